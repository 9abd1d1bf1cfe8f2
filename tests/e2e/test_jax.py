"""jax.distributed.initialize from the rendered env, and an allgather across the processes.

The client first calls jax.distributed.initialize() with no arguments, which reads
JAX_COORDINATOR_ADDRESS; JAX (0.10.2, the newest release) takes the process count and id only from
a cluster it detects (Slurm, Open MPI, Cloud TPU, an Indexed Job read through the API), never from
JAX_NUM_PROCESSES and JAX_PROCESS_ID, so the client then passes those two, as docs/frameworks.md
tells scripts to. Should a JAX release read them itself, the test says so and the docs can drop
the arguments.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from webhook.core.render import render

from .harness import run_job
from .workloads import NAMESPACE, reports, statefulset

pytestmark = pytest.mark.e2e

CLIENT = str(Path(__file__).with_name("clients") / "jax_allgather.py")


def test_three_jax_pods_join_the_coordinator_jax_reads_itself_and_allgather(tmp_path: Path) -> None:
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
    # No call passed a coordinator: JAX found it in JAX_COORDINATOR_ADDRESS itself.
    assert {report["bare"] for report in found} == {False}, (
        "jax.distributed.initialize() now forms the job from the env alone: "
        "update docs/frameworks.md and docs/contract.md's JAX line"
    )
