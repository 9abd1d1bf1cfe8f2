"""mpirun across ssh with the rendered env, hostfile and the sweeper's keys: Open MPI 4 and 5.

Workers run sshd (Debian's OpenSSH) in their own pods; the launcher runs a plain `mpirun` of a
program that all-reduces. Every rank must run on a worker, as many as the hostfile's slots.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from webhook.core import contract
from webhook.core.render import render
from webhook.sweeper import sshkeys

from .harness import run_job
from .workloads import NAMESPACE, reports, statefulset

pytestmark = pytest.mark.e2e

PROGRAM = Path(__file__).with_name("clients") / "mpi_allreduce.c"
VENV_BIN = str(Path(sys.executable).parent)
SSHD = ["sh", "-c", "mkdir -p /run/sshd && exec /usr/sbin/sshd -D -e"]
# The image's settings, not Trainhook's: run as root, and use the pods' eth0 although its
# addresses are in 127.0.0.0/8, which Open MPI leaves out by default.
IMAGE_ENV = {
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "OMPI_MCA_btl_tcp_if_include": "eth0",
    "OMPI_MCA_oob_tcp_if_include": "eth0",
    "PRTE_MCA_prte_if_include": "eth0",
}
OPEN_MPI = {
    # name: (the bin directory holding mpicc and mpirun, mpirun's own arguments)
    "open-mpi-4": ("/usr/bin", []),
    "open-mpi-5": (VENV_BIN, ["--prefix", str(Path(VENV_BIN).parent)]),
}


def ssh_secret(job: str) -> dict[str, str]:
    """The files of the Secret the sweeper creates for an MPI job."""
    keys = sshkeys.new_key_pair(f"{job}@trainhook")
    config = sshkeys.ssh_config(sshkeys.host_patterns(NAMESPACE, [job]), 22)
    return {
        sshkeys.PRIVATE_KEY: keys.private,
        sshkeys.PUBLIC_KEY: keys.public,
        sshkeys.AUTHORIZED_KEYS: keys.public,
        sshkeys.CONFIG: config,
    }


@pytest.mark.parametrize("mpi", sorted(OPEN_MPI))
def test_a_plain_mpirun_on_the_launcher_runs_every_slot_on_the_workers_and_all_reduces(
    mpi: str, tmp_path: Path
) -> None:
    bin_dir, mpirun_args = OPEN_MPI[mpi]
    if (
        not os.access(Path(bin_dir) / "mpirun", os.X_OK)
        or shutil.which("sshd", path="/usr/sbin") is None
    ):
        pytest.fail(f"{mpi} or sshd is missing: `make e2e` installs them")
    program = tmp_path / "allreduce"
    subprocess.run([f"{bin_dir}/mpicc", str(PROGRAM), "-o", str(program)], check=True)
    results = tmp_path / "results"
    results.mkdir()
    job = "mpi"
    pods = render(
        [
            statefulset(
                "mpi-launcher",
                framework="mpi",
                job=job,
                role="launcher",
                replicas=1,
                command=[f"{bin_dir}/mpirun", *mpirun_args, str(program), str(results)],
            ),
            statefulset(
                "mpi-worker",
                framework="mpi",
                job=job,
                role="worker",
                replicas=2,
                command=SSHD,
                annotations={contract.NPROC_PER_NODE: "2"},
            ),
        ]
    )
    image_env = {**IMAGE_ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}"}

    run_job(
        tmp_path,
        [pod.pod for pod in pods],
        "mpi",
        namespace=NAMESPACE,
        timeout=120,
        finishers=["mpi-launcher-0"],
        image_env=image_env,
        secrets={f"{job}-ssh": ssh_secret(job)},
    )

    found = reports(results)
    assert sorted(report["rank"] for report in found) == [0, 1, 2, 3]
    assert {report["size"] for report in found} == {4}
    assert {report["sum"] for report in found} == {1 + 2 + 3 + 4}
    assert sorted(report["host"] for report in found) == [
        "mpi-worker-0",
        "mpi-worker-0",
        "mpi-worker-1",
        "mpi-worker-1",
    ]
