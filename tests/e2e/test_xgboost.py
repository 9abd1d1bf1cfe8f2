"""XGBoost's RabitTracker (sortby="task") and CommunicatorContext from the rendered env."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from webhook.core.render import render

from .harness import run_job
from .workloads import NAMESPACE, reports, statefulset

pytestmark = pytest.mark.e2e

CLIENT = str(Path(__file__).with_name("clients") / "xgb_allreduce.py")


def test_an_xgboost_master_and_three_workers_get_their_rendered_ranks_and_all_reduce(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    command = [sys.executable, CLIENT, str(results)]
    pods = render(
        [
            statefulset(
                "xgb-master",
                framework="xgboost",
                job="xgb",
                role="master",
                replicas=1,
                command=command,
            ),
            statefulset(
                "xgb-worker",
                framework="xgboost",
                job="xgb",
                role="worker",
                replicas=3,
                command=command,
            ),
        ]
    )
    # The workers start in reverse: the tracker still ranks them by task, not by arrival.
    manifests = [pods[0].pod, *reversed([pod.pod for pod in pods[1:]])]

    run_job(tmp_path, manifests, "xgboost", namespace=NAMESPACE, timeout=120)

    found = reports(results)
    assert [report["rank"] for report in found] == [0, 1, 2, 3]
    assert {report["world_size"] for report in found} == {4}
    assert {report["sum"] for report in found} == {1 + 2 + 3 + 4}
