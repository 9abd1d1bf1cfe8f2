"""A sweeper cut off after each write of a whole-job restart and of a resume, then a fresh one:
the same end as a run that was never interrupted.

The emulator lets the first k writes through and refuses every later one (Leases aside), as if
the sweeper had been killed right after its k-th write; the sweeper is stopped, writes are let
through again and a new sweeper takes the job over. The test plays the StatefulSet controller
(it recreates deleted pods) and the kubelet (it reports a crash).
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.support.stored import pod
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.objects import parse_time
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.job.state import format_time

from .test_failure_rules_live import exited
from .test_sweeper_api import annotations_on, create_pytorch_job

RESTART_JOB = {contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "3"}
JOB_PODS = ("pt-master-0", "pt-worker-0", "pt-worker-1")
# The writes of an uninterrupted restart: its Event, the record on each of the two
# StatefulSets, the three deletions, then the failed runs of the crashed pod, now gone.
RESTART_WRITES = 7
# The writes of an uninterrupted resume: the job's Service (a suspended job has none yet), then
# each StatefulSet's replicas back, with the status.
RESUME_WRITES = 3


def status_on(emulator: Any, name: str) -> dict[str, Any]:
    raw = annotations_on(emulator, STATEFULSETS, name).get(contract.STATUS)
    return json.loads(raw) if raw else {}


def pods_by_name(emulator: Any) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in emulator.objects(PODS, "ml")}


def interrupted(
    emulator: Any, kube: Any, writes: int | None, refusal: int, done: Any, what: str
) -> None:
    """Run a sweeper whose writes after the first `writes` (None: never) are answered
    `refusal`, then, from where it left the job, a fresh one until `done()`, which may play
    the other controllers."""
    handler = emulator.emulator
    if writes is not None:
        handler.cut_writes_after(writes, refusal)
        with sweeping(kube) as cut:
            eventually(lambda: handler.writes_refused > 0, timeout=20, what="a write refused")
            cut.reconciled("ml", "pt", times=1)  # it retried, and was refused again
        assert handler.writes_made == writes
        handler.restore_writes()
    with sweeping(kube) as fresh:
        eventually(done, timeout=30, what=what)
        fresh.reconciled("ml", "pt")
        assert done(), f"no longer {what}"


def successful_deletes(emulator: Any) -> Counter[str]:
    return Counter(
        path.rsplit("/", 1)[1]
        for method, path, code, _ in emulator.emulator.log
        if method == "DELETE" and "/pods/" in path and code < 300
    )


def running_job(emulator: Any, kube: Any) -> dict[str, str]:
    """A RestartJob job, running, its sweeper stopped; a worker's training then crashes. The
    uids of its pods."""
    create_pytorch_job(kube, RESTART_JOB)
    with sweeping(kube) as sweeper:
        eventually(lambda: status_on(emulator, "pt-master").get("state") == "Running")
        sweeper.reconciled("ml", "pt")
    exited(kube, "pt-worker-1", 1, message="NCCL error: unhandled system error")
    return {name: p["metadata"]["uid"] for name, p in pods_by_name(emulator).items()}


def restarted(emulator: Any, kube: Any, old: dict[str, str]) -> bool:
    """Plays the StatefulSet controller (every deleted pod back, created after the restart
    began); whether the job runs again on pods none of which is from before the restart."""
    statuses = [status_on(emulator, name) for name in ("pt-master", "pt-worker")]
    began = max((s.get("restartedAt") or "" for s in statuses), default="")
    present = pods_by_name(emulator)
    missing = [name for name in JOB_PODS if name not in present]
    if missing and began:
        moment = parse_time(began)
        assert moment is not None
        if datetime.now(UTC) < moment:
            return False  # the API server stamps creations to the second: wait for it
        owners = {o["metadata"]["name"]: o for o in emulator.objects(STATEFULSETS, "ml")}
        for name in missing:
            owner, _, index = name.rpartition("-")
            fresh = pod(owners[owner], int(index))
            fresh["metadata"]["creationTimestamp"] = format_time(datetime.now(UTC))
            kube.create(PODS, "ml", fresh)
        return False
    uids = {p["metadata"]["uid"] for p in present.values()}
    return (
        sorted(present) == list(JOB_PODS)
        and not uids & set(old.values())
        and all((s.get("state"), s.get("restarts")) == ("Running", 1) for s in statuses)
    )


# Refused as a failing API server would (500), or as a write that lost a race (409 Conflict);
# and once not at all.
REFUSALS = (500, 409)


def cases(writes: int) -> list[tuple[int | None, int]]:
    return [(k, refusal) for k in range(writes) for refusal in REFUSALS] + [(None, 500)]


@pytest.mark.parametrize(("writes", "refusal"), cases(RESTART_WRITES))
def test_a_restart_cut_off_after_any_write_ends_as_an_uninterrupted_one(
    emulator, kube, writes, refusal
):
    old = running_job(emulator, kube)
    interrupted(
        emulator,
        kube,
        writes,
        refusal,
        lambda: restarted(emulator, kube, old),
        "the job running again on new pods",
    )
    # Every pod from before the restart deleted exactly once; none created since.
    assert successful_deletes(emulator) == Counter(JOB_PODS)
    statuses = [status_on(emulator, name) for name in ("pt-master", "pt-worker")]
    assert statuses[0]["restartedAt"] == statuses[1]["restartedAt"]
    assert statuses[0]["attemptStartedAt"] == statuses[0]["restartedAt"]
    for name in ("pt-master", "pt-worker"):
        assert contract.PHASE not in annotations_on(emulator, STATEFULSETS, name)


def test_an_uninterrupted_restart_makes_the_writes_the_cut_off_runs_cover(emulator, kube):
    running_job(emulator, kube)
    handler = emulator.emulator
    handler.cut_writes_after(100)
    with sweeping(kube) as sweeper:
        eventually(lambda: not pods_by_name(emulator), what="the pods deleted")
        sweeper.reconciled("ml", "pt")
    assert handler.writes_made == RESTART_WRITES
    restarting = [
        (method, path.rsplit("/", 1)[1])
        for method, path, code, _ in handler.log
        if method != "GET" and "/leases" not in path
    ][-RESTART_WRITES:]
    assert restarting == [
        ("POST", "events"),
        ("PATCH", "pt-master"),
        ("PATCH", "pt-worker"),
        *(("DELETE", name) for name in JOB_PODS),
        ("PATCH", "pt-worker"),
    ]


def suspended_job(emulator: Any, kube: Any) -> datetime:
    """A job the sweeper suspended long after it started, with a deadline of ten minutes,
    that the user has just resumed (the sweeper stopped meanwhile). When it was resumed."""
    settings = {contract.ACTIVE_DEADLINE_SECONDS: "600", contract.SUSPEND: "true"}
    create_pytorch_job(kube, settings)
    with sweeping(kube) as sweeper:
        eventually(
            lambda: all(
                status_on(emulator, name).get("state") == "Suspended"
                and contract.SUSPENDED_REPLICAS in annotations_on(emulator, STATEFULSETS, name)
                for name in ("pt-master", "pt-worker")
            ),
            what="suspended",
        )
        sweeper.reconciled("ml", "pt")
    for obj in emulator.objects(PODS, "ml"):  # the StatefulSet controller scales to 0
        kube.delete(PODS, "ml", obj["metadata"]["name"], {})
    resumed = datetime.now(UTC).replace(microsecond=0)
    for name in ("pt-master", "pt-worker"):
        status = {**status_on(emulator, name), "startTime": "2025-01-01T00:00:00Z"}
        annotations = {contract.STATUS: json.dumps(status), contract.SUSPEND: None}
        kube.patch(STATEFULSETS, "ml", name, {"metadata": {"annotations": annotations}})
    return resumed


def resumed_from(emulator: Any, resumed: datetime) -> bool:
    for name, replicas in (("pt-master", 1), ("pt-worker", 2)):
        workload = next(
            o for o in emulator.objects(STATEFULSETS, "ml") if o["metadata"]["name"] == name
        )
        annotations = workload["metadata"].get("annotations") or {}
        status = status_on(emulator, name)
        start = parse_time(status.get("startTime"))
        if (
            workload["spec"]["replicas"] != replicas
            or contract.SUSPENDED_REPLICAS in annotations
            or contract.PHASE in annotations
            or status.get("state") in (None, "Suspended")
            or start is None
            or start < resumed
            or status.get("resumedAt") != status.get("startTime")
        ):
            return False
    return True


@pytest.mark.parametrize(("writes", "refusal"), cases(RESUME_WRITES))
def test_a_resume_cut_off_after_any_write_runs_its_deadline_from_the_resume(
    emulator, kube, writes, refusal
):
    resumed = suspended_job(emulator, kube)
    interrupted(
        emulator,
        kube,
        writes,
        refusal,
        lambda: resumed_from(emulator, resumed),
        "resumed, its clock from the resume",
    )
    starts = {status_on(emulator, name)["startTime"] for name in ("pt-master", "pt-worker")}
    assert len(starts) == 1  # one resume, not one per sweeper


def test_an_uninterrupted_resume_makes_the_writes_the_cut_off_runs_cover(emulator, kube):
    resumed = suspended_job(emulator, kube)
    handler = emulator.emulator
    handler.cut_writes_after(100)
    with sweeping(kube) as sweeper:
        eventually(lambda: resumed_from(emulator, resumed), what="resumed")
        sweeper.reconciled("ml", "pt")
    assert handler.writes_made == RESUME_WRITES
