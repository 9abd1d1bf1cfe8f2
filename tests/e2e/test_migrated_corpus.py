"""Operators' own example jobs, migrated by `trainhook migrate`, form their job with the real
framework client: the training-operator's PyTorchJob and Volcano's pytorch-plugin Job
(torch.distributed, gloo), the training-operator's TFJob (MultiWorkerMirroredStrategy), the
training-operator's and paddle-operator's PaddleJobs (paddle.distributed.launch), mpi-operator's
pi MPIJob (Open MPI's mpirun over the workers' sshd, as its images run it) and ms-operator's MSJob
(MindSpore's scheduler and workers), the training-operator's JAXJob (jax.distributed from
the variables that operator sets, as its example's script reads them) and XGBoostJob (XGBoost's
tracker on the master, every pod all-reducing). Only the container's
command and name change (the examples' images are not here), and what the guide tells a user to
add; everything else is what migrate wrote.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.migrate import migrate
from webhook.core.render import render

from .harness import Cluster, run_job
from .workloads import open_mpi_program, reports, ssh_secret

pytestmark = pytest.mark.e2e

CORPUS = Path(__file__).parent.parent / "corpus"
CLIENTS = Path(__file__).parent / "clients"
RANK_SCRIPT = str(Path(__file__).with_name("allreduce_rank.py"))
MS_BIN = Path(__file__).resolve().parents[2] / ".venv-mindspore" / "bin"


def migrated(name: str, command: list[str] | None, container_name: str) -> list[dict[str, Any]]:
    """The file's job as migrate writes it, its one container running `command` (None: its own)
    under one name (the harness starts one named container in every pod)."""
    documents = [d for d in yaml.safe_load_all((CORPUS / name).read_text()) if d]
    (migration,) = migrate(documents)
    for workload in migration.objects:
        (container,) = workload["spec"]["template"]["spec"]["containers"]
        container["name"] = container_name
        if command is not None:
            container["command"] = command
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


@pytest.mark.parametrize(
    ("name", "namespace", "job"),
    [
        ("training-operator/paddlejob-simple-cpu.yaml", "kubeflow", "paddle-simple-cpu"),
        ("paddle-operator/paddlejob-simple.yaml", "default", "simple"),
    ],
)
def test_an_operators_paddlejob_launches_one_collective_job(
    name: str, namespace: str, job: str, tmp_path: Path
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    # The example's own launcher, with the all-reduce client in place of paddle's run_check.
    launch = [sys.executable, "-m", "paddle.distributed.launch"]
    client = [*launch, str(CLIENTS / "paddle_allreduce.py"), str(results)]
    pods = render(migrated(name, client, "paddle"))
    assert [p.name for p in pods] == [f"{job}-worker-0", f"{job}-worker-1"]

    run_job(tmp_path, [p.pod for p in pods], "paddle", namespace=namespace, timeout=120)

    found = reports(results)
    assert [r["rank"] for r in found] == [0, 1]
    assert {r["world_size"] for r in found} == {2}
    assert {r["sum"] for r in found} == {1 + 2}
    assert all(r["gathered"] == [0, 1] for r in found)


# mpi-operator's base image, as its build/base/Dockerfile makes it: the user mpiuser (uid 1000,
# home /home/mpiuser, here in place of this machine's user 1000 in the pod's own /etc), its
# sshd settings in ~/.sshd_config with `Port 2222` appended, and the pi program in its home (the
# all-reduce program writing its report, in place of pi.cc). Open MPI 4's mpirun comes first on
# PATH, as in the image.
MPIUSER_HOME = "/home/mpiuser"
MPI_OPERATOR_IMAGE = f"""
sed -i '/^[^:]*:[^:]*:1000:/d' /etc/passwd /etc/group
echo 'mpiuser:x:1000:1000::{MPIUSER_HOME}:/bin/sh' >> /etc/passwd
echo 'mpiuser:x:1000:' >> /etc/group
mkdir -p {MPIUSER_HOME}/bin {MPIUSER_HOME}/results
cp {{sshd_config}} {MPIUSER_HOME}/.sshd_config
echo 'Port 2222' >> {MPIUSER_HOME}/.sshd_config
cp {{program}} {MPIUSER_HOME}/allreduce
printf '#!/bin/sh\\nexec {MPIUSER_HOME}/allreduce {MPIUSER_HOME}/results\\n' > {MPIUSER_HOME}/pi
chmod 755 {MPIUSER_HOME}/pi
ln -s /usr/bin/mpirun.openmpi {MPIUSER_HOME}/bin/mpirun
chown -R 1000:1000 {MPIUSER_HOME}
mount --bind {{results}} {MPIUSER_HOME}/results
"""
MPI_OPERATOR_SSHD_CONFIG = Path(__file__).with_name("upstream") / "mpi-operator-sshd_config"


def test_mpi_operators_pi_example_runs_mpirun_over_its_images_sshd_on_port_2222(
    tmp_path: Path,
) -> None:
    if shutil.which("sshd", path="/usr/sbin") is None:
        pytest.fail("sshd is missing: `make e2e` installs it")
    program = open_mpi_program(tmp_path)
    results = tmp_path / "results"
    results.mkdir()
    results.chmod(0o777)  # mpiuser's ranks write their reports there
    workloads = migrated("mpi-operator/mpijob-pi.yaml", None, "mpi")
    for workload in workloads:  # what migrate's note and the guide tell a user of these images
        workload["metadata"]["annotations"][contract.PORT] = "2222"
    pods = render(workloads)
    assert [p.name for p in pods] == ["pi-launcher-0", "pi-worker-0", "pi-worker-1"]
    launcher = pods[0]
    assert launcher.pod["spec"]["containers"][0]["command"] == ["mpirun"]
    assert launcher.pod["spec"]["containers"][0]["args"] == ["-n", "2", "/home/mpiuser/pi"]
    service = launcher.pod["spec"]["subdomain"]

    run_job(
        tmp_path,
        [p.pod for p in pods],
        "mpi",
        namespace="default",
        timeout=60,
        finishers=["pi-launcher-0"],
        image_env={
            "HOME": MPIUSER_HOME,
            "PATH": f"{MPIUSER_HOME}/bin:{os.environ['PATH']}",
            # the pods' addresses are in 127.0.0.0/8, which Open MPI leaves out by default
            "OMPI_MCA_btl_tcp_if_include": "eth0",
            "OMPI_MCA_oob_tcp_if_include": "eth0",
        },
        secrets={"pi-ssh": ssh_secret("pi", port=2222, namespace="default", service=service)},
        image_script=MPI_OPERATOR_IMAGE.format(
            sshd_config=MPI_OPERATOR_SSHD_CONFIG, program=program, results=results
        ),
    )

    found = reports(results)
    assert sorted(r["rank"] for r in found) == [0, 1]
    assert {r["sum"] for r in found} == {1 + 2}
    assert sorted(r["host"] for r in found) == ["pi-worker-0", "pi-worker-1"]
    assert {path.stat().st_uid for path in results.glob("*.json")} == {1000}


def test_ms_operators_msjob_forms_one_mindspore_cluster_of_its_four_workers(
    tmp_path: Path,
) -> None:
    if not (MS_BIN / "python").exists():
        pytest.fail(f"{MS_BIN} is missing: `make e2e` builds it")
    results = tmp_path / "results"
    results.mkdir()
    client = [str(MS_BIN / "python"), str(CLIENTS / "ms_allreduce.py"), str(results)]
    workloads = migrated("ms-operator/msjob-wide-deep-dataparallel.yaml", client, "mindspore")
    for workload in workloads:
        # The example's script and data come from a folder of its node (hostPath), not here.
        spec = workload["spec"]["template"]["spec"]
        spec.pop("volumes")
        spec["containers"][0].pop("volumeMounts")
    pods = render(workloads)
    assert {p.env["MS_WORKER_NUM"] for p in pods} == {"4"}
    port = int(pods[0].env["MS_SCHED_PORT"])

    with Cluster(tmp_path, "default") as cluster:
        cluster.add_pods(p.pod for p in pods)
        # the Service the sweeper creates for the scheduler, from the same declaration
        declare = FRAMEWORKS["mindspore"].services
        assert declare is not None
        (service,) = declare("ms-widedeep-dataparallel", ["scheduler", "worker"], port)
        cluster.add_service(service.name, service.selector, service.port)
        cluster.start(
            cluster.pods, "mindspore", image_env={"PATH": f"{MS_BIN}:{os.environ['PATH']}"}
        )
        workers = [name for name in cluster.pods if "-worker-" in name]
        cluster.wait(workers, 120)

    found = reports(results)
    hosts = [f"ms-widedeep-dataparallel-worker-{i}" for i in range(4)]
    assert [(r["rank"], r["host"]) for r in found] == list(enumerate(hosts))
    assert {(r["size"], r["sum"]) for r in found} == {(4, 1 + 2 + 3 + 4)}


def test_the_training_operators_jaxjob_example_joins_jax_from_the_operators_variables(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    client = [sys.executable, str(CLIENTS / "jax_allgather.py"), str(results), "--kubeflow"]
    pods = render(migrated("training-operator/jaxjob-simple.yaml", client, "jax"))
    assert [p.name for p in pods] == ["jaxjob-simple-worker-0", "jaxjob-simple-worker-1"]

    run_job(tmp_path, [p.pod for p in pods], "jax", namespace="kubeflow", timeout=120)

    found = reports(results)
    assert [report["process_index"] for report in found] == [0, 1]
    assert {report["process_count"] for report in found} == {2}
    assert all(report["gathered"] == [1, 11] for report in found)


def test_the_training_operators_xgboostjob_example_all_reduces_through_the_masters_tracker(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    client = [sys.executable, str(CLIENTS / "xgb_allreduce.py"), str(results)]
    pods = render(migrated("training-operator/xgboostjob-iris.yaml", client, "xgboost"))
    name = "xgboost-dist-iris-test-train"
    assert [p.name for p in pods] == [f"{name}-master-0", f"{name}-worker-0", f"{name}-worker-1"]

    run_job(tmp_path, [p.pod for p in pods], "xgboost", namespace="default", timeout=120)

    found = reports(results)
    assert [report["rank"] for report in found] == [0, 1, 2]
    assert {report["world_size"] for report in found} == {3}
    assert {report["sum"] for report in found} == {1 + 2 + 3}
