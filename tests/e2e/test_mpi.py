"""mpirun across ssh with the rendered env, hostfile and the sweeper's keys: Open MPI 4 and 5,
MPICH and Intel MPI, each given its own trainhook.io/mpi-implementation.

Workers run sshd (Debian's OpenSSH) in their own pods; the launcher runs a plain `mpirun` (or
Hydra's `mpiexec`) of a program that all-reduces. Every rank must run on a worker, as many as
the hostfile's slots.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from webhook.core import contract
from webhook.core.render import render

from .harness import run_job
from .workloads import MPI_PROGRAM, NAMESPACE, open_mpi_program, reports, ssh_secret, statefulset

pytestmark = pytest.mark.e2e


VENV_BIN = str(Path(sys.executable).parent)
# Intel MPI's runtime (PyPI impi-rt), in a prefix of its own: its mpirun would replace Open MPI
# 5's in the virtualenv. `make e2e` installs it there.
IMPI = Path(__file__).parents[2] / ".venv-impi"
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


@dataclass(frozen=True)
class MPI:
    compiler: str  # mpicc
    launcher: list[str]  # the launcher's command, before the program
    implementation: str | None  # trainhook.io/mpi-implementation; None: the default
    bin_dir: str = "/usr/bin"  # put first on every pod's PATH
    image_env: dict[str, str] = field(default_factory=dict)


MPIS = {
    "open-mpi-4": MPI("/usr/bin/mpicc.openmpi", ["/usr/bin/mpirun.openmpi"], None),
    "open-mpi-5": MPI(
        f"{VENV_BIN}/mpicc",
        [f"{VENV_BIN}/mpirun", "--prefix", str(Path(VENV_BIN).parent)],
        "OpenMPI",
        VENV_BIN,
    ),
    # Both MPIs are installed: Debian's alternatives would pick one for `mpiexec`.
    "mpich": MPI("/usr/bin/mpicc.mpich", ["/usr/bin/mpiexec.mpich"], "MPICH"),
    # The runtime has no compiler: a program built by MPICH's mpicc runs on Intel MPI's
    # library (the two share the MPICH ABI). Its libfabric comes from Debian (PyPI has none),
    # over TCP between the pods.
    "intel-mpi": MPI(
        "/usr/bin/mpicc.mpich",
        [str(IMPI / "bin" / "mpiexec.hydra")],
        "Intel",
        str(IMPI / "bin"),
        {
            "I_MPI_ROOT": str(IMPI),
            "LD_LIBRARY_PATH": str(IMPI / "lib"),
            "I_MPI_OFI_LIBRARY_INTERNAL": "0",
            "FI_PROVIDER": "tcp",
        },
    ),
}


@pytest.mark.parametrize("name", sorted(MPIS))
def test_a_plain_mpirun_on_the_launcher_runs_every_slot_on_the_workers_and_all_reduces(
    name: str, tmp_path: Path
) -> None:
    mpi = MPIS[name]
    if not os.access(mpi.launcher[0], os.X_OK) or shutil.which("sshd", path="/usr/sbin") is None:
        pytest.fail(f"{name} or sshd is missing: `make e2e` installs them")
    program = tmp_path / "allreduce"
    subprocess.run([mpi.compiler, str(MPI_PROGRAM), "-o", str(program)], check=True)
    results = tmp_path / "results"
    results.mkdir()
    job = "mpi"
    implementation = {contract.MPI_IMPLEMENTATION: mpi.implementation} if mpi.implementation else {}
    pods = render(
        [
            statefulset(
                "mpi-launcher",
                framework="mpi",
                job=job,
                role="launcher",
                replicas=1,
                command=[*mpi.launcher, str(program), str(results)],
                annotations=implementation,
            ),
            statefulset(
                "mpi-worker",
                framework="mpi",
                job=job,
                role="worker",
                replicas=2,
                command=SSHD,
                annotations={contract.NPROC_PER_NODE: "2", **implementation},
            ),
        ]
    )
    image_env = {**IMAGE_ENV, **mpi.image_env, "PATH": f"{mpi.bin_dir}:{os.environ['PATH']}"}

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


# The image's user and its own sshd (a non-root sshd logs in only its own user, on a port above
# 1024), as mpi-operator's non-root pi example builds them. Its uid is one no user of this
# machine has, so that ssh finds its home by it.
MPIUSER = 2000
MPIUSER_HOME = "/home/mpiuser"
SSHD_CONFIG = (
    "Port 2222\\nHostKey {home}/sshd/host_key\\nPidFile none\\nUsePAM no\\nStrictModes yes\\n"
)
NON_ROOT_IMAGE = f"""
echo 'mpiuser:x:{MPIUSER}:{MPIUSER}::{MPIUSER_HOME}:/bin/sh' >> /etc/passwd
echo 'mpiuser:x:{MPIUSER}:' >> /etc/group
mkdir -p {MPIUSER_HOME}/sshd {MPIUSER_HOME}/results
ssh-keygen -q -t ed25519 -N '' -f {MPIUSER_HOME}/sshd/host_key
printf '{SSHD_CONFIG.format(home=MPIUSER_HOME)}' > {MPIUSER_HOME}/sshd/sshd_config
chown -R {MPIUSER}:{MPIUSER} {MPIUSER_HOME}
cp {{program}} {MPIUSER_HOME}/allreduce
mount --bind {{results}} {MPIUSER_HOME}/results
"""


def test_an_mpi_job_whose_ranks_run_as_a_non_root_user_logs_in_with_the_keys_in_its_home(
    tmp_path: Path,
) -> None:
    if shutil.which("sshd", path="/usr/sbin") is None:
        pytest.fail("sshd is missing: `make e2e` installs it")
    program = open_mpi_program(tmp_path)
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # the user's ranks write their reports there
    job = "mpi"
    settings = {
        contract.SSH_AUTH_MOUNT_PATH: f"{MPIUSER_HOME}/.ssh",
        contract.PORT: "2222",
    }
    workloads = [
        statefulset(
            "mpi-launcher",
            framework="mpi",
            job=job,
            role="launcher",
            replicas=1,
            command=[
                "/usr/bin/mpirun.openmpi",
                f"{MPIUSER_HOME}/allreduce",
                f"{MPIUSER_HOME}/results",
            ],
            annotations=settings,
        ),
        statefulset(
            "mpi-worker",
            framework="mpi",
            job=job,
            role="worker",
            replicas=2,
            command=["/usr/sbin/sshd", "-D", "-e", "-f", f"{MPIUSER_HOME}/sshd/sshd_config"],
            annotations={contract.NPROC_PER_NODE: "2", **settings},
        ),
    ]
    for workload in workloads:
        workload["spec"]["template"]["spec"]["securityContext"] = {"runAsUser": MPIUSER}
    pods = render(workloads)
    for pod in pods:
        assert pod.pod["spec"]["securityContext"]["fsGroup"] == MPIUSER
        ssh = next(v for v in pod.pod["spec"]["volumes"] if "secret" in v)
        assert ssh["secret"]["defaultMode"] == 0o440

    run_job(
        tmp_path,
        [pod.pod for pod in pods],
        "mpi",
        namespace=NAMESPACE,
        timeout=120,
        finishers=["mpi-launcher-0"],
        image_env={
            "HOME": MPIUSER_HOME,
            "OMPI_MCA_btl_tcp_if_include": "eth0",
            "OMPI_MCA_oob_tcp_if_include": "eth0",
        },
        secrets={f"{job}-ssh": ssh_secret(job, port=2222)},
        image_script=NON_ROOT_IMAGE.format(program=program, results=results),
    )

    found = reports(results)
    assert sorted(report["rank"] for report in found) == [0, 1, 2, 3]
    assert {report["sum"] for report in found} == {1 + 2 + 3 + 4}
    assert sorted(report["host"] for report in found) == [
        "mpi-worker-0",
        "mpi-worker-0",
        "mpi-worker-1",
        "mpi-worker-1",
    ]
    owners = {path.stat().st_uid for path in results.glob("*.json")}
    assert owners == {MPIUSER}  # the ranks ran as the image's user, not as root
