"""The queue of jobs due for a look, each at most once, earliest first."""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable

from webhook.sweeper.job.state import JobKey


class WorkQueue:
    """Jobs due for a look, each at most once, earliest first; a key can be scheduled later."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._due: dict[JobKey, float] = {}
        self._heap: list[tuple[float, JobKey]] = []
        self._ready = threading.Condition()

    def add(self, key: JobKey, delay: float = 0.0) -> None:
        due = self._clock() + max(0.0, delay)
        with self._ready:
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, key))
            self._ready.notify()

    def pop(self, timeout: float) -> JobKey | None:
        """The next due key, waiting at most `timeout` seconds for one."""
        deadline = self._clock() + timeout
        with self._ready:
            while True:
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier add
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    return key
                wait = deadline - now
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if wait <= 0:
                    return None
                self._ready.wait(wait)

    def __len__(self) -> int:
        with self._ready:
            return len(self._due)
