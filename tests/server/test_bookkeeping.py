"""The admission line and metrics are written by one thread: a serving thread never waits on a
write, and every noted request is written, in order, before a scrape."""

from __future__ import annotations

import io
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from tests.server.test_logs import served_alone, stream  # noqa: F401  (the fixture)
from webhook.server import bookkeeping, gunicorn_conf
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


@pytest.fixture
def unhurried(held: HeldStream, monkeypatch: pytest.MonkeyPatch) -> HeldStream:
    """Writes go through at once, but the writer, once woken, waits a minute for more."""
    monkeypatch.setattr(bookkeeping, "WRITE_EVERY", 60.0)
    held.release.set()
    return held


def note_allowed(uid: str) -> None:
    bookkeeping.note(Record("allowed", uid=uid, kind="Job", operation="CREATE"), 0.001)


def written_uids(held: HeldStream) -> list[list[str]]:
    """The uids of each write's lines."""
    return [[json.loads(line)["uid"] for line in text.splitlines()] for text in held.writes]


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
            note_allowed(uid)

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

    with served_alone():  # pytest's own handler, added once the test runs, is taken off
        note_allowed("first")
        assert held.entered.wait(timeout=30)  # the writer is inside the first line's write
        for i in range(5):
            note_allowed(f"queued-{i}")
        held.release.set()
        assert bookkeeping.written()

    assert written_uids(held) == [["first"], [f"queued-{i}" for i in range(5)]]
    assert admissions() == before + 6


def test_a_burst_of_requests_waits_for_the_writer_and_goes_out_in_one_write(
    stream: io.StringIO,  # noqa: F811
    unhurried: HeldStream,
) -> None:
    # The writer, woken by the first, waits for the requests after it rather than writing
    # each as it comes; a scrape (`written`) does not wait that long.
    before = admissions()
    uids = [f"burst-{i}" for i in range(20)]

    with served_alone():
        for uid in uids:
            note_allowed(uid)
            time.sleep(0.002)  # as requests come: the writer could run between them
        assert unhurried.writes == []
        assert bookkeeping.written()

    assert written_uids(unhurried) == [uids]
    assert admissions() == before + 20


def test_a_worker_writes_what_waits_as_it_exits(
    stream: io.StringIO,  # noqa: F811
    unhurried: HeldStream,
) -> None:
    uids = [f"last-{i}" for i in range(3)]

    with served_alone():
        for uid in uids:
            note_allowed(uid)
        gunicorn_conf.worker_exit(server=None, worker=None)  # as gunicorn calls it in the worker
        written = written_uids(unhurried)

    assert [uid for write in written for uid in write] == uids


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
