"""Real torch.distributed (CPU, gloo) rendezvous with nothing but the env Trainhook renders.

Every pod of a job runs as its own process tree, under its own hostname, reaching its peers by
the cluster DNS names in its env (each pod's own 127.0.0.x in its own network namespace); each
process all-reduces its rank.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from webhook.core import contract
from webhook.core.render import RenderedPod, render

from .harness import pod_hostname
from .harness import run_job as run_pods

pytestmark = pytest.mark.e2e

RANK_SCRIPT = str(Path(__file__).with_name("allreduce_rank.py"))
PYTHON = sys.executable
TORCHRUN = [PYTHON, "-m", "torch.distributed.run"]
NAMESPACE = "train"
JOB_DEADLINE_S = 120.0


@pytest.fixture(scope="module", autouse=True)
def torch_installed() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.fail("torch is not installed: `make e2e` installs torch==2.13.0 before these tests")


def statefulset(
    name: str,
    *,
    job: str,
    role: str,
    replicas: int,
    annotations: dict[str, str],
    command: list[str],
    namespace: str = NAMESPACE,
) -> dict[str, Any]:
    labels = {contract.FRAMEWORK: "pytorch", contract.JOB: job, contract.ROLE: role}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {
            "replicas": replicas,
            "serviceName": job,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **labels}},
                "spec": {
                    "restartPolicy": "Always",
                    "containers": [{"name": "pytorch", "image": "pytorch", "command": command}],
                },
            },
        },
    }


def script_constant(name: str) -> Any:
    """A constant of the rank script, read without importing torch."""
    tree = ast.parse(Path(RANK_SCRIPT).read_text())
    for node in tree.body:
        targets = [getattr(target, "id", None) for target in getattr(node, "targets", [])]
        if isinstance(node, ast.Assign) and targets == [name]:
            return ast.literal_eval(node.value)
    raise KeyError(name)


def run_job(
    pods: Sequence[RenderedPod],
    tmp_path: Path,
    namespace: str = NAMESPACE,
    configmaps: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    manifests = [pod.pod for pod in pods]
    run_pods(
        tmp_path,
        manifests,
        "pytorch",
        namespace=namespace,
        timeout=JOB_DEADLINE_S,
        configmaps=configmaps,
    )


def reports_by_pod(results: Path) -> dict[str, list[dict[str, Any]]]:
    by_pod: dict[str, list[dict[str, Any]]] = {}
    for path in sorted(results.glob("*.json")):
        report = json.loads(path.read_text())
        by_pod.setdefault(report["hostname"], []).append(report)
    return by_pod


def assert_one_world(by_pod: dict[str, list[dict[str, Any]]], world_size: int) -> None:
    """Every process joined the same group of `world_size` and saw the same, correct sum."""
    reports = [report for reports in by_pod.values() for report in reports]
    assert sorted(report["rank"] for report in reports) == list(range(world_size))
    assert {report["world_size"] for report in reports} == {world_size}
    assert {report["sum"] for report in reports} == {world_size * (world_size + 1) // 2}
    assert all(report["gathered"] == list(range(world_size)) for report in reports)


@pytest.mark.parametrize("launcher", [[PYTHON], TORCHRUN], ids=["python", "torchrun"])
def test_pytorch_master_and_two_workers_rendezvous_and_all_reduce_with_the_rendered_env(
    launcher: list[str], tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    command = [*launcher, RANK_SCRIPT, str(results)]
    annotations: dict[str, str] = {}
    pods = render(
        [
            statefulset(
                "pt-master",
                job="pt",
                role="master",
                replicas=1,
                annotations=annotations,
                command=command,
            ),
            statefulset(
                "pt-worker",
                job="pt",
                role="worker",
                replicas=2,
                annotations=annotations,
                command=command,
            ),
        ]
    )
    assert sorted((pod.role, pod.index, pod.rank) for pod in pods) == [
        ("master", 0, 0),
        ("worker", 0, 1),
        ("worker", 1, 2),
    ]
    assert {pod.env["MASTER_ADDR"] for pod in pods} == {f"pt-master-0.pt.{NAMESPACE}.svc"}

    run_job(pods, tmp_path)

    by_pod = reports_by_pod(results)
    assert sorted(by_pod) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]
    assert_one_world(by_pod, world_size=3)
    for pod in pods:
        [report] = by_pod[pod_hostname(pod.pod)]
        assert (report["rank"], report["world_size"]) == (
            int(pod.env["RANK"]),
            int(pod.env["WORLD_SIZE"]),
        )


def test_four_torchrun_pods_with_two_processes_each_form_one_world_of_eight(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    pods = render(
        [
            statefulset(
                "ddp",
                job="ddp",
                role="worker",
                replicas=4,
                annotations={contract.NPROC_PER_NODE: "2"},
                command=[*TORCHRUN, RANK_SCRIPT, str(results)],
            )
        ]
    )
    assert sorted(pod.rank for pod in pods) == [0, 1, 2, 3]

    run_job(pods, tmp_path)

    by_pod = reports_by_pod(results)
    assert sorted(by_pod) == ["ddp-0", "ddp-1", "ddp-2", "ddp-3"]
    assert_one_world(by_pod, world_size=8)
    for pod in pods:
        reports = by_pod[pod_hostname(pod.pod)]
        first = int(pod.env["RANK"])
        assert sorted(report["rank"] for report in reports) == [first, first + 1]
        assert {report["world_size"] for report in reports} == {int(pod.env["WORLD_SIZE"])}
        assert {report["env"]["GROUP_RANK"] for report in reports} == {pod.env["NODE_RANK"]}
        assert sorted(report["env"]["LOCAL_RANK"] for report in reports) == ["0", "1"]


def test_a_job_past_the_inline_bound_forms_one_world_and_reads_its_lists_from_the_configmap(
    tmp_path: Path,
) -> None:
    # Long names (a 60-letter namespace, StatefulSets of 48, within what their controller's
    # revision label allows) push 17 pods' host names past the 2,560-byte bound.
    job, namespace = "pt-" + "j" * 38, "ns-" + "n" * 57
    results = tmp_path / "results"
    results.mkdir()
    command = [PYTHON, RANK_SCRIPT, str(results)]
    documents = [
        statefulset(
            f"{job}-{role}",
            job=job,
            role=role,
            replicas=replicas,
            annotations={},
            command=command,
            namespace=namespace,
        )
        for role, replicas in (("master", 1), ("worker", 16))
    ]
    pods = render(documents)
    names = {pod.peers.name for pod in pods if pod.peers is not None}
    assert len(names) == 1 and all(pod.peers is not None for pod in pods)
    files = pods[0].peers
    assert files is not None
    assert not any(name.endswith("_HOSTS") for pod in pods for name in pod.env)
    contract = (Path(__file__).parents[2] / "docs" / "contract.md").read_text().splitlines()
    assert script_constant("LISTS") in contract  # the script runs docs/contract.md's line

    run_job(pods, tmp_path / "cluster", namespace, configmaps={files.name: files.data})

    by_pod = reports_by_pod(results)
    assert len(by_pod) == 17
    assert_one_world(by_pod, world_size=17)
    workers = ",".join(f"{job}-worker-{i}.{job}.{namespace}.svc" for i in range(16))
    for [report] in by_pod.values():
        assert report["hosts"] == {
            "TRAINHOOK_MASTER_HOSTS": f"{job}-master-0.{job}.{namespace}.svc",
            "TRAINHOOK_WORKER_HOSTS": workers,
        }
