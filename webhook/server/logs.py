"""Structured logs: one JSON object per line, on stderr, for the server and gunicorn alike."""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Final

import orjson

from webhook.server.admission import Record

ADMISSION_LOGGER: Final = "trainhook.admission"
LEVELS: Final = ("debug", "info", "warning", "error")

# Attributes every LogRecord has; anything else was passed through `extra=` and is logged too.
_STANDARD: Final = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

_admissions = logging.getLogger(ADMISSION_LOGGER)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": _timestamp(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(line, default=str).decode()
        except TypeError:  # e.g. a dict with keys that are not strings, passed through `extra=`
            return json.dumps(line, separators=(",", ":"), default=str)


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
    level = logging.WARNING if record.result == "rejected" else logging.INFO
    if _admissions.isEnabledFor(level):
        # What `Logger.log` does, less finding the caller's file and line: the line has neither.
        line = _admissions.makeRecord(
            ADMISSION_LOGGER, level, __file__, 0, "admission", (), None, extra=fields
        )
        _admissions.handle(line)


def logging_config(level: str) -> dict[str, Any]:
    """A `logging.config.dictConfig` for gunicorn's `logconfig_dict` setting."""
    handler = {
        "class": "logging.StreamHandler",
        "formatter": "json",
        "filters": ["client_timeouts"],
        "stream": "ext://sys.stderr",
    }
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "filters": {"client_timeouts": {"()": ClientTimeouts}},
        "handlers": {"stderr": handler},
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {
            "gunicorn.error": {"level": level.upper(), "handlers": [], "propagate": True},
            "gunicorn.access": {"level": "WARNING", "handlers": [], "propagate": True},
        },
    }


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def _timestamp(created: float) -> str:
    global _second
    whole, text = _second
    if int(created) != whole:
        whole, text = int(created), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        _second = (whole, text)
    return f"{text}.{int(created % 1 * 1000):03d}Z"
