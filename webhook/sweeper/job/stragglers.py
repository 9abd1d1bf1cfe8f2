"""Stragglers: ranks whose own step time stays over `trainhook.io/straggler-threshold` times the
median of the job's other ranks.

Each rank (a pod) of a reporting job may send its time per step (`stepTimeSeconds`); the sweeper
keeps its last WINDOW of them. Each report is judged against the median of the other ranks'
step times (each rank's the median of its window): over the threshold it is slow. A rank is
flagged after FLAG_AFTER slow reports in a row and unflagged after as many normal ones, so one
slow step (a checkpoint, a garbage collection) flags nothing. A rank that stops reporting is
forgotten once it has missed QUIET_AFTER of its own report intervals (and QUIET_FLOOR at least):
it leaves the median, and its flag goes with it.

What is flagged is published on the job's workloads (`trainhook.io/stragglers`, `record`); a
straggler never restarts anything: a `straggler` failure rule has the whole-job restarts other
rules fire keep the pods off its node. Pure: plain data, the time passed in. Memory is bounded:
WINDOW times per rank, MAX_RANKS ranks per job, the jobs by the caller's bound.
"""

from __future__ import annotations

import json
from collections import OrderedDict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from statistics import median
from typing import Any, Final

from webhook.core import contract
from webhook.sweeper.job.state import JobKey, format_time

WINDOW: Final = 5  # step times kept per rank: its step time is their median
FLAG_AFTER: Final = 3  # slow reports in a row flag a rank; as many normal ones unflag it
QUIET_AFTER: Final = 3  # a rank that misses this many of its report intervals is forgotten
QUIET_FLOOR: Final = timedelta(minutes=2)  # ... and not before this long without a report
MAX_RANKS: Final = 10_000  # per job: the ranks heard from last are kept past it
MAX_LISTED: Final = 8  # ranks named on the job, the slowest first


@dataclass
class Rank:
    """What the sweeper keeps of one rank: its pod, node, and last step times."""

    pod: str
    uid: str
    node: str
    rank: int | None
    times: deque[float] = field(default_factory=lambda: deque(maxlen=WINDOW))
    heard: datetime | None = None
    interval: timedelta | None = None  # between its last two reports
    slow: int = 0  # slow reports in a row
    normal: int = 0  # normal reports in a row
    ratio: float | None = None  # its step time over the others' median, at its last report
    since: datetime | None = None  # when it was flagged; None: not flagged

    @property
    def step_time(self) -> float:
        return float(median(self.times))

    def quiet(self, now: datetime) -> bool:
        """Whether it has stopped reporting: missed QUIET_AFTER of its intervals."""
        if self.heard is None:
            return True
        allowed = max(QUIET_FLOOR, QUIET_AFTER * (self.interval or timedelta(0)))
        return now - self.heard > allowed


@dataclass
class JobRanks:
    """One job's ranks, judged against its threshold."""

    threshold: float
    ranks: OrderedDict[str, Rank] = field(default_factory=OrderedDict)

    def report(
        self, pod: str, uid: str, node: str, rank: int | None, seconds: float, now: datetime
    ) -> None:
        """A report of `pod`'s step time: kept, and judged against the other ranks."""
        known = self.ranks.pop(pod, None)
        if known is None or known.uid != uid:  # a new pod under the name starts afresh
            known = Rank(pod, uid, node, rank)
        known.node, known.rank = node or known.node, rank if rank is not None else known.rank
        self.ranks[pod] = known
        while len(self.ranks) > MAX_RANKS:
            self.ranks.popitem(last=False)
        if known.heard is not None:
            known.interval = now - known.heard
        known.heard = now
        known.times.append(seconds)
        peers = [
            other.step_time
            for other in self.ranks.values()
            if other is not known and other.times and not other.quiet(now)
        ]
        if not peers:
            known.slow = known.normal = 0
            known.ratio, known.since = None, None
            return
        middle = float(median(peers))
        known.ratio = known.step_time / middle
        if seconds > self.threshold * middle:
            known.slow, known.normal = known.slow + 1, 0
            if known.since is None and known.slow >= FLAG_AFTER:
                known.since = now
        else:
            known.slow, known.normal = 0, known.normal + 1
            if known.since is not None and known.normal >= FLAG_AFTER:
                known.since = None

    def expire(self, now: datetime) -> None:
        for pod in [pod for pod, rank in self.ranks.items() if rank.quiet(now)]:
            del self.ranks[pod]

    def settled(self) -> bool:
        """Whether every rank has been judged FLAG_AFTER times: its verdict of no straggler is
        then its own, not a want of reports (another replica may have heard more)."""
        return len(self.ranks) > 1 and all(len(r.times) >= FLAG_AFTER for r in self.ranks.values())

    def flagged(self) -> list[Rank]:
        """The stragglers, the slowest first."""
        found = [rank for rank in self.ranks.values() if rank.since is not None]
        return sorted(found, key=lambda rank: (-(rank.ratio or 0.0), rank.pod))

    def record(self) -> dict[str, Any] | None:
        """The job's `trainhook.io/stragglers`: None when no rank is flagged."""
        flagged = self.flagged()
        if not flagged:
            return None
        listed = []
        for rank in flagged[:MAX_LISTED]:
            entry: dict[str, Any] = {"pod": rank.pod, "node": rank.node}
            if rank.rank is not None:
                entry["rank"] = rank.rank
            entry["ratio"] = round(rank.ratio or 0.0, 1)
            entry["since"] = format_time(rank.since) if rank.since else ""
            listed.append(entry)
        return {
            "count": len(flagged),
            "ranks": len(self.ranks),
            "threshold": self.threshold,
            "flagged": listed,
        }


class Stragglers:
    """Every job's ranks; at most `max_jobs` jobs, the one heard from longest ago forgotten."""

    def __init__(self, max_jobs: int) -> None:
        self.max_jobs = max_jobs
        self.jobs: OrderedDict[JobKey, JobRanks] = OrderedDict()

    def report(
        self,
        key: JobKey,
        threshold: float,
        pod: str,
        uid: str,
        node: str,
        rank: int | None,
        seconds: float,
        now: datetime,
    ) -> JobRanks:
        job = self.jobs.pop(key, None) or JobRanks(threshold)
        job.threshold = threshold
        self.jobs[key] = job
        while len(self.jobs) > self.max_jobs:
            self.jobs.popitem(last=False)
        job.report(pod, uid, node, rank, seconds, now)
        return job

    def forget(self, key: JobKey) -> None:
        self.jobs.pop(key, None)

    def expire(self, now: datetime) -> list[JobKey]:
        """Forget the ranks that stopped reporting, and the jobs left without any: the jobs
        whose record changed."""
        changed = []
        for key, job in list(self.jobs.items()):
            before = job.record()
            job.expire(now)
            if not job.ranks:
                del self.jobs[key]
            if job.record() != before:
                changed.append(key)
        return changed

    def record(self, key: JobKey) -> dict[str, Any] | None:
        job = self.jobs.get(key)
        return job.record() if job is not None else None


def record_text(record: Mapping[str, Any] | None) -> str | None:
    """The annotation's value; None removes it."""
    return json.dumps(record, separators=(",", ":")) if record else None


# --- reading it back: the failure rules, the Event, `trainhook describe` and `status` -------------


@dataclass(frozen=True)
class Straggler:
    pod: str
    node: str
    rank: int | None
    ratio: float
    since: str

    def said(self) -> str:
        """`rank 2 (pod pt-worker-1 on node gpu-3, 1.8x)`."""
        who = f"rank {self.rank}" if self.rank is not None else f"pod {self.pod}"
        where = f"pod {self.pod} on node {self.node}" if self.rank is not None else self.node
        return f"{who} ({where or 'no node'}, {self.ratio:g}x)"


@dataclass(frozen=True)
class StragglerRecord:
    count: int
    ranks: int
    threshold: float
    flagged: tuple[Straggler, ...]


def read_stragglers(annotations: Mapping[str, str]) -> StragglerRecord | None:
    """The stragglers a workload records, None when it records none (or nothing readable)."""
    raw = annotations.get(contract.STRAGGLERS)
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("flagged"), list):
        return None
    found = []
    for entry in data["flagged"][:MAX_LISTED]:
        if not isinstance(entry, dict) or not isinstance(entry.get("pod"), str):
            continue
        rank, ratio = entry.get("rank"), entry.get("ratio")
        found.append(
            Straggler(
                entry["pod"],
                str(entry.get("node") or ""),
                rank if isinstance(rank, int) and not isinstance(rank, bool) else None,
                float(ratio) if isinstance(ratio, int | float) else 0.0,
                str(entry.get("since") or ""),
            )
        )
    if not found:
        return None
    count, ranks, threshold = data.get("count"), data.get("ranks"), data.get("threshold")
    return StragglerRecord(
        count if isinstance(count, int) and count >= len(found) else len(found),
        ranks if isinstance(ranks, int) else 0,
        float(threshold) if isinstance(threshold, int | float) else 0.0,
        tuple(found),
    )


def stragglers_line(record: StragglerRecord) -> str:
    """`1 of 4 ranks over 1.5x the others' median step time: rank 2 (pod pt-worker-1 on node
    gpu-3, 1.8x)`, as `trainhook describe` shows it."""
    more = record.count - len(record.flagged)
    named = ", ".join(s.said() for s in record.flagged) + (f", {more} more" if more > 0 else "")
    return (
        f"{record.count} of {record.ranks} ranks over {record.threshold:g}x the others' median "
        f"step time: {named}"
    )
