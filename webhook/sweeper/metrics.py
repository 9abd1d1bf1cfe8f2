"""The sweeper's /metrics: which build runs, and whether this replica leads.

A registry of its own (with the process collector), served over plain HTTP by
prometheus_client's server thread when `trainhook sweep --metrics-bind` is given.
"""

from __future__ import annotations

import platform
import threading
from collections.abc import Callable
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Gauge, ProcessCollector, start_http_server

from webhook import __version__


class SweeperMetrics:
    def __init__(self, is_leader: Callable[[], bool]) -> None:
        self.registry = CollectorRegistry()
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
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def serve(self, bind: str) -> tuple[str, int]:
        """Serve on HOST:PORT (port 0 picks one); returns the address bound."""
        host, _, port = bind.rpartition(":")
        self._server, self._thread = start_http_server(
            int(port), addr=host.strip("[]") or "0.0.0.0", registry=self.registry
        )
        address = self._server.server_address
        return str(address[0]), int(address[1])

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
