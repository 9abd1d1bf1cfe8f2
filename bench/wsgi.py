"""Where a served request's time goes in the app: the Flask apps called in-process.

The do-nothing app and ours are called as gunicorn calls them (a WSGI environ, a body stream),
without sockets or TLS, in alternating rounds. Ours runs with its logging and metrics set up as
`trainhook serve` sets them up (JSON lines, multiprocess metrics files), once with the admission
log line and once with that logger above INFO, so what the line costs shows. The server writes
the line and the metrics on a thread of their own; here they are written on the calling thread,
so its CPU time counts them.
"""

from __future__ import annotations

import io
import logging
import logging.config
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from bench.inprocess import body_of, fastest
from bench.reviews import Case


@dataclass(frozen=True)
class AppCost:
    case: str
    null_us: float
    ours_us: float
    ours_without_log_line_us: float


def _caller(app: Any, body: bytes) -> Callable[[], None]:
    from werkzeug.test import EnvironBuilder

    environ = EnvironBuilder(
        path="/mutate", method="POST", data=body, content_type="application/json"
    ).get_environ()

    def call() -> None:
        request = dict(environ)
        request["wsgi.input"] = io.BytesIO(body)
        chunks: Iterable[bytes] = app(request, lambda status, headers: None)
        for _ in chunks:
            pass
        close = getattr(chunks, "close", None)
        if close is not None:
            close()

    return call


def app_costs(cases: Sequence[Case], rounds: int) -> list[AppCost]:
    metrics_dir = tempfile.mkdtemp(prefix="trainhook-bench-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir  # read when metrics are imported
    from bench.nullapp import null_app
    from webhook.server import bookkeeping, metrics
    from webhook.server.admission import Context, Record
    from webhook.server.app import create_app
    from webhook.server.logs import ADMISSION_LOGGER, log_admission, logging_config

    def written_here(record: Record, seconds: float) -> None:
        log_admission(record, seconds)
        metrics.observe(record, seconds)

    queued, bookkeeping.note = bookkeeping.note, written_here

    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    with open(os.devnull, "w") as sink:
        config = logging_config("info")
        config["handlers"]["stderr"]["stream"] = sink
        logging.config.dictConfig(config)
        admissions = logging.getLogger(ADMISSION_LOGGER)
        ours, null = create_app(Context()), null_app(None)  # type: ignore[arg-type]
        costs = []
        for case in cases:
            body = body_of(case)
            call_ours = _caller(ours, body)

            def quiet(on: bool) -> None:
                admissions.setLevel(logging.WARNING if on else logging.NOTSET)

            times = fastest(
                [_caller(null, body), call_ours, call_ours], rounds, [None, None, quiet]
            )
            costs.append(AppCost(case.name, *(t * 1e6 for t in times)))
        # The handler writing to the closed sink leaves the root logger, or every later
        # section's log records (the API emulator's access lines) fail to write.
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
        for handler in list(root.handlers):
            root.removeHandler(handler)
        root.setLevel(saved[0])
        for handler in saved[1]:
            root.addHandler(handler)
    del os.environ["PROMETHEUS_MULTIPROC_DIR"]
    bookkeeping.note = queued
    return costs
