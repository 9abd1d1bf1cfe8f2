"""The sweeper's decision: from the current state of one job to the actions that converge it.

Pure and level-triggered: the same state always gives the same actions, and everything the
sweeper must remember (a job's phase, when it finished) is written on the job's own objects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.gang import Gang, job_gang
from webhook.core.gang import podgroup_spec as core_podgroup_spec
from webhook.core.objects import parse_time
from webhook.core.peers import PeerFiles, configmap, inline, peer_files
from webhook.core.requests import sum_requests
from webhook.core.topology import stamp, topology_from_stamp
from webhook.core.workload import Member, build_topology, disagreement
from webhook.kube.resources import (
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    JOBS,
    MANAGED_BY,
    MANAGER,
    PODGROUPS,
    PODS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    Resource,
)
from webhook.sweeper.actions import (
    Action,
    Create,
    CreateSshSecret,
    Decision,
    Delete,
    Emit,
    ObjectRef,
    Patch,
)
from webhook.sweeper.failures import counts_restarts, restarts_whole_job
from webhook.sweeper.inplace import IN_PLACE_TIMEOUT, InPlace, last_attempt, start_in_place, step
from webhook.sweeper.kueue import finished_marker
from webhook.sweeper.policy import (
    DEFAULT_CLEAN_POD_POLICY,
    FAILED,
    PHASES,
    Replica,
    RestartCause,
    Tally,
    Verdict,
    judge,
    observed_successes,
    restart_cause,
    role_counts,
    succeeded_replicas,
    tally,
)
from webhook.sweeper.sshkeys import host_patterns, ssh_config
from webhook.sweeper.state import (
    JobState,
    Owned,
    PodView,
    WorkloadView,
    format_indexes,
    format_time,
)

# The workloads of one manifest are created one after the other: the job's topology is enforced
# once its newest workload is this old, not while the rest of the job is still being created.
SETTLE = timedelta(seconds=5)


@dataclass(frozen=True)
class Outcome:
    phase: str
    reason: str
    message: str | None  # None when read back from the workloads rather than judged now
    finished_at: datetime | None
    status: str | None = None  # the trainhook.io/status recorded with it


def decide(state: JobState, now: datetime) -> Decision:
    decision = _decide(state, now)
    if not state.intruders:
        return decision
    return Decision(
        (*_intruder_events(state), *decision.actions), decision.recheck_at, decision.phase
    )


def _decide(state: JobState, now: datetime) -> Decision:
    if state.problems:
        return Decision(tuple(_problem_events(state)), phase="Invalid")
    if not state.workloads:
        return Decision(tuple(_orphans(state)))
    outcome = recorded_outcome(state)
    if outcome is not None:
        return _finished(state, outcome, now)
    recorded = recorded_status(state)
    suspend = bool(state.setting("suspend"))
    start = parse_time(recorded.get("startTime")) or now
    if recorded.get("state") == SUSPENDED and not suspend:
        start = now  # as for a Job, the deadline counts from the resume
    succeeded = succeeded_replicas(state)
    verdict = judge(state, now) or (None if suspend else _deadline(state, now, start))
    plan: RestartPlan | None = None
    if verdict is None and suspend:
        return _suspend(state, now, recorded, start, succeeded)
    if verdict is None and restarts_whole_job(state) and not state.deleting:
        plan, verdict = _plan_restart(state, now, recorded, succeeded)
    if verdict is not None:
        restarts = _restarts(state, now, recorded, succeeded)
        # what the restarts recorded stays; the rule named is the one that ended the job
        extra: dict[str, Any] = {k: recorded[k] for k in ("fired", "disruptions") if k in recorded}
        if verdict.rule:
            extra["rule"] = verdict.rule
        status = status_json(
            verdict.phase, verdict.reason, verdict.message, restarts, start, extra=extra
        )
        outcome = Outcome(verdict.phase, verdict.reason, verdict.message, now, status)
        return _finished(state, outcome, now)
    return _running(state, now, recorded, start, succeeded, plan)


def recorded_outcome(state: JobState) -> Outcome | None:
    """The phase the sweeper recorded on the job's workloads; the earliest one wins."""
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
                )
            )
    if not found:
        return None
    timed = [o for o in found if o.finished_at is not None]
    return min(timed, key=lambda o: o.finished_at or datetime.min) if timed else found[0]


# --- the job's state, as recorded on its workloads ----------------------------------------


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
    most: dict[str, Any] = max(found, key=lambda v: _count(v.get("restarts")))
    status = dict(most)
    starts = [t for t in (parse_time(v.get("startTime")) for v in found) if t is not None]
    if starts:
        status["startTime"] = format_time(min(starts))
    return status


def _count(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def status_json(
    phase: str,
    reason: str,
    message: str,
    restarts: int,
    start: datetime,
    restarted_at: datetime | None = None,
    cause: str = "",
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
    value.update(extra or {})
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _restarts(
    state: JobState, now: datetime, recorded: dict[str, Any], succeeded: set[Replica]
) -> int:
    """Whole-job restarts when a rule may restart the job; otherwise the failed runs of the
    training containers."""
    if restarts_whole_job(state):
        return _count(recorded.get("restarts"))
    return tally(state, now, succeeded).settled


def _deadline(state: JobState, now: datetime, start: datetime) -> Verdict | None:
    seconds = state.setting("active_deadline_seconds")
    if seconds is None or now < start + timedelta(seconds=seconds):
        return None
    return Verdict(
        FAILED,
        "DeadlineExceeded",
        f"the job did not finish within {contract.ACTIVE_DEADLINE_SECONDS} {seconds} "
        f"(started {format_time(start)})",
    )


def _deadline_at(state: JobState, start: datetime) -> datetime | None:
    seconds = state.setting("active_deadline_seconds")
    return start + timedelta(seconds=seconds) if seconds is not None else None


# --- suspend and resume -------------------------------------------------------------------

SUSPENDED = "Suspended"


def _suspend(
    state: JobState,
    now: datetime,
    recorded: dict[str, Any],
    start: datetime,
    succeeded: set[Replica],
) -> Decision:
    """StatefulSets to 0 and Jobs suspended, each remembering what it was; the job keeps its
    restarts and its recorded successes and failed runs."""
    restarts = _restarts(state, now, recorded, succeeded)
    message = f"{contract.SUSPEND} is true"
    status = status_json(SUSPENDED, SUSPENDED, message, restarts, start)
    actions: list[Action] = []
    if recorded.get("state") != SUSPENDED:
        actions.append(_state_event(state, SUSPENDED, SUSPENDED, message, restarts))
    for workload in state.workloads:
        if workload.kind == "Pod":
            continue
        annotations: dict[str, Any] = {}
        spec: dict[str, Any] = {}
        remembered = contract.SUSPENDED_REPLICAS in workload.annotations
        if workload.kind == "StatefulSet" and workload.replicas > 0:
            spec["replicas"] = 0
            if not remembered:
                annotations[contract.SUSPENDED_REPLICAS] = str(workload.replicas)
        status_now = workload.job_status
        if status_now is not None and not status_now.suspended and not status_now.finished:
            spec["suspend"] = True
            if not remembered:
                annotations[contract.SUSPENDED_REPLICAS] = str(workload.replicas)
        if workload.annotations.get(contract.STATUS) != status:
            annotations[contract.STATUS] = status
        patch: dict[str, Any] = {}
        if annotations:
            patch["metadata"] = {"annotations": annotations}
        if spec:
            patch["spec"] = spec
        if patch:
            actions.append(
                Patch(
                    workload.resource,
                    state.namespace,
                    workload.name,
                    patch,
                    workload.resource_version,
                )
            )
    return Decision(tuple(actions), phase=SUSPENDED)


def _resume(state: JobState) -> list[Action]:
    """Give back what suspending took: each workload's replicas, each Job running again."""
    actions: list[Action] = []
    for workload in state.workloads:
        remembered = workload.annotations.get(contract.SUSPENDED_REPLICAS)
        if remembered is None:
            continue
        patch: dict[str, Any] = {"metadata": {"annotations": {contract.SUSPENDED_REPLICAS: None}}}
        if workload.kind == "StatefulSet" and remembered.isdigit():
            patch["spec"] = {"replicas": int(remembered)}
        elif workload.job_status is not None and workload.job_status.suspended:
            patch["spec"] = {"suspend": False}
        actions.append(
            Patch(
                workload.resource, state.namespace, workload.name, patch, workload.resource_version
            )
        )
    return actions


# --- whole-job restarts -------------------------------------------------------------------


@dataclass(frozen=True)
class RestartPlan:
    """A restart under way: the job's pods (or one role's) created before `since` are deleted,
    or, in place, every pod restarts its containers for the next attempt."""

    since: datetime
    cause: str  # the RestartCause key
    restarts: int
    new: RestartCause | None  # set when this decision starts the restart
    rule: str = ""  # the name of the rule that fired
    fired: dict[str, int] = field(default_factory=dict)  # per budgeted rule: times it acted
    disruptions: dict[str, int] = field(default_factory=dict)  # free restarts, by kind
    role: str | None = None  # restart-role: the only role whose pods are deleted
    pod: str | None = None  # restart-pod: the only pod deleted
    in_place: InPlace | None = None
    fallback: str = ""  # why the pods are recreated although the rule restarts in place

    def extra(self) -> dict[str, Any]:
        """What trainhook.io/status records of it besides the count and the cause."""
        value: dict[str, Any] = {}
        if self.rule:
            value["rule"] = self.rule
        if self.fired:
            value["fired"] = self.fired
        if self.disruptions:
            value["disruptions"] = self.disruptions
        if self.role:
            value["role"] = self.role
        if self.pod:
            value["pod"] = self.pod
        if self.in_place is not None:
            value.update(self.in_place.recorded())
        return value


def _plan_restart(
    state: JobState, now: datetime, recorded: dict[str, Any], succeeded: set[Replica]
) -> tuple[RestartPlan | None, Verdict | None]:
    since = parse_time(recorded.get("restartedAt"))
    handled = str(recorded.get("cause") or "")
    restarts = _count(recorded.get("restarts"))
    fired = _counts(recorded.get("fired"))
    disruptions = _counts(recorded.get("disruptions"))
    in_place = InPlace.read(recorded)
    if in_place is not None and not in_place.released:
        # Every rank is on its way back to the barrier: what happens meanwhile is the restart's.
        return _current_plan(state, recorded, since, handled, restarts, in_place), None
    runs_since = in_place.released_at if in_place is not None else since
    cause = restart_cause(
        state,
        now,
        succeeded,
        runs_since,
        handled,
        in_place=in_place is not None,
        restarted=_restarted_by(recorded.get("role"), recorded.get("pod")),
    )
    if cause is None:
        plan = _current_plan(state, recorded, since, handled, restarts, in_place)
        return plan, None
    count = restarts + (1 if cause.counted else 0)
    limit = state.setting("backoff_limit")
    rule = cause.rule
    if rule is not None and rule.budget is not None:
        used = fired.get(rule.key, 0)
        if used >= rule.budget:
            verdict = Verdict(
                FAILED,
                "BackoffLimitExceeded",
                f"{cause.message}; {rule.name} has acted {used} time(s), its max is {rule.budget}",
                rule.name,
            )
            return None, verdict
        fired = {**fired, rule.key: used + 1}
    if cause.counted and limit is not None and count > limit and counts_restarts(state):
        verdict = Verdict(
            FAILED,
            "BackoffLimitExceeded",
            f"{cause.message}; the job was restarted {restarts} time(s) "
            f"and {contract.BACKOFF_LIMIT} is {limit}"
            + (f" ({rule.name})" if rule is not None else ""),
            rule.name if rule is not None else "",
        )
        return None, verdict
    if cause.disruption is not None:
        disruptions = {**disruptions, cause.disruption: disruptions.get(cause.disruption, 0) + 1}
    in_place_now, fallback = (
        start_in_place(state, now, last_attempt(recorded) + 1) if cause.in_place else (None, "")
    )
    plan = RestartPlan(
        now,
        cause.key,
        count,
        cause,
        rule.name if rule is not None else "",
        fired,
        disruptions,
        cause.role,
        cause.pod,
        in_place_now,
        fallback,
    )
    return plan, None


def _restarted_by(role: object, pod: object) -> Callable[[PodView], bool] | None:
    """The pods a partial restart restarted: one role's, or one pod."""
    if isinstance(pod, str):
        return lambda view: view.name == pod
    if isinstance(role, str):
        return lambda view: view.role == role
    return None


def _current_plan(
    state: JobState,
    recorded: dict[str, Any],
    since: datetime | None,
    handled: str,
    restarts: int,
    in_place: InPlace | None,
) -> RestartPlan | None:
    """The restart recorded last, while it is under way or once it is done (its counts stay)."""
    if since is None:
        return None
    role, pod = recorded.get("role"), recorded.get("pod")
    return RestartPlan(
        since,
        handled,
        restarts,
        None,
        str(recorded.get("rule") or ""),
        _counts(recorded.get("fired")),
        _counts(recorded.get("disruptions")),
        role if isinstance(role, str) else None,
        pod if isinstance(pod, str) else None,
        in_place,
    )


def _counts(value: object) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if _count(v)}


def _restart_pods(state: JobState, plan: RestartPlan) -> list[PodView]:
    """The pods a restart still has to delete: every pod of the job's StatefulSets and Jobs
    (of its one role, for restart-role) created before it, not already going or finished. A
    restart in place deletes none."""
    if plan.in_place is not None:
        return []
    return [
        pod
        for pod in state.pods
        if pod.owner_kind in ("StatefulSet", "Job")
        and (plan.role is None or pod.role == plan.role)
        and (plan.pod is None or pod.name == plan.pod)
        and not pod.terminating
        and pod.phase not in ("Succeeded", "Failed")
        and (pod.created is None or pod.created < plan.since)
    ]


def _restarted(state: JobState, plan: RestartPlan) -> bool:
    """Whether a pod created since the restart runs (or has already finished); in place,
    whether every rank is back and released."""
    if plan.in_place is not None:
        return plan.in_place.released
    return any(
        pod.phase in ("Running", "Succeeded")
        and pod.created is not None
        and pod.created >= plan.since
        for pod in state.pods
        if not pod.terminating
    )


def _restart_event(state: JobState, plan: RestartPlan, cause: RestartCause, pods: int) -> Emit:
    limit = state.setting("backoff_limit")
    if cause.counted:
        of = f" of {contract.BACKOFF_LIMIT} {limit}" if limit is not None else ""
        counted = f"restart {plan.restarts}{of}"
    elif cause.disruption is not None:
        counted = f"not counted against the backoff limit: {cause.disruption}"
    else:
        counted = "not counted against the backoff limit"
    if plan.in_place is not None:
        what = (
            f"restarting all {plan.in_place.pods} pod(s) of the job in place "
            f"(attempt {plan.in_place.attempt})"
        )
    elif plan.pod is not None:
        what = f"restarting pod {plan.pod} alone"
    elif plan.role is not None:
        what = f"restarting the {pods} pod(s) of role {plan.role}"
    else:
        what = f"restarting all {pods} pod(s) of the job together"
    rule = f"; {cause.rule.name}" if cause.rule is not None else ""
    instead = f"; not in place: {plan.fallback}" if plan.fallback else ""
    message = f"{what} ({counted}): {cause.message}{rule}{instead}"
    kind = "Warning" if cause.counted else "Normal"
    return _event(state, state.workloads[0], kind, "Restarting", message, key=cause.key)


def _fallback_event(state: JobState, plan: RestartPlan, pods: int) -> Emit:
    message = (
        f"restarting all {pods} pod(s) of the job by recreating them, not in place: {plan.fallback}"
    )
    return _event(state, state.workloads[0], "Warning", "Restarting", message, key=message)


# --- a running job ------------------------------------------------------------------------


def _running(
    state: JobState,
    now: datetime,
    recorded: dict[str, Any],
    start: datetime,
    succeeded: set[Replica],
    plan: RestartPlan | None,
) -> Decision:
    created = [w.created for w in state.workloads if w.created is not None]
    settled = max(created) + SETTLE if created else now
    counts = tally(state, now, succeeded)
    in_place_step = None
    if plan is not None and plan.in_place is not None and not state.deleting:
        in_place_step = step(state, plan.in_place, now)
        if in_place_step.fallback:
            plan = replace(plan, since=now, in_place=None, fallback=in_place_step.fallback)
            in_place_step = None
        else:
            plan = replace(plan, in_place=in_place_step.in_place)
    restarting = _restart_pods(state, plan) if plan is not None else []
    if plan is not None:
        restarts = plan.restarts
    elif restarts_whole_job(state):
        restarts = _count(recorded.get("restarts"))
    else:
        restarts = counts.settled
    phase, reason, message = live_state(state, succeeded)
    if plan is not None and plan.new is not None:
        phase, reason, message = "Restarting", plan.new.reason, plan.new.message
    elif restarting or (plan is not None and not _restarted(state, plan)):
        # a restart under way says what caused it until the new pods run
        phase = "Restarting"
        reason = str(recorded.get("reason") or "PodsRestarting")
        message = str(recorded.get("message") or "")
    status = status_json(
        phase,
        reason,
        message,
        restarts,
        start,
        plan.since if plan else None,
        plan.cause if plan else "",
        plan.extra() if plan else None,
    )
    events: list[Action] = []
    if plan is not None and plan.new is not None:
        events.append(_restart_event(state, plan, plan.new, len(restarting)))
    elif plan is not None and plan.fallback:
        events.append(_fallback_event(state, plan, len(restarting)))
    elif phase != recorded.get("state") and (phase, reason) != ("Pending", "Pending"):
        events.append(_state_event(state, phase, reason, message, restarts))
    try:
        actions: list[Action] = []
        resume = _resume(state)
        if not state.deleting:  # a job being deleted is neither re-stamped nor restarted
            actions += [*_service(state), *_cluster_services(state), *resume]
            if not resume:  # the replicas it resumes with decide its PodGroup and topology
                actions += _podgroup(state)
            actions += _ssh_secret(state)
            # A large job's lists before any stamp that needs them: a pod restarted for a new
            # topology mounts a ConfigMap that already holds it.
            actions += _peers(state)
            if now >= settled and not restarting and not resume:
                actions += _agreement(state)
                actions += _topology(state)
    except TrainhookError as error:
        first = state.workloads[0]
        invalid = _event(state, first, "Warning", "InvalidJob", str(error))
        return Decision((invalid,), phase="Invalid")
    actions = _merge_records(state, actions, events, _records(state, counts, status))
    actions += [Delete(PODS, state.namespace, pod.name, pod.uid) for pod in restarting]
    in_place_deadline = None
    if in_place_step is not None:
        actions += in_place_step.actions
        if not in_place_step.in_place.released:
            in_place_deadline = in_place_step.in_place.started + IN_PLACE_TIMEOUT
    rechecks = [
        moment
        for moment in (settled, counts.pending, _deadline_at(state, start), in_place_deadline)
        if moment is not None and moment > now
    ]
    return Decision(tuple(actions), recheck_at=min(rechecks) if rechecks else None, phase=phase)


# Why a container cannot start, as the kubelet says it.
WAITING_PROBLEMS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)


def live_state(state: JobState, succeeded: set[Replica]) -> tuple[str, str, str]:
    """(state, reason, message) of a job that has not finished, from its pods."""
    pods = [p for p in state.pods if (p.role, p.index) not in succeeded]
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
    if any(p.terminating or p.disrupted for p in pods):
        return "Restarting", "PodsRestarting", ""
    for pod in counted:
        training = pod.training
        if training is not None and training.waiting in WAITING_PROBLEMS:
            detail = f": {training.waiting_message}" if training.waiting_message else ""
            message = f"pod {pod.name}: container {training.name}{detail}"
            return "Pending", training.waiting, message
    for pod in counted:
        if pod.phase == "Pending" and pod.scheduling:
            return "Pending", "Unschedulable", f"pod {pod.name}: {pod.scheduling}"
    if any(p.phase == "Running" for p in counted):
        return "Running", "Running", ""
    return "Pending", "Pending", ""


def _records(state: JobState, counts: Tally, status: str) -> dict[str, dict[str, str]]:
    """Per workload, the annotations to record: the job's status, the replicas seen to succeed
    (never forgotten once seen) and the failed runs counted so far."""
    observed = observed_successes(state)
    records: dict[str, dict[str, str]] = {}
    for workload in state.workloads:
        if workload.kind == "Pod":
            continue
        wanted: dict[str, str] = {}
        if workload.annotations.get(contract.STATUS) != status:
            wanted[contract.STATUS] = status
        seen = observed.get(workload.name, set()) if workload.kind == "StatefulSet" else set()
        if not seen <= workload.succeeded:
            wanted[contract.SUCCEEDED] = format_indexes(seen | workload.succeeded)
        ledger = counts.ledgers.get(workload.name)
        if ledger is not None and ledger != workload.failed_runs:
            wanted[contract.FAILED_RUNS] = ledger.format()
        if wanted:
            records[workload.name] = wanted
    return records


def _merge_records(
    state: JobState,
    actions: list[Action],
    events: list[Action],
    records: dict[str, dict[str, str]],
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
        Patch(
            w.resource,
            state.namespace,
            w.name,
            {"metadata": {"annotations": pending[w.name]}},
            w.resource_version,
        )
        for w in state.workloads
        if w.name in pending
    ]
    # The Service, PodGroup and Secret first (the pods need them); the events before the state
    # they announce is recorded, so a failed write has them recorded again, not lost.
    creates = [a for a in merged if isinstance(a, Create | CreateSshSecret)]
    rest = [a for a in merged if not isinstance(a, Create | CreateSshSecret)]
    return [*creates, *events, *alone, *rest]


def _state_event(state: JobState, phase: str, reason: str, message: str, restarts: int) -> Emit:
    kind = "Normal" if reason in ("Running", "Pending", "PodsRestarting", SUSPENDED) else "Warning"
    text = f"job {state.job} is {phase.lower()}" + (f": {reason}" if reason != phase else "")
    if message:
        text += f": {message}"
    return _event(state, state.workloads[0], kind, phase, text, key=f"{phase}|{reason}|{restarts}")


def labels(state: JobState) -> dict[str, str]:
    return {contract.JOB: state.job, MANAGED_BY: MANAGER}


def owner_references(state: JobState) -> list[dict[str, Any]]:
    """Every workload owns the job's Service, PodGroup and Secret: Kubernetes deletes them
    once the last workload is gone."""
    return [
        {"apiVersion": w.resource.api_version, "kind": w.kind, "name": w.name, "uid": w.uid}
        for w in state.workloads
        if w.uid
    ]


def _ports(state: JobState) -> list[int]:
    ports = (
        w.settings.port if w.settings.port is not None else w.framework.port
        for w in state.workloads
    )
    return list(dict.fromkeys(p for p in ports if p is not None))


def service_spec(state: JobState) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {contract.JOB: state.job},
    }
    name = state.framework.name
    ports = _ports(state)
    if ports:
        spec["ports"] = [
            {
                "name": name if i == 0 else f"{name}-{i}",
                "port": port,
                "targetPort": port,
                "protocol": "TCP",
            }
            for i, port in enumerate(ports)
        ]
    return spec


def _service(state: JobState) -> Iterable[Action]:
    spec = service_spec(state)
    existing = state.service
    if existing is None:
        yield Create(SERVICES, state.namespace, _body(state, "v1", "Service", state.job, spec))
        return
    if not existing.managed:
        if existing.spec.get("clusterIP") != "None":
            yield _event(
                state,
                state.workloads[0],
                "Warning",
                "ServiceNotHeadless",
                f"Service {state.job} was not created by Trainhook and is not headless "
                "(clusterIP: None): the job's pods cannot reach each other by hostname",
            )
        return
    wanted = {
        "ports": spec.get("ports"),
        "selector": spec["selector"],
        "publishNotReadyAddresses": True,
    }
    if _differs(existing, wanted) or _owners_differ(state, existing):
        yield _update(state, SERVICES, existing, wanted)


PODGROUP_RESOURCES = {r.api_version: r for r in (PODGROUPS, COSCHEDULING_PODGROUPS)}


def gang_of(state: JobState) -> Gang | None:
    """How the job is gang-scheduled; Refused when its workloads disagree."""
    members = [(f"{w.kind} {w.name}", w.settings) for w in state.workloads]
    return job_gang(state.job, members)


def cluster_service_specs(state: JobState) -> dict[str, dict[str, Any]]:
    """The ClusterIP Services the job's framework asks for, by name."""
    declare = state.framework.services
    if declare is None:
        return {}
    ports = _ports(state)
    wanted = declare(state.job, [w.role for w in state.workloads], ports[0] if ports else None)
    return {
        service.name: {
            "type": "ClusterIP",
            "selector": dict(service.selector),
            "ports": [
                {
                    "name": state.framework.name,
                    "port": service.port,
                    "targetPort": service.port,
                    "protocol": "TCP",
                }
            ],
        }
        for service in wanted
    }


def _cluster_services(state: JobState) -> Iterable[Action]:
    existing = {owned.name: owned for owned in state.cluster_services}
    for name, spec in cluster_service_specs(state).items():
        found = existing.get(name)
        if found is None:
            yield Create(SERVICES, state.namespace, _body(state, "v1", "Service", name, spec))
        elif not found.managed:
            yield _event(
                state,
                state.workloads[0],
                "Warning",
                "ServiceNotManaged",
                f"Service {name} was not created by Trainhook: the job's pods may reach the "
                "wrong address through it",
            )
        else:
            wanted = {"selector": spec["selector"], "ports": spec["ports"]}
            if _differs(found, wanted) or _owners_differ(state, found):
                yield _update(state, SERVICES, found, wanted)


def podgroup_spec(state: JobState) -> dict[str, Any] | None:
    """The spec of the job's PodGroup; None when the job has none."""
    found = podgroup_of(state)
    return found[1] if found else None


def podgroup_of(state: JobState) -> tuple[Resource, dict[str, Any]] | None:
    """The job's PodGroup, of whichever scheduler it names: its pods, their summed requests."""
    gang = gang_of(state)
    if gang is None:
        return None
    counts = role_counts(state)
    # A bare pod counts once: pods of a bare-pod job not created yet add no requests.
    parts = [(w.pod_requests, w.replicas) for w in state.workloads]
    priority = next((w.priority_class for w in state.workloads if w.priority_class), None)
    found = core_podgroup_spec(gang, sum(counts.values()), sum_requests(parts), priority)
    if found is None:
        return None
    api_version, spec = found
    return PODGROUP_RESOURCES[api_version], spec


def _podgroups(state: JobState) -> dict[Resource, Owned | None]:
    return {PODGROUPS: state.podgroup, COSCHEDULING_PODGROUPS: state.coscheduling_podgroup}


def _podgroup(state: JobState) -> Iterable[Action]:
    found = podgroup_of(state)
    wanted = found[0] if found else None
    for resource, existing in _podgroups(state).items():
        if resource != wanted and existing is not None and existing.managed:
            # The job now names another scheduler (or none): its old PodGroup goes.
            yield Delete(resource, state.namespace, existing.name, existing.uid)
    if found is None:
        return
    resource, spec = found
    existing = _podgroups(state)[resource]
    if existing is not None and not existing.managed:
        return
    if existing is None:
        body_spec = {k: v for k, v in spec.items() if v is not None}
        body = _body(state, resource.api_version, "PodGroup", state.job, body_spec)
        yield Create(resource, state.namespace, body)
    elif _differs(existing, spec) or _owners_differ(state, existing):
        yield _update(state, resource, existing, spec)


def _ssh_secret(state: JobState) -> Iterable[Action]:
    if not state.framework.ssh_keys:
        return
    if state.secret is not None:
        if not state.secret.managed:
            # Someone else's Secret under the name the pods mount: say so once, never replace it.
            first = state.workloads[0]
            yield _event(
                state,
                first,
                "Warning",
                "ForeignSecret",
                f"Secret {state.secret.name} was not made by Trainhook (it has no "
                f"{MANAGED_BY}={MANAGER} label), yet the job's pods mount it as their SSH keys; "
                "delete it so the sweeper makes one, or rename the job",
                key=state.secret.uid or state.secret.name,
            )
        return
    workers = [w for w in state.workloads if w.role == "worker"] or list(state.workloads)
    port = workers[0].settings.port or state.framework.port
    if port is None:  # a framework that talks ssh names its port
        return
    services = [w.service or state.job for w in state.workloads]
    yield CreateSshSecret(
        namespace=state.namespace,
        name=f"{state.job}-ssh",
        labels=labels(state),
        owners=tuple(owner_references(state)),
        ssh_config=ssh_config(host_patterns(state.namespace, services), port),
    )


def peer_files_of(state: JobState) -> dict[str, PeerFiles]:
    """By name, the peers ConfigMap of every topology the job's pods are created with: each
    workload's stamp, and the one the sweeper is about to stamp; none for a small job."""
    framework = state.framework

    def port(workload: WorkloadView) -> int | None:
        return workload.settings.port if workload.settings.port is not None else framework.port

    # Distinct (stamp, port) pairs first: a job of bare pods has one workload per pod.
    pairs = dict.fromkeys(
        (tuple(sorted(w.stamp.items())), port(w))
        for w in state.workloads
        if w.stamp.get(contract.TOPOLOGY)
    )
    cores = [w.workload for w in state.workloads if w.kind != "Pod"]
    if cores:
        wanted = tuple(sorted(stamp(build_topology(cores, state.cluster_domain)).items()))
        for workload_port in dict.fromkeys(port(w) for w in state.workloads):
            pairs[(wanted, workload_port)] = None
    found: dict[str, PeerFiles] = {}
    for stamp_items, stamp_port in pairs:
        topology = topology_from_stamp(
            dict(stamp_items),
            job=state.job,
            namespace=state.namespace,
            framework=framework.name,
            role_order=framework.roles,
            cluster_domain=state.cluster_domain,
        )
        if topology is None or inline(topology):
            continue
        files = peer_files(topology, stamp_port, framework.lists)
        found[files.name] = files
    return found


def _peers(state: JobState) -> Iterable[Action]:
    """Create the ConfigMaps the job's pods mount; delete the ones no pod mounts any more."""
    wanted = peer_files_of(state)
    existing = {owned.name for owned in state.peers}
    for name, files in wanted.items():
        if name not in existing:
            body = configmap(files, state.namespace)
            body["metadata"]["labels"] = labels(state)
            owners = owner_references(state)
            if owners:
                body["metadata"]["ownerReferences"] = owners
            yield Create(CONFIGMAPS, state.namespace, body)
    mounted = {pod.peers for pod in state.pods if not pod.terminating}
    for owned in state.peers:
        if owned.name not in wanted and owned.name not in mounted:
            yield Delete(CONFIGMAPS, state.namespace, owned.name, owned.uid)


def _body(state: JobState, api_version: str, kind: str, name: str, spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": state.namespace, "labels": labels(state)}
    owners = owner_references(state)
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def _differs(existing: Owned, wanted: dict[str, Any]) -> bool:
    return any(existing.spec.get(key) != value for key, value in wanted.items())


def _owners_differ(state: JobState, existing: Owned) -> bool:
    return existing.owners != frozenset(w.uid for w in state.workloads if w.uid)


def _update(state: JobState, resource: Any, existing: Owned, spec: dict[str, Any]) -> Patch:
    patch = {"metadata": {"ownerReferences": owner_references(state)}, "spec": spec}
    return Patch(resource, state.namespace, existing.name, patch, existing.resource_version)


def same_topology(stamped: str | None, wanted: str) -> bool:
    """Compare two topology stamps as ordered role lists, whatever their JSON spacing."""
    try:
        left = json.loads(stamped) if stamped else None
        right = json.loads(wanted)
    except ValueError:
        return False
    return isinstance(left, dict) and list(left.items()) == list(right.items())


def elastic_scale(stamped: str | None, wanted: str, elastic: tuple[int, int] | None) -> bool:
    """Whether an elastic job only changed its replica counts, staying within min:max."""
    if elastic is None:
        return False
    try:
        left = json.loads(stamped) if stamped else None
        right = json.loads(wanted)
    except ValueError:
        return False
    if not isinstance(left, dict) or not isinstance(right, dict) or list(left) != list(right):
        return False
    total = sum(v for v in right.values() if isinstance(v, int))
    return elastic[0] <= total <= elastic[1]


def _topology(state: JobState) -> Iterable[Action]:
    """Keep every workload's stamp equal to the job's topology, then restart stale pods together."""
    workloads = [w for w in state.workloads if w.kind != "Pod"]
    if not workloads:
        return
    wanted = stamp(build_topology([w.workload for w in workloads]))
    topology = wanted[contract.TOPOLOGY]
    elastic = state.setting("elastic")
    restamped = False
    for workload in workloads:
        if all(workload.stamp.get(key) == value for key, value in wanted.items()):
            continue
        if elastic_scale(workload.stamp.get(contract.TOPOLOGY), topology, elastic) and all(
            workload.stamp.get(key) == value
            for key, value in wanted.items()
            if key != contract.TOPOLOGY
        ):
            continue  # scaled within min:max: the rendezvous takes it, nothing restarts
        status = workload.job_status
        if workload.kind == "StatefulSet" or (status and status.suspended and not status.started):
            restamped = restamped or workload.kind == "StatefulSet"
            patch = {"spec": {"template": {"metadata": {"annotations": wanted}}}}
            yield Patch(
                workload.resource, state.namespace, workload.name, patch, workload.resource_version
            )
        else:
            yield _event(
                state,
                workload,
                "Warning",
                "TopologyStale",
                f"Job {workload.name} runs with topology {workload.stamp.get(contract.TOPOLOGY)} "
                f"but the job is now {topology}; a started Job's pod template cannot change: "
                "delete and recreate it",
                key=topology,
            )
    if restamped:
        return  # restart pods once their StatefulSets carry the new stamp
    owners = {w.name for w in workloads if w.kind == "StatefulSet"}
    current: dict[str | None, bool] = {}  # the pods of a job share a handful of stamps

    def is_current(stamped: str | None) -> bool:
        if stamped not in current:
            current[stamped] = same_topology(stamped, topology) or elastic_scale(
                stamped, topology, elastic
            )
        return current[stamped]

    stale = [
        pod
        for pod in state.pods
        if pod.owner_kind == "StatefulSet"
        and pod.owner_name in owners
        and not pod.terminating
        and not is_current(pod.topology)
    ]
    if not stale:
        return
    names = ", ".join(pod.name for pod in stale)
    first = next(w for w in workloads if w.kind == "StatefulSet")
    yield _event(
        state,
        first,
        "Normal",
        "TopologyChanged",
        f"restarting {len(stale)} pod(s) together for topology {topology}: {names}",
        key=topology,
    )
    for pod in stale:
        yield Delete(PODS, state.namespace, pod.name, pod.uid)


def _agreement(state: JobState) -> Iterable[Action]:
    """A job-wide setting its roles disagree on (admitted while its siblings could not be read,
    or changed since): one Warning on the first workload, for as long as it lasts."""
    members = [
        Member(w.role, f"{w.kind} {w.name}", w.settings, w.priority_class) for w in state.workloads
    ]
    problem = disagreement(state.job, state.framework, members)
    if problem is None:
        problem = _bare_pod_ports(state)
    if problem is not None:
        yield _event(state, state.workloads[0], "Warning", "SettingsDisagree", problem)


def _bare_pod_ports(state: JobState) -> str | None:
    """Bare pods whose hosts annotation records no ports reach every peer on their own port:
    those of one job must listen on one."""
    bare = [
        w
        for w in state.workloads
        if w.kind == "Pod" and '"port":' not in w.stamp.get(contract.HOSTS, "")
    ]
    ports = [(w, w.settings.port or w.framework.port) for w in bare]
    if len({port for _, port in ports}) < 2:
        return None
    listed = ", ".join(f"{w.role} (Pod {w.name}) {port}" for w, port in ports[:6])
    more = f" and {len(ports) - 6} more" if len(ports) > 6 else ""
    return (
        f"{contract.PORT} differs between the bare pods of job {state.job}: {listed}{more}; "
        f"set one, or record each role's port in {contract.HOSTS}"
    )


# --- a finished job -----------------------------------------------------------------------


def _finished(state: JobState, outcome: Outcome, now: datetime) -> Decision:
    finished_at = outcome.finished_at or now
    record = {
        contract.PHASE: outcome.phase,
        contract.FINISHED_AT: format_time(finished_at),
        contract.REASON: outcome.reason,
    }
    if outcome.status is not None:
        record[contract.STATUS] = outcome.status
    clean = state.setting("clean_pod_policy") or DEFAULT_CLEAN_POD_POLICY
    events: list[Action] = []
    patches: list[Action] = []
    for workload in state.workloads:
        patch: dict[str, Any] = {}
        recorded = all(workload.annotations.get(k) == v for k, v in record.items())
        if not recorded:
            patch["metadata"] = {"annotations": record}
            if workload.annotations.get(contract.PHASE) not in PHASES:
                message = outcome.message or f"job {state.job} {outcome.phase.lower()}"
                kind = "Normal" if outcome.phase == "Succeeded" else "Warning"
                events.append(_event(state, workload, kind, outcome.reason, message, outcome.phase))
        if workload.kind == "StatefulSet" and workload.replicas != 0:
            patch["spec"] = {"replicas": 0}  # a finished pod must not be restarted to train again
        status = workload.job_status
        if (
            status is not None
            and clean in ("All", "Running")
            and not status.finished
            and not status.suspended
        ):
            patch["spec"] = {"suspend": True}  # stop the Job controller replacing cleaned pods
        if patch:
            patches.append(
                Patch(
                    workload.resource,
                    state.namespace,
                    workload.name,
                    patch,
                    workload.resource_version,
                )
            )
    ttl = state.setting("ttl_seconds_after_finished")
    expires = finished_at + timedelta(seconds=ttl) if ttl is not None else None
    if expires is not None and now >= expires and not patches:
        return Decision(tuple(_delete_job(state)))
    # The Kueue marker before the pods go: Kueue must see it on a pod of the group.
    actions = (
        *events,
        *finished_marker(state),
        *patches,
        *_clean_pods(state, clean),
        *_release_gang(state),
    )
    return Decision(actions, recheck_at=expires, phase=outcome.phase)


def _release_gang(state: JobState) -> Iterable[Action]:
    """A finished job's PodGroup goes once none of its pods is pending or running, so the job
    no longer holds its place (and its resources) in the scheduler's queue until its TTL."""
    if any(not pod.terminating and pod.phase in ("Pending", "Running") for pod in state.pods):
        return
    for resource, owned in _podgroups(state).items():
        if owned is not None and owned.managed:
            yield Delete(resource, state.namespace, owned.name, owned.uid)


def _clean_pods(state: JobState, policy: str) -> Iterable[Action]:
    if policy == "None":
        return
    for pod in state.pods:
        if pod.terminating:
            continue
        if policy == "All" or pod.phase in ("Pending", "Running"):
            yield Delete(PODS, state.namespace, pod.name, pod.uid)


def _delete_job(state: JobState) -> Iterable[Action]:
    yield from _orphans(state, only_orphans=False)
    for workload in state.workloads:
        yield Delete(workload.resource, state.namespace, workload.name, workload.uid)


def _orphans(state: JobState, only_orphans: bool = True) -> Iterable[Action]:
    """The sweeper's own objects of a job that is gone (or expired); never anyone else's."""
    if only_orphans and any(not pod.terminating for pod in state.pods):
        return
    for resource, owned in (
        (SERVICES, state.service),
        *((SERVICES, service) for service in state.cluster_services),
        *_podgroups(state).items(),
        (SECRETS, state.secret),
    ):
        if owned is not None and owned.managed:
            yield Delete(resource, state.namespace, owned.name, owned.uid)
    for owned in state.peers:
        yield Delete(CONFIGMAPS, state.namespace, owned.name, owned.uid)


# --- events -------------------------------------------------------------------------------


def _problem_events(state: JobState) -> Iterable[Action]:
    for problem in state.problems:
        target = ObjectRef(_api_version(problem.kind), problem.kind, problem.name, problem.uid)
        yield _emit(state, target, "Warning", "InvalidJob", problem.message, problem.message)


def _intruder_events(state: JobState) -> Iterable[Action]:
    for intruder in state.intruders:
        kind = intruder.kind
        target = ObjectRef(_api_version(kind), kind, intruder.name, intruder.uid)
        yield _emit(state, target, "Warning", "NotInJob", intruder.message, "NotInJob")


def _api_version(kind: str) -> str:
    return {"StatefulSet": STATEFULSETS, "Job": JOBS}.get(kind, PODS).api_version


def _event(
    state: JobState, workload: WorkloadView, kind: str, reason: str, message: str, key: str = ""
) -> Emit:
    target = ObjectRef(workload.resource.api_version, workload.kind, workload.name, workload.uid)
    return _emit(state, target, kind, reason, message, key or message)


def _emit(
    state: JobState, target: ObjectRef, kind: str, reason: str, message: str, key: str
) -> Emit:
    """An Event named after what it says: recording the same thing twice finds it exists."""
    digest = hashlib.sha256(f"{target.uid}|{reason}|{key}".encode()).hexdigest()[:12]
    name = f"{target.name[:240]}.{digest}"
    return Emit(state.namespace, name, target, kind, reason, message)
