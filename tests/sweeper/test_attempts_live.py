"""A whole-job restart starts from nothing, end to end: a sweeper against the API emulator, the
test playing the kubelet (it writes what pods report) and the StatefulSet controller."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.objects import parse_time
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.job.state import format_time

from .test_failure_rules_live import events, exited, status_of
from .test_sweeper_api import annotations_on, names

RESTART_JOB = {contract.RESTART_POLICY: "RestartJob"}


def create_job(kube: Any, shape: list[tuple[str, int]], settings: dict[str, str], framework: str):
    workloads = stamped(
        *(
            statefulset(
                f"j-{role}",
                framework=framework,
                role=role,
                job="j",
                replicas=replicas,
                annotations=settings,
            )
            for role, replicas in shape
        )
    )
    created = [kube.create(STATEFULSETS, "ml", w) for w in workloads]
    for workload in created:
        for index in range(workload["spec"]["replicas"]):
            kube.create(PODS, "ml", pod(workload, index))
    return created


def recreate(kube: Any, workloads: list[dict[str, Any]], restarted_at: str) -> None:
    """The StatefulSet controller's new pods, created once the restart has begun."""
    began = parse_time(restarted_at)
    assert began is not None
    eventually(lambda: datetime.now(UTC) >= began, what="the restart's second")
    for workload in workloads:
        for index in range(workload["spec"]["replicas"]):
            obj = pod(workload, index)
            obj["metadata"]["uid"] += "-2"
            obj["metadata"]["creationTimestamp"] = format_time(datetime.now(UTC))
            kube.create(PODS, "ml", obj)


def restart_after_a_success(emulator: Any, kube: Any, workloads: list[dict[str, Any]], **names_):
    """`first` exits 0 (and is recorded), `crashing` crashes; the job restarts, its pods are
    recreated and run."""
    first, crashing, container = names_["first"], names_["crashing"], names_["container"]
    first_workload = first.rsplit("-", 1)[0]
    eventually(lambda: status_of(emulator, first_workload).get("state") == "Running")
    exited(kube, first, 0, "Completed", container=container)
    eventually(
        lambda: annotations_on(emulator, STATEFULSETS, first_workload).get(contract.SUCCEEDED),
        what="the success recorded",
    )
    exited(kube, crashing, 1, container=container)
    eventually(lambda: names(emulator, PODS) == [], what="every pod deleted")
    restarted_at = status_of(emulator, first_workload)["restartedAt"]
    recreate(kube, workloads, restarted_at)
    eventually(
        lambda: status_of(emulator, first_workload).get("state") == "Running",
        what="the new attempt runs",
    )
    for workload in workloads:
        recorded = annotations_on(emulator, STATEFULSETS, workload["metadata"]["name"])
        assert contract.SUCCEEDED not in recorded, "the old attempt's success is forgotten"


def test_a_jax_worker_that_succeeded_before_a_restart_and_crashes_after_it_restarts_the_job(
    emulator, kube
):
    workloads = create_job(kube, [("worker", 3)], RESTART_JOB, "jax")
    with sweeping(kube):
        restart_after_a_success(
            emulator, kube, workloads, first="j-worker-0", crashing="j-worker-2", container="main"
        )
        exited(kube, "j-worker-0", 1, container="main")
        eventually(
            lambda: status_of(emulator, "j-worker").get("restarts") == 2,
            what="the job restarted again",
        )
    assert len(events(emulator, "Restarting")) == 2
    assert contract.PHASE not in annotations_on(emulator, STATEFULSETS, "j-worker")


def test_jax_workers_succeeding_after_a_restart_while_one_trains_do_not_end_the_job(emulator, kube):
    workloads = create_job(kube, [("worker", 3)], RESTART_JOB, "jax")
    with sweeping(kube) as sweeper:
        restart_after_a_success(
            emulator, kube, workloads, first="j-worker-0", crashing="j-worker-2", container="main"
        )
        exited(kube, "j-worker-1", 0, "Completed", container="main")
        exited(kube, "j-worker-2", 0, "Completed", container="main")
        eventually(
            lambda: (
                annotations_on(emulator, STATEFULSETS, "j-worker").get(contract.SUCCEEDED) == "1-2"
            ),
            what="the new attempt's successes recorded",
        )
        sweeper.reconciled("ml", "j")
        assert contract.PHASE not in annotations_on(emulator, STATEFULSETS, "j-worker")
        assert names(emulator, PODS) == ["j-worker-0", "j-worker-1", "j-worker-2"]
        exited(kube, "j-worker-0", 0, "Completed", container="main")
        eventually(
            lambda: annotations_on(emulator, STATEFULSETS, "j-worker").get(contract.PHASE),
            what="the outcome recorded",
        )
    assert annotations_on(emulator, STATEFULSETS, "j-worker")[contract.PHASE] == "Succeeded"


def test_pytorch_with_success_policy_all_does_not_succeed_on_a_success_of_the_attempt_before(
    emulator, kube
):
    settings = {**RESTART_JOB, contract.SUCCESS_POLICY: "all"}
    workloads = create_job(kube, [("master", 1), ("worker", 2)], settings, "pytorch")
    with sweeping(kube) as sweeper:
        restart_after_a_success(
            emulator,
            kube,
            workloads,
            first="j-worker-0",
            crashing="j-worker-1",
            container="pytorch",
        )
        exited(kube, "j-master-0", 0, "Completed", container="pytorch")
        exited(kube, "j-worker-1", 0, "Completed", container="pytorch")
        eventually(
            lambda: (
                annotations_on(emulator, STATEFULSETS, "j-worker").get(contract.SUCCEEDED) == "1"
            ),
            what="the new attempt's successes recorded",
        )
        sweeper.reconciled("ml", "j")
        assert contract.PHASE not in annotations_on(emulator, STATEFULSETS, "j-master")
