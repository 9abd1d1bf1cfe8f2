"""The phase chain: from the state of one job to the decision that converges it.

Pure and level-triggered: the same state always gives the same actions, and everything the
sweeper must remember (a job's phase, when it finished) is written on the job's own objects.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from webhook.core.errors import TrainhookError
from webhook.core.objects import parse_time
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Action, Decision, Delete, Emit
from webhook.sweeper.decide.agreement import agreement_warnings
from webhook.sweeper.decide.compute_domain import (
    compute_domain_actions,
    compute_domain_ready,
    nvlink_pods,
)
from webhook.sweeper.decide.events import (
    event_on,
    intruder_events,
    problem_events,
    unattributed_events,
)
from webhook.sweeper.decide.failures import restarts_whole_job
from webhook.sweeper.decide.lifecycle.checkpoint import (
    CheckpointStep,
    checkpoint_step,
    holds_restart,
)
from webhook.sweeper.decide.lifecycle.deadline import deadline_at, deadline_verdict
from webhook.sweeper.decide.lifecycle.finish import finish_job, orphans, unverified_outcome
from webhook.sweeper.decide.lifecycle.in_place import in_place_actions, in_place_timeout
from webhook.sweeper.decide.lifecycle.restart import (
    RestartPlan,
    fallback_event,
    plan_restart,
    recorded_plan,
    restart_event,
    restart_moment,
    restart_pods,
    restart_took,
)
from webhook.sweeper.decide.lifecycle.suspend import resume_job, suspend_job
from webhook.sweeper.decide.marks import forged_mark_actions
from webhook.sweeper.decide.nodes import straggler_events
from webhook.sweeper.decide.owned import (
    cluster_service_actions,
    owned_gate_actions,
    owned_recheck,
    peer_files_of,
    peers_actions,
    podgroup_actions,
    proof_records,
    proven_peers,
    service_actions,
    ssh_secret_actions,
)
from webhook.sweeper.decide.policy import Replica, judge, succeeded_replicas, tally
from webhook.sweeper.decide.records import (
    SUSPENDED,
    Outcome,
    live_state,
    merge_records,
    positive_count,
    recorded_outcome,
    recorded_status,
    records_to_write,
    restarts_of,
    state_event,
    status_json,
)
from webhook.sweeper.decide.stalls import stall_timer
from webhook.sweeper.decide.topology import topology_actions
from webhook.sweeper.job.goodput import goodput_record
from webhook.sweeper.job.state import JobState

# The workloads of one manifest are created one after the other: the job's topology is enforced
# once its newest workload is this old, not while the rest of the job is still being created.
SETTLE = timedelta(seconds=5)


def decide(state: JobState, now: datetime) -> Decision:
    decision = _decide(state, now)
    forged = tuple(forged_mark_actions(state)) if state.workloads else ()
    if not state.intruders and not state.unattributed and not forged:
        return decision
    said = (*intruder_events(state), *unattributed_events(state), *forged)
    return Decision((*said, *decision.actions), decision.recheck_at, decision.phase)


def _decide(state: JobState, now: datetime) -> Decision:
    if state.problems:
        return Decision(tuple(problem_events(state)), phase="Invalid")
    if not state.workloads:
        return Decision(tuple(orphans(state)))
    outcome = recorded_outcome(state)
    if outcome is not None and not outcome.verified:
        return unverified_outcome(state, outcome)
    if outcome is not None:
        return finish_job(state, outcome, now)
    recorded = recorded_status(state)
    suspend = bool(state.settings.suspend)
    start = parse_time(recorded.get("startTime")) or now
    resumed = parse_time(recorded.get("resumedAt"))
    if recorded.get("state") == SUSPENDED and not suspend:
        start = resumed = now  # as for a Job, the deadline counts from the resume
    succeeded = succeeded_replicas(state)
    verdict = judge(state, now) or (None if suspend else deadline_verdict(state, now, start))
    plan: RestartPlan | None = None
    # A planned stop first asks the pods for a checkpoint (trainhook.io/checkpoint-on-stop).
    checkpoint = checkpoint_step(state, now, recorded)
    if verdict is None and suspend and not checkpoint.holding:
        return suspend_job(state, now, recorded, start, succeeded, resumed, checkpoint)
    if verdict is None and restarts_whole_job(state) and not state.deleting:
        plan, verdict = plan_restart(state, now, recorded, succeeded)
        if verdict is None and plan is not None and holds_restart(checkpoint, plan.new):
            plan = recorded_plan(state, recorded)
    if verdict is not None:
        restarts = restarts_of(state, now, recorded, succeeded)
        # what the restarts recorded stays; the rule named is the one that ended the job
        extra: dict[str, Any] = {k: recorded[k] for k in ("fired", "disruptions") if k in recorded}
        if verdict.rule:
            extra["rule"] = verdict.rule
        extra |= goodput_record(state, recorded, verdict.phase, verdict.reason, now)
        status = status_json(
            verdict.phase,
            verdict.reason,
            verdict.message,
            restarts,
            start,
            resumed=resumed,
            extra=extra,
        )
        outcome = Outcome(verdict.phase, verdict.reason, verdict.message, now, status)
        return finish_job(state, outcome, now)
    return _running(state, now, recorded, start, succeeded, plan, resumed, checkpoint)


def _running(
    state: JobState,
    now: datetime,
    recorded: dict[str, Any],
    start: datetime,
    succeeded: set[Replica],
    plan: RestartPlan | None,
    resumed: datetime | None,
    checkpoint: CheckpointStep,
) -> Decision:
    created = [w.created for w in state.workloads if w.created is not None]
    settled = max(created) + SETTLE if created else now
    counts = tally(state, now, succeeded)
    in_place_step = None
    replacing = plan.excluded if plan is not None else ()
    if plan is not None and plan.in_place is not None and not state.deleting:
        in_place_step = in_place_actions(state, plan.in_place, now, plan.excluded)
        if in_place_step.fallback:
            since, same_second = restart_moment(state, now)
            plan = replace(
                plan,
                since=since,
                same_second=same_second,
                in_place=None,
                fallback=in_place_step.fallback,
                attempt_began=since,
            )
            in_place_step = None
        else:
            plan = replace(plan, in_place=in_place_step.in_place)
    restarting = restart_pods(state, plan) if plan is not None else []
    if plan is not None:
        restarts = plan.restarts
    elif restarts_whole_job(state):
        restarts = positive_count(recorded.get("restarts"))
    else:
        restarts = counts.settled
    phase, reason, message = live_state(state, succeeded)
    if plan is not None and plan.new is not None:
        phase, reason, message = "Restarting", plan.new.reason, plan.new.message
    elif restarting or (plan is not None and not restart_took(state, plan)):
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
        resumed=resumed,
        attempt_began=plan.attempt_began if plan else None,
        extra=(plan.extra() if plan else {})
        | goodput_record(state, recorded, phase, reason, now)
        | checkpoint.record,
    )
    events: list[Action] = [a for a in checkpoint.actions if isinstance(a, Emit)]
    if plan is not None and plan.new is not None:
        events.append(restart_event(state, plan, plan.new, len(restarting)))
    elif plan is not None and plan.fallback:
        events.append(fallback_event(state, plan, len(restarting)))
    elif phase != recorded.get("state") and (phase, reason) != ("Pending", "Pending"):
        events.append(state_event(state, phase, reason, message, restarts))
    events += straggler_events(state)
    proofs: dict[str, dict[str, str | None]] = {}
    try:
        actions: list[Action] = []
        resume = resume_job(state)
        if not state.deleting:  # a job being deleted is neither re-stamped nor restarted
            actions += [*service_actions(state), *cluster_service_actions(state), *resume]
            if not resume:  # the replicas it resumes with decide its PodGroup and topology
                actions += podgroup_actions(state)
            actions += ssh_secret_actions(state)
            actions += compute_domain_actions(state)
            # A large job's lists before any stamp that needs them: a pod restarted for a new
            # topology mounts a ConfigMap that already holds it.
            wanted = peer_files_of(state)
            actions += peers_actions(state, wanted)
            peers = proven_peers(state, wanted)
            domain = compute_domain_ready(state)
            actions += owned_gate_actions(state, peers, domain)
            proofs = proof_records(state, peers, domain and nvlink_pods(state) > 0)
            if now >= settled and not restarting and not resume:
                actions += agreement_warnings(state)
                actions += topology_actions(state)
    except TrainhookError as error:
        first = state.workloads[0]
        invalid = event_on(state, first, "Warning", "InvalidJob", str(error))
        return Decision((invalid,), phase="Invalid")
    records = records_to_write(state, counts, status)
    for name, proof in proofs.items():
        records[name] = records.get(name, {}) | proof
    actions = merge_records(state, actions, events, records)
    actions += [Delete(PODS, state.namespace, pod.name, pod.uid) for pod in restarting]
    actions += [a for a in checkpoint.actions if not isinstance(a, Emit)]
    in_place_deadline = None
    stall = stall_timer(state)
    if in_place_step is not None:
        actions += in_place_step.actions
        if not in_place_step.in_place.released:
            in_place_deadline = in_place_step.in_place.started + in_place_timeout(replacing)
    rechecks = [
        moment
        for moment in (
            settled,
            counts.pending,
            deadline_at(state, start),
            in_place_deadline,
            stall.at if stall is not None else None,
            owned_recheck(state, now, actions),
            checkpoint.until,
        )
        if moment is not None and moment > now
    ]
    return Decision(tuple(actions), recheck_at=min(rechecks) if rechecks else None, phase=phase)
