"""gunicorn settings for the admission server (`trainhook serve` adds bind, TLS files, workers).

The API server keeps its connections to a webhook alive and reuses them, so the worker is
gthread (keep-alive) and keeps idle connections longer than the API server's client does
(90 s): a server that closes first races the next request on that connection.
"""

from __future__ import annotations

import gc
import ssl
from collections.abc import Callable
from typing import Any

from prometheus_client import multiprocess

from webhook.server.logs import GunicornLogger
from webhook.server.tls import serving_certificate

worker_class = "webhook.server.worker.AdmissionWorker"
threads = 8
keepalive = 120
# In-flight requests get this long to finish after SIGTERM; admission calls time out within 30 s.
graceful_timeout = 25
timeout = 30
# Each worker listens on its own socket (SO_REUSEPORT) and the kernel spreads new connections
# across them. On one shared socket the first worker awake accepts, and since the API server keeps
# its few connections alive, one worker can end up with all of them while the others idle.
# A socket passed as fd:// stays one socket, shared by all workers.
reuse_port = True
accesslog = None  # each admission logs its own structured line
logger_class = GunicornLogger  # and gunicorn does not build an access line per request either
proc_name = "trainhook"
control_socket_disable = True  # nothing drives gunicorn at run time; no socket file to leave behind
# The server works with untrusted bodies; keep gunicorn's own request-line and header limits.
limit_request_line = 8190
limit_request_fields = 100


def ssl_context(
    config: Any, default_ssl_context_factory: Callable[[], ssl.SSLContext]
) -> ssl.SSLContext:
    """TLS 1.2 or newer, with the certificate as it is on disk now."""
    return serving_certificate(config.certfile, config.keyfile).context()


def post_worker_init(worker: Any) -> None:
    """In the worker, once the app is loaded: what exists by then (modules, the app, the
    compiled tables) lives as long as the worker, so the cyclic garbage collector stops walking
    it. A full collection then walks what requests made, not every object the worker imported
    (served, a PyTorch pod's request costs 80 to 100 us less CPU: docs/performance.md)."""
    gc.collect()
    gc.freeze()


def child_exit(server: Any, worker: Any) -> None:
    multiprocess.mark_process_dead(worker.pid)  # type: ignore[no-untyped-call]


def worker_exit(server: Any, worker: Any) -> None:
    """In the worker, as it exits: the lines and counts of its last requests are written."""
    from webhook.server import bookkeeping  # imported by the worker's app already

    bookkeeping.written()
