"""Structured logs for both processes: one JSON object per line, on stderr.

The server and the sweeper configure logging through `logging_config`; the server adds
gunicorn's loggers and the admission line on top (webhook/server/logs.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Sequence
from typing import Any, Final, TextIO

import orjson

LEVELS: Final = ("debug", "info", "warning", "error")

# Attributes every LogRecord has; anything else was passed through `extra=` and is logged too.
_STANDARD: Final = frozenset(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = _head(
            record.created, record.levelno, record.name, record.process, record.getMessage()
        )
        for key, value in vars(record).items():
            if key not in _STANDARD:
                line[key] = value
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return _encode(line)


class JsonLines(logging.StreamHandler[TextIO]):
    """A stream of JSON lines that can also take a line's fields directly.

    `write_fields` writes what `JsonFormatter` makes of a record with those fields, without
    making the record: the admission line is written once per request, and a LogRecord with
    its handler and filter calls costs several times the line itself.
    """

    def write_fields(self, level: int, logger: str, message: str, fields: dict[str, Any]) -> None:
        self.write_many([(level, logger, message, fields)])

    def write_many(self, lines: Sequence[tuple[int, str, str, dict[str, Any]]]) -> None:
        """Several lines' fields (level, logger, message, fields) in one write and one flush:
        one system call for what queued while the last write went out."""
        now, pid = time.time(), os.getpid()
        heads: dict[tuple[int, str, str], dict[str, Any]] = {}  # the same for each line alike
        try:
            text = "".join(
                _encode(_head_of(heads, now, level, logger, pid, message) | fields)
                + self.terminator
                for level, logger, message, fields in lines
            )
            with self.lock:  # type: ignore[union-attr]
                self.stream.write(text)
                self.flush()
        except RecursionError:
            raise
        except Exception:  # as `emit` does: a failed log write must not fail the request
            level, logger, _, fields = lines[0]
            self.handleError(logging.makeLogRecord({"name": logger, "levelno": level, **fields}))


def logging_config(level: str, filters: dict[str, Any] | None = None) -> dict[str, Any]:
    """A `logging.config.dictConfig`: every record as a JSON line on stderr, at `level`.

    `filters` (name -> a dictConfig filter) are put on the one handler, in that order.
    """
    filters = filters or {}
    handler: dict[str, Any] = {
        "class": f"{__name__}.JsonLines",
        "formatter": "json",
        "stream": "ext://sys.stderr",
    }
    if filters:
        handler["filters"] = list(filters)
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "filters": filters,
        "handlers": {"stderr": handler},
        "root": {"level": level.upper(), "handlers": ["stderr"]},
    }


def _head(created: float, level: int, logger: str, pid: int | None, message: str) -> dict[str, Any]:
    """What every line starts with, whichever way it is written."""
    return {
        "time": _timestamp(created),
        "level": logging.getLevelName(level).lower(),
        "logger": logger,
        "pid": pid,
        "message": message,
    }


def _head_of(
    heads: dict[tuple[int, str, str], dict[str, Any]],
    created: float,
    level: int,
    logger: str,
    pid: int,
    message: str,
) -> dict[str, Any]:
    head = heads.get((level, logger, message))
    if head is None:
        head = heads[level, logger, message] = _head(created, level, logger, pid, message)
    return head


def _encode(line: dict[str, Any]) -> str:
    try:
        return orjson.dumps(line, default=str).decode()
    except TypeError:  # e.g. a dict with keys that are not strings, passed through `extra=`
        return json.dumps(line, separators=(",", ":"), default=str)


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text


def _timestamp(created: float) -> str:
    global _second
    whole, text = _second
    if int(created) != whole:
        whole, text = int(created), time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
        _second = (whole, text)
    return f"{text}.{int(created % 1 * 1000):03d}Z"
