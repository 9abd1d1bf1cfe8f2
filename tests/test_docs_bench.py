"""docs/performance.md's Results tables are the bench's own rendering of the figures it keeps in
docs/bench-results.json: a figure is written once, by the run, and no table drifts from it."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from bench.burst import Burst
from bench.inprocess import Growth, HandlerCost
from bench.pod_events import EventCost, events_table
from bench.restarts import RestartCost
from bench.restarts import table as restarts_table
from bench.run import Goal, burst_table, goals_table, growth_table, handler_table, memory_table
from bench.served import Memory
from bench.shards import ShardRun
from bench.shards import table as shards_table
from bench.sizes import JobSize
from bench.sizes import table as sizes_table
from bench.sweeper import SweeperCost, sweeper_table
from bench.sweeper_events import ProcessEventCost, process_events_table
from bench.sweeper_process import ProcessMemory, process_table

REPO = Path(__file__).resolve().parent.parent
PERFORMANCE = (REPO / "docs" / "performance.md").read_text()
FIGURES: dict[str, Any] = json.loads((REPO / "docs" / "bench-results.json").read_text())


def build(cls: Any, row: Mapping[str, Any]) -> Any:
    """The bench's record of one row, from its JSON (properties it derives are not stored)."""
    names = {field.name for field in dataclasses.fields(cls)}
    return cls(**{key: value for key, value in row.items() if key in names})


def rows(cls: Any, key: str) -> list[Any]:
    return [build(cls, row) for row in FIGURES[key]]


TABLES: dict[str, Callable[[], str]] = {
    "1. handler cost": lambda: handler_table(rows(HandlerCost, "handler")),
    "2b. burst": lambda: burst_table(
        [(build(Burst, ours), build(Burst, null)) for ours, null in FIGURES["bursts"]]
    ),
    "3. growth": lambda: growth_table(rows(Growth, "growth")),
    "4. memory": lambda: memory_table(rows(Memory, "memory")),
    "6. job sizes": lambda: sizes_table(rows(JobSize, "sizes")),
    "7. sweeper": lambda: sweeper_table(rows(SweeperCost, "sweeper")),
    "8. sweep process": lambda: process_table(rows(ProcessMemory, "sweep_process")),
    "9. pod events": lambda: events_table(rows(EventCost, "pod_events")),
    "9b. sweep events": lambda: process_events_table(rows(ProcessEventCost, "sweep_events")),
    "10. restarts": lambda: restarts_table(rows(RestartCost, "restarts")),
    "11. goals": lambda: goals_table(rows(Goal, "goals")),
    "12. shards": lambda: shards_table(build(ShardRun, FIGURES["shards"])),
}


@pytest.mark.parametrize("section", TABLES)
def test_the_results_table_is_the_bench_rendering_of_the_recorded_figures(section: str) -> None:
    rendered = TABLES[section]()
    assert rendered in PERFORMANCE, f"section {section}, rendered from the figures:\n{rendered}"


def test_the_results_name_the_run_the_figures_come_from() -> None:
    results = PERFORMANCE.split("## Results", 1)[1]
    assert f"commit `{FIGURES['commit']}`" in results.split("###", 1)[0]
