"""Which job and role each pod plays, on the sweeper's /metrics: `trainhook_pod_info`, always 1,
one series per pod of the jobs this replica decides on.

Exporters that label their series with the pod they measure (NVIDIA's dcgm-exporter in
Kubernetes mode adds `namespace`, `pod` and `container` to every GPU's series) are joined to
the training job through it: `DCGM_FI_DEV_GPU_UTIL * on(namespace, pod) group_left(job, role)
trainhook_pod_info`. The series are bounded by the pods the sweeper already tracks, and a job's
are dropped when the sweeper forgets the job.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.sweeper.job.pods import PodView
from webhook.sweeper.job.state import JobKey

# The metric name the chart's GPU dashboard joins on (charts/trainhook/dashboards).
POD_INFO: Final = "trainhook_pod_info"
# Pods of these owners are the job's own (a pod of any other owner is reported, never counted).
OWN_PODS: Final = ("StatefulSet", "Job", "Pod")


class PodInfoFigures(Collector):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # The job's pods as last decided on, kept as handed over: the rows are made when
        # Prometheus scrapes, not at each look at the job (a 10,000-pod job's look would pay
        # for them at every pod event).
        self._jobs: dict[JobKey, Sequence[PodView]] = {}

    def seen(self, key: JobKey, pods: Sequence[PodView] | None) -> None:
        """The job's pods as last decided on (an immutable sequence); None forgets the job."""
        with self._lock:
            if pods:
                self._jobs[key] = pods
            else:
                self._jobs.pop(key, None)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        info = GaugeMetricFamily(
            POD_INFO,
            "Always 1: a pod of a training job this replica decides on, with its job, role and "
            "global rank (join per-pod series on namespace and pod).",
            labels=["namespace", "pod", "job", "role", "rank"],
        )
        with self._lock:
            jobs = sorted(self._jobs.items())
        for (namespace, job), pods in jobs:
            rows = sorted(
                (pod.name, pod.role or "", pod.rank)
                for pod in pods
                if pod.owner_kind in OWN_PODS and pod.name
            )
            for pod, role, rank in rows:
                info.add_metric([namespace, pod, job, role, rank], 1.0)
        yield info
