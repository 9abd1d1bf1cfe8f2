"""The goodput ledger a decision records with the status of a job that reports its progress
(webhook.sweeper.job.goodput):
the phase the job is in now, the seconds closed by the phase it leaves, the steps its restarts
lost, and, when a stall is what restarts it, the stall's time taken from training."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from webhook.core.errors import TrainhookError
from webhook.core.job.progress import read_summary
from webhook.core.objects import parse_time
from webhook.sweeper.decide.stalls import STALLED, running_since
from webhook.sweeper.job.goodput import RECORDED, Goodput, phase_of
from webhook.sweeper.job.state import JobState


def job_summary(state: JobState) -> dict[str, Any] | None:
    """The job's last progress summary (trainhook.io/progress on its workloads)."""
    found = [s for s in (read_summary(w.annotations) for w in state.workloads) if s]
    return max(found, key=lambda s: str(s.get("updated", ""))) if found else None


def goodput_record(
    state: JobState, recorded: dict[str, Any], phase: str, reason: str, now: datetime
) -> dict[str, Any]:
    """{"goodput": ...} for the trainhook.io/status a decision records in `phase`; nothing for a
    job that does not report its progress (trainhook.io/report-progress)."""
    if not any(w.settings.report_progress for w in state.workloads):
        return {}
    summary = job_summary(state) or {}
    updated = parse_time(summary.get("updated"))
    started = running_since(state)
    reported = updated is not None and (not started or updated >= max(started))
    ledger = Goodput.read(recorded)
    if ledger is None:
        began = parse_time(recorded.get("startTime")) or now
        ledger = Goodput("pending", min(began, now))
    before = ledger.phase
    ledger = ledger.advanced(phase_of(phase, reported), now).with_restart(summary.get("restart"))
    timeout = _stall_timeout(state)
    if reason == STALLED and before == "training" and ledger.phase == "restarting" and timeout:
        ledger = ledger.stalled_for(timeout)
    return {RECORDED: ledger.recorded()}


def _stall_timeout(state: JobState) -> int | None:
    try:
        return state.settings.stall_timeout
    except TrainhookError:  # roles that disagree: the job is refused
        return None
