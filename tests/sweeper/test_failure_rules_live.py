"""Failure rules end to end: a sweeper against the API emulator, the test playing the kubelet
(it writes what pods report) and the StatefulSet controller."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.objects import parse_time
from webhook.kube.resources import EVENTS, PODS, STATEFULSETS
from webhook.sweeper.job.state import format_time

from .test_sweeper_api import annotations_on, create_pytorch_job, names

NCCL = "[Rank 2] Watchdog caught collective operation timeout: NCCL timed out after 1800000ms"
LONG_AGO = "2025-01-01T00:00:00Z"  # past the grace period


def report(kube: Any, name: str, **status: Any) -> None:
    kube.patch(PODS, "ml", name, {"status": status})


def exited(
    kube: Any,
    name: str,
    code: int,
    reason: str = "Error",
    message: str = "",
    at: str = LONG_AGO,
    container: str = "pytorch",
) -> None:
    run: dict[str, Any] = {"exitCode": code, "reason": reason, "finishedAt": at}
    if message:
        run["message"] = message
    report(
        kube,
        name,
        containerStatuses=[
            {
                "name": container,
                "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": run},
            }
        ],
    )


def status_of(emulator: Any, name: str = "pt-master") -> dict[str, Any]:
    raw = annotations_on(emulator, STATEFULSETS, name).get(contract.STATUS)
    return json.loads(raw) if raw else {}


def events(emulator: Any, reason: str) -> list[dict[str, Any]]:
    return [e for e in emulator.objects(EVENTS, "ml") if e["reason"] == reason]


def recreate(kube: Any, workloads: tuple[Any, ...], restarted_at: str) -> None:
    """What the StatefulSet controller does once the pods are gone: new pods, created once the
    restart has begun (`restarted_at`, which the sweeper rounds up to the next second; the API
    server stamps creation times to the second)."""
    began = parse_time(restarted_at)
    assert began is not None
    eventually(lambda: datetime.now(UTC) >= began, what="the restart's second")
    master, workers = workloads
    for obj in (pod(master, 0), pod(workers, 0), pod(workers, 1)):
        obj["metadata"]["creationTimestamp"] = format_time(datetime.now(UTC))
        kube.create(PODS, "ml", obj)


def test_a_rank_oomkilled_fails_the_job_with_events_naming_the_rule(emulator, kube):
    settings = {contract.FAILURE_POLICY: "reason=OOMKilled -> fail"}
    create_pytorch_job(kube, settings)
    with sweeping(kube):
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        exited(kube, "pt-worker-1", 137, "OOMKilled", "CUDA out of memory")
        eventually(
            lambda: annotations_on(emulator, STATEFULSETS, "pt-worker").get(contract.PHASE),
            what="the outcome recorded",
        )
    worker = annotations_on(emulator, STATEFULSETS, "pt-worker")
    assert (worker[contract.PHASE], worker[contract.REASON]) == ("Failed", "FailurePolicy")
    failed = events(emulator, "FailurePolicy")
    assert sorted(e["involvedObject"]["name"] for e in failed) == ["pt-master", "pt-worker"]
    assert failed[0]["message"] == (
        "pod pt-worker-1: container pytorch exited with code 137 (OOMKilled): CUDA out of "
        "memory; failure-policy rule 1 (reason=OOMKilled -> fail)"
    )
    assert status_of(emulator)["rule"] == "failure-policy rule 1 (reason=OOMKilled -> fail)"


def test_a_pod_refused_by_its_kubelet_restarts_the_job_free(emulator, kube):
    settings = {
        contract.FAILURE_POLICY: "pod-reason=UnexpectedAdmissionError -> restart-job-free",
        contract.RESTART_POLICY: "RestartJob",
        contract.BACKOFF_LIMIT: "0",
    }
    create_pytorch_job(kube, settings)
    with sweeping(kube) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        report(
            kube,
            "pt-worker-1",
            phase="Failed",
            reason="UnexpectedAdmissionError",
            message="Allocate failed due to no healthy devices present",
            containerStatuses=[],
        )
        # its controller replaces the failed pod; the sweeper deletes the others
        eventually(lambda: names(emulator, PODS) == ["pt-worker-1"], what="the others deleted")
        eventually(lambda: status_of(emulator).get("cause"), what="the restart recorded")
    (event,) = events(emulator, "Restarting")
    assert (event["type"], event["message"]) == (
        "Normal",
        "restarting all 2 pod(s) of the job together (not counted against the backoff limit): "
        "pod pt-worker-1 failed: UnexpectedAdmissionError; failure-policy rule 1 "
        "(pod-reason=UnexpectedAdmissionError -> restart-job-free)",
    )
    assert status_of(emulator)["restarts"] == 0
    assert not annotations_on(emulator, STATEFULSETS, "pt-master").get(contract.PHASE)
    assert sweeper.actions.count("delete Pod ml/pt-worker-0") == 1
    assert "delete Pod ml/pt-worker-1" not in sweeper.actions


def test_a_preempted_pod_restarts_the_job_free_and_is_reported_apart(emulator, kube):
    settings = {contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "0"}
    create_pytorch_job(kube, settings)
    with sweeping(kube):
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        condition = {"type": "DisruptionTarget", "status": "True"}
        condition["reason"] = "PreemptionByScheduler"
        condition["message"] = "preempted by a higher-priority pod"
        report(kube, "pt-worker-0", conditions=[condition])
        eventually(lambda: names(emulator, PODS) == [], what="every pod deleted")
        eventually(lambda: status_of(emulator).get("disruptions"), what="the restart recorded")
    status = status_of(emulator)
    assert (status["restarts"], status["disruptions"], status["reason"]) == (
        0,
        {"preemption": 1},
        "Preempted",
    )
    (event,) = events(emulator, "Restarting")
    assert event["message"].startswith(
        "restarting all 3 pod(s) of the job together (not counted against the backoff limit: "
        "preemption): pod pt-worker-0 was preempted (DisruptionTarget PreemptionByScheduler)"
    )


def test_an_nccl_timeout_restarts_the_job_until_the_rules_budget_is_spent(emulator, kube):
    settings = {contract.FAILURE_POLICY: 'message~"NCCL*timed out" -> restart-job max=1'}
    master, workers, _ = create_pytorch_job(kube, settings)
    with sweeping(kube):
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        exited(kube, "pt-worker-1", 1, message=NCCL)
        eventually(lambda: names(emulator, PODS) == [], what="every pod deleted")
        eventually(lambda: status_of(emulator).get("fired") == {"policy/1": 1}, what="counted")
        recreate(kube, (master, workers), status_of(emulator)["restartedAt"])
        exited(kube, "pt-worker-0", 1, message=NCCL, at=format_time(datetime.now(UTC)))
        eventually(
            lambda: annotations_on(emulator, STATEFULSETS, "pt-master").get(contract.PHASE),
            timeout=30,  # the new failure counts once past its grace period
            what="the outcome recorded",
        )
    master_annotations = annotations_on(emulator, STATEFULSETS, "pt-master")
    assert master_annotations[contract.REASON] == "BackoffLimitExceeded"
    (failed, _) = events(emulator, "BackoffLimitExceeded")
    assert failed["message"] == (
        f"pod pt-worker-0: container pytorch exited with code 1: {NCCL}; failure-policy rule 1 "
        '(message~"NCCL*timed out" -> restart-job max=1) has acted 1 time(s), its max is 1'
    )


def test_a_worker_that_exits_0_early_restarts_the_job(emulator, kube):
    settings = {contract.FAILURE_POLICY: "exit=0 role=worker -> restart-job"}
    create_pytorch_job(kube, settings)
    with sweeping(kube):
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        exited(kube, "pt-worker-1", 0, "Completed")
        eventually(lambda: names(emulator, PODS) == [], what="every pod deleted")
        eventually(lambda: status_of(emulator).get("restarts") == 1, what="counted")
    (event,) = events(emulator, "Restarting")
    assert event["message"] == (
        "restarting all 3 pod(s) of the job together (restart 1): pod pt-worker-1: container "
        "pytorch exited with code 0; failure-policy rule 1 (exit=0 role=worker -> restart-job)"
    )
    assert contract.SUCCEEDED not in annotations_on(emulator, STATEFULSETS, "pt-worker")


def create_tensorflow_ps_job(kube: Any, settings: dict[str, str]) -> list[dict[str, Any]]:
    workloads = stamped(
        statefulset(
            "tf-chief", framework="tensorflow", role="chief", job="tf", annotations=settings
        ),
        statefulset(
            "tf-ps", framework="tensorflow", role="ps", job="tf", replicas=2, annotations=settings
        ),
        statefulset(
            "tf-worker",
            framework="tensorflow",
            role="worker",
            job="tf",
            replicas=2,
            annotations=settings,
        ),
    )
    created = [kube.create(STATEFULSETS, "ml", w) for w in workloads]
    for owner in created:
        for index in range(owner["spec"]["replicas"]):
            kube.create(PODS, "ml", pod(owner, index))
    return created


def tf_status(emulator: Any) -> dict[str, Any]:
    return status_of(emulator, "tf-chief")


def test_a_parameter_server_that_fails_restarts_its_role_alone(emulator, kube):
    create_tensorflow_ps_job(kube, {contract.FAILURE_POLICY: "role=ps -> restart-role max=2"})
    with sweeping(kube) as sweeper:
        eventually(lambda: tf_status(emulator).get("state") == "Running", what="Running")
        exited(kube, "tf-ps-1", 1, message="OSError: address in use", container="tensorflow")
        eventually(
            lambda: names(emulator, PODS) == ["tf-chief-0", "tf-worker-0", "tf-worker-1"],
            what="the parameter servers deleted",
        )
        eventually(lambda: tf_status(emulator).get("role") == "ps", what="recorded")
    assert not [
        a
        for a in sweeper.actions
        if a.startswith(("delete Pod ml/tf-worker", "delete Pod ml/tf-chief"))
    ]
    (event,) = events(emulator, "Restarting")
    assert event["message"].startswith(
        "restarting the 2 pod(s) of role ps (restart 1): pod tf-ps-1"
    )


def test_ignored_and_retried_failures_leave_the_pods_to_kubernetes(emulator, kube):
    policy = "exit=143 -> ignore\nexit=1 -> retry"
    settings = {contract.FAILURE_POLICY: policy, contract.RESTART_POLICY: "RestartJob"}
    create_pytorch_job(kube, settings)
    with sweeping(kube) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        exited(kube, "pt-worker-0", 143)
        exited(kube, "pt-worker-1", 1)
        sweeper.reconciled("ml", "pt", times=3)
    assert not [a for a in sweeper.actions if a.startswith("delete Pod")]
    assert not events(emulator, "Restarting")
    assert not annotations_on(emulator, STATEFULSETS, "pt-master").get(contract.PHASE)


def test_a_kueue_job_that_ends_marks_its_pod_group_finished(emulator, kube):
    settings = {contract.SCHEDULER: "kueue", contract.QUEUE: "team-a"}
    create_pytorch_job(kube, settings)
    with sweeping(kube):
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        exited(kube, "pt-master-0", 0, "Completed")
        eventually(
            lambda: annotations_on(emulator, PODS, "pt-master-0").get(
                contract.KUEUE_RETRIABLE_IN_GROUP
            ),
            what="the Kueue marker",
        )
        eventually(
            lambda: annotations_on(emulator, STATEFULSETS, "pt-master").get(contract.PHASE),
            what="the outcome",
        )
    marked = [
        p["metadata"]["name"]
        for p in emulator.objects(PODS, "ml")
        if (p["metadata"].get("annotations") or {}).get(contract.KUEUE_RETRIABLE_IN_GROUP)
        == "false"
    ]
    assert marked == ["pt-master-0"]


def test_a_role_restart_leaves_the_other_roles_successes_counting(emulator, kube):
    settings = {contract.FAILURE_POLICY: "role=ps -> restart-role max=2"}
    servers, workers = stamped(
        statefulset(
            "pd-ps", framework="paddle", role="ps", job="pd", replicas=2, annotations=settings
        ),
        statefulset(
            "pd-worker",
            framework="paddle",
            role="worker",
            job="pd",
            replicas=2,
            annotations=settings,
        ),
    )
    servers, workers = (kube.create(STATEFULSETS, "ml", w) for w in (servers, workers))
    for owner in (servers, workers):
        for index in range(2):
            kube.create(PODS, "ml", pod(owner, index))
    with sweeping(kube) as sweeper:
        eventually(lambda: status_of(emulator, "pd-ps").get("state") == "Running", what="Running")
        exited(kube, "pd-worker-0", 0, "Completed", container="paddle")
        eventually(
            lambda: (
                annotations_on(emulator, STATEFULSETS, "pd-worker").get(contract.SUCCEEDED) == "0"
            ),
            what="worker 0's success recorded",
        )
        # Kubernetes restarts the StatefulSet's container: its exit 0 shows no more.
        report(
            kube,
            "pd-worker-0",
            containerStatuses=[
                {"name": "paddle", "restartCount": 2, "state": {"running": {}}, "lastState": {}}
            ],
        )
        exited(kube, "pd-ps-1", 1, message="OSError: address in use", container="paddle")
        eventually(
            lambda: names(emulator, PODS) == ["pd-worker-0", "pd-worker-1"],
            what="the parameter servers deleted",
        )
        restarted_at = status_of(emulator, "pd-ps")["restartedAt"]
        began = parse_time(restarted_at)
        assert began is not None
        eventually(lambda: datetime.now(UTC) >= began, what="the restart's second")
        for index in range(2):
            back = pod(servers, index)
            back["metadata"]["creationTimestamp"] = format_time(datetime.now(UTC))
            kube.create(PODS, "ml", back)
        sweeper.reconciled("ml", "pd")
        assert annotations_on(emulator, STATEFULSETS, "pd-worker")[contract.SUCCEEDED] == "0"
        exited(kube, "pd-worker-1", 0, "Completed", container="paddle")
        eventually(
            lambda: annotations_on(emulator, STATEFULSETS, "pd-worker").get(contract.PHASE),
            what="the outcome recorded",
        )
    worker = annotations_on(emulator, STATEFULSETS, "pd-worker")
    assert (worker[contract.PHASE], worker[contract.REASON]) == ("Succeeded", "Completed")
    assert status_of(emulator, "pd-worker")["message"] == (
        "every worker succeeded (success policy: the framework default)"
    )
