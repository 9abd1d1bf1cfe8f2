"""Which failure rule fires for each pod of a job, from what the pod and its container report.

The rules are the job's `trainhook.io/failure-policy` followed by its restart policy's preset
(webhook.core.job.failure_rules); this module turns a pod's status into the facts they match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from webhook.core.fabrics.preflight import preflight_verdict
from webhook.core.job.failure_rules import (
    PARTIAL,
    RESTART_IN_PLACE,
    WHOLE_JOB,
    Failure,
    FailurePolicy,
    Rule,
    failure_policy,
)
from webhook.sweeper.decide.nodes import node_facts, sick_nodes
from webhook.sweeper.decide.stalls import stalled
from webhook.sweeper.job.goodput import STALLED
from webhook.sweeper.job.pods import PodView, Run, created_before
from webhook.sweeper.job.state import JobState

# A peer that crashes because the replica deciding success has just exited can be seen before
# that exit 0: a failed run counts only once it is this old.
GRACE: Final = timedelta(seconds=10)

Replica = tuple[str, int]  # (role, index in the role)

# How each kind of disruption is reported: the reason, and what happened to the pod.
DISRUPTION_REPORTS: Final = {
    "preemption": ("Preempted", "was preempted"),
    "drain": ("Drained", "was evicted by a drain"),
    "node-loss": ("NodeLost", "lost its node"),
    "kubelet": ("EvictedByKubelet", "was stopped by its kubelet"),
}


DISRUPTION_REASONS: Final = tuple(reason for reason, _ in DISRUPTION_REPORTS.values())


def settled(run: Run, now: datetime | None) -> bool:
    """Whether a failed run is older than the grace period (a run of unknown time is)."""
    return now is None or run.finished is None or run.finished <= now - GRACE


def job_failure_policy(state: JobState) -> FailurePolicy:
    return failure_policy(state.settings.failure_rules, state.settings.restart_policy)


def restarts_whole_job(state: JobState) -> bool:
    """Whether a failure may restart the whole job or a role (the sweeper then counts restarts)."""
    return any(rule.action in (*WHOLE_JOB, *PARTIAL) for rule in job_failure_policy(state).rules)


def counts_restarts(state: JobState) -> bool:
    """Whether the job's restarts, not its failed runs, are what its backoff limit counts: its
    restart policy restarts the whole job, or a rule restarts it in place (which stops every
    container: not a failed run)."""
    return state.settings.restart_policy in ("RestartJob", "RestartJobInPlace") or any(
        rule.action == RESTART_IN_PLACE for rule in state.settings.failure_rules or ()
    )


@dataclass(frozen=True)
class Fired:
    """A rule that fired for one pod: on a failed run, on a run that exited 0 where a rule names
    exit code 0, on a pod stopped from outside, or on a pod that failed before it ran."""

    pod: PodView
    rule: Rule
    key: str  # identifies what happened, so the same failure is acted on once
    reason: str  # OOMKilled, Error, Preempted, UnexpectedAdmissionError, ...
    message: str  # one line: what the pod reported
    disruption: str | None = None  # preemption, drain, node-loss, kubelet

    @property
    def action(self) -> str:
        return self.rule.action

    @property
    def excludes(self) -> str | None:
        """The node the restart keeps the recreated pods off (`exclude-node`), if any."""
        return self.pod.node or None if self.rule.exclude_node else None


def disruption_of(pod: PodView) -> str | None:
    return _facts(pod, None).disruption() if pod.disrupted else None


def describe_disruption(pod: PodView, kind: str) -> tuple[str, str]:
    """(reason, message) for a pod stopped from outside."""
    reason, what = DISRUPTION_REPORTS[kind]
    signs = [f"{t} {r}".strip() for t, r in pod.stop_conditions] or [pod.status_reason]
    return reason, f"pod {pod.name} {what} ({', '.join(s for s in signs if s)})"


def _facts(pod: PodView, run: Run | None, **node: Any) -> Failure:
    return Failure(
        role=pod.role,
        exit_code=run.exit_code if run else None,
        reason=run.reason if run else "",
        message=run.message if run else "",
        pod_reason=pod.status_reason,
        conditions=pod.stop_conditions,
        preflight=_preflight(pod, run),
        **node,
    )


def _preflight(pod: PodView, run: Run | None) -> str:
    """What a failed run of an init container says the job's preflight found: slow, gpu, error,
    or "" (any other run, the training container's among them)."""
    training = pod.training
    if run is None or training is None or run is not training.init_failed:
        return ""
    return preflight_verdict(run.exit_code, run.message)


def early_exit(state: JobState, pod: PodView, policy: FailurePolicy | None = None) -> Rule | None:
    """The user's rule naming exit code 0 that matches the pod's run that exited 0: such a run
    is no success, the rule handles it (a worker that returns before its peers, say)."""
    training = pod.training
    if training is None or not training.succeeded or not pod.counts:
        return None
    policy = policy or job_failure_policy(state)
    run = training.current if training.exit_code == 0 else training.last
    for rule in policy.rules:
        if rule.preset or not any(low == 0 for low, _ in rule.match.exit_codes):
            continue
        if rule.match.matches(_facts(pod, run)):
            return rule
    return None


def fired_rules(
    state: JobState,
    now: datetime | None,
    succeeded: set[Replica],
    since: datetime | None = None,
    in_place: bool = False,
    restarted: Callable[[PodView], bool] | None = None,
    same_second: frozenset[str] = frozenset(),
) -> Iterator[Fired]:
    """Every rule that fires now, pod by pod (newest run first). `since`: when the job was last
    restarted; pods created before it (recreated) or, in place, runs that ended by then (when it
    was released) are part of that restart; `restarted`: which pods it restarted, when only some
    (a role, a pod); `same_second`: the pods of `since`'s own second created before it."""
    runs_since = since if in_place else None
    policy = job_failure_policy(state)
    users = FailurePolicy(tuple(rule for rule in policy.rules if not rule.preset))
    known = state.pod_facts
    # A plain pod has nothing a rule fires on (a retired one has its failed runs: read with
    # the notable ones); a pod stopped from outside and gone since is the disruption it was,
    # until the job restarts after it.
    notable = known.with_retired(known.notable)
    pods = [*((pod, False) for pod in notable), *((pod, True) for pod in known.gone)]
    for pod, gone in pods:
        if (pod.role, pod.index) in succeeded:
            continue
        old = since is not None and created_before(pod, since, same_second)
        if old and gone:
            continue
        if not in_place and old and (restarted is None or restarted(pod)):
            continue
        node = node_facts(state, pod)
        if pod.disrupted:
            facts = _facts(pod, pod.training.current if pod.training else None, **node)
            kind = facts.disruption() or "kubelet"
            rule = policy.first(facts)
            if rule is not None:
                reason, message = describe_disruption(pod, kind)
                yield Fired(pod, rule, f"{pod.uid8}/disrupted", reason, message, kind)
            continue
        if pod.terminating:
            continue
        training = pod.training
        early = early_exit(state, pod, policy)
        if training is not None and early is not None:
            run = training.current if training.exit_code == 0 else training.last
            if run is not None and settled(run, now) and _after(run, runs_since):
                message = f"pod {pod.name}: container {training.name} {run.describe()}"
                key = f"{pod.uid8}/exit0/{training.restarts}"
                yield Fired(pod, early, key, "Completed", message)
        runs = [r for r in _failed_runs(pod) if settled(r, now) and _after(r, runs_since)]
        for run in runs:
            rule = policy.first(_facts(pod, run, **node))
            if rule is not None and training is not None:
                reason = run.reason if run.reason not in ("", "Completed") else "Error"
                message = f"pod {pod.name}: container {container_name(pod, run)} {run.describe()}"
                yield Fired(pod, rule, f"{pod.uid8}/{training.failures}", reason, message)
        if not runs and pod.phase == "Failed" and pod.status_reason:
            # refused by its kubelet before a container ran (UnexpectedAdmissionError, OutOfcpu,
            # NodeAffinity): its controller replaces it; only the user's own rules act on it
            rule = users.first(_facts(pod, None, **node))
            if rule is not None:
                message = f"pod {pod.name} failed: {pod.status_reason}"
                yield Fired(
                    pod, rule, f"{pod.uid8}/{pod.status_reason}", pod.status_reason, message
                )

    def passed(pod: PodView) -> bool:  # succeeded, or part of the last restart
        if (pod.role, pod.index) in succeeded:
            return True
        old = since is not None and created_before(pod, since, same_second)
        return not in_place and old and (restarted is None or restarted(pod))

    for sick in sick_nodes(state, users.rules, passed):
        yield Fired(sick.pod, sick.rule, sick.key, sick.reason, sick.message)
    stall = stalled(state, now)
    first = next((p for p in state.pods if p.owner_kind in ("StatefulSet", "Job")), None)
    if stall is not None and first is not None:
        rule = policy.first(Failure(stalled=True))
        if rule is not None:
            yield Fired(first, rule, stall.key, STALLED, stall.message())


def _failed_runs(pod: PodView) -> tuple[Run, ...]:
    return pod.training.failed_runs() if pod.training else ()


def _after(run: Run, since: datetime | None) -> bool:
    return since is None or run.finished is None or run.finished > since


def container_name(pod: PodView, run: Run | None = None) -> str:
    training = pod.training
    if training is None:
        return "?"
    if (
        run is not None
        and run is training.init_failed
        and run
        not in (
            training.current,
            training.last,
        )
    ):
        return f"{training.name} (an init container)"
    return training.name
