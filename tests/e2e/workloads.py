"""Labelled workloads for the e2e jobs, and the reports their processes write."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

from webhook.core import contract
from webhook.sweeper import sshkeys

NAMESPACE = "train"
MPI_PROGRAM = Path(__file__).with_name("clients") / "mpi_allreduce.c"


def statefulset(
    name: str,
    *,
    framework: str,
    job: str,
    role: str,
    replicas: int,
    command: list[str],
    annotations: dict[str, str] | None = None,
    container: str | None = None,
    resources: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A StatefulSet of one role of a job, its container named after the framework."""
    labels = {contract.FRAMEWORK: framework, contract.JOB: job, contract.ROLE: role}
    spec: dict[str, Any] = {"name": container or framework, "image": framework, "command": command}
    if resources:
        spec["resources"] = resources
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": labels,
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "replicas": replicas,
            "serviceName": job,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, **labels}},
                "spec": {"restartPolicy": "Always", "containers": [spec]},
            },
        },
    }


def reports(results: Path) -> list[dict[str, Any]]:
    """Every report the job's processes wrote, in file name order."""
    return [json.loads(path.read_text()) for path in sorted(results.glob("*.json"))]


def ssh_secret(
    job: str, port: int = 22, namespace: str = NAMESPACE, service: str | None = None
) -> dict[str, str]:
    """The files of the Secret the sweeper creates for an MPI job."""
    body = sshkeys.secret_body(
        namespace=namespace,
        name=f"{job}-ssh",
        labels={},
        owners=[],
        config=sshkeys.ssh_config(sshkeys.host_patterns(namespace, [service or job]), port),
        keys=sshkeys.new_key_pair(f"{job}@trainhook"),
    )
    return {name: base64.b64decode(value).decode() for name, value in body["data"].items()}


def open_mpi_program(folder: Path) -> Path:
    """clients/mpi_allreduce.c built by Open MPI's mpicc into `folder`: what the examples'
    images run."""
    program = folder / "allreduce"
    subprocess.run(["/usr/bin/mpicc.openmpi", str(MPI_PROGRAM), "-o", str(program)], check=True)
    return program
