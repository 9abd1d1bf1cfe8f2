"""trainhook.io/active-deadline-seconds: a job that runs too long fails."""

from __future__ import annotations

from datetime import datetime, timedelta

from webhook.core import contract
from webhook.sweeper.decide.policy import FAILED, Verdict
from webhook.sweeper.job.state import JobState, format_time


def deadline_verdict(state: JobState, now: datetime, start: datetime) -> Verdict | None:
    seconds = state.settings.active_deadline_seconds
    if seconds is None or now < start + timedelta(seconds=seconds):
        return None
    return Verdict(
        FAILED,
        "DeadlineExceeded",
        f"the job did not finish within {contract.ACTIVE_DEADLINE_SECONDS} {seconds} "
        f"(started {format_time(start)})",
    )


def deadline_at(state: JobState, start: datetime) -> datetime | None:
    seconds = state.settings.active_deadline_seconds
    return start + timedelta(seconds=seconds) if seconds is not None else None
