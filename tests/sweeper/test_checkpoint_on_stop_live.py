"""A checkpoint before a suspend, end to end: sweepers against the API emulator on a played
clock, the test playing the progress endpoint (it writes the job's report on its workloads) and
the kubelet that runs the pods. The request is written once, survives a sweeper restarted in the
middle of the hold, and the suspend goes ahead when the checkpoint comes or at the deadline."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.job.state import format_time
from webhook.sweeper.report.describe import describe, read_job

from .test_failure_rules_live import events, status_of
from .test_sweeper_api import annotations_on

SETTINGS = {contract.REPORT_PROGRESS: "true", contract.CHECKPOINT_ON_STOP: "5m"}
POD_NAMES = ["pt-master-0", "pt-worker-0", "pt-worker-1"]


class PlayedClock:
    """The time the sweepers decide at: it moves only when the test says."""

    def __init__(self) -> None:
        self.now = datetime.now(UTC).replace(microsecond=0)

    def __call__(self) -> datetime:
        return self.now


def report(kube: Any, step: int, checkpoint: int, at: datetime) -> None:
    """What the progress endpoint writes on the job's workloads after a report."""
    value = {
        "step": step,
        "updated": format_time(at),
        "stepSince": format_time(at),
        "checkpoint": {"step": checkpoint, "time": format_time(at)},
    }
    patch = {"metadata": {"annotations": {contract.PROGRESS: json.dumps(value)}}}
    for name in ("pt-master", "pt-worker"):
        kube.patch(STATEFULSETS, "ml", name, patch)


def running_job(kube: Any, clock: PlayedClock) -> None:
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=SETTINGS),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=SETTINGS),
    )
    master = kube.create(STATEFULSETS, "ml", master)
    workers = kube.create(STATEFULSETS, "ml", workers)
    for obj in (pod(master, 0), pod(workers, 0), pod(workers, 1)):
        kube.create(PODS, "ml", obj)
    report(kube, step=450, checkpoint=400, at=clock.now - timedelta(minutes=3))


def requests_on_pods(emulator: Any) -> dict[str, str | None]:
    return {
        name: annotations_on(emulator, PODS, name).get(contract.CHECKPOINT_REQUESTED)
        for name in POD_NAMES
    }


def replicas(emulator: Any) -> list[int]:
    return [
        obj["spec"]["replicas"]
        for obj in sorted(emulator.objects(STATEFULSETS, "ml"), key=lambda o: o["metadata"]["name"])
    ]


def suspend(kube: Any) -> None:
    patch = {"metadata": {"annotations": {contract.SUSPEND: "true"}}}
    kube.patch(STATEFULSETS, "ml", "pt-master", patch)


def pod_writes(*sweepers: Any) -> int:
    return sum(a.startswith("patch Pod ") for s in sweepers for a in s.actions)


def test_a_held_suspend_outlives_a_sweeper_restart_and_ends_at_its_deadline(emulator, kube):
    clock = PlayedClock()
    asked = format_time(clock.now)
    running_job(kube, clock)
    with sweeping(kube, clock=clock) as first:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        suspend(kube)
        eventually(
            lambda: set(requests_on_pods(emulator).values()) == {asked},
            what="every running pod asked for a checkpoint",
        )
        first.reconciled("ml", "pt")
        assert replicas(emulator) == [1, 2]  # the pods keep running while they save
    assert pod_writes(first) == 3
    # The sweeper restarts in the middle of the hold: the one taking over remembers it all.
    with sweeping(kube, "sweeper-b", clock=clock) as second:
        eventually(second.leads, what="the second sweeper leads")
        second.reconciled("ml", "pt")
        assert pod_writes(second) == 0  # not asked twice
        assert replicas(emulator) == [1, 2]
        assert len(events(emulator, "CheckpointRequested")) == 1
        clock.now += timedelta(minutes=4, seconds=59)
        second.reconciled("ml", "pt")
        assert replicas(emulator) == [1, 2]
        clock.now += timedelta(seconds=1)
        second.reconciled("ml", "pt")
        eventually(lambda: replicas(emulator) == [0, 0], what="the suspend at the deadline")
    (late,) = events(emulator, "CheckpointNotSaved")
    assert late["message"] == (
        f"no checkpoint saved within 5m of the request at {asked} (the last is step 400); "
        "the suspend goes ahead"
    )
    assert status_of(emulator)["checkpoint"] == {
        "stop": "suspend",
        "requestedAt": asked,
        "step": 400,
        "time": format_time(clock.now - timedelta(minutes=8)),
        "outcome": "notSaved",
    }


def test_a_checkpoint_reported_during_a_held_suspend_lets_it_go_ahead_and_describe_says_so(
    emulator, kube
):
    clock = PlayedClock()
    asked = format_time(clock.now)
    running_job(kube, clock)
    with sweeping(kube, clock=clock) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        suspend(kube)
        eventually(
            lambda: set(requests_on_pods(emulator).values()) == {asked}, what="the pods asked"
        )
        clock.now += timedelta(seconds=40)
        report(kube, step=452, checkpoint=452, at=clock.now)
        eventually(lambda: replicas(emulator) == [0, 0], what="the suspend once it has saved")
        sweeper.reconciled("ml", "pt")
    assert pod_writes(sweeper) == 3
    text = describe(read_job(kube, "ml", "pt"), clock.now)
    assert (
        "40s ago    Normal  CheckpointRequested  StatefulSet/pt-master  "
        "asked the job's 3 running pod(s) to save a checkpoint "
        f"(trainhook.io/checkpoint-requested: {asked}) before the job is suspended; "
        "the suspend waits for it until "
        f"{format_time(clock.now + timedelta(minutes=4, seconds=20))} "
        "(trainhook.io/checkpoint-on-stop 5m)"
    ) in text
    assert (
        "0s ago     Normal  CheckpointSaved      StatefulSet/pt-master  "
        f"checkpoint saved at step 452, 40s after the request at {asked}; the suspend goes ahead"
    ) in text


def test_a_resume_during_a_held_suspend_takes_the_request_back_from_every_pod(emulator, kube):
    clock = PlayedClock()
    running_job(kube, clock)
    with sweeping(kube, clock=clock):
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        suspend(kube)
        eventually(lambda: None not in requests_on_pods(emulator).values(), what="the pods asked")
        clock.now += timedelta(minutes=1)
        kube.patch(
            STATEFULSETS, "ml", "pt-master", {"metadata": {"annotations": {contract.SUSPEND: None}}}
        )
        eventually(
            lambda: set(requests_on_pods(emulator).values()) == {None},
            what="the request taken back",
        )
        eventually(lambda: "checkpoint" not in status_of(emulator), what="the record gone")
    assert replicas(emulator) == [1, 2]
    assert not events(emulator, "Suspended")
