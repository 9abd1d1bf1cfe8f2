"""A preemption the sweeper never saw a pod for, end to end: a sweeper against the API emulator,
held between two looks while the scheduler marks a pod, deletes it with no grace and its
StatefulSet controller replaces it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tests.support.stored import pod
from tests.support.sweeping import Running, sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS

from .test_failure_rules_live import events, report, status_of
from .test_sweeper_api import annotations_on, create_pytorch_job, names

STATIC = {contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "0"}
PREEMPTED = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "PreemptionByScheduler",
    "message": "preempted by a higher-priority pod",
}


def held_between_looks(sweeper: Running) -> tuple[threading.Event, Callable[[], None]]:
    """Hold the sweeper's next look at any job until the returned event is set; the function
    returned waits until it is held (any look under way has ended)."""
    release = threading.Event()
    waiting = threading.Event()
    look = sweeper.sweeper.reconcile

    def held(key: tuple[str, str]) -> None:
        waiting.set()
        release.wait(30)
        look(key)

    sweeper.sweeper.reconcile = held  # type: ignore[method-assign]

    def until_held() -> None:
        sweeper.sweeper.queue.add(("ml", "pt"))
        eventually(waiting.is_set, what="the sweeper held before its next look")

    return release, until_held


def watched_uid(sweeper: Running, name: str) -> str | None:
    informer = sweeper.sweeper.informer(PODS, "ml")
    assert informer is not None
    for obj in informer.objects_of(("ml", "pt")):
        if obj["metadata"]["name"] == name:
            return str(obj["metadata"]["uid"])
    return None


def test_a_pod_preempted_and_replaced_between_two_looks_restarts_the_static_job_free(
    emulator, kube
):
    _, workers, _ = create_pytorch_job(kube, STATIC)
    with sweeping(kube) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        release, until_held = held_between_looks(sweeper)
        until_held()
        # the scheduler marks the pod and deletes it with no grace; its controller replaces it
        report(kube, "pt-worker-0", conditions=[PREEMPTED])
        kube.delete(PODS, "ml", "pt-worker-0", {"gracePeriodSeconds": 0})
        fresh: dict[str, Any] = kube.create(PODS, "ml", pod(workers, 0))  # a new uid
        eventually(
            lambda: watched_uid(sweeper, "pt-worker-0") == fresh["metadata"]["uid"],
            what="the replacement watched",
        )
        release.set()
        eventually(lambda: status_of(emulator).get("disruptions"), what="the restart recorded")
        eventually(lambda: names(emulator, PODS) == [], what="every pod deleted, the new too")
    status = status_of(emulator)
    assert (status["restarts"], status["disruptions"], status["reason"]) == (
        0,
        {"preemption": 1},
        "Preempted",
    )
    (event,) = events(emulator, "Restarting")
    assert event["type"] == "Normal"
    assert event["message"].startswith(
        "restarting all 3 pod(s) of the job together (not counted against the backoff limit: "
        "preemption): pod pt-worker-0 was preempted (DisruptionTarget PreemptionByScheduler)"
    )
    assert contract.PHASE not in annotations_on(emulator, STATEFULSETS, "pt-master")


def test_a_pod_preempted_and_deleted_between_two_looks_restarts_the_static_job_free(emulator, kube):
    create_pytorch_job(kube, STATIC)
    with sweeping(kube) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        release, until_held = held_between_looks(sweeper)
        until_held()
        report(kube, "pt-worker-1", conditions=[PREEMPTED])
        kube.delete(PODS, "ml", "pt-worker-1", {"gracePeriodSeconds": 0})
        eventually(lambda: watched_uid(sweeper, "pt-worker-1") is None, what="the deletion seen")
        release.set()
        eventually(lambda: status_of(emulator).get("disruptions"), what="the restart recorded")
        eventually(lambda: names(emulator, PODS) == [], what="every pod deleted")
    (event,) = events(emulator, "Restarting")
    assert "pod pt-worker-1 was preempted" in event["message"]
    assert status_of(emulator)["restarts"] == 0
