"""The server's logs: gunicorn's loggers and the one line each admission leaves, as JSON lines
(webhook/logs.py)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any, Final

from gunicorn import glogging

from webhook import logs
from webhook.logs import JsonLines
from webhook.server.admission import Record

ADMISSION_LOGGER: Final = "trainhook.admission"

_admissions = logging.getLogger(ADMISSION_LOGGER)


class GunicornLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger, less the access line it builds for every request.

    gunicorn builds that line (a dict of every header and environ entry) whenever logging is
    configured by a dict, even with its access logger off; each admission logs its own line.
    """

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        if self.access_log.isEnabledFor(logging.INFO):
            super().access(resp, req, environ, request_time)

    def info(self, msg: str, *args: Any, **kwargs: Any) -> None:
        if msg == "Listening at: %s (%s)" and args and not args[0]:
            # With reuse_port the master binds nothing (each worker binds its own socket), and
            # gunicorn would log "Listening at:  (pid)": name the address it serves instead.
            where = ",".join(f"https://{bind}" for bind in self.cfg.bind)
            msg, args = "Listening at: %s (%s; each worker binds its own socket)", (where, args[1])
        super().info(msg, *args, **kwargs)


class ClientTimeouts(logging.Filter):
    """A client that stalls past the connection timeout is logged as one warning line.

    gunicorn reports it as a socket error with a traceback; it is a slow or silent client, not a
    fault of the server.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, TimeoutError):
            record.msg = "closed a connection that stalled: %s"
            record.args = (error,)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info, record.exc_text = None, None
        return True


def log_admission(record: Record, seconds: float) -> None:
    """The one line each request to /mutate leaves."""
    log_admissions([(record, seconds)])


def log_admissions(answered: Sequence[tuple[Record, float]]) -> None:
    """The lines of several requests, in their order: where one JSON lines handler alone reads
    them, made into one write. Raises what making a line raises, for the first that fails."""
    lines = [line for record, seconds in answered if (line := admission_line(record, seconds))]
    handlers: dict[int, JsonLines | None] = {}
    for level, _ in lines:  # found once per level, not once per line
        if level not in handlers:
            handlers[level] = _only_handler(_admissions, level)
    direct = [handlers[level] for level, _ in lines]
    if lines and all(handler is direct[0] for handler in direct) and direct[0] is not None:
        direct[0].write_many([(level, ADMISSION_LOGGER, "admission", f) for level, f in lines])
        return
    for (level, fields), handler in zip(lines, direct, strict=True):
        if handler is not None:
            handler.write_fields(level, ADMISSION_LOGGER, "admission", fields)
            continue
        # What `Logger.log` does, less finding the caller's file and line: the line has neither.
        made = _admissions.makeRecord(
            ADMISSION_LOGGER, level, __file__, 0, "admission", (), None, extra=fields
        )
        _admissions.handle(made)


def admission_line(record: Record, seconds: float) -> tuple[int, dict[str, Any]] | None:
    """The level and fields of a request's line; None when the line is below the admission
    logger's level (then nothing of it is made)."""
    level = logging.WARNING if record.result == "rejected" else logging.INFO
    if not _admissions.isEnabledFor(level):
        return None
    fields: dict[str, Any] = {
        "uid": record.uid,
        "kind": record.kind,
        "object": f"{record.namespace}/{record.name}" if record.namespace else record.name,
        "operation": record.operation,
        "dry_run": record.dry_run,
        "result": record.result,
        "patch_bytes": record.patch_bytes,
        "warnings": record.warnings,
        "duration_ms": round(seconds * 1000, 3),
    }
    if record.detail:
        fields["detail"] = record.detail
    if record.error:
        fields["error"] = record.error
    if record.lookup_unavailable:
        fields["lookup_unavailable"] = True
    return level, fields


def _only_handler(logger: logging.Logger, level: int) -> JsonLines | None:
    """The JSON lines handler a record at `level` would reach, if it is the only handler it
    would reach and nothing on the way could change or drop the record; else None."""
    if logger.filters:
        return None
    found: list[logging.Handler] = []
    current: logging.Logger | None = logger
    while current is not None:
        found.extend(current.handlers)
        current = current.parent if current.propagate else None
    if len(found) != 1:
        return None
    [handler] = found
    if type(handler) is not JsonLines or level < handler.level:
        return None
    if not all(type(f) is ClientTimeouts for f in handler.filters):
        return None
    return handler


def logging_config(level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for gunicorn's `logconfig_dict` setting."""
    config = logs.logging_config(level, {"client_timeouts": {"()": ClientTimeouts}})
    config["loggers"] = {
        "gunicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
        "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
    }
    return config
