"""How many Events the sweeper records, whatever others do: each one once a while, few per job.

An Event's name is derived from what it says, so recording it again only finds it exists; but
each attempt is still a request. Anyone allowed to create pods can label thousands with a job's
name, and each gets a `NotInJob` Warning: without memory the sweeper would POST all of them on
every reconcile. So the sweeper remembers the Events it recorded (or found recorded) for
`REMEMBER_FOR` (less than the hour the API server keeps an Event, so one that expired is recorded
again), and records at most `PER_JOB` new ones per job in any `WINDOW`; the rest wait for a
later reconcile.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from datetime import datetime, timedelta

REMEMBERED = 100_000  # Event names at most, about 200 bytes each
REMEMBER_FOR = timedelta(minutes=30)
PER_JOB = 20
WINDOW = timedelta(minutes=1)

JobKey = tuple[str, str]


class EmitBudget:
    """Which Events were recorded lately, and whether a job may record another now."""

    def __init__(self, per_job: int = PER_JOB, window: timedelta = WINDOW) -> None:
        self._per_job = per_job
        self._window = window
        self._recorded: OrderedDict[tuple[str, str], datetime] = OrderedDict()
        self._recent: dict[JobKey, deque[datetime]] = {}

    def recorded(self, namespace: str, name: str, now: datetime) -> bool:
        """Whether the Event was recorded (or found recorded) within `REMEMBER_FOR`."""
        when = self._recorded.get((namespace, name))
        return when is not None and now - when < REMEMBER_FOR

    def allows(self, job: JobKey, now: datetime) -> bool:
        """Whether `job` may record one more Event at `now`; counts it when it may."""
        recent = self._recent.setdefault(job, deque())
        while recent and now - recent[0] >= self._window:
            recent.popleft()
        if len(recent) >= self._per_job:
            return False
        recent.append(now)
        if len(self._recent) > REMEMBERED:  # jobs quiet for a window hold nothing to keep
            self._recent = {k: v for k, v in self._recent.items() if now - v[-1] < self._window}
        return True

    def remember(self, namespace: str, name: str, now: datetime) -> None:
        self._recorded[(namespace, name)] = now
        self._recorded.move_to_end((namespace, name))
        while len(self._recorded) > REMEMBERED:
            self._recorded.popitem(last=False)
