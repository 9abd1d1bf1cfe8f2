"""The sweeper's /metrics: which build runs, whether this replica leads, and its reconcile
figures (health.py), with /healthz and /readyz beside them.

A registry of its own (with the process collector), served over plain HTTP in a thread when
`trainhook sweep --metrics-bind` is given.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from typing import Any, Final

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook import __version__
from webhook.sweeper.job.state import JobKey
from webhook.sweeper.serving.health import SweeperHealth, serve

# Label sets stay bounded whatever pods report: the metrics of the most recent jobs only, and
# only the summary's few metrics (webhook.core.job.progress.SUMMARY_METRICS) of each.
METRIC_JOBS: Final = 100


class ProgressFigures(Collector):
    """The jobs' reported progress, and the numeric metrics of the most recent ones."""

    def __init__(self, latest: Callable[[], list[tuple[JobKey, dict[str, Any]]]]) -> None:
        self.latest = latest

    def collect(self) -> Iterator[GaugeMetricFamily]:
        ratio = GaugeMetricFamily(
            "trainhook_job_progress_ratio",
            "The last progress a job reported, from 0 to 1 (jobs this replica heard from).",
            labels=["namespace", "job"],
        )
        metric = GaugeMetricFamily(
            "trainhook_job_metric",
            f"The last value of each numeric metric a job reported (the {METRIC_JOBS} jobs "
            "heard from last).",
            labels=["namespace", "job", "name"],
        )
        latest = self.latest()
        for (namespace, job), summary in latest:
            if isinstance(summary.get("progress"), int):
                ratio.add_metric([namespace, job], summary["progress"] / 100)
        for (namespace, job), summary in latest[-METRIC_JOBS:]:
            for name, value in (summary.get("metrics") or {}).items():
                number = _number(value)
                if number is not None:
                    metric.add_metric([namespace, job, name], number)
        yield ratio
        yield metric


STRAGGLERS: Final = "trainhook_job_stragglers"  # the chart's dashboard queries it


class StragglerFigures(Collector):
    """How many ranks of each job are flagged as stragglers now: one series per job that judges
    its ranks (trainhook.io/straggler-threshold), as many as the endpoint remembers."""

    def __init__(self, straggling: Callable[[], list[tuple[JobKey, int]]]) -> None:
        self.straggling = straggling

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(
            STRAGGLERS,
            "Ranks of a job flagged as stragglers now: their step time stays over the job's "
            "trainhook.io/straggler-threshold times the other ranks' median.",
            labels=["namespace", "job"],
        )
        for (namespace, job), count in self.straggling():
            gauge.add_metric([namespace, job], float(count))
        yield gauge


def _number(value: object) -> float | None:
    try:
        number = float(str(value))
    except ValueError:
        return None
    return number if math.isfinite(number) else None


class SweeperMetrics:
    def __init__(self, is_leader: Callable[[], bool], health: SweeperHealth | None = None) -> None:
        self.registry = CollectorRegistry()
        self.health = health
        for collector in health.collectors() if health else ():
            self.registry.register(collector)
        ProcessCollector(registry=self.registry)
        build = Gauge(
            "trainhook_build_info",
            "Always 1; its labels say which Trainhook and Python run.",
            ["version", "python"],
            registry=self.registry,
        )
        build.labels(__version__, platform.python_version()).set(1)
        leader = Gauge(
            "trainhook_sweeper_leader",
            "1 while this replica holds the sweeper's Lease and acts, else 0.",
            registry=self.registry,
        )
        leader.set_function(lambda: 1.0 if is_leader() else 0.0)
        self._server: ThreadingHTTPServer | None = None

    def serve(self, bind: str) -> tuple[str, int]:
        """Serve /metrics, /healthz and /readyz on HOST:PORT (port 0 picks one); returns the
        address bound."""
        host, _, port = bind.rpartition(":")
        health = self.health
        self._server = serve(
            host.strip("[]") or "0.0.0.0",
            int(port),
            exposition=lambda: generate_latest(self.registry),
            healthy=health.healthy if health else lambda: True,
            ready=health.ready if health else lambda: True,
        )
        address = self._server.server_address
        return str(address[0]), int(address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
