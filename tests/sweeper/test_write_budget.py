"""Writes per job bounded over time whatever others do to the job's objects, and a normal job's
start and whole-job restart never held back."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.stored import pod, stamped, statefulset
from webhook.kube.client import Kube
from webhook.kube.resources import CONFIGMAPS, SERVICES, STATEFULSETS
from webhook.sweeper.decide import decide
from webhook.sweeper.executor import Executor, WritesDeferred
from webhook.sweeper.writes import BURST, PER_MINUTE, WriteBudget

from .helpers import state_of

START = datetime(2025, 1, 1, 0, 0, 5, tzinfo=UTC)
JOB = ("ml", "pt")


class Clock:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


def test_a_job_may_write_its_burst_and_one_per_pod_at_once_then_its_rate():
    budget = WriteBudget(per_minute=60, burst=100)
    paid = sum(budget.take(JOB, 1000, START) for _ in range(1200))
    assert paid == 1100  # a 1,000-pod job's restart (one delete per pod) fits, with room
    assert budget.wait(JOB, START) == pytest.approx(1.0)
    later = START + timedelta(seconds=30)
    assert sum(budget.take(JOB, 1000, later) for _ in range(100)) == 30
    # another job's budget is its own
    assert budget.take(("ml", "other"), 1, START)


def test_a_bad_budget_is_refused():
    with pytest.raises(ValueError, match="at least one write per minute"):
        WriteBudget(per_minute=0)


def running_job(kube: Kube) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=2),
    )
    workloads = [kube.create(STATEFULSETS, "ml", w) for w in (master, workers)]
    pods = [pod(workloads[0], 0), pod(workloads[1], 0), pod(workloads[1], 1)]
    return workloads, pods


def test_a_service_deleted_five_times_a_second_is_recreated_at_the_budgets_rate(
    emulator, kube, caplog
):
    emulator.emulator.keep_requests = False  # thousands of requests: keep only our own log
    clock = Clock()
    writes: Counter[int] = Counter()  # the sweeper's writes by minute of the attack

    def written(resource, namespace, name, obj):
        writes[int((clock.now - START).total_seconds() // 60)] += 1

    run = Executor(kube, identity="sweeper-a", clock=clock, written=written)
    _workloads, pods = running_job(kube)
    deferred = 0

    def reconcile() -> None:
        nonlocal deferred
        state = state_of(
            "pt",
            emulator.objects(STATEFULSETS, "ml"),
            pods,
            services=emulator.objects(SERVICES, "ml"),
            configmaps=emulator.objects(CONFIGMAPS, "ml"),
        )
        try:
            run.apply(decide(state, clock.now).actions, JOB, pods=3)
        except WritesDeferred:
            deferred += 1

    caplog.set_level(logging.WARNING, logger="trainhook.sweeper")
    for tick in range(3 * 60 * 5):  # three minutes, the Service deleted every 0.2 s
        clock.now = START + timedelta(seconds=tick / 5)
        if emulator.objects(SERVICES, "ml"):
            kube.delete(SERVICES, "ml", "pt", {})
        reconcile()

    # Unbounded, the sweeper would write 300 times a minute; it writes its burst, then its rate.
    assert writes[0] <= BURST + 3 + PER_MINUTE
    assert writes[1] <= PER_MINUTE + 1 and writes[2] <= PER_MINUTE + 1
    assert writes[1] >= PER_MINUTE - 1  # deferred, not dropped: the rate is spent in full
    assert deferred > 500
    # Said once for the whole attack, not once per deferred write.
    (said,) = [r.getMessage() for r in caplog.records if "write budget" in r.getMessage()]
    assert said.startswith("job ml/pt spent its write budget (103 at once, then 60 a minute): ")
    # The attack stops: the Service is back within the second the budget pays for.
    clock.now += timedelta(seconds=1)
    reconcile()
    assert [s["metadata"]["name"] for s in emulator.objects(SERVICES, "ml")] == ["pt"]


def test_a_1000_pod_jobs_start_and_restart_are_never_deferred(emulator, kube):
    emulator.emulator.keep_requests = False
    clock = Clock()
    run = Executor(kube, identity="sweeper-a", clock=clock)
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=999),
    )
    workloads = [kube.create(STATEFULSETS, "ml", w) for w in (master, workers)]
    pending = [pod(workloads[0], 0, phase="Pending", ready=False)] + [
        pod(workloads[1], i, phase="Pending", ready=False) for i in range(999)
    ]
    running = [pod(workloads[0], 0)] + [pod(workloads[1], i) for i in range(999)]
    writes = 0
    for step, pods in enumerate([[], pending[:500], pending, running, running]):
        clock.now = START + timedelta(seconds=10 * step)
        state = state_of(
            "pt",
            emulator.objects(STATEFULSETS, "ml"),
            pods,
            services=emulator.objects(SERVICES, "ml"),
            configmaps=emulator.objects(CONFIGMAPS, "ml"),
        )
        actions = decide(state, clock.now).actions
        writes += sum(1 for a in actions if a.__class__.__name__ != "Emit")
        run.apply(actions, JOB, pods=1000)  # WritesDeferred would fail the test
    assert [s["metadata"]["name"] for s in emulator.objects(SERVICES, "ml")] == ["pt"]
    assert 3 < writes <= BURST  # Service, records, stamps: a start spends a part of the burst
    # A whole-job restart deletes every pod at once: a thousand writes, within the budget.
    assert all(run.writes.take(JOB, 1000, clock.now) for _ in range(1000))
