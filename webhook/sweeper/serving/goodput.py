"""The jobs' goodput on the sweeper's /metrics: seconds by phase, steps lost to restarts and
the effective-training-time ratio of each reporting job this replica decides on (see
webhook.sweeper.job.goodput), from the ledger its last decision recorded."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from webhook.core import contract
from webhook.core.job.progress import read_summary
from webhook.sweeper.actions import annotations_written
from webhook.sweeper.job.goodput import PHASES, Goodput
from webhook.sweeper.job.state import JobKey

# The metric names the chart's dashboard queries (charts/trainhook/dashboards).
PHASE_SECONDS: Final = "trainhook_job_phase_seconds"
LOST_STEPS: Final = "trainhook_job_lost_steps"
GOODPUT_RATIO: Final = "trainhook_job_goodput_ratio"


def recorded_ledger(
    statuses: Iterable[str | None], progress: Iterable[Mapping[str, str]]
) -> tuple[Goodput | None, int | None]:
    """The goodput ledger among a job's trainhook.io/status values (the newest phase start
    wins), and the step its last progress summary reports."""
    ledgers = []
    for raw in statuses:
        try:
            ledger = Goodput.read(json.loads(raw or "{}"))
        except ValueError:
            continue
        if ledger is not None:
            ledgers.append(ledger)
    summaries = [s for s in (read_summary(a) for a in progress) if s]
    summary = max(summaries, key=lambda s: str(s.get("updated", ""))) if summaries else {}
    step = summary.get("step")
    ledger = max(ledgers, key=lambda g: g.since) if ledgers else None
    return ledger, step if isinstance(step, int) else None


def statuses_written(actions: Iterable[Any]) -> list[str]:
    """The trainhook.io/status values a decision writes."""
    return [
        annotations[contract.STATUS]
        for annotations in annotations_written(actions)
        if isinstance(annotations.get(contract.STATUS), str)
    ]


class GoodputFigures(Collector):
    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._jobs: dict[JobKey, tuple[Goodput, int | None]] = {}

    def seen(self, key: JobKey, ledger: Goodput | None, step: int | None) -> None:
        """The job's ledger as last decided; None forgets the job."""
        with self._lock:
            if ledger is None:
                self._jobs.pop(key, None)
            else:
                self._jobs[key] = (ledger, step)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = datetime.fromtimestamp(self._clock(), UTC)
        seconds = GaugeMetricFamily(
            PHASE_SECONDS,
            "Seconds a reporting job spent in each phase so far: pending, starting, training, "
            "restarting, stalled.",
            labels=["namespace", "job", "phase"],
        )
        lost = GaugeMetricFamily(
            LOST_STEPS,
            "Steps a reporting job reached and lost again to restarts (past its checkpoints).",
            labels=["namespace", "job"],
        )
        ratio = GaugeMetricFamily(
            GOODPUT_RATIO,
            "The effective-training-time ratio: time training, less the time the lost steps "
            "took, over all the time counted (0 to 1).",
            labels=["namespace", "job"],
        )
        with self._lock:
            jobs = list(self._jobs.items())
        for (namespace, job), (ledger, step) in jobs:
            totals = ledger.totals(now)
            for phase in PHASES:
                seconds.add_metric([namespace, job, phase], float(totals[phase]))
            lost.add_metric([namespace, job], float(ledger.lost_steps))
            share = ledger.ratio(now, step)
            if share is not None:
                ratio.add_metric([namespace, job], share)
        yield seconds
        yield lost
        yield ratio
