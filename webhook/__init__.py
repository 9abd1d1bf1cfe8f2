"""Trainhook: labelled Kubernetes workloads become distributed training jobs."""

__version__ = "0.1.0"
