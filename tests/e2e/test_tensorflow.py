"""TensorFlow's own cluster resolver and MultiWorkerMirroredStrategy from the rendered TF_CONFIG."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from webhook.core.render import render

from .harness import run_job
from .workloads import NAMESPACE, reports, statefulset

pytestmark = pytest.mark.e2e

CLIENT = str(Path(__file__).with_name("clients") / "tf_allreduce.py")


def test_a_chief_and_two_tensorflow_workers_form_one_strategy_and_all_reduce(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    command = [sys.executable, CLIENT, str(results)]
    pods = render(
        [
            statefulset(
                "tf-chief",
                framework="tensorflow",
                job="tf",
                role="chief",
                replicas=1,
                command=command,
            ),
            statefulset(
                "tf-worker",
                framework="tensorflow",
                job="tf",
                role="worker",
                replicas=2,
                command=command,
            ),
        ]
    )

    run_job(tmp_path, [pod.pod for pod in pods], "tensorflow", namespace=NAMESPACE, timeout=180)

    found = reports(results)
    assert sorted(tuple(report["task"]) for report in found) == [
        ("chief", 0),
        ("worker", 0),
        ("worker", 1),
    ]
    hosts = [f"tf-worker-{i}.tf.{NAMESPACE}.svc:2222" for i in range(2)]
    assert all(
        report["cluster"] == {"chief": [f"tf-chief-0.tf.{NAMESPACE}.svc:2222"], "worker": hosts}
        for report in found
    )
    assert {report["replicas"] for report in found} == {3}
    assert {report["sum"] for report in found} == {1 + 2 + 3}
