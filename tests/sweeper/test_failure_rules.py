"""The sweeper's decision under trainhook.io/failure-policy: each action, the rule it names,
per-rule budgets, and disruptions that restart free and are counted apart."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Delete, Emit, Patch
from webhook.sweeper.decide.policy import Verdict, judge

from .helpers import (
    NOW,
    annotations_patched,
    decision,
    of_type,
    state_of,
    status_of,
    terminated,
)

NCCL = "[Rank 1] Watchdog caught collective operation timeout: NCCL timed out after 1800000ms"


def pytorch(policy: str | None = None, **settings: str) -> list[dict[str, Any]]:
    annotations = {**settings}
    if policy is not None:
        annotations[contract.FAILURE_POLICY] = policy
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    return stamped(master, worker)


def condition(obj: dict[str, Any], kind: str, reason: str) -> dict[str, Any]:
    obj["status"]["conditions"].append({"type": kind, "status": "True", "reason": reason})
    return obj


def restart_event(actions: Any) -> Emit:
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert isinstance(event, Emit)
    return event


def test_an_oomkilled_rank_fails_the_job_naming_the_rule() -> None:
    workloads = pytorch("reason=OOMKilled -> fail", **{contract.RESTART_POLICY: "RestartJob"})
    master, workers = workloads
    oom = terminated(
        pod(workers, 1, restarts=1),
        137,
        reason="OOMKilled",
        message="CUDA out of memory",
        last=True,
    )
    pods = [pod(master, 0), pod(workers, 0), oom]
    assert judge(state_of("pt", workloads, pods), NOW) == Verdict(
        "Failed",
        "FailurePolicy",
        "pod pt-worker-1: container pytorch exited with code 137 (OOMKilled): CUDA out of "
        "memory; failure-policy rule 1 (reason=OOMKilled -> fail)",
        "failure-policy rule 1 (reason=OOMKilled -> fail)",
    )
    actions = decision("pt", workloads, pods, records=True).actions
    failed = [e for e in of_type(actions, Emit) if e.reason == "FailurePolicy"]
    assert [e.type for e in failed] == ["Warning", "Warning"]  # on both workloads
    assert "failure-policy rule 1 (reason=OOMKilled -> fail)" in failed[0].message
    assert not of_type(actions, Delete) or all(d.resource == PODS for d in of_type(actions, Delete))


def test_an_nccl_timeout_restarts_the_job_within_the_rules_budget_then_fails_it() -> None:
    policy = 'message~"Watchdog caught collective|NCCL*timed out" -> restart-job max=2'
    workloads = pytorch(policy)  # restart policy OnFailure: other failures only retry
    master, workers = workloads
    crashed = terminated(pod(workers, 1, restarts=1), 1, message=NCCL, last=True)
    pods = [pod(master, 0), pod(workers, 0), crashed]
    actions = decision("pt", workloads, pods, records=True).actions
    event = restart_event(actions)
    assert (event.type, event.message) == (
        "Warning",
        "restarting all 3 pod(s) of the job together (restart 1): pod pt-worker-1: container "
        f"pytorch exited with code 1: {NCCL}; failure-policy rule 1 "
        '(message~"Watchdog caught collective|NCCL*timed out" -> restart-job max=2)',
    )
    assert [d.name for d in of_type(actions, Delete)] == [
        "pt-master-0",
        "pt-worker-0",
        "pt-worker-1",
    ]
    status = status_of(actions)
    assert (status["restarts"], status["fired"], status["rule"]) == (
        1,
        {"policy/1": 1},
        'failure-policy rule 1 (message~"Watchdog caught collective|NCCL*timed out" '
        "-> restart-job max=2)",
    )
    # The rule has acted twice already: the next NCCL timeout fails the job.
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(
            {"state": "Running", "restarts": 2, "fired": {"policy/1": 2}}
        )
    verdict_events = [
        e
        for e in of_type(decision("pt", workloads, pods, records=True).actions, Emit)
        if e.reason == "BackoffLimitExceeded"
    ]
    assert verdict_events[0].message.endswith(
        '; failure-policy rule 1 (message~"Watchdog caught collective|NCCL*timed out" '
        "-> restart-job max=2) has acted 2 time(s), its max is 2"
    )


def test_a_failure_no_rule_of_the_user_matches_falls_to_the_restart_policy() -> None:
    workloads = pytorch('message~"NCCL" -> restart-job')
    master, workers = workloads
    segfault = terminated(pod(workers, 1, restarts=1), 139, message="Segmentation fault", last=True)
    actions = decision("pt", workloads, [pod(master, 0), pod(workers, 0), segfault]).actions
    assert not of_type(actions, Delete)  # OnFailure: Kubernetes restarts the container alone


def test_a_pod_its_kubelet_refused_restarts_the_job_free_when_a_rule_says_so() -> None:
    workloads = pytorch(
        "pod-reason=UnexpectedAdmissionError -> restart-job-free",
        **{contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "0"},
    )
    master, workers = workloads
    refused = pod(workers, 1, phase="Failed")
    refused["status"]["reason"] = "UnexpectedAdmissionError"
    refused["status"]["containerStatuses"] = []
    actions = decision(
        "pt", workloads, [pod(master, 0), pod(workers, 0), refused], records=True
    ).actions
    event = restart_event(actions)
    assert (event.type, event.message) == (
        "Normal",
        "restarting all 2 pod(s) of the job together (not counted against the backoff limit): "
        "pod pt-worker-1 failed: UnexpectedAdmissionError; failure-policy rule 1 "
        "(pod-reason=UnexpectedAdmissionError -> restart-job-free)",
    )
    assert status_of(actions)["restarts"] == 0


def test_without_a_rule_a_pod_its_kubelet_refused_is_left_to_its_controller() -> None:
    workloads = pytorch(None, **{contract.RESTART_POLICY: "RestartJob"})
    master, workers = workloads
    refused = pod(workers, 1, phase="Failed")
    refused["status"]["reason"] = "UnexpectedAdmissionError"
    refused["status"]["containerStatuses"] = []
    actions = decision("pt", workloads, [pod(master, 0), pod(workers, 0), refused]).actions
    assert not of_type(actions, Delete)


def test_a_preempted_pod_restarts_the_job_free_and_is_counted_apart() -> None:
    workloads = pytorch(
        None, **{contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "0"}
    )
    master, workers = workloads
    preempted = condition(
        pod(workers, 1, terminating=True), "DisruptionTarget", "PreemptionByScheduler"
    )
    actions = decision(
        "pt", workloads, [pod(master, 0), pod(workers, 0), preempted], records=True
    ).actions
    event = restart_event(actions)
    assert (event.type, event.message) == (
        "Normal",
        "restarting all 2 pod(s) of the job together (not counted against the backoff limit: "
        "preemption): pod pt-worker-1 was preempted (DisruptionTarget PreemptionByScheduler); "
        "trainhook.io/restart-policy RestartJob rule 1 (disrupted=any -> restart-job-free)",
    )
    status = status_of(actions)
    assert (status["state"], status["reason"], status["restarts"], status["disruptions"]) == (
        "Restarting",
        "Preempted",
        0,
        {"preemption": 1},
    )


def test_a_rule_may_fail_a_job_whose_pod_lost_its_node() -> None:
    workloads = pytorch("disrupted=node-loss -> fail")
    master, workers = workloads
    lost = condition(pod(workers, 1, terminating=True), "DisruptionTarget", "DeletionByPodGC")
    verdict = judge(state_of("pt", workloads, [pod(master, 0), pod(workers, 0), lost]), NOW)
    assert verdict == Verdict(
        "Failed",
        "FailurePolicy",
        "pod pt-worker-1 lost its node (DisruptionTarget DeletionByPodGC); failure-policy rule 1 "
        "(disrupted=node-loss -> fail)",
        "failure-policy rule 1 (disrupted=node-loss -> fail)",
    )


def test_an_early_exit_0_a_rule_names_is_no_success_and_restarts_the_job() -> None:
    workloads = pytorch("exit=0 role=worker -> restart-job")
    master, workers = workloads
    early = terminated(pod(workers, 1), 0, reason="Completed")
    pods = [pod(master, 0), pod(workers, 0), early]
    actions = decision("pt", workloads, pods, records=True).actions
    event = restart_event(actions)
    assert event.message == (
        "restarting all 3 pod(s) of the job together (restart 1): pod pt-worker-1: container "
        "pytorch exited with code 0; failure-policy rule 1 (exit=0 role=worker -> restart-job)"
    )
    recorded = [
        p.patch["metadata"]["annotations"].get(contract.SUCCEEDED)
        for p in of_type(actions, Patch)
        if p.name == "pt-worker"
    ]
    assert recorded == [None]  # the early exit is not recorded as the worker's success


def test_without_a_rule_an_exit_0_is_a_success_as_before() -> None:
    workloads = pytorch(None)
    master, workers = workloads
    pods = [pod(master, 0), pod(workers, 0), terminated(pod(workers, 1), 0, reason="Completed")]
    actions = decision("pt", workloads, pods, records=True).actions
    assert not of_type(actions, Delete)
    worker_patch = next(p for p in of_type(actions, Patch) if p.name == "pt-worker")
    assert worker_patch.patch["metadata"]["annotations"][contract.SUCCEEDED] == "1"


def test_restart_role_restarts_only_the_failed_pods_role_of_a_parameter_server_job() -> None:
    policy = "role=ps -> restart-role max=3"
    annotations = {contract.FAILURE_POLICY: policy}
    chief = statefulset(
        "tf-chief", framework="tensorflow", role="chief", job="tf", annotations=annotations
    )
    ps = statefulset(
        "tf-ps", framework="tensorflow", role="ps", job="tf", replicas=2, annotations=annotations
    )
    worker = statefulset(
        "tf-worker",
        framework="tensorflow",
        role="worker",
        job="tf",
        replicas=2,
        annotations=annotations,
    )
    workloads = stamped(chief, ps, worker)
    chief, ps, worker = workloads
    crashed = terminated(pod(ps, 1, restarts=1), 1, message="OSError: port in use", last=True)
    pods = [pod(chief, 0), pod(ps, 0), crashed, pod(worker, 0), pod(worker, 1)]
    actions = decision("tf", workloads, pods, records=True).actions
    assert [d.name for d in of_type(actions, Delete)] == ["tf-ps-0", "tf-ps-1"]
    assert restart_event(actions).message.startswith(
        "restarting the 2 pod(s) of role ps (restart 1)"
    )


def test_restart_pod_replaces_the_failed_pod_alone_and_keeps_watching_the_others() -> None:
    annotations = {contract.FAILURE_POLICY: "reason=Error -> restart-pod max=5"}
    annotations[contract.ELASTIC] = "2:4"
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    workloads = stamped(master, worker)
    master, workers = workloads
    crashed = terminated(pod(workers, 1, restarts=1), 1, last=True)
    pods = [pod(master, 0), pod(workers, 0), crashed]
    actions = decision("pt", workloads, pods, records=True).actions
    assert [d.name for d in of_type(actions, Delete)] == ["pt-worker-1"]
    assert restart_event(actions).message.startswith("restarting pod pt-worker-1 alone (restart 1)")
    status = status_of(actions)
    assert (status["pod"], status["fired"]) == ("pt-worker-1", {"policy/1": 1})
    # Later a pod the restart left alone fails: it is a new cause, not part of that restart.
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
        workload["metadata"]["resourceVersion"] += "1"
    replaced = pod(workers, 1)
    replaced["metadata"]["creationTimestamp"] = "2025-01-01T01:00:05Z"
    other = terminated(pod(workers, 0, restarts=1), 1, last=True)
    actions = decision("pt", workloads, [pod(master, 0), other, replaced], records=True).actions
    assert [d.name for d in of_type(actions, Delete)] == ["pt-worker-0"]


def test_a_drained_pod_is_reported_as_drained_not_as_a_failure() -> None:
    workloads = pytorch(None)  # OnFailure: the StatefulSet replaces the pod
    master, workers = workloads
    drained = condition(
        pod(workers, 1, terminating=True), "DisruptionTarget", "EvictionByEvictionAPI"
    )
    actions = decision(
        "pt", workloads, [pod(master, 0), pod(workers, 0), drained], records=True
    ).actions
    status = status_of(actions)
    assert (status["state"], status["reason"], status["message"], status["restarts"]) == (
        "Restarting",
        "Drained",
        "pod pt-worker-1 was evicted by a drain (DisruptionTarget EvictionByEvictionAPI)",
        0,
    )
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert event.type == "Normal"
    assert not of_type(actions, Delete)


def paddle_ps_job() -> list[dict[str, Any]]:
    annotations = {contract.FAILURE_POLICY: "role=ps -> restart-role max=3"}
    ps = statefulset(
        "pd-ps", framework="paddle", role="ps", job="pd", replicas=2, annotations=annotations
    )
    worker = statefulset(
        "pd-worker",
        framework="paddle",
        role="worker",
        job="pd",
        replicas=2,
        annotations=annotations,
    )
    return stamped(ps, worker)


def recorded(workloads: list[dict[str, Any]], actions: Any) -> None:
    """Apply the annotations a decision patched onto the workloads, as the API server would."""
    for workload in workloads:
        for patch in of_type(actions, Patch):
            if patch.name == workload["metadata"]["name"]:
                annotations = workload["metadata"].setdefault("annotations", {})
                for key, value in patch.patch.get("metadata", {}).get("annotations", {}).items():
                    if value is None:
                        annotations.pop(key, None)
                    else:
                        annotations[key] = value
                workload["metadata"]["resourceVersion"] += "1"


def test_a_role_restart_keeps_the_other_roles_successes_counting() -> None:
    workloads = paddle_ps_job()
    ps, workers = workloads
    # Worker 0 has trained to the end (its exit 0 recorded); then a parameter server fails.
    done = terminated(pod(workers, 0, restarts=1), 0, reason="Completed", last=True)
    pods = [pod(ps, 0), pod(ps, 1), done, pod(workers, 1)]
    recorded(workloads, decision("pd", workloads, pods, records=True).actions)
    assert workloads[1]["metadata"]["annotations"][contract.SUCCEEDED] == "0"
    # Kubernetes has restarted worker 0's container since: its exit 0 shows no more.
    waiting = pod(workers, 0, restarts=2)
    crashed = terminated(pod(ps, 1, restarts=1), 1, message="OSError: port in use", last=True)
    pods = [pod(ps, 0), crashed, waiting, pod(workers, 1)]
    actions = decision("pd", workloads, pods, records=True).actions
    assert [d.name for d in of_type(actions, Delete)] == ["pd-ps-0", "pd-ps-1"]
    assert contract.SUCCEEDED not in annotations_patched(actions, "pd-worker")
    recorded(workloads, actions)
    status = json.loads(workloads[0]["metadata"]["annotations"][contract.STATUS])
    assert status["role"] == "ps"
    # The servers come back; worker 1 finishes: every worker has succeeded, so the job has.
    back = [pod(ps, 0), pod(ps, 1)]
    for obj in back:
        obj["metadata"]["creationTimestamp"] = "2025-01-01T01:00:05Z"
    finished = terminated(pod(workers, 1, restarts=1), 0, reason="Completed", last=True)
    state = state_of("pd", workloads, [*back, waiting, finished])
    assert judge(state, NOW + timedelta(seconds=30)) == Verdict(
        "Succeeded", "Completed", "every worker succeeded (success policy: the framework default)"
    )
    # A server created before its role's restart is still replaced.
    stale = pod(ps, 1)
    pods = [back[0], stale, waiting, pod(workers, 1)]
    actions = decision("pd", workloads, pods, now=NOW + timedelta(seconds=30)).actions
    assert [d.name for d in of_type(actions, Delete)] == ["pd-ps-1"]
