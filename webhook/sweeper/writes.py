"""How many writes the sweeper makes for one job, whatever others do: a token bucket per job.

Everything the sweeper writes for a job (its Service, PodGroup, peer lists and SSH Secret, the
records on its workloads, the pods it deletes or marks) is derived from the job's objects, and
anyone allowed to change those (delete the Service every second, flap a label) can make each
reconcile write again. So each job has a bucket of `burst` writes plus one per pod its workloads
ask for (a whole-job restart deletes every pod at once), refilled at `per_minute`; a write the
bucket cannot pay for is deferred, never dropped: the job is reconciled again once a write is
paid for, and the sweeper, level-triggered, writes then what the job still needs.

A job's normal life fits in the bucket: its start takes a few writes (Service, PodGroup, lists,
a record per workload), and a restart one per pod. Events have their own budget (emits.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

PER_MINUTE = 60
BURST = 100
REMEMBERED = 100_000  # jobs at most, a few dozen bytes each

JobKey = tuple[str, str]


@dataclass
class _Bucket:
    tokens: float
    at: datetime
    deferring: bool = False  # said so already, until its bucket is full again


class WriteBudget:
    """Whether a job may write now, and when it may write again."""

    def __init__(self, per_minute: int = PER_MINUTE, burst: int = BURST) -> None:
        if per_minute < 1 or burst < 1:
            raise ValueError("a write budget needs at least one write per minute and a burst")
        self.per_minute = per_minute
        self.burst = burst
        self._buckets: dict[JobKey, _Bucket] = {}

    def capacity(self, pods: int) -> int:
        """The writes a job of `pods` pods may make at once."""
        return self.burst + max(0, pods)

    def take(self, job: JobKey, pods: int, now: datetime) -> bool:
        """Pay for one write of `job` at `now`; False when its bucket is empty."""
        bucket = self._refilled(job, pods, now)
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True

    def wait(self, job: JobKey, now: datetime) -> float:
        """Seconds until `job` may write once more."""
        bucket = self._buckets.get(job)
        if bucket is None or bucket.tokens >= 1:
            return 0.0
        return (1 - bucket.tokens) * 60.0 / self.per_minute

    def first_deferral(self, job: JobKey) -> bool:
        """Whether this is the first write of `job` deferred since it was last under budget
        (the one to say so about); marks it said."""
        bucket = self._buckets.get(job)
        if bucket is None or bucket.deferring:
            return False
        bucket.deferring = True
        return True

    def _refilled(self, job: JobKey, pods: int, now: datetime) -> _Bucket:
        capacity = self.capacity(pods)
        bucket = self._buckets.get(job)
        if bucket is None:
            bucket = self._buckets[job] = _Bucket(float(capacity), now)
            if len(self._buckets) > REMEMBERED:
                self._forget_full(now)
            return bucket
        elapsed = max(0.0, (now - bucket.at).total_seconds())
        bucket.tokens = min(float(capacity), bucket.tokens + elapsed * self.per_minute / 60.0)
        bucket.at = now
        if bucket.tokens >= capacity:
            bucket.deferring = False
        return bucket

    def _forget_full(self, now: datetime) -> None:
        """Drop the jobs whose buckets have refilled: a new bucket is a full one."""
        for key, bucket in list(self._buckets.items()):
            elapsed = (now - bucket.at).total_seconds()
            if bucket.tokens + elapsed * self.per_minute / 60.0 >= self.burst:
                del self._buckets[key]
