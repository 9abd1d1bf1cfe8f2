"""The admission line and metrics are written by one thread: a serving thread never waits on a
write, and every noted request is written, in order, before a scrape."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from tests.server.test_logs import served_alone, stream  # noqa: F401  (the fixture)
from webhook.server import bookkeeping
from webhook.server.admission import Record


class HeldStream(io.StringIO):
    """A log stream whose writes wait until released, as a full pipe to the log collector."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.entered = threading.Event()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        self.entered.set()
        self.release.wait()
        return super().write(text)


@pytest.fixture
def held() -> Iterator[HeldStream]:
    with served_alone() as handler:
        held = HeldStream()
        previous = handler.setStream(held)
        try:
            yield held
        finally:
            held.release.set()
            assert bookkeeping.written()
            if previous is not None:
                handler.setStream(previous)


def admissions() -> float:
    labels = {"kind": "Job", "operation": "CREATE", "result": "allowed"}
    return REGISTRY.get_sample_value("trainhook_admissions_total", labels) or 0.0


def test_a_serving_thread_answers_while_the_log_write_is_held(
    stream: io.StringIO,  # noqa: F811
    held: HeldStream,
) -> None:
    before = admissions()
    uids = [f"uid-{i}" for i in range(5)]

    def serve() -> None:
        for uid in uids:
            bookkeeping.note(Record("allowed", uid=uid, kind="Job", operation="CREATE"), 0.001)

    noting = threading.Thread(target=serve)
    noting.start()
    noting.join(timeout=30)

    assert not noting.is_alive()  # all five noted while the first line's write still waits
    assert held.entered.wait(timeout=30)
    held.release.set()
    assert bookkeeping.written()
    assert [json.loads(line)["uid"] for line in held.getvalue().splitlines()] == uids
    assert admissions() == before + 5


def test_what_queued_behind_a_write_goes_out_in_one_write_and_is_counted(
    stream: io.StringIO,  # noqa: F811
    held: HeldStream,
) -> None:
    before = admissions()

    def note(uid: str) -> None:
        bookkeeping.note(Record("allowed", uid=uid, kind="Job", operation="CREATE"), 0.001)

    with served_alone():  # pytest's own handler, added once the test runs, is taken off
        note("first")
        assert held.entered.wait(timeout=30)  # the writer is inside the first line's write
        for i in range(5):
            note(f"queued-{i}")
        held.release.set()
        assert bookkeeping.written()

    assert [[json.loads(line)["uid"] for line in text.splitlines()] for text in held.writes] == [
        ["first"],
        [f"queued-{i}" for i in range(5)],
    ]
    assert admissions() == before + 6


class Unformattable(str):
    def __format__(self, spec: str) -> str:
        raise AssertionError("a line below the log level was formatted")


def test_nothing_is_made_of_a_line_below_the_log_level(stream: io.StringIO) -> None:  # noqa: F811
    record = Record("allowed", uid="quiet", kind="Pod", namespace="ns", name=Unformattable("p"))
    admission = logging.getLogger("trainhook.admission")
    admission.setLevel(logging.WARNING)
    try:
        with served_alone():
            bookkeeping.note(record, 0.001)
            assert bookkeeping.written()
    finally:
        admission.setLevel(logging.NOTSET)

    assert stream.getvalue() == ""
    with served_alone():  # at the level, the same record is formatted (and fails here)
        bookkeeping.note(record, 0.001)
        assert bookkeeping.written()
    assert "could not log or count an admission" in stream.getvalue()
