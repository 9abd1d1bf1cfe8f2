"""paddle.distributed.launch forms a collective job from the rendered env and all-reduces."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from webhook.core import contract
from webhook.core.render import render

from .harness import run_job
from .workloads import NAMESPACE, reports, statefulset

pytestmark = pytest.mark.e2e

CLIENT = str(Path(__file__).with_name("clients") / "paddle_allreduce.py")
LAUNCH = [sys.executable, "-m", "paddle.distributed.launch"]


def test_three_paddle_workers_launch_one_collective_job_and_all_reduce(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    pods = render(
        [
            statefulset(
                "pd",
                framework="paddle",
                job="pd",
                role="worker",
                replicas=3,
                command=[*LAUNCH, CLIENT, str(results)],
            )
        ]
    )

    run_job(tmp_path, [pod.pod for pod in pods], "paddle", namespace=NAMESPACE, timeout=180)

    found = reports(results)
    assert [report["rank"] for report in found] == [0, 1, 2]
    assert {report["world_size"] for report in found} == {3}
    assert {report["sum"] for report in found} == {1 + 2 + 3}
    assert all(report["gathered"] == [0, 1, 2] for report in found)


def test_two_paddle_pods_of_two_trainers_each_launch_one_collective_job_of_four(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    pods = render(
        [
            statefulset(
                "pd",
                framework="paddle",
                job="pd",
                role="worker",
                replicas=2,
                command=[*LAUNCH, CLIENT, str(results)],
                annotations={contract.NPROC_PER_NODE: "2"},
            )
        ]
    )

    run_job(tmp_path, [pod.pod for pod in pods], "paddle", namespace=NAMESPACE, timeout=180)

    found = reports(results)
    assert [report["rank"] for report in found] == [0, 1, 2, 3]
    assert {report["world_size"] for report in found} == {4}
    assert {report["sum"] for report in found} == {1 + 2 + 3 + 4}
    assert all(report["gathered"] == [0, 1, 2, 3] for report in found)
