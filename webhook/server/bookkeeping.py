"""Each admission's log line and metrics, written by one thread of the process.

A serving thread hands its request's record over and answers at once: it takes no lock that is
held across a write (the log handler's, the metrics files'), so threads that answer do not queue
behind one that writes. The writer thread starts in the process that first records (a gunicorn
worker, after the fork). Should it fall this far behind, a serving thread writes its own line,
so what waits stays bounded and nothing is dropped.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Final

from webhook.server import metrics
from webhook.server.admission import Record
from webhook.server.logs import log_admission

MAX_WAITING: Final = 10_000

log = logging.getLogger("trainhook.server")

_Item = tuple[Record, float] | threading.Event
_waiting: queue.SimpleQueue[_Item] = queue.SimpleQueue()
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
    return done.wait(timeout)


def _start_writer() -> None:
    global _waiting, _writer_pid
    with _start:
        if _writer_pid == os.getpid():
            return
        _waiting = queue.SimpleQueue()  # a forked child does not inherit the parent's writer
        threading.Thread(
            target=_write_forever, args=(_waiting,), name="bookkeeping", daemon=True
        ).start()
        _writer_pid = os.getpid()


def _write_forever(waiting: queue.SimpleQueue[_Item]) -> None:
    while True:
        item = waiting.get()
        if isinstance(item, threading.Event):
            item.set()
        else:
            _write(*item)


def _write(record: Record, seconds: float) -> None:
    try:
        log_admission(record, seconds)
        metrics.observe(record, seconds)
    except Exception:  # the writer outlives any one record
        log.exception("could not log or count an admission", extra={"uid": record.uid})
