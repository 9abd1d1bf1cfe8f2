"""Goodput: where a reporting job's time went by phase (pending, starting, training,
restarting, stalled), the steps its restarts lost, and its effective-training-time ratio, on a
played clock, as recorded with the job's status and shown by `trainhook describe`."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.decide import decide
from webhook.sweeper.job.goodput import Goodput
from webhook.sweeper.job.state import format_time
from webhook.sweeper.report.describe import JobObjects, describe

from .helpers import NOW, state_of, status_of

T0 = NOW


def job() -> list[dict[str, Any]]:
    annotations = {
        contract.REPORT_PROGRESS: "true",
        contract.STALL_TIMEOUT: "10m",
        contract.FAILURE_POLICY: "stalled -> restart-job max=3",
    }
    return stamped(
        statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41"),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=annotations),
    )


def pods(workloads: list[dict[str, Any]], started: datetime | None) -> list[dict[str, Any]]:
    master, workers = workloads
    made = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    for obj in made:
        obj["metadata"]["creationTimestamp"] = format_time(T0)
        status = obj["status"]["containerStatuses"][0]
        if started is None:
            obj["status"]["phase"] = "Pending"
            status["state"] = {"waiting": {"reason": "ContainerCreating"}}
        else:
            status["state"] = {"running": {"startedAt": format_time(started)}}
    return made


def report(workloads: list[dict[str, Any]], step: int, at: datetime, **extra: Any) -> None:
    value = {"step": step, "updated": format_time(at), "stepSince": format_time(at), **extra}
    for workload in workloads:
        workload["metadata"]["annotations"][contract.PROGRESS] = json.dumps(value)


def step(workloads: list[dict[str, Any]], objs: list[dict[str, Any]], now: datetime) -> Goodput:
    """Decide at `now`, and keep what the decision records, as the API server would."""
    status = status_of(decide(state_of("pt", workloads, objs), now).actions)
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    ledger = Goodput.read(status)
    assert ledger is not None
    return ledger


def test_a_jobs_time_is_counted_by_phase_and_a_stall_is_taken_from_training() -> None:
    workloads = job()
    assert step(workloads, pods(workloads, None), T0).phase == "pending"
    began = T0 + timedelta(minutes=5)
    ledger = step(workloads, pods(workloads, began), began)
    assert (ledger.phase, ledger.seconds) == ("starting", {"pending": 300})
    report(workloads, 10, T0 + timedelta(minutes=7))
    ledger = step(workloads, pods(workloads, began), T0 + timedelta(minutes=7))
    assert (ledger.phase, ledger.seconds) == ("training", {"pending": 300, "starting": 120})
    report(workloads, 500, T0 + timedelta(minutes=30))
    stalled_at = T0 + timedelta(minutes=40)  # ten minutes without a new step
    ledger = step(workloads, pods(workloads, began), stalled_at)
    assert ledger.phase == "restarting"
    assert ledger.seconds == {"pending": 300, "starting": 120, "training": 1380, "stalled": 600}
    assert ledger.ratio(stalled_at, 500) == 1380 / 2400


def test_steps_lost_to_restarts_are_counted_once_and_taken_from_the_ratio() -> None:
    ledger = Goodput("training", T0, {"training": 1000})
    lost = {"at": format_time(T0), "reachedStep": 500, "checkpointStep": 400, "lostSteps": 100}
    ledger = ledger.with_restart(lost).with_restart(lost)
    assert ledger.lost_steps == 100
    # 1000 s of training reached 500 steps and lost 100: 200 s of it were redone
    assert ledger.ratio(T0, 400) == 800 / 1000


def test_describe_shows_the_time_by_phase_the_lost_steps_and_the_goodput() -> None:
    workloads = job()
    ledger = Goodput(
        "training",
        T0 - timedelta(minutes=20),
        {"pending": 600, "starting": 300, "training": 6000, "restarting": 300, "stalled": 600},
        lost_steps=50,
        lost_at="2025-01-01T00:00:00Z",
    )
    status = {"state": "Running", "restarts": 1, "goodput": ledger.recorded()}
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    report(workloads, 950, T0)
    objs = pods(workloads, T0 - timedelta(hours=3))
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(objs), None, None, ()), T0)
    (line,) = [x for x in text.splitlines() if x.startswith("Goodput:")]
    assert line == (
        "Goodput:      76% of 2h (pending 10m, starting 5m, training 2h, restarting 5m, "
        "stalled 10m; 50 steps lost to restarts)"
    )


def test_the_sweepers_metrics_show_each_reporting_jobs_goodput() -> None:
    from prometheus_client import generate_latest

    from webhook.sweeper.serving.goodput import GoodputFigures, recorded_ledger
    from webhook.sweeper.serving.metrics import SweeperMetrics

    workloads = job()
    ledger = Goodput("training", T0 - timedelta(minutes=10), {"pending": 60, "training": 540})
    status = {"state": "Running", "goodput": ledger.recorded()}
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    report(workloads, 100, T0)
    found, step = recorded_ledger(
        [w["metadata"]["annotations"][contract.STATUS] for w in workloads],
        [w["metadata"]["annotations"] for w in workloads],
    )
    assert (found, step) == (ledger, 100)
    metrics = SweeperMetrics(lambda: True)
    figures = GoodputFigures(clock=lambda: T0.timestamp())
    metrics.registry.register(figures)
    figures.seen(("ml", "pt"), found, step)
    text = generate_latest(metrics.registry).decode()
    for line in (
        'trainhook_job_phase_seconds{job="pt",namespace="ml",phase="pending"} 60.0',
        'trainhook_job_phase_seconds{job="pt",namespace="ml",phase="training"} 1140.0',
        'trainhook_job_phase_seconds{job="pt",namespace="ml",phase="stalled"} 0.0',
        'trainhook_job_lost_steps{job="pt",namespace="ml"} 0.0',
        'trainhook_job_goodput_ratio{job="pt",namespace="ml"} 0.95',
    ):
        assert line in text.splitlines()
    figures.seen(("ml", "pt"), None, None)
    assert 'job="pt"' not in generate_latest(metrics.registry).decode()
