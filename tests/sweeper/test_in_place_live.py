"""An in-place restart of a multi-role job end to end: a sweeper against the API emulator, and a
kubelet played by the test that restarts every container of a pod when its attempt changes
(RestartAllContainers) and holds its barrier until the attempt is released."""

from __future__ import annotations

import json
from typing import Any

from tests.support.played_cluster import PlayedCluster, in_place_pod
from tests.support.stored import stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.job.restart_in_place import BARRIER
from webhook.kube.resources import EVENTS, PODS, STATEFULSETS

from .test_sweeper_api import annotations_on

SETTINGS = {contract.RESTART_POLICY: "RestartJobInPlace", contract.BACKOFF_LIMIT: "2"}


def pods_seen(emulator: Any) -> dict[str, tuple[str, str, dict[str, str]]]:
    return {
        p["metadata"]["name"]: (
            p["metadata"]["uid"],
            p["spec"]["nodeName"],
            {
                k: v
                for k, v in (p["metadata"].get("annotations") or {}).items()
                if k in (contract.ATTEMPT, contract.RELEASED_ATTEMPT)
            },
        )
        for p in emulator.objects(PODS, "ml")
    }


def status_of(emulator: Any) -> dict[str, Any]:
    raw = annotations_on(emulator, STATEFULSETS, "pt-master").get(contract.STATUS)
    return json.loads(raw) if raw else {}


def test_a_multi_role_job_restarts_in_place_and_starts_again_only_when_every_rank_is_back(
    emulator, kube
):
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=SETTINGS),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=SETTINGS),
    )
    master, workers = (
        kube.create(STATEFULSETS, "ml", master),
        kube.create(STATEFULSETS, "ml", workers),
    )
    placed = [(master, 0, "gpu-node-a"), (workers, 0, "gpu-node-b"), (workers, 1, "gpu-node-c")]
    for owner, index, node in placed:
        kube.create(PODS, "ml", in_place_pod(owner, index, node))
    before = pods_seen(emulator)
    with PlayedCluster(emulator, kube, [master, workers]) as kubelet, sweeping(kube) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        kubelet.held.add("pt-master-0")  # its node is slow to restart its containers
        crashed = {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:00:00Z"}
        training = {"name": "pytorch", "restartCount": 1, "state": {"running": {}}}
        finished = {"name": BARRIER, "state": {"terminated": {"exitCode": 0}}}
        _, name, crash = kubelet.report(
            "pt-worker-1", {**training, "lastState": {"terminated": crashed}}, finished
        )
        kube.patch(PODS, "ml", name, crash)
        eventually(
            lambda: kubelet.restarted == {"pt-worker-0": 1, "pt-worker-1": 1},
            what="the workers restarted for attempt 1",
        )
        # The master has not restarted yet: nobody may start training.
        sweeper.reconciled("ml", "pt", times=3)
        seen = pods_seen(emulator)
        assert {name: annotations for name, (_, _, annotations) in seen.items()} == {
            name: {contract.ATTEMPT: "1"} for name in ("pt-master-0", "pt-worker-0", "pt-worker-1")
        }
        kubelet.held.clear()
        eventually(
            lambda: all(
                a.get(contract.RELEASED_ATTEMPT) == "1" for _, _, a in pods_seen(emulator).values()
            ),
            what="the barrier released on every pod",
        )
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running again")
    after = pods_seen(emulator)
    # Same pods, same uids, same nodes: nothing was deleted or rescheduled.
    assert {n: (uid, node) for n, (uid, node, _) in after.items()} == {
        n: (uid, node) for n, (uid, node, _) in before.items()
    }
    assert not [a for a in sweeper.actions if a.startswith("delete Pod")]
    status = status_of(emulator)
    assert (status["restarts"], status["attempt"], status["inPlace"]) == (1, 1, 3)
    assert status["releasedAt"] >= status["restartedAt"]
    restarts = [e["message"] for e in emulator.objects(EVENTS, "ml") if e["reason"] == "Restarting"]
    assert restarts == [
        "restarting all 3 pod(s) of the job in place (attempt 1) (restart 1 of "
        "trainhook.io/backoff-limit 2): pod pt-worker-1: container pytorch exited with code 1; "
        "trainhook.io/restart-policy RestartJobInPlace rule 2 (* -> restart-in-place)"
    ]
