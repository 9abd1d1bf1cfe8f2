"""The chart's Grafana dashboard: a ConfigMap Grafana's sidecar finds, and every query of it
checked by promtool (`promtool test rules`) against series the sweeper's own /metrics exposes.

The input series are the sweeper's exposition, as its collectors produce it for one job, played
over an hour: a query that names a metric, a label or a phase the code does not expose finds
nothing and fails its test."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tests.chart.rendering import REPO, render
from webhook.sweeper.job.goodput import Goodput
from webhook.sweeper.serving.goodput import GoodputFigures
from webhook.sweeper.serving.health import SweeperHealth
from webhook.sweeper.serving.metrics import StragglerFigures

DASHBOARDS = REPO / "charts" / "trainhook" / "dashboards"
VARIABLES = {"$namespace": ".*", "$job": ".*"}  # the dashboard's "All"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def queries() -> list[str]:
    found = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            found += [target["expr"] for target in panel["targets"]]
    return found


def exposed() -> dict[str, float]:
    """The sweeper's trainhook_* series for one running job that reports its progress."""
    health = SweeperHealth()
    health.job_phase(("ml", "pt"), "Running")
    ledger = Goodput("training", T0 - timedelta(seconds=540), {"pending": 60}, lost_steps=20)
    health.goodput = GoodputFigures(clock=lambda: T0.timestamp())
    health.goodput.seen(("ml", "pt"), ledger, 180)
    registry = CollectorRegistry()
    for collector in health.collectors():
        registry.register(collector)
    registry.register(StragglerFigures(lambda: [(("ml", "pt"), 1)]))  # with --progress-bind
    series = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("trainhook_") and not re.match(r"\S+_(created|bucket)\{?", line):
            name, value = line.rsplit(" ", 1)
            series[name] = float(value)
    return series


def played(name: str, value: float) -> str:
    """An hour of a series, a sample a minute: training and restarts grow, the rest stay."""
    if 'phase="training"' in name and name.startswith("trainhook_job_phase_seconds"):
        return f"{value:g}+60x60"  # a minute of training each minute
    if name.startswith("trainhook_sweeper_job_restarts_total"):
        return "0+1x60"  # a restart a minute
    return f"{value:g}x60"


# What each query finds after the hour (at 60m), for the job above.
JOB = 'job="pt",namespace="ml"'
EXPECTED: dict[str, list[tuple[str, float]]] = {
    'trainhook_job_goodput_ratio{namespace=~".*", job=~".*"}': [
        # 540 s training, 60 s pending; 20 of the 200 steps reached were lost: 54 s redone
        (f"trainhook_job_goodput_ratio{{{JOB}}}", 0.81)
    ],
    'sum by (phase) (trainhook_job_phase_seconds{namespace=~".*", job=~".*"})': [
        ('{phase="pending"}', 60),
        ('{phase="starting"}', 0),
        ('{phase="training"}', 540 + 3600),
        ('{phase="restarting"}', 0),
        ('{phase="stalled"}', 0),
    ],
    "sum(increase(trainhook_job_phase_seconds{phase!='training',namespace=~'.*',job=~'.*'}[1h]))"
    "by(phase)": [
        (f'{{phase="{phase}"}}', 0) for phase in ("pending", "starting", "restarting", "stalled")
    ],
    'trainhook_job_lost_steps{namespace=~".*", job=~".*"}': [
        (f"trainhook_job_lost_steps{{{JOB}}}", 20)
    ],
    "sum by (phase) (trainhook_sweeper_jobs)": [
        (f'{{phase="{phase}"}}', 1 if phase == "Running" else 0)
        for phase in (
            "Pending",
            "Running",
            "Restarting",
            "Suspended",
            "Succeeded",
            "Failed",
            "Invalid",
        )
    ],
    "sum(increase(trainhook_sweeper_job_restarts_total[1h]))": [("{}", 60)],
    'max by (namespace, job) (trainhook_job_stragglers{namespace=~".*", job=~".*"})': [
        (f"{{{JOB}}}", 1)
    ],
}


def test_the_chart_ships_the_dashboard_for_grafanas_sidecar() -> None:
    assert not [
        c
        for c in render().of_kind("ConfigMap")
        if "grafana_dashboard" in (c["metadata"].get("labels") or {})
    ]
    rendered = render({"metrics": {"grafanaDashboards": {"enabled": True, "labels": {"a": "b"}}}})
    (configmap,) = [
        c
        for c in rendered.of_kind("ConfigMap")
        if (c["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"
    ]
    assert configmap["metadata"]["labels"]["a"] == "b"
    shipped = configmap["data"]["trainhook-training-jobs.json"]
    assert json.loads(shipped) == json.loads((DASHBOARDS / "training-jobs.json").read_text())


def test_every_query_of_the_dashboard_is_tested() -> None:
    substituted = []
    for query in queries():
        for variable, value in VARIABLES.items():
            query = query.replace(variable, value)
        substituted.append(query)
    assert sorted(substituted) == sorted(EXPECTED)


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian package prometheus; `make test` installs it)",
)
def test_promtool_finds_what_each_query_should_on_the_sweepers_own_series(tmp_path: Path) -> None:
    series = exposed()
    assert {"trainhook_job_goodput_ratio", "trainhook_job_lost_steps"} <= {
        name.split("{")[0] for name in series
    }
    tests: dict[str, Any] = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {"series": name, "values": played(name, value)}
                    for name, value in sorted(series.items())
                ],
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "60m",
                        "exp_samples": [
                            {"labels": labels, "value": value} for labels, value in found
                        ],
                    }
                    for expr, found in EXPECTED.items()
                ],
            }
        ],
    }
    path = tmp_path / "dashboard-tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
