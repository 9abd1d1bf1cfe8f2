"""Trainhook: labelled Kubernetes workloads become distributed training jobs."""

from importlib.metadata import version

# One place for the version: pyproject.toml's [project] version, as pip installed it. The Helm
# chart's appVersion must equal it (tests/test_packaging.py).
__version__: str = version("trainhook")
