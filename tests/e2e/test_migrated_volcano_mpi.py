"""Volcano's own MPI example without the mpi plugin (tests/corpus/volcano/job-mpi-ssh-svc.yaml:
the ssh and svc plugins, tasks mpimaster and mpiworker), migrated by `trainhook migrate` and run
unchanged: the launcher's script reads `/etc/volcano/mpiworker.host`, starts its sshd and runs
`mpiexec --host` over SSH with the job's keys. What the image would hold (mpi_hello_world) is
ours: an all-reduce writing each rank's report."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from webhook.core.migrate import migrate
from webhook.core.render import render

from .harness import run_job
from .test_mpi import IMAGE_ENV
from .workloads import NAMESPACE, open_mpi_program, reports, ssh_secret

pytestmark = pytest.mark.e2e

CORPUS = Path(__file__).parent.parent / "corpus"


def test_volcanos_ssh_and_svc_mpi_example_runs_its_own_command_once_migrated(
    tmp_path: Path,
) -> None:
    text = (CORPUS / "volcano" / "job-mpi-ssh-svc.yaml").read_text()
    (migration,) = migrate([d for d in yaml.safe_load_all(text) if d])
    for workload in migration.objects:
        workload["metadata"]["namespace"] = NAMESPACE
        # The harness starts one container of one name in every pod; its command is as written.
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        container["name"] = "mpi"
    results = tmp_path / "results"
    results.mkdir()
    hello = f"#!/bin/sh\nexec {open_mpi_program(tmp_path)} {results}\n"
    pods = render(migration.objects)
    assert [p.name for p in pods] == [
        "lm-mpi-job-mpimaster-0",
        "lm-mpi-job-mpiworker-0",
        "lm-mpi-job-mpiworker-1",
    ]

    run_job(
        tmp_path,
        [pod.pod for pod in pods],
        "mpi",
        namespace=NAMESPACE,
        timeout=120,
        finishers=["lm-mpi-job-mpimaster-0"],
        image_env=IMAGE_ENV,
        secrets={"lm-mpi-job-ssh": ssh_secret("lm-mpi-job")},
        image_files={"mpi_hello_world": hello},
    )

    found = reports(results)
    assert [report["rank"] for report in found] == [0, 1]
    assert {report["sum"] for report in found} == {1 + 2}
    assert sorted(report["host"] for report in found) == [
        "lm-mpi-job-mpiworker-0",
        "lm-mpi-job-mpiworker-1",
    ]
