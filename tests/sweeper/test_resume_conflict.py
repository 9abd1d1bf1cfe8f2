"""A conflict on a resume's writes does not move the job's deadline: it runs from when the job
was resumed, and the job is looked at when it is due."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tests.support.sweeping import Running, sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.objects import parse_time
from webhook.kube.resources import PODS, STATEFULSETS

from .test_sweeper_api import annotations_on, create_pytorch_job

DEADLINE = 4
RESUME = {"metadata": {"annotations": {contract.SUSPEND: None}}}


def status_on(emulator: Any, name: str) -> dict[str, Any]:
    raw = annotations_on(emulator, STATEFULSETS, name).get(contract.STATUS)
    return json.loads(raw) if raw else {}


def suspended(emulator: Any, kube: Any, sweeper: Running) -> None:
    """A job with a deadline, suspended by the sweeper, its pods gone; one of its two
    workloads no longer asks for the suspension (the other still does)."""
    eventually(
        lambda: all(
            status_on(emulator, name).get("state") == "Suspended"
            for name in ("pt-master", "pt-worker")
        ),
        what="suspended",
    )
    sweeper.reconciled("ml", "pt")
    for obj in emulator.objects(PODS, "ml"):  # the StatefulSet controller scales to 0
        kube.delete(PODS, "ml", obj["metadata"]["name"], {})
    kube.patch(STATEFULSETS, "ml", "pt-worker", RESUME)
    sweeper.reconciled("ml", "pt")


def lateness(emulator: Any, resumed: datetime) -> float:
    """How long after its deadline, counted from `resumed`, the job failed for it (finished-at
    is in whole seconds)."""
    eventually(
        lambda: annotations_on(emulator, STATEFULSETS, "pt-master").get(contract.PHASE),
        timeout=DEADLINE + 15,
        what="the deadline",
    )
    master = annotations_on(emulator, STATEFULSETS, "pt-master")
    assert master[contract.REASON] == "DeadlineExceeded"
    finished = parse_time(master[contract.FINISHED_AT])
    assert finished is not None
    return (finished - resumed.replace(microsecond=0)).total_seconds() - DEADLINE


def test_one_conflict_on_the_second_write_of_a_resume_is_decided_again_at_once(emulator, kube):
    settings = {contract.ACTIVE_DEADLINE_SECONDS: str(DEADLINE), contract.SUSPEND: "true"}
    create_pytorch_job(kube, settings)
    with sweeping(kube, backoff_base=1.0, resync_seconds=60.0) as sweeper:
        suspended(emulator, kube, sweeper)
        # the resume's write on its second workload is refused once: it changed meanwhile
        emulator.emulator.fail(409, method="PATCH", path="/statefulsets/pt-worker")
        resumed = datetime.now(UTC)
        kube.patch(STATEFULSETS, "ml", "pt-master", RESUME)
        assert lateness(emulator, resumed) <= 1
