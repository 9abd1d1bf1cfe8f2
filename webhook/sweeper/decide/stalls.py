"""Hangs: trainhook.io/stall-timeout. A job whose progress reports name no new step for that
long, while every pod of it runs, has stalled: a failure `stalled` that the failure rules route
(`stalled -> restart-in-place max=3`).

The timer starts at the job's first report, and counts only while the job runs: from the latest
of when the step it reports last was first reported, the job's last restart (or the release of
its in-place restart), its resume, and the start of the newest run of a training container. It
stands still while a pod is pending or restarting, a rank waits at its barrier, or the job is
suspended: no stall is judged then. Pure: the clock is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import human_duration, read_summary
from webhook.core.objects import parse_time
from webhook.sweeper.job.goodput import running_since
from webhook.sweeper.job.pods import PodView
from webhook.sweeper.job.state import JobState, format_time


@dataclass(frozen=True)
class Stall:
    """The job reported step `step` last, and nothing newer since `since`."""

    step: int
    since: datetime  # when the timer started
    timeout: timedelta

    @property
    def at(self) -> datetime:
        return self.since + self.timeout

    @property
    def key(self) -> str:
        """One stall is acted on once: a restart starts the timer again."""
        return f"stalled/{format_time(self.since)}"

    def message(self) -> str:
        return (
            f"no new step for {human_duration(self.timeout.total_seconds())} "
            f"({contract.STALL_TIMEOUT}): step {self.step} last reported, the timer started "
            f"at {format_time(self.since)}"
        )


def stall_timer(state: JobState) -> Stall | None:
    """The job's stall timer: None before its first report with a step, without a timeout, or
    while it does not run (the timer stands still)."""
    timeout = _timeout(state)
    if timeout is None or not _running(state):
        return None
    summaries = [s for s in (read_summary(w.annotations) for w in state.workloads) if s]
    if not summaries:
        return None
    summary = max(summaries, key=lambda s: str(s.get("updated", "")))
    step = summary.get("step")
    reported = parse_time(summary.get("stepSince")) or parse_time(summary.get("updated"))
    if not isinstance(step, int) or reported is None:
        return None
    return Stall(step, max(reported, *running_since(state)), timeout)


def stalled(state: JobState, now: datetime | None) -> Stall | None:
    """The stall the job is in now, if any."""
    timer = stall_timer(state) if now is not None else None
    return timer if timer is not None and now is not None and now >= timer.at else None


def _timeout(state: JobState) -> timedelta | None:
    try:
        seconds = state.settings.stall_timeout if state.workloads else None
    except TrainhookError:  # roles that disagree: the job is refused, and nothing is judged
        return None
    return timedelta(seconds=seconds) if seconds else None


def _running(state: JobState) -> bool:
    """Every pod of the job runs its training: none pending, restarting, being deleted or
    waiting at its barrier, as many as the job has, and the job not suspended."""
    if state.settings.suspend or state.deleting:
        return False
    expected = sum(w.replicas for w in state.workloads)
    pods = [p for p in state.pods if p.owner_kind in ("StatefulSet", "Job", "Pod")]
    return expected > 0 and len(pods) >= expected and all(map(_runs, pods))


def _runs(pod: PodView) -> bool:
    training = pod.training
    return (
        pod.phase == "Running"
        and not pod.terminating
        and not pod.disrupted
        and pod.barrier_waiting is None
        and training is not None
        and training.current is None
        and not training.waiting
    )
