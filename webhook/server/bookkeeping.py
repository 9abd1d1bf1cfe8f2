"""Each admission's log line and metrics, written by one thread of the process.

A serving thread hands its request's record over and answers at once: it takes no lock that is
held across a write (the log handler's, the metrics files'), so threads that answer do not queue
behind one that writes. The writer thread starts in the process that first records (a gunicorn
worker, after the fork). Woken by a request, it waits `WRITE_EVERY` for the requests that follow
and writes them together: the lines in one write, each counter incremented and each histogram
bucket written once per batch. So a busy worker wakes it a few times a second rather than once
per request; each wake-up cost the serving threads more than the line it wrote (a thread switch,
and their code and data pushed out of the CPU's caches). Should it fall `MAX_WAITING` behind, a
serving thread writes its own line, so what waits stays bounded; what waits when the worker
exits is written before it does (`written`, from gunicorn's `worker_exit`).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Final

from webhook.server import metrics
from webhook.server.admission import Record
from webhook.server.logs import log_admission, log_admissions

MAX_WAITING: Final = 10_000
# How long a noted request may wait for the ones after it to be written with it (seconds).
WRITE_EVERY = 0.05
# The most lines written in one system call.
MAX_BATCH: Final = 256

log = logging.getLogger("trainhook.server")

_Item = tuple[Record, float] | threading.Event
_waiting: queue.SimpleQueue[_Item] = queue.SimpleQueue()
_hurry = threading.Event()  # set by one waiting for the writes: the writer waits no longer
_writer_pid = 0
_start = threading.Lock()


def note(record: Record, seconds: float) -> None:
    """Log and count one answered request, off the serving thread."""
    if _writer_pid != os.getpid():
        _start_writer()
    if _waiting.qsize() >= MAX_WAITING:
        _write(record, seconds)
        return
    _waiting.put((record, seconds))


def written(timeout: float = 2.0) -> bool:
    """Wait until every request noted before has been written (a scrape of /metrics counts
    them); False if that took longer than `timeout` seconds."""
    if _writer_pid != os.getpid():
        return True  # nothing noted in this process
    done = threading.Event()
    _waiting.put(done)
    _hurry.set()
    return done.wait(timeout)


def _start_writer() -> None:
    global _waiting, _hurry, _writer_pid
    with _start:
        if _writer_pid == os.getpid():
            return
        _waiting = queue.SimpleQueue()  # a forked child does not inherit the parent's writer
        _hurry = threading.Event()
        threading.Thread(
            target=_write_forever, args=(_waiting, _hurry), name="bookkeeping", daemon=True
        ).start()
        _writer_pid = os.getpid()


def _write_forever(waiting: queue.SimpleQueue[_Item], hurry: threading.Event) -> None:
    while True:
        first = waiting.get()
        if not isinstance(first, threading.Event):
            hurry.wait(WRITE_EVERY)
        hurry.clear()
        batch = [first]
        while not waiting.empty():
            batch.append(waiting.get())
        answered: list[tuple[Record, float]] = []
        for item in batch:
            if isinstance(item, threading.Event):
                _write_all(answered)
                answered = []
                item.set()
                continue
            answered.append(item)
            if len(answered) == MAX_BATCH:
                _write_all(answered)
                answered = []
        _write_all(answered)


def _write(record: Record, seconds: float) -> None:
    _write_all([(record, seconds)])


def _write_all(answered: list[tuple[Record, float]]) -> None:
    """The lines of what queued together in one write, and their counts; a record whose line
    cannot be made is logged as such, and the others are written."""
    if not answered:
        return
    try:
        log_admissions(answered)
    except Exception:
        for record, seconds in answered:  # find the one that fails; write the others
            try:
                log_admission(record, seconds)
            except Exception:  # the writer outlives any one record
                log.exception("could not log or count an admission", extra={"uid": record.uid})
                answered = [item for item in answered if item[0] is not record]
    try:
        metrics.observe_all(answered)
    except Exception:
        log.exception("could not count admissions", extra={"uid": answered[0][0].uid})
