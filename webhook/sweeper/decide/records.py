"""The job's records and status: what the sweeper wrote on the job's workloads, and what it
writes next.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from webhook.core import contract
from webhook.core.job.completeness import waiting_message
from webhook.core.objects import parse_time
from webhook.kube.resources import JOBS, STATEFULSETS
from webhook.sweeper.actions import Action, Create, CreateSshSecret, Emit, Patch, workload_patch
from webhook.sweeper.decide.compute_domain import UNAVAILABLE, unavailable_message
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.failures import (
    DISRUPTION_REASONS,
    describe_disruption,
    disruption_of,
    restarts_whole_job,
)
from webhook.sweeper.decide.owned import waiting_for
from webhook.sweeper.decide.policy import (
    PHASES,
    Replica,
    Tally,
    observed_successes,
    same_second_recorded,
    tally,
)
from webhook.sweeper.job.pods import WAITING_PROBLEMS, is_unschedulable
from webhook.sweeper.job.recorded import format_indexes
from webhook.sweeper.job.state import JobState, attempt_of, format_time

WAITING_FOR_ROLES = "WaitingForRoles"  # the reason of a job that lacks a role
# The reason of a job whose pods wait for a ConfigMap or Secret someone else made under its names.
WAITING_FOR_OWNED_OBJECTS = "WaitingForOwnedObjects"


@dataclass(frozen=True)
class Outcome:
    phase: str
    reason: str
    message: str | None  # None when read back from the workloads rather than judged now
    finished_at: datetime | None
    status: str | None = None  # the trainhook.io/status recorded with it
    # False when only workloads the webhook did not admit record it: nobody judged who wrote it
    verified: bool = True


def recorded_outcome(state: JobState) -> Outcome | None:
    """The phase the sweeper recorded on the job's workloads; the earliest one wins, and one
    recorded on a workload the webhook admitted wins over any other."""
    found: list[Outcome] = []
    for workload in state.workloads:
        phase = workload.annotations.get(contract.PHASE)
        if phase in PHASES:
            found.append(
                Outcome(
                    phase,
                    workload.annotations.get(contract.REASON) or phase,
                    None,
                    parse_time(workload.annotations.get(contract.FINISHED_AT)),
                    workload.annotations.get(contract.STATUS),
                    verified=workload.attributed,
                )
            )
    found = [o for o in found if o.verified] or found
    if not found:
        return None
    timed = [o for o in found if o.finished_at is not None]
    return min(timed, key=lambda o: o.finished_at or datetime.min) if timed else found[0]


def recorded_status(state: JobState) -> dict[str, Any]:
    """The trainhook.io/status the sweeper recorded: the one with the most restarts, with the
    earliest start any workload records (a write may have reached only some of them)."""
    found: list[dict[str, Any]] = []
    for workload in state.workloads:
        try:
            value = json.loads(workload.annotations.get(contract.STATUS) or "{}")
        except ValueError:
            continue
        if isinstance(value, dict) and value:
            found.append(value)
    if not found:
        return {}
    most: dict[str, Any] = max(found, key=lambda v: positive_count(v.get("restarts")))
    status = dict(most)
    starts = [t for t in (parse_time(v.get("startTime")) for v in found) if t is not None]
    if starts:
        status["startTime"] = format_time(min(starts))
    # Once resumed, the clock runs from the latest resume any workload records, and that write
    # says whether the job still is suspended: a resume that reached only some workloads is
    # not taken back by those it missed, whose records are older.
    resumes = [(t, v) for v in found if (t := parse_time(v.get("resumedAt"))) is not None]
    if resumes:
        latest, newest = max(resumes, key=lambda found: found[0])
        status["startTime"] = status["resumedAt"] = format_time(latest)
        status["state"] = newest.get("state")
    return status


def positive_count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def status_json(
    phase: str,
    reason: str,
    message: str,
    restarts: int,
    start: datetime,
    restarted_at: datetime | None = None,
    cause: str = "",
    *,
    resumed: datetime | None = None,
    attempt_began: datetime | None = None,
    extra: dict[str, Any] | None = None,
) -> str:
    """trainhook.io/status: compact JSON, the same on every workload of the job."""
    value: dict[str, Any] = {
        "state": phase,
        "reason": reason,
        "message": message,
        "restarts": restarts,
        "startTime": format_time(start),
    }
    if restarted_at is not None:
        value["restartedAt"] = format_time(restarted_at)
        value["cause"] = cause
        # Restarting one role or pod leaves the attempt as it was (null: the first).
        value["attemptStartedAt"] = format_time(attempt_began) if attempt_began else None
    if resumed is not None:
        value["resumedAt"] = format_time(resumed)
    value.update(extra or {})
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def restarts_of(
    state: JobState, now: datetime, recorded: dict[str, Any], succeeded: set[Replica]
) -> int:
    """Whole-job restarts when a rule may restart the job; otherwise the failed runs of the
    training containers."""
    if restarts_whole_job(state):
        return positive_count(recorded.get("restarts"))
    return tally(state, now, succeeded).settled


SUSPENDED = "Suspended"


def live_state(state: JobState, succeeded: set[Replica]) -> tuple[str, str, str]:
    """(state, reason, message) of a job that has not finished, from its pods."""
    missing = state.missing_roles()
    if missing:
        declared = state.settings.roles is not None
        return "Pending", WAITING_FOR_ROLES, waiting_message(state.job, missing, declared)
    unavailable = unavailable_message(state)
    if unavailable is not None:
        return "Pending", UNAVAILABLE, unavailable
    foreign = waiting_for(state)
    if foreign:
        return (
            "Pending",
            WAITING_FOR_OWNED_OBJECTS,
            f"the job's pods wait for {' and '.join(foreign)}, which Trainhook did not make for "
            "the job and never lets them mount: delete it so the sweeper makes the job's own",
        )
    # Plain pods (PodFacts) have not failed, are not stopped and wait for nothing: of them, only
    # whether one runs matters.
    facts = state.pod_facts
    pods = [p for p in facts.notable if (p.role, p.index) not in succeeded]
    counted = [p for p in pods if p.counts]
    for pod in counted:
        training = pod.training
        if training is None:
            continue
        crashed = training.waiting == "CrashLoopBackOff" or (
            training.current is not None and training.current.exit_code != 0
        )
        runs = training.failed_runs()
        if (crashed or (pod.phase == "Pending" and training.init_failed)) and runs:
            run = runs[0]
            container = training.name
            if run is training.init_failed and run not in (training.current, training.last):
                container += " (an init container)"
            reason = run.reason if run.reason not in ("", "Error", "Completed") else "Error"
            if training.waiting == "CrashLoopBackOff" and reason == "Error":
                reason = "CrashLoopBackOff"
            return "Restarting", reason, f"pod {pod.name}: container {container} {run.describe()}"
    for pod in pods:
        kind = disruption_of(pod)
        if kind is not None:  # preempted, drained, its node lost: said apart from failures
            return ("Restarting", *describe_disruption(pod, kind))
    if any(p.terminating for p in pods):
        return "Restarting", "PodsRestarting", ""
    for pod in counted:
        training = pod.training
        if training is not None and training.waiting in WAITING_PROBLEMS:
            detail = f": {training.waiting_message}" if training.waiting_message else ""
            message = f"pod {pod.name}: container {training.name}{detail}"
            return "Pending", training.waiting, message
    waiting = [
        next((p for p in counted if is_unschedulable(p)), None),
        next((p for p in facts.unschedulable if (p.role, p.index) not in succeeded), None),
    ]
    first = min((p for p in waiting if p is not None), key=lambda p: p.name, default=None)
    if first is not None:
        return "Pending", "Unschedulable", f"pod {first.name}: {first.scheduling}"
    if any(p.phase == "Running" for p in counted) or facts.any_running_besides(succeeded):
        return "Running", "Running", ""
    return "Pending", "Pending", ""


def records_to_write(
    state: JobState, counts: Tally, status: str
) -> dict[str, dict[str, str | None]]:
    """Per workload, the annotations to record: the job's status, the replicas seen to succeed
    (never forgotten once seen within one attempt) and the failed runs counted so far."""
    attempt = attempt_of(status)
    # Successes seen in the attempt the status records: when it records a restart made now, the
    # old pods, not deleted yet, succeeded in the attempt before.
    observed = observed_successes(
        state, parse_time(attempt) if attempt else None, same_second_recorded(status, attempt)
    )
    records: dict[str, dict[str, str | None]] = {}
    for workload in state.workloads:
        if workload.kind == "Pod":
            continue
        wanted: dict[str, str | None] = {}
        if workload.annotations.get(contract.STATUS) != status:
            wanted[contract.STATUS] = status
        seen = observed.get(workload.name, set()) if workload.kind == "StatefulSet" else set()
        # Written with the status, in one patch: a workload that records the new attempt has
        # forgotten the successes of the one before.
        recorded = workload.succeeded if workload.attempt == attempt else frozenset()
        if attempt != workload.attempt and workload.succeeded:
            wanted[contract.SUCCEEDED] = format_indexes(seen) or None
        elif not seen <= recorded:
            wanted[contract.SUCCEEDED] = format_indexes(seen | recorded)
        ledger = counts.ledgers.get(workload.name)
        if ledger is not None and ledger != workload.failed_runs:
            wanted[contract.FAILED_RUNS] = ledger.format()
        if wanted:
            records[workload.name] = wanted
    return records


def merge_records(
    state: JobState,
    actions: list[Action],
    events: list[Action],
    records: dict[str, dict[str, str | None]],
) -> list[Action]:
    """One patch per workload and decision: records join a patch the job needs anyway (each
    carries the resourceVersion it was decided on), else come after the creations."""
    merged: list[Action] = []
    pending = dict(records)
    for action in actions:
        if (
            isinstance(action, Patch)
            and action.name in pending
            and action.resource
            in (
                STATEFULSETS,
                JOBS,
            )
        ):
            patch = dict(action.patch)
            metadata = dict(patch.get("metadata") or {})
            metadata["annotations"] = {
                **dict(metadata.get("annotations") or {}),
                **pending.pop(action.name),
            }
            patch["metadata"] = metadata
            action = Patch(
                action.resource, action.namespace, action.name, patch, action.resource_version
            )
        merged.append(action)
    alone = [
        workload_patch(state, w, {"metadata": {"annotations": pending[w.name]}})
        for w in state.workloads
        if w.name in pending
    ]
    # The Service, PodGroup and Secret first (the pods need them); the events before the state
    # they announce is recorded, so a failed write has them recorded again, not lost.
    creates = [a for a in merged if isinstance(a, Create | CreateSshSecret)]
    rest = [a for a in merged if not isinstance(a, Create | CreateSshSecret)]
    return [*creates, *events, *alone, *rest]


def state_event(state: JobState, phase: str, reason: str, message: str, restarts: int) -> Emit:
    normal = (
        "Running",
        "Pending",
        "PodsRestarting",
        SUSPENDED,
        WAITING_FOR_OWNED_OBJECTS,  # the Foreign* Warning names the object
        *DISRUPTION_REASONS,
    )
    kind = "Normal" if reason in normal else "Warning"
    text = f"job {state.job} is {phase.lower()}" + (f": {reason}" if reason != phase else "")
    if message:
        text += f": {message}"
    return event_on(
        state, state.workloads[0], kind, phase, text, key=f"{phase}|{reason}|{restarts}"
    )
