"""Whole-job restarts in place: the attempt written on every pod, the barrier released only
when every rank waits at it, and the fallback to recreating the pods."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.core.job.restart_in_place import BARRIER, RESTARTER
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Delete, Emit, Patch
from webhook.sweeper.decide.policy import judge
from webhook.sweeper.job.state import format_time

from .helpers import NOW, decision, of_type, state_of, status_of, terminated

IN_PLACE = {contract.RESTART_POLICY: "RestartJobInPlace", contract.BACKOFF_LIMIT: "3"}
STARTED = NOW - timedelta(seconds=20)


def pytorch() -> list[dict[str, Any]]:
    master = statefulset("pt-master", role="master", job="pt", annotations=IN_PLACE, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=IN_PLACE, rv="42"
    )
    return stamped(master, worker)


def ranked(
    obj: dict[str, Any],
    *,
    attempt: int | None = None,
    waiting_since: datetime | None = None,
    released: int | None = None,
) -> dict[str, Any]:
    """A pod as the webhook makes it for a job restarted in place, and how far it got."""
    obj["spec"]["initContainers"] = [
        {"name": RESTARTER, "restartPolicy": "Always"},
        {"name": BARRIER},
    ]
    barrier: dict[str, Any] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    if waiting_since is not None:
        barrier = {"running": {"startedAt": format_time(waiting_since)}}
    obj["status"]["initContainerStatuses"] = [
        {"name": RESTARTER, "restartCount": 0, "state": {"running": {}}},
        {"name": BARRIER, "restartCount": 0, "state": barrier},
    ]
    if attempt is not None:
        obj["metadata"]["annotations"][contract.ATTEMPT] = str(attempt)
    if released is not None:
        obj["metadata"]["annotations"][contract.RELEASED_ATTEMPT] = str(released)
    return obj


def restarting(workloads: list[dict[str, Any]], **extra: Any) -> None:
    status = {
        "state": "Restarting",
        "reason": "Error",
        "message": "pod pt-worker-1: container pytorch exited with code 1: NCCL error",
        "restarts": 1,
        "startTime": "2025-01-01T00:00:00Z",
        "restartedAt": format_time(STARTED),
        "cause": "worker1/1",
        "attempt": 1,
        "inPlace": 3,
        **extra,
    }
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)


def pod_patches(actions: Any) -> dict[str, dict[str, str]]:
    return {
        p.name: dict(p.patch["metadata"]["annotations"])
        for p in of_type(actions, Patch)
        if p.resource == PODS
    }


def test_a_failed_rank_restarts_every_pod_in_place_for_the_next_attempt() -> None:
    workloads = pytorch()
    master, workers = workloads
    crashed = terminated(ranked(pod(workers, 1, restarts=1)), 1, message="NCCL error", last=True)
    pods = [ranked(pod(master, 0)), ranked(pod(workers, 0)), crashed]
    actions = decision("pt", workloads, pods, records=True).actions
    assert not of_type(actions, Delete)  # every pod keeps its name, node and IP
    assert pod_patches(actions) == {
        name: {contract.ATTEMPT: "1"} for name in ("pt-master-0", "pt-worker-0", "pt-worker-1")
    }
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert event.message == (
        "restarting all 3 pod(s) of the job in place (attempt 1) (restart 1 of "
        "trainhook.io/backoff-limit 3): pod pt-worker-1: container pytorch exited with code 1: "
        "NCCL error; trainhook.io/restart-policy RestartJobInPlace rule 2 (* -> restart-in-place)"
    )
    status = status_of(actions)
    assert (status["state"], status["attempt"], status["inPlace"], status["restarts"]) == (
        "Restarting",
        1,
        3,
        1,
    )
    assert "releasedAt" not in status


def test_the_barrier_stays_closed_until_every_rank_waits_at_it() -> None:
    workloads = pytorch()
    master, workers = workloads
    restarting(workloads)
    pods = [
        ranked(pod(master, 0), attempt=1, waiting_since=STARTED + timedelta(seconds=3)),
        ranked(pod(workers, 0), attempt=1, waiting_since=STARTED + timedelta(seconds=4)),
        ranked(pod(workers, 1), attempt=1),  # still training: its containers not restarted yet
    ]
    actions = decision("pt", workloads, pods, records=True).actions
    assert pod_patches(actions) == {}
    assert status_of(actions)["state"] == "Restarting"
    assert decision("pt", workloads, pods).recheck_at == STARTED + timedelta(seconds=60)


def test_the_barrier_is_released_on_every_pod_once_every_rank_is_back() -> None:
    workloads = pytorch()
    master, workers = workloads
    restarting(workloads)
    back = STARTED + timedelta(seconds=5)
    pods = [
        ranked(pod(master, 0), attempt=1, waiting_since=back),
        ranked(pod(workers, 0), attempt=1, waiting_since=back),
        ranked(pod(workers, 1, restarts=2), attempt=1, waiting_since=back),
    ]
    actions = decision("pt", workloads, pods, records=True).actions
    assert pod_patches(actions) == {
        name: {contract.RELEASED_ATTEMPT: "1"}
        for name in ("pt-master-0", "pt-worker-0", "pt-worker-1")
    }
    assert status_of(actions)["releasedAt"] == format_time(NOW)


def test_a_pod_asked_late_gets_the_attempt_written_again() -> None:
    workloads = pytorch()
    master, workers = workloads
    restarting(workloads)
    pods = [
        ranked(pod(master, 0), attempt=1, waiting_since=STARTED),
        ranked(pod(workers, 0)),  # the first write did not reach it
        ranked(pod(workers, 1), attempt=1, waiting_since=STARTED),
    ]
    actions = decision("pt", workloads, pods, records=True).actions
    assert pod_patches(actions) == {"pt-worker-0": {contract.ATTEMPT: "1"}}


def test_runs_stopped_by_the_restart_are_not_failures_once_released() -> None:
    workloads = pytorch()
    master, workers = workloads
    restarting(workloads, releasedAt=format_time(STARTED + timedelta(seconds=6)))
    killed_at = 18  # seconds before NOW: during the restart, before the release
    pods = [
        terminated(
            ranked(pod(m, i, restarts=1), attempt=1, released=1), 137, ago=killed_at, last=True
        )
        for m, i in ((master, 0), (workers, 0), (workers, 1))
    ]
    actions = decision("pt", workloads, pods, records=True).actions
    assert not of_type(actions, Delete)
    assert pod_patches(actions) == {}
    assert not [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert status_of(actions)["state"] == "Running"


def test_a_pod_gone_during_the_restart_falls_back_to_recreating_every_pod() -> None:
    workloads = pytorch()
    master, workers = workloads
    restarting(workloads)
    pods = [
        ranked(pod(master, 0), attempt=1, waiting_since=STARTED),
        ranked(pod(workers, 0), attempt=1, waiting_since=STARTED),
    ]  # pt-worker-1 is gone with its node
    actions = decision("pt", workloads, pods, records=True).actions
    assert [d.name for d in of_type(actions, Delete)] == ["pt-master-0", "pt-worker-0"]
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert event.message == (
        "restarting all 2 pod(s) of the job by recreating them, not in place: 1 of the job's 3 "
        "pods are gone"
    )
    status = status_of(actions)
    assert ("inPlace" not in status, status["restartedAt"]) == (True, format_time(NOW))


def test_ranks_that_do_not_reach_their_barrier_in_time_are_recreated() -> None:
    workloads = pytorch()
    master, workers = workloads
    restarting(workloads)
    pods = [
        ranked(pod(master, 0), attempt=1, waiting_since=STARTED),
        ranked(pod(workers, 0), attempt=1),
        ranked(pod(workers, 1), attempt=1),
    ]
    later = STARTED + timedelta(seconds=61)
    actions = decision("pt", workloads, pods, records=True, now=later).actions
    assert len(of_type(actions, Delete)) == 3
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert event.message == (
        "restarting all 3 pod(s) of the job by recreating them, not in place: 2 rank(s) did not "
        "reach their barrier within 60s (pt-worker-0, pt-worker-1): the kubelet may not restart "
        "all containers (RestartAllContainers, Kubernetes 1.35+)"
    )


def test_pods_without_the_barrier_are_recreated_at_once() -> None:
    workloads = pytorch()
    master, workers = workloads
    crashed = terminated(pod(workers, 1, restarts=1), 1, message="NCCL error", last=True)
    actions = decision(
        "pt", workloads, [pod(master, 0), pod(workers, 0), crashed], records=True
    ).actions
    assert len(of_type(actions, Delete)) == 3
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert event.message.endswith(
        "; not in place: pod pt-master-0 has no restart barrier (created before the job "
        "restarted in place)"
    )


def test_a_pod_restarted_in_place_succeeds_by_a_run_that_ended_after_the_restart() -> None:
    workloads = pytorch()
    master, workers = workloads
    restarting(workloads, releasedAt=format_time(STARTED + timedelta(seconds=6)))
    after = terminated(ranked(pod(master, 0), attempt=1, released=1), 0, reason="Completed", ago=5)
    pods = [after, ranked(pod(workers, 0), attempt=1), ranked(pod(workers, 1), attempt=1)]
    assert judge(state_of("pt", workloads, pods), NOW) is not None  # master 0 decides: done
    before = terminated(
        ranked(pod(master, 0), attempt=1, released=1), 0, reason="Completed", ago=40
    )
    pods[0] = before  # that exit 0 was the attempt before the restart
    assert judge(state_of("pt", workloads, pods), NOW) is None
