"""Jobs written for Volcano and for paddle-operator run their own commands unchanged on Trainhook
jobs with `trainhook.io/compat`: the manifests are the projects' own (tests/e2e/upstream/), each
task or replica spec becomes a labelled StatefulSet, its container's command and args as they are.
What the images would hold (the MPI program, the training script) is ours.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core import contract
from webhook.core.render import render

from .harness import run_job
from .test_mpi import IMAGE_ENV
from .workloads import NAMESPACE, open_mpi_program, reports, ssh_secret, statefulset

pytestmark = pytest.mark.e2e

UPSTREAM = Path(__file__).with_name("upstream")
PADDLE_CLIENT = Path(__file__).with_name("clients") / "paddle_allreduce.py"


def upstream(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((UPSTREAM / name).read_text())
    return document


def as_statefulset(
    name: str, spec: dict[str, Any], *, framework: str, job: str, role: str, **compat: str
) -> dict[str, Any]:
    """One task or replica spec of an upstream job as a labelled StatefulSet of the same
    replicas, its container's command and args unchanged."""
    container = spec["template"]["spec"]["containers"][0]
    workload = statefulset(
        name,
        framework=framework,
        job=job,
        role=role,
        replicas=spec["replicas"],
        command=container["command"],
        annotations=dict(compat),
    )
    if "args" in container:
        workload["spec"]["template"]["spec"]["containers"][0]["args"] = container["args"]
    return workload


def test_volcanos_mpi_plugin_example_runs_its_own_mpiexec_of_mpi_host_unchanged(
    tmp_path: Path,
) -> None:
    job = upstream("volcano-mpi-plugin.yaml")
    tasks = {task["name"]: task for task in job["spec"]["tasks"]}
    # The image: mpi_hello_world in its working directory, here our all-reduce writing its
    # report.
    results = tmp_path / "results"
    results.mkdir()
    program = open_mpi_program(tmp_path)
    hello = f"#!/bin/sh\nexec {program} {results}\n"
    compat = {contract.COMPAT: "volcano"}
    name = "lm-mpi-job"
    pods = render(
        [
            as_statefulset(
                f"{name}-mpimaster",
                tasks["mpimaster"],
                framework="mpi",
                job=name,
                role="launcher",
                **compat,
            ),
            as_statefulset(
                f"{name}-mpiworker",
                tasks["mpiworker"],
                framework="mpi",
                job=name,
                role="worker",
                **compat,
            ),
        ]
    )
    launcher = pods[0]
    assert launcher.env["MPI_HOST"] == (
        "lm-mpi-job-mpiworker-0.lm-mpi-job.train.svc,lm-mpi-job-mpiworker-1.lm-mpi-job.train.svc"
    )

    run_job(
        tmp_path,
        [pod.pod for pod in pods],
        "mpi",
        namespace=NAMESPACE,
        timeout=120,
        finishers=[f"{name}-mpimaster-0"],
        image_env=IMAGE_ENV,
        secrets={f"{name}-ssh": ssh_secret(name)},
        image_files={"mpi_hello_world": hello},
    )

    found = reports(results)
    assert [report["rank"] for report in found] == [0, 1]
    assert {report["sum"] for report in found} == {1 + 2}
    assert sorted(report["host"] for report in found) == [
        "lm-mpi-job-mpiworker-0",
        "lm-mpi-job-mpiworker-1",
    ]


def train_fleet(results: Path) -> str:
    """The image's train_fleet.py: our collective all-reduce, which also records what Paddle's
    older launcher checks of the paddle-operator's variables."""
    return (
        "import json, os, runpy, sys\n"
        "from paddle.distributed.fleet import cloud_utils\n"
        "names = ('PADDLE_TRAINERS', 'TRAINER_PORTS_NUM', 'TRAINING_ROLE', 'PADDLE_TRAINER_ID')\n"
        "seen = {name: os.environ.get(name) for name in names}\n"
        "seen['use_paddlecloud'] = cloud_utils.use_paddlecloud()\n"
        f"path = os.path.join({str(results)!r}, 'env-' + seen['PADDLE_TRAINER_ID'] + '.env')\n"
        "open(path, 'w').write(json.dumps(seen))\n"
        f"sys.argv = [{str(PADDLE_CLIENT)!r}, {str(results)!r}]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )


def test_paddle_operators_resnet_example_launches_its_train_fleet_script_unchanged(
    tmp_path: Path,
) -> None:
    job = upstream("paddle-operator-resnet.yaml")
    results = tmp_path / "results"
    results.mkdir()
    name = job["metadata"]["name"]
    worker = as_statefulset(
        f"{name}-worker",
        job["spec"]["worker"],
        framework="paddle",
        job=name,
        role="worker",
        **{contract.COMPAT: "paddle-operator"},
    )
    # Its container runs `python -m paddle.distributed.launch train_fleet.py`: `python` is the
    # image's, here the one with Paddle installed.
    container = worker["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python"]
    pods = render([worker])

    run_job(
        tmp_path,
        [pod.pod for pod in pods],
        "paddle",
        namespace=NAMESPACE,
        timeout=180,
        image_env={"PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"},
        image_files={"train_fleet.py": train_fleet(results)},
    )

    found = reports(results)
    assert [report["rank"] for report in found] == [0, 1]
    assert {report["sum"] for report in found} == {1 + 2}
    hosts = f"{name}-worker-0.{name}.train.svc,{name}-worker-1.{name}.train.svc"
    seen = [json.loads(path.read_text()) for path in sorted(results.glob("env-*.env"))]
    assert seen == [
        {
            "PADDLE_TRAINERS": hosts,
            "TRAINER_PORTS_NUM": "20",
            "TRAINING_ROLE": "TRAINER",
            "PADDLE_TRAINER_ID": str(index),
            "use_paddlecloud": True,
        }
        for index in (0, 1)
    ]
