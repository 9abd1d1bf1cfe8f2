"""The JSON log lines: the admission line as the server writes it, and gunicorn's access line."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from gunicorn import glogging
from gunicorn.config import Config

from webhook.logs import JsonFormatter, JsonLines
from webhook.server.admission import Record
from webhook.server.logs import (
    ADMISSION_LOGGER,
    GunicornLogger,
    _only_handler,
    log_admission,
    log_admissions,
    logging_config,
)


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """Logging as `trainhook serve` sets it up, into a string; put back as it was after."""
    root = logging.getLogger()
    saved = root.level, list(root.handlers)
    output = io.StringIO()
    config = logging_config("info")
    config["handlers"]["stderr"]["stream"] = output
    logging.config.dictConfig(config)
    yield output
    for handler in root.handlers:
        root.removeHandler(handler)
    root.setLevel(saved[0])
    for handler in saved[1]:
        root.addHandler(handler)


@contextmanager
def served_alone() -> Iterator[JsonLines]:
    """Only the server's handler on the root logger, as in `trainhook serve` (pytest adds its
    own while a test runs)."""
    root = logging.getLogger()
    others = [handler for handler in root.handlers if type(handler) is not JsonLines]
    for handler in others:
        root.removeHandler(handler)
    try:
        [ours] = root.handlers
        assert isinstance(ours, JsonLines)
        yield ours
    finally:
        for handler in others:
            root.addHandler(handler)


@contextmanager
def caught(logger: logging.Logger) -> Iterator[list[logging.LogRecord]]:
    """The records a handler of its own on `logger` receives, while this lasts."""
    records: list[logging.LogRecord] = []

    class Catcher(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    catcher = Catcher()
    logger.addHandler(catcher)
    try:
        yield records
    finally:
        logger.removeHandler(catcher)


def mutated_pod() -> Record:
    record = Record(
        "mutated",
        uid="0f2b7c6e-1a2b-4c3d-8e9f-001122334455",
        kind="Pod",
        namespace="team-a",
        name="pt-worker-3",
        operation="CREATE",
    )
    record.patch_bytes = 4098
    record.warnings = 1
    return record


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_an_admission_leaves_one_line_with_what_was_admitted_and_how_long_it_took(
    stream: io.StringIO,
) -> None:
    with served_alone():
        log_admission(mutated_pod(), 0.0001834)

    [line] = lines(stream)
    assert line.pop("time").endswith("Z")
    assert line == {
        "level": "info",
        "logger": "trainhook.admission",
        "pid": os.getpid(),
        "message": "admission",
        "uid": "0f2b7c6e-1a2b-4c3d-8e9f-001122334455",
        "kind": "Pod",
        "object": "team-a/pt-worker-3",
        "operation": "CREATE",
        "dry_run": False,
        "result": "mutated",
        "patch_bytes": 4098,
        "warnings": 1,
        "duration_ms": 0.183,
    }


def test_a_batch_of_lines_at_different_levels_gives_each_line_its_own_level_and_fields(
    stream: io.StringIO,
) -> None:
    refused = Record("rejected", uid="u-2", error="not_json", detail="body is not JSON")
    with served_alone():
        log_admissions([(mutated_pod(), 0.001), (refused, 0.002), (mutated_pod(), 0.003)])

    written = lines(stream)
    assert [(line["level"], line["result"], line["duration_ms"]) for line in written] == [
        ("info", "mutated", 1.0),
        ("warning", "rejected", 2.0),
        ("info", "mutated", 3.0),
    ]
    assert [line["uid"] for line in written] == [mutated_pod().uid, "u-2", mutated_pod().uid]
    assert [line["patch_bytes"] for line in written] == [4098, 0, 4098]
    assert written[1]["error"] == "not_json" and "error" not in written[0]
    assert len({line["time"] for line in written}) == 1  # one batch, one time


def test_the_line_written_directly_is_the_line_the_formatter_makes_of_a_record(
    stream: io.StringIO,
) -> None:
    record = Record("rejected", uid="u-1", kind="", error="not_json", detail="body is not JSON")
    with served_alone() as handler:
        assert _only_handler(logging.getLogger(ADMISSION_LOGGER), logging.WARNING) is handler
        log_admission(record, 0.002)
    [direct] = lines(stream)

    own = {"time", "level", "logger", "pid", "message"}
    fields = {key: value for key, value in direct.items() if key not in own}
    made = logging.getLogger(ADMISSION_LOGGER).makeRecord(
        ADMISSION_LOGGER, logging.WARNING, __file__, 0, "admission", (), None, extra=fields
    )
    formatted = json.loads(JsonFormatter().format(made))

    assert direct["level"] == "warning"
    assert list(direct) == list(formatted)
    assert {k: v for k, v in direct.items() if k != "time"} == {
        k: v for k, v in formatted.items() if k != "time"
    }


def test_another_handler_on_the_admission_logger_gets_the_line_as_a_record_too(
    stream: io.StringIO,
) -> None:
    admissions = logging.getLogger(ADMISSION_LOGGER)
    with caught(admissions) as records, served_alone():
        assert _only_handler(admissions, logging.INFO) is None
        log_admission(mutated_pod(), 0.0001)

    [line] = lines(stream)
    [record] = records
    assert record.getMessage() == "admission"
    assert record.levelno == logging.INFO
    assert (record.uid, record.object, record.patch_bytes) == (  # type: ignore[attr-defined]
        line["uid"],
        "team-a/pt-worker-3",
        4098,
    )


def test_admissions_are_not_logged_while_the_admission_logger_is_above_info(
    stream: io.StringIO,
) -> None:
    admissions = logging.getLogger(ADMISSION_LOGGER)
    admissions.setLevel(logging.WARNING)
    try:
        with served_alone():
            log_admission(mutated_pod(), 0.0001)
            log_admission(Record("rejected", error="too_large"), 0.0001)
    finally:
        admissions.setLevel(logging.NOTSET)

    assert [(line["result"], line["error"]) for line in lines(stream)] == [
        ("rejected", "too_large")
    ]


class BrokenStream(io.StringIO):
    def write(self, text: str) -> int:
        raise OSError("stderr is gone")


def test_a_log_stream_that_fails_does_not_fail_the_admission(
    stream: io.StringIO, capsys: pytest.CaptureFixture[str]
) -> None:
    with served_alone() as handler:
        handler.setStream(BrokenStream())
        log_admission(mutated_pod(), 0.0001)

    assert "OSError: stderr is gone" in capsys.readouterr().err


def access_logger(level: int, monkeypatch: pytest.MonkeyPatch) -> tuple[GunicornLogger, list[str]]:
    """Our gunicorn logger around a logger of the test's own, its lines, and the atoms it built."""
    built: list[str] = []

    def atoms(self: glogging.Logger, *args: Any) -> dict[str, str]:
        built.append("atoms")
        return {"s": "200"}

    monkeypatch.setattr(glogging.Logger, "atoms", atoms)
    logger = GunicornLogger.__new__(
        GunicornLogger
    )  # its setup would reconfigure gunicorn's loggers
    logger.cfg = Config()
    logger.cfg.set("accesslog", "-")
    logger._access_log_enabled = True
    logger.access_log = logging.getLogger("test.gunicorn.access")
    logger.access_log.setLevel(level)
    logger.access_log.propagate = False
    return logger, built


def test_gunicorn_builds_no_access_line_while_its_access_logger_is_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logger, built = access_logger(logging.WARNING, monkeypatch)

    logger.access(None, None, {}, None)

    assert built == []


def test_gunicorn_still_writes_access_lines_when_its_access_logger_is_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    logger, built = access_logger(logging.INFO, monkeypatch)
    logger.cfg.set("access_log_format", "%(s)s")

    with caught(logger.access_log) as records:
        logger.access(None, None, {}, None)

    assert built == ["atoms"]
    assert [record.getMessage() for record in records] == ["200"]
