"""When a job has succeeded or failed: success policies, restart policies and the backoff limit."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from webhook.core import contract
from webhook.core.frameworks import Framework
from webhook.sweeper.state import JobState, PodView

SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"
PHASES: Final = (SUCCEEDED, FAILED)

# Lifecycle defaults, the same as Kubeflow's training-operator RunPolicy: pods are kept, failed
# training containers are retried without limit, and a finished job stays until deleted.
DEFAULT_CLEAN_POD_POLICY: Final = "None"
DEFAULT_RESTART_POLICY: Final = "OnFailure"

Replica = tuple[str, int]  # (role, index in the role)


@dataclass(frozen=True)
class Verdict:
    phase: str  # Succeeded or Failed
    reason: str  # CamelCase, recorded in trainhook.io/reason and on the Event
    message: str  # one line for a person


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
    policy = state.setting("success_policy")
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


def succeeded_replicas(state: JobState) -> set[Replica]:
    """Replicas that finished their training: by exit code for StatefulSet pods (which
    Kubernetes restarts even after success), by their own status for Jobs and bare Pods."""
    done: set[Replica] = set()
    for pod in state.pods:
        if pod.role is None or pod.index is None:
            continue
        if pod.owner_kind == "StatefulSet":
            ok = pod.training is not None and pod.training.succeeded
        else:
            ok = pod.phase == "Succeeded"
        if ok:
            done.add((pod.role, pod.index))
    for workload in state.workloads:
        status = workload.job_status
        if status is None:
            continue
        indexes = range(workload.replicas) if status.complete else status.completed_indexes
        done.update((workload.role, i) for i in indexes)
    return done


def judge(state: JobState) -> Verdict | None:
    """Succeeded, Failed, or None while the job is still running. Success is checked first:
    peers often crash once the replica that decides success has exited."""
    rule = success_rule(state)
    if rule.met(succeeded_replicas(state)):
        policy = state.setting("success_policy")
        source = f"{contract.SUCCESS_POLICY} {policy}" if policy else "the framework default"
        message = f"{rule.describe} succeeded (success policy: {source})"
        return Verdict(SUCCEEDED, "Completed", message)
    return failure(state)


def failure(state: JobState) -> Verdict | None:
    for workload in state.workloads:
        if workload.job_status is not None and workload.job_status.failed is not None:
            return Verdict(
                FAILED, "JobFailed", f"Job {workload.name} failed: {workload.job_status.failed}"
            )
    # A pod evicted, preempted or stopped by Kueue did not fail: its job restarts (Kueue requeues
    # the whole pod group, the controllers recreate the pods), it is not failed.
    live = [pod for pod in state.pods if not pod.terminating and not pod.disrupted]
    for pod in live:
        if pod.owner_kind == "Pod" and pod.phase == "Failed":
            return Verdict(FAILED, "PodFailed", f"pod {pod.name} failed{_exit_detail(pod)}")
    restart_policy = state.setting("restart_policy") or DEFAULT_RESTART_POLICY
    if restart_policy == "ExitCode":
        for pod in live:
            for code in pod.training.exit_codes() if pod.training else ():
                if 1 <= code <= 127:
                    return Verdict(
                        FAILED,
                        "ExitCode",
                        f"pod {pod.name}: container {_container(pod)} exited with code {code}; "
                        f"with {contract.RESTART_POLICY} ExitCode, codes 1-127 are permanent",
                    )
    if restart_policy == "Never":
        for pod in live:
            codes = [c for c in (pod.training.exit_codes() if pod.training else ()) if c != 0]
            if codes:
                return Verdict(
                    FAILED,
                    "PodFailed",
                    f"pod {pod.name}: container {_container(pod)} exited with code {codes[0]}; "
                    f"{contract.RESTART_POLICY} is Never",
                )
    limit = state.setting("backoff_limit")
    if limit is not None:
        failures = sum(pod.training.failures for pod in live if pod.training)
        if failures > limit:
            return Verdict(
                FAILED,
                "BackoffLimitExceeded",
                f"{failures} failed runs of the training containers exceed "
                f"{contract.BACKOFF_LIMIT} {limit}",
            )
    return None


def _container(pod: PodView) -> str:
    return pod.training.name if pod.training else "?"


def _exit_detail(pod: PodView) -> str:
    if pod.training is None:
        return ""
    codes = [c for c in pod.training.exit_codes() if c != 0]
    return f": container {pod.training.name} exited with code {codes[0]}" if codes else ""
