"""Goodput: where a job's time went, by phase, and how much of it trained.

The phases: `pending` (a pod waits to be scheduled or for its image), `starting` (every pod
runs, and the job has reported no step since its pods last started), `training`, `restarting`
(a restart under way) and `stalled` (no new step for trainhook.io/stall-timeout: the time from
the stall's start to its detection, counted as training until then). A suspended job's time
counts in none. Only a job that reports its progress has a ledger, recorded with each decision
(`goodput_record`) in the job's trainhook.io/status (`goodput`): the
seconds of each phase closed so far, the phase now and since when, and the steps lost to
restarts; it changes only when the phase does, so recording it costs no write of its own.

The goodput ratio is the effective-training-time ratio: the time spent training, less the time
it took to reach the steps lost again to restarts (at the job's mean time per step), over all
the time counted. Pure: the clock is passed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import human_duration, read_summary
from webhook.core.objects import parse_time
from webhook.sweeper.job.state import JobState

PHASES: Final = ("pending", "starting", "training", "restarting", "stalled")
STALLED: Final = "Stalled"  # the reason of a restart a stall causes (trainhook.io/stall-timeout)
RECORDED: Final = "goodput"  # the field of trainhook.io/status
SUSPENDED: Final = "suspended"  # counted in no phase
FINISHED: Final = "finished"  # the ledger closed


@dataclass(frozen=True)
class Goodput:
    phase: str  # one of PHASES, or SUSPENDED
    since: datetime
    seconds: dict[str, int] = field(default_factory=dict)  # closed, by phase
    lost_steps: int = 0  # steps reached and lost again to restarts, over the job's life
    lost_at: str = ""  # the last restart whose lost steps are counted (its `at`)

    def advanced(self, phase: str, now: datetime) -> Goodput:
        """The ledger once the job is in `phase` at `now`."""
        if phase == self.phase:
            return self
        return Goodput(phase, now, self.totals(now, whole=True), self.lost_steps, self.lost_at)

    def totals(self, now: datetime, whole: bool = False) -> dict[str, Any]:
        """Seconds by phase, the current one counted up to `now`."""
        found: dict[str, Any] = {phase: self.seconds.get(phase, 0) for phase in PHASES}
        if self.phase in found and now > self.since:
            elapsed = (now - self.since).total_seconds()
            found[self.phase] += int(elapsed) if whole else elapsed
        return found

    def stalled_for(self, seconds: int) -> Goodput:
        """The last `seconds` counted as training were a stall."""
        moved = min(seconds, self.seconds.get("training", 0))
        counted = dict(self.seconds)
        counted["training"] = counted.get("training", 0) - moved
        counted["stalled"] = counted.get("stalled", 0) + moved
        return Goodput(self.phase, self.since, counted, self.lost_steps, self.lost_at)

    def with_restart(self, restart: object) -> Goodput:
        """Counting the steps a restart lost (a progress summary's `restart`), once."""
        if not isinstance(restart, dict):
            return self
        at, lost = restart.get("at"), restart.get("lostSteps")
        if not isinstance(at, str) or at == self.lost_at or not isinstance(lost, int):
            return self
        return Goodput(self.phase, self.since, self.seconds, self.lost_steps + max(0, lost), at)

    def ratio(self, now: datetime, step: int | None) -> float | None:
        """The effective-training-time ratio; None before any time is counted."""
        totals = self.totals(now)
        counted = float(sum(totals.values()))
        if counted <= 0:
            return None
        training = float(totals["training"])
        reached = (step or 0) + self.lost_steps
        redone = training * self.lost_steps / reached if reached > 0 else 0.0
        return max(0.0, training - redone) / counted

    def recorded(self) -> dict[str, Any]:
        value: dict[str, Any] = {
            "phase": self.phase,
            "since": self.since.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "seconds": {p: s for p, s in self.seconds.items() if s},
        }
        if self.lost_steps:
            value["lostSteps"] = self.lost_steps
            value["lostAt"] = self.lost_at
        return value

    @staticmethod
    def read(status: object) -> Goodput | None:
        value = status.get(RECORDED) if isinstance(status, dict) else None
        if not isinstance(value, dict):
            return None
        phase, since = value.get("phase"), parse_time(value.get("since"))
        if phase not in (*PHASES, SUSPENDED, FINISHED) or since is None:
            return None
        seconds = value.get("seconds")
        counted = {
            p: s
            for p, s in (seconds.items() if isinstance(seconds, dict) else ())
            if p in PHASES and isinstance(s, int) and not isinstance(s, bool) and s > 0
        }
        lost = value.get("lostSteps")
        lost_at = value.get("lostAt")
        return Goodput(
            str(phase),
            since,
            counted,
            lost if isinstance(lost, int) and lost > 0 else 0,
            lost_at if isinstance(lost_at, str) else "",
        )


def phase_of(state: str, reported_since_start: bool) -> str:
    """The goodput phase of a job in trainhook.io/status `state`."""
    if state == "Running":
        return "training" if reported_since_start else "starting"
    if state == "Restarting":
        return "restarting"
    if state == "Suspended":
        return SUSPENDED
    if state in ("Succeeded", "Failed"):
        return FINISHED
    return "pending"


def goodput_text(ledger: Goodput, now: datetime, step: int | None) -> str:
    """`76% of 2h (pending 10m, starting 5m, training 2h, ...; 50 steps lost to restarts)`."""
    totals = ledger.totals(now)
    ratio = ledger.ratio(now, step)
    counted = sum(totals.values())
    phases = ", ".join(f"{p} {human_duration(s)}" for p, s in totals.items() if s)
    lost = f"; {ledger.lost_steps} steps lost to restarts" if ledger.lost_steps else ""
    share = f"{round(ratio * 100)}%" if ratio is not None else "-"
    return f"{share} of {human_duration(counted)} ({phases or 'nothing counted yet'}{lost})"


def running_since(state: JobState) -> list[datetime]:
    """The moments the job's pods last started running: its last restart, the release of its
    in-place restart, its resume, and the start of each training container's current run."""
    moments = _restarted(state)
    moments += [p.training.started for p in state.pods if p.training and p.training.started]
    return moments


def _restarted(state: JobState) -> list[datetime]:
    """When the job last restarted, its in-place restart was released, and it resumed."""
    found = []
    for workload in state.workloads:
        try:
            status = json.loads(workload.annotations.get(contract.STATUS) or "{}")
        except ValueError:
            continue
        if isinstance(status, dict):
            for key in ("restartedAt", "releasedAt", "resumedAt"):
                moment = parse_time(status.get(key))
                if moment is not None:
                    found.append(moment)
    return found


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
