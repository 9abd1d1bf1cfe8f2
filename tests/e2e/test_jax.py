"""jax.distributed.initialize from the rendered env, and an allgather across the processes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from webhook.core.render import render

from .harness import run_job
from .workloads import NAMESPACE, reports, statefulset

pytestmark = pytest.mark.e2e

CLIENT = str(Path(__file__).with_name("clients") / "jax_allgather.py")


def test_three_jax_pods_initialize_one_distributed_job_and_allgather(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    pods = render(
        [
            statefulset(
                "jx",
                framework="jax",
                job="jx",
                role="worker",
                replicas=3,
                command=[sys.executable, CLIENT, str(results)],
            )
        ]
    )

    run_job(tmp_path, [pod.pod for pod in pods], "jax", namespace=NAMESPACE, timeout=120)

    found = reports(results)
    assert [report["process_index"] for report in found] == [0, 1, 2]
    assert {report["process_count"] for report in found} == {3}
    assert all(report["gathered"] == [1, 11, 21] for report in found)
