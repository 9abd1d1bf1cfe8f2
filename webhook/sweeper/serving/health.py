"""The sweeper's health and its reconcile figures, and the HTTP server for both.

/healthz answers 200 while the reconcile loop turns (it stalls only when a decision or an API
call hangs); /readyz answers 200 once every cache has listed its objects. The figures are what a
person watching the sweeper wants: the jobs by phase, whole-job restarts, how long a reconcile
takes and how often it fails, and how many jobs wait in the queue (metrics.py adds the build and
whether this replica leads, and serves them all at /metrics).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    Counter,
    Histogram,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.sweeper.job.state import JobKey
from webhook.sweeper.serving.goodput import GoodputFigures
from webhook.sweeper.serving.pod_info import PodInfoFigures

PHASES: Final = ("Pending", "Running", "Restarting", "Suspended", "Succeeded", "Failed", "Invalid")
# The loop turns at least every half second; a minute without a turn means it is stuck.
STALLED_AFTER: Final = 60.0


class SweeperHealth:
    """Whether the reconcile loop turns and the caches are synced, and the reconcile figures
    (collectors not bound to a registry: metrics.py registers them with its own)."""

    def __init__(
        self,
        *,
        queue_depth: Callable[[], int] = lambda: 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reconciles = Histogram(
            "trainhook_sweeper_reconcile_duration_seconds",
            "Time to decide on one job and apply its actions.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0),
            registry=None,
        )
        self.errors = Counter(
            "trainhook_sweeper_reconcile_errors",
            "Reconciles that did not converge, by reason: conflict (409s in a row), api (an API "
            "error) or unexpected.",
            ["reason"],
            registry=None,
        )
        self.restarts = Counter(
            "trainhook_sweeper_job_restarts",
            "Whole-job restarts started (restart-policy RestartJob), counted or not.",
            registry=None,
        )
        self.writes_deferred = Counter(
            "trainhook_sweeper_writes_deferred",
            "Writes for a job deferred because the job spent its write budget (a job's objects "
            "changed faster than a normal job's do).",
            registry=None,
        )
        self.phases: dict[JobKey, str] = {}
        self._lock = threading.Lock()
        self._clock = clock
        self._turned = clock()
        self._ready = False
        self._live = _Live(self, queue_depth)
        self.goodput = GoodputFigures()
        self.pod_info = PodInfoFigures()

    def collectors(self) -> list[Collector]:
        return [
            self.reconciles,
            self.errors,
            self.restarts,
            self.writes_deferred,
            self._live,
            self.goodput,
            self.pod_info,
        ]

    def job_phase(self, key: JobKey, phase: str | None) -> None:
        """The phase a job was last decided in; None once the job is gone."""
        with self._lock:
            if phase is None:
                self.phases.pop(key, None)
            else:
                self.phases[key] = phase

    def by_phase(self) -> dict[str, int]:
        counts = dict.fromkeys(PHASES, 0)
        with self._lock:
            for phase in self.phases.values():
                counts[phase] = counts.get(phase, 0) + 1
        return counts

    def turned(self) -> None:
        self._turned = self._clock()

    def set_ready(self, ready: bool) -> None:
        self._ready = ready

    def healthy(self) -> bool:
        return self._clock() - self._turned < STALLED_AFTER

    def ready(self) -> bool:
        return self._ready


class _Live(Collector):
    """Figures read when scraped: jobs by phase, queue depth."""

    def __init__(self, health: SweeperHealth, queue_depth: Callable[[], int]) -> None:
        self.metrics = health
        self.queue_depth = queue_depth

    def collect(self) -> Iterator[GaugeMetricFamily]:
        jobs = GaugeMetricFamily(
            "trainhook_sweeper_jobs",
            "Training jobs by the phase last decided, of the shards this replica holds.",
            labels=["phase"],
        )
        for phase, count in self.metrics.by_phase().items():
            jobs.add_metric([phase], count)
        yield jobs
        yield GaugeMetricFamily(
            "trainhook_sweeper_queue_depth",
            "Jobs waiting for a look, due now or later.",
            value=self.queue_depth(),
        )


def serve(
    host: str,
    port: int,
    *,
    exposition: Callable[[], bytes],
    healthy: Callable[[], bool],
    ready: Callable[[], bool],
) -> ThreadingHTTPServer:
    """Serve /metrics, /healthz and /readyz in a daemon thread; `shutdown()` stops it."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                self._answer(200, exposition(), CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                ok = healthy()
                self._answer(200 if ok else 503, b"ok\n" if ok else b"reconcile loop stalled\n")
            elif path == "/readyz":
                ok = ready()
                self._answer(200 if ok else 503, b"ok\n" if ok else b"caches not synced yet\n")
            else:
                self._answer(404, b"not found\n")

        def _answer(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="health", daemon=True).start()
    return server
