"""The Flask app: HTTP in and out around `admission.review`, plus health, readiness and metrics."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from flask import Flask, Response, request
from gunicorn.http.errors import ParseException
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge
from werkzeug.wsgi import get_content_length

from webhook.core import jsoncodec
from webhook.server import bookkeeping, metrics
from webhook.server.admission import MAX_BODY_BYTES, Answer, Context, rejected, review, too_large
from webhook.server.reviews import failure_status

log = logging.getLogger("trainhook.server")

# Each returns None when it is satisfied, else what the server is still waiting for.
ReadinessCheck = Callable[[], str | None]

_JSON = "application/json"
# A body over the limit is still read up to this size before the 413, beyond it the connection
# is closed at once.
_DRAINED_AT_MOST = 2 * MAX_BODY_BYTES


def create_app(context: Context, readiness: tuple[ReadinessCheck, ...] = ()) -> Flask:
    app = Flask("trainhook")
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES

    @app.post("/mutate")
    def mutate() -> Response:
        started = time.perf_counter()
        try:
            answer = _answer(context)
        except ParseException as error:  # a chunked body gunicorn cannot read: the client's
            text = " ".join(str(error).split())[:200] or type(error).__name__
            return _status(400, "BadRequest", f"malformed request body: {text}")
        except Exception:
            log.exception("admission failed", extra={"path": request.path})
            metrics.ERRORS.labels("internal").inc()
            return _status(500, "InternalError", "internal error; see the webhook's log")
        seconds = time.perf_counter() - started
        bookkeeping.note(answer.record, seconds)
        body = jsoncodec.dumps(answer.body)
        return Response(body, status=answer.status, mimetype=_JSON)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        waiting = [reason for check in readiness if (reason := check()) is not None]
        if waiting:
            return Response(f"not ready: {'; '.join(waiting)}\n", 503, mimetype="text/plain")
        return Response("ready\n", mimetype="text/plain")

    @app.get("/metrics")
    def scrape() -> Response:
        bookkeeping.written()  # a scrape counts every admission this worker answered before it
        text, content_type = metrics.exposition()
        return Response(text, content_type=content_type)

    @app.errorhandler(HTTPException)
    def http_error(error: HTTPException) -> Response:
        code = error.code or 500
        name = error.name.replace(" ", "")
        return _status(code, name, f"{request.method} {request.path}: {error.name}")

    return app


def _answer(context: Context) -> Answer:
    environ = request.environ
    size = get_content_length(environ)
    if size is None:  # chunked: werkzeug's stream stops reading at the limit
        try:
            body = request.get_data(cache=False)
        except RequestEntityTooLarge:
            return rejected(too_large(None))
    elif size > MAX_BODY_BYTES:
        if size <= _DRAINED_AT_MOST:
            _discard(size)
        return rejected(too_large(size))
    else:
        # The announced length, read from the server's stream itself: it is within the limit,
        # and werkzeug's wrapper, which enforces the limit, reads through Python calls.
        body = environ["wsgi.input"].read(size)
    return review(body, environ.get("CONTENT_TYPE"), context)


def _discard(size: int) -> None:
    """Read a refused body to its end, so the client, still sending, gets the answer rather
    than a reset connection."""
    stream = request.input_stream
    while size > 0:
        chunk = stream.read(min(size, 1 << 16))
        if not chunk:
            return
        size -= len(chunk)


def _status(code: int, reason: str, message: str) -> Response:
    status = failure_status(code, reason, message)
    return Response(json.dumps(status, separators=(",", ":")), status=code, mimetype=_JSON)
