"""Operators' own example jobs, migrated by `trainhook migrate`, form their job with the real
framework client: the training-operator's PyTorchJob and Volcano's pytorch-plugin Job
(torch.distributed, gloo), and the training-operator's TFJob (MultiWorkerMirroredStrategy).
Only the container's command and name change (the examples' images are not here); everything
else is what migrate wrote.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core.migrate import migrate
from webhook.core.render import render

from .harness import run_job
from .workloads import reports

pytestmark = pytest.mark.e2e

CORPUS = Path(__file__).parent.parent / "corpus"
CLIENTS = Path(__file__).parent / "clients"
RANK_SCRIPT = str(Path(__file__).with_name("allreduce_rank.py"))


def migrated(name: str, command: list[str], container_name: str) -> list[dict[str, Any]]:
    """The file's job as migrate writes it, its one container running `command` under one name
    (the harness starts one named container in every pod)."""
    documents = [d for d in yaml.safe_load_all((CORPUS / name).read_text()) if d]
    (migration,) = migrate(documents)
    for workload in migration.objects:
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        container["command"] = command
        container["name"] = container_name
        container.pop("args", None)
    return migration.objects


@pytest.mark.parametrize(
    ("name", "namespace", "pods"),
    [
        (
            "training-operator/pytorchjob-simple.yaml",
            "kubeflow",
            ["pytorch-simple-master-0", "pytorch-simple-worker-0"],
        ),
        (
            "volcano/job-pytorch-plugin.yaml",
            "default",
            ["pytorch-job-master-0", "pytorch-job-worker-0", "pytorch-job-worker-1"],
        ),
    ],
)
def test_an_operators_pytorch_example_all_reduces_with_torch(
    name: str, namespace: str, pods: list[str], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    rendered = render(migrated(name, [sys.executable, RANK_SCRIPT, str(results)], "pytorch"))
    assert [p.name for p in rendered] == pods

    run_job(tmp_path, [p.pod for p in rendered], "pytorch", namespace=namespace, timeout=120)

    found = [json.loads(p.read_text()) for p in sorted(results.glob("*.json"))]
    world = len(pods)
    assert sorted(r["rank"] for r in found) == list(range(world))
    assert {r["world_size"] for r in found} == {world}
    assert {r["sum"] for r in found} == {world * (world + 1) // 2}


def test_the_training_operators_tfjob_example_forms_one_strategy(tmp_path: Path) -> None:
    results = tmp_path / "results"
    results.mkdir()
    client = [sys.executable, str(CLIENTS / "tf_allreduce.py"), str(results)]
    pods = render(migrated("training-operator/tfjob-simple.yaml", client, "tensorflow"))

    run_job(tmp_path, [p.pod for p in pods], "tensorflow", namespace="kubeflow", timeout=180)

    found = reports(results)
    assert sorted(tuple(r["task"]) for r in found) == [("worker", 0), ("worker", 1)]
    hosts = [f"tfjob-simple-worker-{i}.tfjob-simple.kubeflow.svc:2222" for i in range(2)]
    assert all(r["cluster"] == {"worker": hosts} for r in found)
    assert {r["replicas"] for r in found} == {2}
    assert {r["sum"] for r in found} == {2 + 3}
