"""When a job has succeeded or failed: success policies, restart policies and the backoff limit."""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from webhook.core import contract
from webhook.core.frameworks import Framework
from webhook.core.job.failure_rules import (
    COUNTED,
    FAIL,
    PARTIAL,
    RESTART_IN_PLACE,
    RESTART_POD,
    RESTART_ROLE,
    WHOLE_JOB,
    Rule,
)
from webhook.sweeper.decide.failures import (
    GRACE,
    Replica,
    container_name,
    counts_restarts,
    early_exit,
    fired_rules,
    job_failure_policy,
    settled,
)
from webhook.sweeper.job.pods import PodFacts, PodView, Run, created_before
from webhook.sweeper.job.recorded import FailedRuns
from webhook.sweeper.job.state import JobState

SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
PHASES: Final = (SUCCEEDED, FAILED)

# Lifecycle defaults, the same as Kubeflow's training-operator RunPolicy: pods are kept, failed
# training containers are retried without limit, and a finished job stays until deleted.
DEFAULT_CLEAN_POD_POLICY: Final = "None"
DEFAULT_RESTART_POLICY: Final = "OnFailure"
__all__ = ["GRACE", "Replica", "settled"]


@dataclass(frozen=True)
class Verdict:
    phase: str  # Succeeded or Failed
    reason: str  # CamelCase, recorded in trainhook.io/reason and on the Event
    message: str  # one line for a person
    rule: str = ""  # the failure rule that decided it, by name


@dataclass(frozen=True)
class SuccessRule:
    replicas: tuple[Replica, ...]
    need_all: bool  # every replica listed must succeed, or any one of them
    describe: str  # e.g. "master 0", "every worker"

    def met(self, succeeded: set[Replica]) -> bool:
        if not self.replicas:
            return False
        done = [replica in succeeded for replica in self.replicas]
        return all(done) if self.need_all else any(done)


def role_counts(state: JobState) -> dict[str, int]:
    """Replicas per role in role order: from the workloads, or a bare-pod job's own stamp."""
    counts: dict[str, int] = {}
    bare = [w for w in state.workloads if w.kind == "Pod"]
    for workload in state.workloads:
        if workload.kind != "Pod":
            counts[workload.role] = counts.get(workload.role, 0) + workload.replicas
    stamps = (_stamp_counts(w.stamp.get(contract.TOPOLOGY)) for w in bare)
    stamped = next(filter(None, stamps), None)
    if stamped:
        for role, replicas in stamped.items():
            counts.setdefault(role, replicas)
    else:
        for workload in bare:
            counts[workload.role] = counts.get(workload.role, 0) + 1
    if not state.workloads:
        return {}
    order = state.framework.order(counts)
    return {role: counts[role] for role in order if counts[role] > 0}


def _stamp_counts(raw: str | None) -> dict[str, int] | None:
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    return {k: v for k, v in value.items() if isinstance(v, int) and not isinstance(v, bool)}


def success_rule(state: JobState) -> SuccessRule:
    counts = role_counts(state)
    policy = state.settings.success_policy
    if policy == "all":
        return _every_pod(counts)
    if policy == "rank0":
        first = next(iter(counts), None)
        if first is None:
            return SuccessRule((), True, "rank 0")
        return SuccessRule(((first, 0),), True, f"rank 0 ({first} 0)")
    if policy == "any-worker":
        role = "worker" if "worker" in counts else None
        replicas = _replicas(counts, [role] if role else list(counts))
        return SuccessRule(replicas, False, "any worker" if role else "any pod")
    if policy is not None and policy.startswith("role="):
        role = policy.removeprefix("role=")
        return SuccessRule(_replicas(counts, [role]), True, f"every {role}")
    return default_rule(state.framework, counts)


def default_rule(framework: Framework, counts: dict[str, int]) -> SuccessRule:
    """The framework's own notion of done (see the env contract's success column)."""
    success = framework.success
    for role in success.first_of:
        if counts.get(role):
            return SuccessRule(((role, 0),), True, f"{role} 0")
    if success.every and counts.get(success.every):
        return SuccessRule(_replicas(counts, [success.every]), True, f"every {success.every}")
    return _every_pod(counts)


def _every_pod(counts: dict[str, int]) -> SuccessRule:
    return SuccessRule(_replicas(counts, list(counts)), True, "every pod")


def _replicas(counts: dict[str, int], roles: Iterable[str]) -> tuple[Replica, ...]:
    return tuple((role, i) for role in roles for i in range(counts.get(role, 0)))


def counted_pods(state: JobState) -> list[PodView]:
    """Pods whose present state says something about the training (not being deleted, not
    evicted or preempted) beyond running: plain pods (PodFacts) have neither failed nor
    succeeded, so they are left out."""
    return [pod for pod in state.pod_facts.notable if pod.counts]


def _exits_early(state: JobState) -> set[str]:
    """Pods whose exit 0 a rule of the user's failure policy takes for a failure."""
    if not state.settings.failure_rules:
        return set()
    policy = job_failure_policy(state)
    notable = state.pod_facts.notable  # a plain pod has not exited 0
    return {pod.name for pod in notable if early_exit(state, pod, policy) is not None}


def observed_successes(
    state: JobState,
    attempt_began: datetime | Literal["current"] | None = "current",
    same_second_of_attempt: frozenset[str] = frozenset(),
) -> dict[str, set[int]]:
    """Per StatefulSet, the role indexes whose training container is seen to have exited 0 now
    (Kubernetes restarts them, so the sweeper records them the first time it sees them), in the
    attempt that began at `attempt_began` (by default the job's current one): a restart being
    recorded now begins a new attempt, and the old pods it is about to delete, still there when
    it is written, succeeded in the one it ends."""
    if attempt_began == "current":
        began, same_second = state.attempt_began, attempt_same_second(state)
    else:
        began, same_second = attempt_began, same_second_of_attempt
    found: dict[str, set[int]] = {}
    early = _exits_early(state)
    for pod in counted_pods(state):
        if pod.owner_kind != "StatefulSet" or pod.index is None or pod.training is None:
            continue
        if pod.name in early or before_attempt(pod, began, same_second):
            continue
        if pod.training.succeeded:
            found.setdefault(pod.owner_name, set()).add(pod.index)
    return found


def before_attempt(
    pod: PodView, began: datetime | None, same_second: frozenset[str] = frozenset()
) -> bool:
    """Whether a pod's success, if any, was of an attempt before the one that began at `began`:
    the pod was created before that whole-job restart (in its own second, one it recorded in
    `same_second`), and did not restart in place since (a pod restarted in place keeps its
    creation time: its run that exited 0 must have ended after it)."""
    if began is None or pod.created is None or not created_before(pod, began, same_second):
        return False
    training = pod.training
    if pod.has_barrier and training is not None:
        run = training.current if training.exit_code == 0 else training.last
        return run is None or run.finished is None or run.finished < began
    return True


def attempt_same_second(state: JobState) -> frozenset[str]:
    """The pods created in the second the job's current attempt began, before it: recorded by
    the whole-job restart that began it (sameSecond, short uids)."""
    attempt = state.attempt
    if not attempt:
        return frozenset()
    for workload in state.workloads:
        if workload.attempt == attempt:
            found = same_second_recorded(workload.annotations.get(contract.STATUS), attempt)
            if found:
                return found
    return frozenset()


def same_second_recorded(status: str | None, attempt: str) -> frozenset[str]:
    """sameSecond of a recorded trainhook.io/status, when its restart began `attempt`."""
    try:
        value = json.loads(status or "{}")
    except ValueError:
        return frozenset()
    if not isinstance(value, dict) or value.get("restartedAt") != attempt:
        return frozenset()
    found = value.get("sameSecond")
    return (
        frozenset(u for u in found if isinstance(u, str))
        if isinstance(found, list)
        else frozenset()
    )


def succeeded_replicas(state: JobState) -> set[Replica]:
    """Replicas that finished their training: recorded on their workload, or seen now by exit
    code for StatefulSet pods (which Kubernetes restarts even after success) and by their own
    status for Jobs and bare Pods. A pod being deleted or evicted never counts: it may exit 0
    on SIGTERM."""
    done: set[Replica] = set()
    early = _exits_early(state)
    same_second = attempt_same_second(state)
    for pod in counted_pods(state):
        if pod.role is None or pod.index is None or pod.name in early:
            continue
        if before_attempt(pod, state.attempt_began, same_second):
            continue
        if pod.owner_kind == "StatefulSet":
            ok = pod.training is not None and pod.training.succeeded
        else:
            ok = pod.phase == "Succeeded"
        if ok:
            done.add((pod.role, pod.index))
    attempt = state.attempt
    for workload in state.workloads:
        if workload.attempt == attempt:  # successes of an earlier attempt count for nothing
            done.update((workload.role, i) for i in workload.succeeded)
        status = workload.job_status
        if status is None:
            continue
        indexes = range(workload.replicas) if status.complete else status.completed_indexes
        done.update((workload.role, i) for i in indexes)
    return done


def judge(state: JobState, now: datetime | None = None) -> Verdict | None:
    """Succeeded, Failed, or None while the job is still running. Success is checked first:
    peers often crash once the replica that decides success has exited; failures younger than
    GRACE (at `now`) wait, so the decisive replica's exit 0 can still be seen."""
    rule = success_rule(state)
    succeeded = succeeded_replicas(state)
    if rule.met(succeeded):
        policy = state.settings.success_policy
        source = f"{contract.SUCCESS_POLICY} {policy}" if policy else "the framework default"
        message = f"{rule.describe} succeeded (success policy: {source})"
        return Verdict(SUCCEEDED, "Completed", message)
    return failure(state, now, succeeded)


@dataclass(frozen=True)
class Tally:
    """Failed runs of the job's training containers, counted across pod replacements."""

    settled: int  # failed runs older than the grace period
    pending: datetime | None  # when the youngest failed run leaves the grace period
    ledgers: Mapping[str, FailedRuns]  # per workload name: what to record


def tally(state: JobState, now: datetime | None, succeeded: set[Replica]) -> Tally:
    counted = 0
    pending: datetime | None = None
    ledgers: dict[str, FailedRuns] = {}

    def live(pod: PodView) -> tuple[int, int]:
        nonlocal pending
        if not pod.counts or pod.training is None or (pod.role, pod.index) in succeeded:
            return 0, 0
        young = [r for r in pod.training.failed_runs() if not settled(r, now)]
        for run in young:
            if run.finished is not None and now is not None:
                at = run.finished + GRACE
                pending = at if pending is None else max(pending, at)
        return pod.training.failures, len(young)

    # Only pods that failed (notable ones) and those the ledgers name count: a plain pod has
    # no failed run. A retired pod (PodFacts.retired) counts what its ledger says, unless its
    # run is still in the grace period: then it is counted as a notable one.
    facts = state.pod_facts
    by_owner: dict[tuple[str, str], list[PodView]] = {}
    for pod in facts.notable:
        by_owner.setdefault((pod.owner_kind, pod.owner_name), []).append(pod)
    young_retired = _young_retired(facts, now)
    owned: set[tuple[str, str]] = set()
    for workload in state.workloads:
        if workload.kind == "Pod":
            continue
        owner = (workload.kind, workload.name)
        owned.add(owner)
        ledger = workload.failed_runs
        notable = by_owner.get(owner, [])  # in name order
        group = facts.retired.get(owner)
        if group is not None and group.ledger is not ledger:  # read against another ledger
            notable = sorted([*notable, *group.pods.values()], key=lambda p: p.name)
            group = None
        young = [group.pods[uid] for uid in young_retired.get(owner, ())] if group else []
        if young:
            notable = sorted([*notable, *young], key=lambda p: p.name)
        # A pod the ledger names is most often a notable one (it failed): found by its short
        # uid at once; the others are looked up by name; a retired one is there.
        seen = {p.uid8 for p in notable}
        named = ledger.pods.keys() if group is None else group.others | {p.uid8 for p in young}
        present = {uid for uid in named if uid in seen or _has_pod(state, uid, owner)}
        gone = ledger.gone + sum(ledger.pods[uid] for uid in named if uid not in present)
        names = {p.name for p in notable}
        recorded_only = [
            found
            for uid in present
            if uid not in seen or len(facts.uid8s.get(uid, ())) > 1  # short uids may meet
            for name in facts.uid8s.get(uid, ())
            if name not in names
            and (found := _pod_named(state, name)) is not None
            and (found.owner_kind, found.owner_name) == owner
        ]
        ledgered = (
            sorted([*notable, *recorded_only], key=lambda p: p.name) if recorded_only else notable
        )
        per_pod: dict[str, int] = {}
        young_total = 0
        for pod in ledgered:
            failures, young_runs = live(pod)
            recorded = ledger.pods.get(pod.uid8, 0)
            number = max(recorded, failures)
            if number:
                per_pod[pod.uid8] = number
            young_total += min(young_runs, number)
        counts: Mapping[str, int] = per_pod
        if group is not None:  # the retired pods count what the ledger says
            if len(per_pod) == len(named) and all(
                ledger.pods.get(u) == n for u, n in per_pod.items()
            ):
                counts = ledger.pods  # as recorded: the ledger itself
            else:  # what changes is written: in name order, as the pods are read one by one
                settled_retired = [p for p in group.pods.values() if p.uid8 not in seen]
                counts = {
                    p.uid8: per_pod[p.uid8] if p.uid8 in per_pod else ledger.pods[p.uid8]
                    for p in sorted([*ledgered, *settled_retired], key=lambda p: p.name)
                    if p.uid8 in per_pod or p.uid8 not in seen
                }
        ledgers[workload.name] = FailedRuns(gone, counts)
        counted += gone + sum(counts.values()) - young_total
    for pod in facts.notable:
        if (pod.owner_kind, pod.owner_name) not in owned:
            failures, young_runs = live(pod)
            counted += failures - young_runs
    return Tally(counted, pending, ledgers)


def _young_retired(facts: PodFacts, now: datetime | None) -> dict[tuple[str, str], list[str]]:
    """Per workload, the short uids of its retired pods whose failed run is in the grace
    period at `now` (the newest few of PodFacts.retired_runs)."""
    runs = facts.retired_runs
    if now is None or not runs or settled(Run(1, "", "", runs[-1][0]), now):
        return {}
    young: dict[tuple[str, str], list[str]] = {}
    for _, kind, name, uid in runs[bisect_right(runs, now - GRACE, key=lambda r: r[0]) :]:
        young.setdefault((kind, name), []).append(uid)
    return young


def _has_pod(state: JobState, uid8: str, owner: tuple[str, str]) -> bool:
    """Whether a pod of `owner` with this short uid is among the job's pods."""
    return any(
        (pod := _pod_named(state, name)) is not None and (pod.owner_kind, pod.owner_name) == owner
        for name in state.pod_facts.uid8s.get(uid8, ())
    )


def _pod_named(state: JobState, name: str) -> PodView | None:
    pods = state.pods
    at = bisect_left(pods, name, key=lambda pod: pod.name)
    return pods[at] if at < len(pods) and pods[at].name == name else None


def failure(
    state: JobState, now: datetime | None = None, succeeded: set[Replica] | None = None
) -> Verdict | None:
    for workload in state.workloads:
        if workload.job_status is not None and workload.job_status.failed is not None:
            facts = state.pod_facts
            pods = [p for p in facts.with_retired(facts.notable) if p.owner_name == workload.name]
            return Verdict(
                FAILED,
                "JobFailed",
                f"Job {workload.name} failed: {workload.job_status.failed}" + _last_failure(pods),
            )
    # A pod evicted, preempted or stopped by Kueue did not fail: its job restarts (Kueue requeues
    # the whole pod group, the controllers recreate the pods), it is not failed.
    if succeeded is None:
        succeeded = succeeded_replicas(state)
    for pod in counted_pods(state):
        if pod.owner_kind == "Pod" and pod.phase == "Failed":
            runs = pod.training.failed_runs() if pod.training else ()
            if all(settled(run, now) for run in runs):
                return Verdict(FAILED, "PodFailed", f"pod {pod.name} failed{_exit_detail(pod)}")
    # Only a rule that fails the job matters here: a job whose rules fail on nothing (the
    # default, OnFailure) is not walked pod by pod for them.
    fails = any(rule.action == FAIL for rule in job_failure_policy(state).rules)
    for fired in fired_rules(state, now, succeeded) if fails else ():
        if fired.action == FAIL:
            rule = fired.rule.name
            return Verdict(FAILED, fired.rule.verdict_reason, f"{fired.message}; {rule}", rule)
    limit = state.settings.backoff_limit
    if limit is not None and not counts_restarts(state):
        live = [
            pod
            for pod in counted_pods(state)
            if pod.training is not None and (pod.role, pod.index) not in succeeded
        ]
        failures = tally(state, now, succeeded).settled
        if failures > limit:
            retired = [  # read one by one only now: their runs may be the latest
                pod
                for pod in state.pod_facts.retired_views()
                if pod.counts
                and pod.training is not None
                and (pod.role, pod.index) not in succeeded
            ]
            live = sorted([*live, *retired], key=lambda pod: pod.name) if retired else live
            return Verdict(
                FAILED,
                "BackoffLimitExceeded",
                f"{failures} failed runs of the training containers exceed "
                f"{contract.BACKOFF_LIMIT} {limit}" + _last_failure(live),
            )
    return None


def _last_failure(pods: Sequence[PodView]) -> str:
    """`; last: pod P: container C exited with code N: <its message>`, for the latest failed
    run among `pods`, or nothing."""
    runs = [(run, pod) for pod in pods if pod.training for run in pod.training.failed_runs()]
    if not runs:
        return ""
    oldest = datetime.min.replace(tzinfo=UTC)
    run, pod = max(runs, key=lambda found: found[0].finished or oldest)
    return f"; last: pod {pod.name}: container {container_name(pod, run)} {run.describe()}"


def _exit_detail(pod: PodView) -> str:
    if pod.training is None:
        return ""
    runs = pod.training.failed_runs()
    return f": container {container_name(pod, runs[0])} {runs[0].describe()}" if runs else ""


# --- whole-job restarts ---------------------------------------------------------------------


@dataclass(frozen=True)
class RestartCause:
    """Why the job restarts, and the rule that says how: a whole-job restart, counted against
    the budgets or free (a pod stopped from outside), in place or by recreating the pods, or one
    role's pods only."""

    key: str  # identifies the cause, so one cause restarts the job once
    counted: bool
    reason: str  # OOMKilled, Error, Preempted, ...
    message: str
    rule: Rule | None = None
    in_place: bool = False
    role: str | None = None  # restart-role: the only role restarted
    pod: str | None = None  # restart-pod: the only pod restarted
    disruption: str | None = None  # preemption, drain, node-loss, kubelet
    node: str | None = None  # exclude-node: the node the recreated pods keep off


def restart_cause(
    state: JobState,
    now: datetime,
    succeeded: set[Replica],
    since: datetime | None,
    handled: str,
    in_place: bool = False,
    restarted: Callable[[PodView], bool] | None = None,
    same_second: frozenset[str] = frozenset(),
) -> RestartCause | None:
    """The first cause for a restart not handled yet. `since`: when the job was last restarted
    (pods created before it are on their way out, runs ended before it were part of it);
    `handled`: that restart's cause; `in_place`: it kept the pods; `restarted`: the pods it
    restarted, when only some."""
    for fired in fired_rules(state, now, succeeded, since, in_place, restarted, same_second):
        if fired.pod.owner_kind not in ("StatefulSet", "Job") or fired.key == handled:
            continue
        if fired.action not in (*WHOLE_JOB, *PARTIAL):
            continue
        return RestartCause(
            fired.key,
            fired.action in COUNTED,
            fired.reason,
            fired.message,
            fired.rule,
            in_place=fired.action == RESTART_IN_PLACE,
            role=fired.pod.role if fired.action == RESTART_ROLE else None,
            pod=fired.pod.name if fired.action == RESTART_POD else None,
            disruption=fired.disruption,
            node=fired.excludes,
        )
    return None
