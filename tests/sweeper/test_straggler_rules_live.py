"""Stragglers end to end against the API emulator: the job's pods report their step times with
their own tokens to the progress endpoint, which names the slow rank on the job; a real sweeper
says so once and restarts nothing, and when a rank crashes later, the restart it makes keeps the
recreated pods off the straggler's node."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.job.progress import status_path
from webhook.kube.resources import NODES, PODS, STATEFULSETS
from webhook.sweeper.serving.progress import Limits, ProgressDesk

from .test_failure_rules_live import events, exited, status_of
from .test_node_rules_live import node
from .test_progress import token_for
from .test_sweeper_api import annotations_on, names

RULE = "straggler -> restart-job exclude-node"


class Wall:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


def report_step_times(
    desk: ProgressDesk, wall: Wall, tokens: list[str], times: list[float]
) -> None:
    """One report of each rank's step time, as the example reporter sends it, ten seconds on."""
    wall.now += timedelta(seconds=10)
    for token, seconds in zip(tokens, times, strict=True):
        body = {"trainerStatus": {"metrics": [{"name": "stepTimeSeconds", "value": str(seconds)}]}}
        answer = desk.handle(
            status_path("ml", "pt"), {"Authorization": f"Bearer {token}"}, json.dumps(body).encode()
        )
        assert answer.status == 200
    desk.flush()


def test_a_straggler_restarts_nothing_and_the_next_crash_restarts_the_job_off_its_node(
    emulator: Any, kube: Any
) -> None:
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        kube.create(NODES, None, node(name))
    settings = {
        contract.REPORT_PROGRESS: "true",
        contract.STRAGGLER_THRESHOLD: "1.5",
        contract.FAILURE_POLICY: RULE,
        contract.RESTART_POLICY: "RestartJob",
    }
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=settings),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=settings),
    )
    master = kube.create(STATEFULSETS, "ml", master)
    workers = kube.create(STATEFULSETS, "ml", workers)
    made = []
    for rank, (obj, where) in enumerate(
        ((pod(master, 0), "gpu-1"), (pod(workers, 0), "gpu-2"), (pod(workers, 1), "gpu-3"))
    ):
        obj["spec"]["nodeName"] = where
        obj["metadata"]["labels"][contract.RANK] = str(rank)
        obj["metadata"]["annotations"][contract.REPORT_PROGRESS] = "true"
        created = kube.create(PODS, "ml", obj)
        made.append((created["metadata"]["name"], created["metadata"]["uid"]))
    tokens = [token_for(emulator, "pt", pod_ref) for pod_ref in made]
    wall = Wall()
    desk = ProgressDesk(
        kube, Limits(burst=100, reports_per_second=100.0, write_interval=0.0), wall=wall
    )
    with sweeping(kube) as running:
        running.sweeper.on_gone.append(desk.forget)  # as `trainhook sweep --progress-bind` does
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        for _ in range(3):
            report_step_times(desk, wall, tokens, [1.0, 1.1, 2.0])
        flagged = json.loads(
            annotations_on(emulator, STATEFULSETS, "pt-worker")[contract.STRAGGLERS]
        )
        assert [(s["pod"], s["node"], s["rank"]) for s in flagged["flagged"]] == [
            ("pt-worker-1", "gpu-3", 2)
        ]
        eventually(lambda: events(emulator, "Straggler"), what="the Straggler event")
        running.reconciled("ml", "pt")  # looked at twice more: still nothing restarted
        assert not events(emulator, "Restarting")
        assert names(emulator, PODS) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
        exited(kube, "pt-worker-0", 1, message="NCCL error")
        eventually(lambda: names(emulator, PODS) == [], what="the job's pods deleted")
        eventually(lambda: status_of(emulator).get("excludedNodes"), what="the exclusion")
        restarted = [status_of(emulator, w) for w in ("pt-master", "pt-worker")]
        # The job deleted: the sweeper sees it go, and the endpoint forgets its ranks.
        assert desk.stragglers.jobs
        for workload in ("pt-master", "pt-worker"):
            emulator.delete(f"/apis/apps/v1/namespaces/ml/statefulsets/{workload}")
        eventually(lambda: not desk.stragglers.jobs, what="the job's ranks forgotten")
    (straggler,) = events(emulator, "Straggler")
    assert straggler["type"] == "Warning"
    assert straggler["message"] == (
        "rank 2 (pod pt-worker-1 on node gpu-3, 1.9x) is a straggler: its steps take over 1.5x "
        "the other ranks' median; nothing is restarted for it; the job's next whole-job restart "
        f"keeps its pods off node gpu-3 (failure-policy rule 1 ({RULE}))"
    )
    (restart,) = events(emulator, "Restarting")
    assert restart["message"] == (
        "restarting all 3 pod(s) of the job together (restart 1): pod pt-worker-0: container "
        "pytorch exited with code 1: NCCL error; trainhook.io/restart-policy RestartJob rule 2 "
        "(* -> restart-job); straggler node gpu-3 excluded (rank 2, 1.9x): the pods keep off "
        "it (1 of at most 8)"
    )
    assert [status["excludedNodes"] for status in restarted] == [["gpu-3"], ["gpu-3"]]
