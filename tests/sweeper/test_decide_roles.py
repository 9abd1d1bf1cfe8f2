"""A job waiting for a role: it says so, and once whole its held Job runs and gated pods start."""

from __future__ import annotations

from typing import Any

from tests.support.stored import indexed_job, owned, pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import JOBS, PODS
from webhook.sweeper.actions import Patch

from .helpers import NOW, decision, of_type, status_of

GATE = {"name": contract.WAITING_FOR_ROLES}


def gated(obj: dict[str, Any], *others: str) -> dict[str, Any]:
    obj["spec"]["schedulingGates"] = [{"name": name} for name in others] + [GATE]
    obj["status"] = {"phase": "Pending", "conditions": []}
    return obj


def service() -> dict[str, Any]:
    return owned("Service", "hv", job="hv", managed=False, spec={"clusterIP": "None"})


def workers_alone() -> dict[str, Any]:
    (workers,) = stamped(
        statefulset("hv-worker", framework="mpi", role="worker", job="hv", replicas=2)
    )
    return workers


def test_workers_without_their_launcher_wait_and_the_job_says_for_what():
    workers = workers_alone()
    pods = [gated(pod(workers, 0)), gated(pod(workers, 1))]
    made = decision("hv", [workers], pods, services=[service()], records=True)
    assert status_of(made.actions, "hv-worker")["state"] == "Pending"
    assert status_of(made.actions, "hv-worker")["reason"] == "WaitingForRoles"
    assert status_of(made.actions, "hv-worker")["message"] == (
        "job hv waits for its role(s) launcher (which the roles it has cannot run without): its "
        "pods start once a workload of each is created"
    )
    assert not [a for a in of_type(made.actions, Patch) if a.resource == PODS]


def test_once_the_launcher_is_there_current_pods_lose_only_the_roles_gate():
    launcher, workers = stamped(
        indexed_job("hv-launcher", role="launcher", job="hv"),
        statefulset("hv-worker", framework="mpi", role="worker", job="hv", replicas=2),
    )
    pods = [
        gated(pod(workers, 0), contract.KUEUE_ADMISSION_GATE),
        gated(pod(workers, 1)),
        pod(launcher, 0),
    ]
    made = decision("hv", [launcher, workers], pods, services=[service()])
    lifted = [a for a in of_type(made.actions, Patch) if a.resource == PODS]
    versions = [p["metadata"]["resourceVersion"] for p in pods[:2]]
    assert lifted == [
        Patch(
            PODS,
            "ml",
            "hv-worker-0",
            {"spec": {"schedulingGates": [{"name": contract.KUEUE_ADMISSION_GATE}]}},
            versions[0],
        ),
        Patch(PODS, "ml", "hv-worker-1", {"spec": {"schedulingGates": None}}, versions[1]),
    ]


def test_gated_pods_stamped_before_the_launcher_came_are_restarted_not_released():
    workers = workers_alone()
    launcher, current = stamped(
        indexed_job("hv-launcher", role="launcher", job="hv"),
        statefulset("hv-worker", framework="mpi", role="worker", job="hv", replicas=2),
    )
    pods = [gated(pod(workers, 0)), gated(pod(workers, 1))]
    made = decision("hv", [launcher, current], pods, services=[service()])
    assert [a.describe() for a in made.actions if getattr(a, "resource", None) == PODS] == [
        "delete Pod ml/hv-worker-0",
        "delete Pod ml/hv-worker-1",
    ]


def test_a_launcher_held_suspended_gets_the_whole_stamp_and_runs_once_workers_exist():
    (alone,) = stamped(
        indexed_job("hv-launcher", role="launcher", job="hv", suspend=True, status={})
    )
    alone["metadata"]["annotations"][contract.WAITING_FOR_ROLES] = "worker"
    _, workers = stamped(
        indexed_job("hv-launcher", role="launcher", job="hv"),
        statefulset("hv-worker", framework="mpi", role="worker", job="hv", replicas=2),
    )
    whole = workers["spec"]["template"]["metadata"]["annotations"]
    made = decision("hv", [alone, workers], [pod(workers, 0), pod(workers, 1)], now=NOW)
    released = [a for a in of_type(made.actions, Patch) if a.resource == JOBS]
    assert released == [
        Patch(
            JOBS,
            "ml",
            "hv-launcher",
            {
                "metadata": {"annotations": {contract.WAITING_FOR_ROLES: None}},
                "spec": {
                    "suspend": False,
                    "template": {
                        "metadata": {
                            "annotations": {
                                contract.TOPOLOGY: whole[contract.TOPOLOGY],
                                contract.HOSTS: whole[contract.HOSTS],
                            }
                        }
                    },
                },
            },
            alone["metadata"]["resourceVersion"],
        )
    ]


def test_a_held_launcher_stays_suspended_while_its_workers_are_missing():
    (alone,) = stamped(
        indexed_job("hv-launcher", role="launcher", job="hv", suspend=True, status={})
    )
    alone["metadata"]["annotations"][contract.WAITING_FOR_ROLES] = "worker"
    made = decision("hv", [alone], [], services=[service()])
    assert [a for a in of_type(made.actions, Patch) if a.resource == JOBS] == []
