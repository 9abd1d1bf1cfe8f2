"""Every example renders into exactly the pods the env contract describes, value for value.

The expected values are written out literally from docs (ENV-CONTRACT): they are not computed by
the code under test, so a mistake in a framework module, the topology or the pod mutation shows
up here as a difference in a string a training script would read.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from webhook import cli
from webhook.core import contract
from webhook.core.render import RenderedPod, render, render_all

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_FILES = sorted(path.name for path in EXAMPLES.glob("*.yaml"))
OLDEST_SUPPORTED = "1.29"
NEWEST = kubernetes_validate.latest_version()


def documents_of(example: str) -> list[dict[str, Any]]:
    with open(EXAMPLES / example) as manifest:
        return [document for document in yaml.safe_load_all(manifest) if document]


@functools.cache
def rendered(example: str) -> tuple[RenderedPod, ...]:
    return tuple(render(documents_of(example)))


def pod_of(example: str, role: str, index: int) -> RenderedPod:
    matches = [pod for pod in rendered(example) if pod.role == role and pod.index == index]
    assert len(matches) == 1, f"{example}: {len(matches)} pods for {role} {index}"
    return matches[0]


def training_container(pod: RenderedPod) -> dict[str, Any]:
    containers: list[dict[str, Any]] = pod.pod["spec"]["containers"]
    assert len(containers) == 1, "every example has one container per pod"
    return containers[0]


# The variables the kubelet fills from the pod: the Job controller's index, and the MindSpore
# scheduler's own IP (where it listens).
FIELD_ENV = {
    "JOB_COMPLETION_INDEX": "metadata.annotations['batch.kubernetes.io/job-completion-index']",
    "MS_SCHED_HOST": "status.podIP",
}


def literal_env(container: Mapping[str, Any]) -> dict[str, str]:
    """The container's env as name -> value; the variables read from the pod aside."""
    entries = container.get("env") or []
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), f"duplicate env names in {names}"
    computed = {
        entry["name"]: entry["valueFrom"]["fieldRef"]["fieldPath"]
        for entry in entries
        if "value" not in entry
    }
    assert computed.items() <= FIELD_ENV.items(), f"env without a literal value: {computed}"
    return {entry["name"]: entry["value"] for entry in entries if "value" in entry}


def quantities(resources: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Resources with every quantity as the string Kubernetes serializes it as."""
    return {
        kind: {name: str(value) for name, value in amounts.items()}
        for kind, amounts in resources.items()
    }


# ---------------------------------------------------------------------------------------------
# Every pod of every example: (role, role index, global rank, pod hostname), in role order.
# ---------------------------------------------------------------------------------------------

NAMESPACE = {"tensorflow-ps.yaml": "research"}  # every other example: "default"

JOB = {
    "jax-kai.yaml": ("jax", "jax-kai"),
    "jax-kubernetes-gang.yaml": ("jax", "jax-gang"),
    "jax.yaml": ("jax", "jax-simple"),
    "mindspore.yaml": ("mindspore", "ms-resnet"),
    "mpi-horovod.yaml": ("mpi", "horovod-mnist"),
    "mpi-kueue.yaml": ("mpi", "horovod-queued"),
    "mpi-pi-mpich.yaml": ("mpi", "pi"),
    "paddle-collective-volcano.yaml": ("paddle", "resnet50-gang"),
    "paddle-collective.yaml": ("paddle", "resnet50"),
    "paddle-indexed-job.yaml": ("paddle", "ernie"),
    "paddle-ps.yaml": ("paddle", "wide-deep"),
    "pytorch-coscheduling.yaml": ("pytorch", "llama-ft"),
    "pytorch.yaml": ("pytorch", "pytorch-mnist"),
    "tensorflow-mnist.yaml": ("tensorflow", "mnist"),
    "tensorflow-ps.yaml": ("tensorflow", "dist-mnist"),
    "xgboost.yaml": ("xgboost", "xgboost-iris"),
}

PODS: dict[str, list[tuple[str, int, int, str]]] = {
    "jax-kai.yaml": [("worker", i, i, f"jax-kai-{i}") for i in range(2)],
    "jax-kubernetes-gang.yaml": [("worker", i, i, f"jax-gang-{i}") for i in range(4)],
    "jax.yaml": [
        ("worker", 0, 0, "jax-simple-0"),
        ("worker", 1, 1, "jax-simple-1"),
    ],
    "mindspore.yaml": [
        ("scheduler", 0, 0, "ms-resnet-scheduler-0"),
        ("worker", 0, 1, "ms-resnet-worker-0"),
        ("worker", 1, 2, "ms-resnet-worker-1"),
        ("worker", 2, 3, "ms-resnet-worker-2"),
        ("worker", 3, 4, "ms-resnet-worker-3"),
    ],
    "mpi-horovod.yaml": [
        ("launcher", 0, 0, "horovod-mnist-launcher-0"),
        ("worker", 0, 1, "horovod-mnist-worker-0"),
        ("worker", 1, 2, "horovod-mnist-worker-1"),
    ],
    "mpi-kueue.yaml": [
        ("launcher", 0, 0, "horovod-queued-launcher-0"),
        ("worker", 0, 1, "horovod-queued-worker-0"),
        ("worker", 1, 2, "horovod-queued-worker-1"),
    ],
    "mpi-pi-mpich.yaml": [
        ("launcher", 0, 0, "pi-launcher-0"),
        ("worker", 0, 1, "pi-worker-0"),
        ("worker", 1, 2, "pi-worker-1"),
    ],
    "paddle-collective-volcano.yaml": [
        ("worker", 0, 0, "resnet50-gang-0"),
        ("worker", 1, 1, "resnet50-gang-1"),
    ],
    "paddle-collective.yaml": [
        ("worker", 0, 0, "resnet50-0"),
        ("worker", 1, 1, "resnet50-1"),
    ],
    "paddle-indexed-job.yaml": [
        ("worker", 0, 0, "ernie-0"),
        ("worker", 1, 1, "ernie-1"),
        ("worker", 2, 2, "ernie-2"),
    ],
    "paddle-ps.yaml": [
        ("ps", 0, 0, "wide-deep-ps-0"),
        ("ps", 1, 1, "wide-deep-ps-1"),
        ("worker", 0, 2, "wide-deep-worker-0"),
        ("worker", 1, 3, "wide-deep-worker-1"),
    ],
    "pytorch-coscheduling.yaml": [
        ("master", 0, 0, "llama-ft-master-0"),
        ("worker", 0, 1, "llama-ft-worker-0"),
        ("worker", 1, 2, "llama-ft-worker-1"),
        ("worker", 2, 3, "llama-ft-worker-2"),
    ],
    "pytorch.yaml": [
        ("master", 0, 0, "pytorch-mnist-master-0"),
        ("worker", 0, 1, "pytorch-mnist-worker-0"),
        ("worker", 1, 2, "pytorch-mnist-worker-1"),
    ],
    "tensorflow-mnist.yaml": [
        ("worker", 0, 0, "mnist-0"),
    ],
    "tensorflow-ps.yaml": [
        ("ps", 0, 0, "dist-mnist-ps-0"),
        ("worker", 0, 1, "dist-mnist-worker-0"),
        ("worker", 1, 2, "dist-mnist-worker-1"),
    ],
    "xgboost.yaml": [
        ("master", 0, 0, "xgboost-iris-master-0"),
        ("worker", 0, 1, "xgboost-iris-worker-0"),
        ("worker", 1, 2, "xgboost-iris-worker-1"),
    ],
}

TOPOLOGY = {
    "jax-kai.yaml": '{"worker":2}',
    "jax-kubernetes-gang.yaml": '{"worker":4}',
    "jax.yaml": '{"worker":2}',
    "mindspore.yaml": '{"scheduler":1,"worker":4}',
    "mpi-horovod.yaml": '{"launcher":1,"worker":2}',
    "mpi-kueue.yaml": '{"launcher":1,"worker":2}',
    "mpi-pi-mpich.yaml": '{"launcher":1,"worker":2}',
    "paddle-collective-volcano.yaml": '{"worker":2}',
    "paddle-collective.yaml": '{"worker":2}',
    "paddle-indexed-job.yaml": '{"worker":3}',
    "paddle-ps.yaml": '{"ps":2,"worker":2}',
    "pytorch-coscheduling.yaml": '{"master":1,"worker":3}',
    "pytorch.yaml": '{"master":1,"worker":2}',
    "tensorflow-mnist.yaml": '{"worker":1}',
    "tensorflow-ps.yaml": '{"ps":1,"worker":2}',
    "xgboost.yaml": '{"master":1,"worker":2}',
}

STATEFULSET_EXAMPLES = [name for name in EXAMPLE_FILES if name != "paddle-indexed-job.yaml"]


def test_every_example_file_has_its_expected_pods_written_here() -> None:
    assert sorted(PODS) == EXAMPLE_FILES
    assert sorted(PODS) == sorted(JOB) == sorted(TOPOLOGY)


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_example_renders_one_pod_per_replica_in_role_order(example: str) -> None:
    pods = rendered(example)
    assert [(pod.role, pod.index, pod.rank) for pod in pods] == [
        (role, index, rank) for role, index, rank, _ in PODS[example]
    ]
    framework, job = JOB[example]
    assert {(pod.framework.name, pod.job) for pod in pods} == {(framework, job)}


def test_trainhook_render_prints_the_same_pods_for_all_examples_at_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    paths = [str(EXAMPLES / example) for example in EXAMPLE_FILES]
    assert cli.main(["render", *paths, "-o", "yaml"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    printed = [doc for doc in yaml.safe_load_all(out) if doc["kind"] == "Pod"]
    assert printed == [pod.pod for example in EXAMPLE_FILES for pod in rendered(example)]


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_rendered_pod_is_valid_for_kubernetes_1_29_and_the_newest(example: str) -> None:
    for pod in rendered(example):
        assert pod.pod["apiVersion"] == "v1"
        assert pod.pod["kind"] == "Pod"
        if "schedulingGroup" not in pod.pod["spec"]:  # Kubernetes' own gang: 1.36 and later
            kubernetes_validate.validate(pod.pod, OLDEST_SUPPORTED, strict=True)
        kubernetes_validate.validate(pod.pod, NEWEST, strict=True)


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_example_manifest_is_valid_for_the_newest_kubernetes(example: str) -> None:
    # Before 1.33 the published schema marked StatefulSet.spec.serviceName required, although the
    # API server never did; the webhook fills it in anyway.
    with open(EXAMPLES / example) as manifest:
        for document in yaml.safe_load_all(manifest):
            kubernetes_validate.validate(document, NEWEST, strict=True)


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_pod_is_labelled_with_its_job_role_rank_and_role_index(example: str) -> None:
    framework, job = JOB[example]
    for pod, (role, index, rank, _) in zip(rendered(example), PODS[example], strict=True):
        labels = pod.pod["metadata"]["labels"]
        trainhook_labels = {k: v for k, v in labels.items() if k.startswith(contract.PREFIX)}
        assert trainhook_labels == {
            contract.FRAMEWORK: framework,
            contract.JOB: job,
            contract.ROLE: role,
            contract.RANK: str(rank),
            contract.ROLE_INDEX: str(index),
        }, pod.name


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_pod_keeps_the_labels_of_its_template(example: str) -> None:
    with open(EXAMPLES / example) as manifest:
        templates = [
            doc["spec"]["template"]["metadata"]["labels"] for doc in yaml.safe_load_all(manifest)
        ]
    for pod in rendered(example):
        labels = pod.pod["metadata"]["labels"]
        assert any(template.items() <= labels.items() for template in templates), pod.name


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_pod_has_a_stable_hostname_under_the_job_headless_service(example: str) -> None:
    _, job = JOB[example]
    for pod, (_, _, _, hostname) in zip(rendered(example), PODS[example], strict=True):
        assert pod.pod["metadata"].get("namespace") == NAMESPACE.get(example, "default")
        assert pod.pod["spec"].get("hostname") == hostname
        assert pod.pod["spec"].get("subdomain") == job


@pytest.mark.parametrize("example", STATEFULSET_EXAMPLES)
def test_statefulset_pods_are_named_after_their_statefulset_and_ordinal(example: str) -> None:
    assert [pod.name for pod in rendered(example)] == [host for *_, host in PODS[example]]


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_every_pod_carries_the_topology_in_role_order(example: str) -> None:
    for pod in rendered(example):
        assert pod.pod["metadata"]["annotations"][contract.TOPOLOGY] == TOPOLOGY[example]


# ---------------------------------------------------------------------------------------------
# The complete env of rank 0 and of other pods, literally.
# ---------------------------------------------------------------------------------------------

MS_SCHEDULER_HOSTS = "ms-resnet-scheduler-0.ms-resnet.default.svc"
MS_WORKER_HOSTS = (
    "ms-resnet-worker-0.ms-resnet.default.svc,"
    "ms-resnet-worker-1.ms-resnet.default.svc,"
    "ms-resnet-worker-2.ms-resnet.default.svc,"
    "ms-resnet-worker-3.ms-resnet.default.svc"
)
TF_PS_HOSTS = "dist-mnist-ps-0.dist-mnist.research.svc"
TF_WORKER_HOSTS = (
    "dist-mnist-worker-0.dist-mnist.research.svc,dist-mnist-worker-1.dist-mnist.research.svc"
)
TF_CLUSTER = (
    '{"ps":["dist-mnist-ps-0.dist-mnist.research.svc:2222"],'
    '"worker":["dist-mnist-worker-0.dist-mnist.research.svc:2222",'
    '"dist-mnist-worker-1.dist-mnist.research.svc:2222"]}'
)
PT_MASTER_HOST = "pytorch-mnist-master-0.pytorch-mnist.default.svc"
PT_WORKER_HOSTS = (
    "pytorch-mnist-worker-0.pytorch-mnist.default.svc,"
    "pytorch-mnist-worker-1.pytorch-mnist.default.svc"
)
MPI_LAUNCHER_HOSTS = "horovod-mnist-launcher-0.horovod-mnist.default.svc"
MPI_WORKER_HOSTS = (
    "horovod-mnist-worker-0.horovod-mnist.default.svc,"
    "horovod-mnist-worker-1.horovod-mnist.default.svc"
)
MPI_ENV = {
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    "OMPI_MCA_orte_set_default_slots": "1",
    "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
    "PRTE_MCA_prte_keep_fqdn_hostnames": "true",
    "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
    "PRTE_MCA_prte_set_default_slots": "1",
}
# mpi-operator's MPICH variables, and the name MPICH's Hydra reads for the ssh arguments.
MPICH_ENV = {
    "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
    "HYDRA_LAUNCHER_EXTRA_ARGS": "-o ConnectionAttempts=10",
    "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10",
}
PI_WORKER_HOSTS = "pi-worker-0.pi.default.svc,pi-worker-1.pi.default.svc"
WD_PS_HOSTS = "wide-deep-ps-0.wide-deep.default.svc,wide-deep-ps-1.wide-deep.default.svc"
WD_WORKER_HOSTS = (
    "wide-deep-worker-0.wide-deep.default.svc,wide-deep-worker-1.wide-deep.default.svc"
)
WD_PADDLE_ENV = {
    "PADDLE_JOB_ID": "wide-deep",
    "PADDLE_NNODES": "4",
    "PADDLE_MASTER": "wide-deep-worker-0.wide-deep.default.svc:36543",
    "PADDLE_TRAINERS_NUM": "2",
    "PADDLE_TRAINER_ENDPOINTS": (
        "wide-deep-worker-0.wide-deep.default.svc:36543,"
        "wide-deep-worker-1.wide-deep.default.svc:36543"
    ),
    "PADDLE_PORT": "36543",
    "PADDLE_PSERVERS_IP_PORT_LIST": (
        "wide-deep-ps-0.wide-deep.default.svc:36543,wide-deep-ps-1.wide-deep.default.svc:36543"
    ),
}
RESNET_HOSTS = "resnet50-0.resnet50.default.svc,resnet50-1.resnet50.default.svc"
GANG_HOSTS = "resnet50-gang-0.resnet50-gang.default.svc,resnet50-gang-1.resnet50-gang.default.svc"
ERNIE_HOSTS = "ernie-0.ernie.default.svc,ernie-1.ernie.default.svc,ernie-2.ernie.default.svc"
XGB_MASTER_HOST = "xgboost-iris-master-0.xgboost-iris.default.svc"
XGB_WORKER_HOSTS = (
    "xgboost-iris-worker-0.xgboost-iris.default.svc,xgboost-iris-worker-1.xgboost-iris.default.svc"
)
JAX_HOSTS = "jax-simple-0.jax-simple.default.svc,jax-simple-1.jax-simple.default.svc"
JAX_KAI_HOSTS = "jax-kai-0.jax-kai.default.svc,jax-kai-1.jax-kai.default.svc"
JAX_GANG_HOSTS = ",".join(f"jax-gang-{i}.jax-gang.default.svc" for i in range(4))
QUEUED_LAUNCHER_HOSTS = "horovod-queued-launcher-0.horovod-queued.default.svc"
QUEUED_WORKER_HOSTS = (
    "horovod-queued-worker-0.horovod-queued.default.svc,"
    "horovod-queued-worker-1.horovod-queued.default.svc"
)
FT_MASTER_HOST = "llama-ft-master-0.llama-ft.default.svc"
FT_WORKER_HOSTS = (
    "llama-ft-worker-0.llama-ft.default.svc,llama-ft-worker-1.llama-ft.default.svc,"
    "llama-ft-worker-2.llama-ft.default.svc"
)

ENV: dict[tuple[str, str, int], dict[str, str]] = {
    ("mpi-pi-mpich.yaml", "launcher", 0): {
        "TRAINHOOK_JOB": "pi",
        "TRAINHOOK_ROLE": "launcher",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_LAUNCHER_HOSTS": "pi-launcher-0.pi.default.svc",
        "TRAINHOOK_LAUNCHER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": PI_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "K_MPI_JOB_ROLE": "launcher",
        **MPICH_ENV,
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    },
    ("mpi-pi-mpich.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "pi",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "2",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_LAUNCHER_HOSTS": "pi-launcher-0.pi.default.svc",
        "TRAINHOOK_LAUNCHER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": PI_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "K_MPI_JOB_ROLE": "worker",
        **MPICH_ENV,
    },
    ("mpi-kueue.yaml", "launcher", 0): {
        "TRAINHOOK_JOB": "horovod-queued",
        "TRAINHOOK_ROLE": "launcher",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_LAUNCHER_HOSTS": QUEUED_LAUNCHER_HOSTS,
        "TRAINHOOK_LAUNCHER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": QUEUED_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "K_MPI_JOB_ROLE": "launcher",
        **MPI_ENV,
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    },
    ("mpi-kueue.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "horovod-queued",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "1",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_LAUNCHER_HOSTS": QUEUED_LAUNCHER_HOSTS,
        "TRAINHOOK_LAUNCHER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": QUEUED_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "K_MPI_JOB_ROLE": "worker",
        **MPI_ENV,
    },
    ("pytorch-coscheduling.yaml", "master", 0): {
        "TRAINHOOK_JOB": "llama-ft",
        "TRAINHOOK_ROLE": "master",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "4",
        "TRAINHOOK_MASTER_HOSTS": FT_MASTER_HOST,
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": FT_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "3",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": FT_MASTER_HOST,
        "PET_MASTER_ADDR": FT_MASTER_HOST,
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "NNODES": "4",
        "PET_NNODES": "4",
        "NODE_RANK": "0",
        "PET_NODE_RANK": "0",
        "NPROC_PER_NODE": "8",
        "PET_NPROC_PER_NODE": "8",
        "WORLD_SIZE": "32",
        "RANK": "0",
    },
    ("pytorch-coscheduling.yaml", "worker", 2): {
        "TRAINHOOK_JOB": "llama-ft",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "2",
        "TRAINHOOK_RANK": "3",
        "TRAINHOOK_WORLD_SIZE": "4",
        "TRAINHOOK_MASTER_HOSTS": FT_MASTER_HOST,
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": FT_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "3",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": FT_MASTER_HOST,
        "PET_MASTER_ADDR": FT_MASTER_HOST,
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "NNODES": "4",
        "PET_NNODES": "4",
        "NODE_RANK": "3",
        "PET_NODE_RANK": "3",
        "NPROC_PER_NODE": "8",
        "PET_NPROC_PER_NODE": "8",
        "WORLD_SIZE": "32",
        "RANK": "24",
    },
    ("mindspore.yaml", "scheduler", 0): {
        "TRAINHOOK_JOB": "ms-resnet",
        "TRAINHOOK_ROLE": "scheduler",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "5",
        "TRAINHOOK_SCHEDULER_HOSTS": MS_SCHEDULER_HOSTS,
        "TRAINHOOK_SCHEDULER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": MS_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "4",
        "PYTHONUNBUFFERED": "1",
        "MS_ROLE": "MS_SCHED",
        "MS_SCHED_PORT": "2222",
        "MS_WORKER_NUM": "4",
        "MS_SERVER_NUM": "0",
        "MS_NODE_ID": "ms-resnet-scheduler-0",
    },
    ("mindspore.yaml", "worker", 2): {
        "TRAINHOOK_JOB": "ms-resnet",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "2",
        "TRAINHOOK_RANK": "3",
        "TRAINHOOK_WORLD_SIZE": "5",
        "TRAINHOOK_SCHEDULER_HOSTS": MS_SCHEDULER_HOSTS,
        "TRAINHOOK_SCHEDULER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": MS_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "4",
        "PYTHONUNBUFFERED": "1",
        "MS_ROLE": "MS_WORKER",
        "MS_SCHED_HOST": "$(MS_RESNET_MS_SCHEDULER_SERVICE_HOST)",
        "MS_SCHED_PORT": "2222",
        "MS_WORKER_NUM": "4",
        "MS_SERVER_NUM": "0",
        "MS_NODE_ID": "2",
    },
    ("tensorflow-mnist.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "mnist",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "1",
        "TRAINHOOK_WORKER_HOSTS": "mnist-0.mnist.default.svc",
        "TRAINHOOK_WORKER_NUM": "1",
        "PYTHONUNBUFFERED": "1",
    },
    ("tensorflow-ps.yaml", "ps", 0): {
        "TRAINHOOK_JOB": "dist-mnist",
        "TRAINHOOK_ROLE": "ps",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_PS_HOSTS": TF_PS_HOSTS,
        "TRAINHOOK_PS_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": TF_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "TF_CONFIG": '{"cluster":' + TF_CLUSTER + ',"task":{"type":"ps","index":0},'
        '"environment":"cloud"}',
    },
    ("tensorflow-ps.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "dist-mnist",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "2",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_PS_HOSTS": TF_PS_HOSTS,
        "TRAINHOOK_PS_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": TF_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "TF_CONFIG": '{"cluster":' + TF_CLUSTER + ',"task":{"type":"worker","index":1},'
        '"environment":"cloud"}',
    },
    ("pytorch.yaml", "master", 0): {
        "TRAINHOOK_JOB": "pytorch-mnist",
        "TRAINHOOK_ROLE": "master",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_MASTER_HOSTS": PT_MASTER_HOST,
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": PT_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": PT_MASTER_HOST,
        "PET_MASTER_ADDR": PT_MASTER_HOST,
        "MASTER_PORT": "29500",
        "PET_MASTER_PORT": "29500",
        "NNODES": "3",
        "PET_NNODES": "3",
        "NODE_RANK": "0",
        "PET_NODE_RANK": "0",
        "NPROC_PER_NODE": "1",
        "PET_NPROC_PER_NODE": "1",
        "WORLD_SIZE": "3",
        "RANK": "0",
    },
    ("pytorch.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "pytorch-mnist",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "2",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_MASTER_HOSTS": PT_MASTER_HOST,
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": PT_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": PT_MASTER_HOST,
        "PET_MASTER_ADDR": PT_MASTER_HOST,
        "MASTER_PORT": "29500",
        "PET_MASTER_PORT": "29500",
        "NNODES": "3",
        "PET_NNODES": "3",
        "NODE_RANK": "2",
        "PET_NODE_RANK": "2",
        "NPROC_PER_NODE": "1",
        "PET_NPROC_PER_NODE": "1",
        "WORLD_SIZE": "3",
        "RANK": "2",
    },
    ("mpi-horovod.yaml", "launcher", 0): {
        "TRAINHOOK_JOB": "horovod-mnist",
        "TRAINHOOK_ROLE": "launcher",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_LAUNCHER_HOSTS": MPI_LAUNCHER_HOSTS,
        "TRAINHOOK_LAUNCHER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": MPI_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "K_MPI_JOB_ROLE": "launcher",
        **MPI_ENV,
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    },
    ("mpi-horovod.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "horovod-mnist",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "2",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_LAUNCHER_HOSTS": MPI_LAUNCHER_HOSTS,
        "TRAINHOOK_LAUNCHER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": MPI_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "K_MPI_JOB_ROLE": "worker",
        **MPI_ENV,
    },
    ("paddle-ps.yaml", "ps", 0): {
        "TRAINHOOK_JOB": "wide-deep",
        "TRAINHOOK_ROLE": "ps",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "4",
        "TRAINHOOK_PS_HOSTS": WD_PS_HOSTS,
        "TRAINHOOK_PS_NUM": "2",
        "TRAINHOOK_WORKER_HOSTS": WD_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        **WD_PADDLE_ENV,
        "PADDLE_CURRENT_ENDPOINT": "wide-deep-ps-0.wide-deep.default.svc:36543",
        "POD_IP": "wide-deep-ps-0.wide-deep.default.svc",
        "TRAINING_ROLE": "PSERVER",
        "PADDLE_TRAINING_ROLE": "PSERVER",
        "PADDLE_SERVER_NUM": "1",
    },
    ("paddle-ps.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "wide-deep",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "3",
        "TRAINHOOK_WORLD_SIZE": "4",
        "TRAINHOOK_PS_HOSTS": WD_PS_HOSTS,
        "TRAINHOOK_PS_NUM": "2",
        "TRAINHOOK_WORKER_HOSTS": WD_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        **WD_PADDLE_ENV,
        "PADDLE_TRAINER_ID": "1",
        "PADDLE_CURRENT_ENDPOINT": "wide-deep-worker-1.wide-deep.default.svc:36543",
        "POD_IP": "wide-deep-worker-1.wide-deep.default.svc",
        "TRAINING_ROLE": "TRAINER",
        "PADDLE_TRAINING_ROLE": "TRAINER",
        "PADDLE_TRAINER_NUM": "1",
    },
    ("paddle-collective.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "resnet50",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": RESNET_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": "resnet50",
        "PADDLE_NNODES": "2",
        "PADDLE_MASTER": "127.0.0.1:36543",
        "PADDLE_TRAINER_ID": "0",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_TRAINER_ENDPOINTS": (
            "resnet50-0.resnet50.default.svc:36543,resnet50-1.resnet50.default.svc:36543"
        ),
        "PADDLE_CURRENT_ENDPOINT": "resnet50-0.resnet50.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "resnet50-0.resnet50.default.svc",
        "PADDLE_NPROC_PER_NODE": "2",
    },
    ("paddle-collective.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "resnet50",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "1",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": RESNET_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": "resnet50",
        "PADDLE_NNODES": "2",
        "PADDLE_MASTER": "resnet50-0.resnet50.default.svc:36543",
        "PADDLE_TRAINER_ID": "1",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_TRAINER_ENDPOINTS": (
            "resnet50-0.resnet50.default.svc:36543,resnet50-1.resnet50.default.svc:36543"
        ),
        "PADDLE_CURRENT_ENDPOINT": "resnet50-1.resnet50.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "resnet50-1.resnet50.default.svc",
        "PADDLE_NPROC_PER_NODE": "2",
    },
    ("paddle-collective-volcano.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "resnet50-gang",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": GANG_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": "resnet50-gang",
        "PADDLE_NNODES": "2",
        "PADDLE_MASTER": "127.0.0.1:36543",
        "PADDLE_TRAINER_ID": "0",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_TRAINER_ENDPOINTS": (
            "resnet50-gang-0.resnet50-gang.default.svc:36543,"
            "resnet50-gang-1.resnet50-gang.default.svc:36543"
        ),
        "PADDLE_CURRENT_ENDPOINT": "resnet50-gang-0.resnet50-gang.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "resnet50-gang-0.resnet50-gang.default.svc",
        "PADDLE_NPROC_PER_NODE": "2",
    },
    ("paddle-collective-volcano.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "resnet50-gang",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "1",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": GANG_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": "resnet50-gang",
        "PADDLE_NNODES": "2",
        "PADDLE_MASTER": "resnet50-gang-0.resnet50-gang.default.svc:36543",
        "PADDLE_TRAINER_ID": "1",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_TRAINER_ENDPOINTS": (
            "resnet50-gang-0.resnet50-gang.default.svc:36543,"
            "resnet50-gang-1.resnet50-gang.default.svc:36543"
        ),
        "PADDLE_CURRENT_ENDPOINT": "resnet50-gang-1.resnet50-gang.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "resnet50-gang-1.resnet50-gang.default.svc",
        "PADDLE_NPROC_PER_NODE": "2",
    },
    ("paddle-indexed-job.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "ernie",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_WORKER_HOSTS": ERNIE_HOSTS,
        "TRAINHOOK_WORKER_NUM": "3",
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": "ernie",
        "PADDLE_NNODES": "3",
        "PADDLE_MASTER": "127.0.0.1:36543",
        "PADDLE_TRAINER_ID": "0",
        "PADDLE_TRAINERS_NUM": "3",
        "PADDLE_TRAINER_ENDPOINTS": (
            "ernie-0.ernie.default.svc:36543,"
            "ernie-1.ernie.default.svc:36543,"
            "ernie-2.ernie.default.svc:36543"
        ),
        "PADDLE_CURRENT_ENDPOINT": "ernie-0.ernie.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "ernie-0.ernie.default.svc",
        "PADDLE_NPROC_PER_NODE": "8",
    },
    ("paddle-indexed-job.yaml", "worker", 2): {
        "TRAINHOOK_JOB": "ernie",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "2",
        "TRAINHOOK_RANK": "2",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_WORKER_HOSTS": ERNIE_HOSTS,
        "TRAINHOOK_WORKER_NUM": "3",
        "PYTHONUNBUFFERED": "1",
        "PADDLE_JOB_ID": "ernie",
        "PADDLE_NNODES": "3",
        "PADDLE_MASTER": "ernie-0.ernie.default.svc:36543",
        "PADDLE_TRAINER_ID": "2",
        "PADDLE_TRAINERS_NUM": "3",
        "PADDLE_TRAINER_ENDPOINTS": (
            "ernie-0.ernie.default.svc:36543,"
            "ernie-1.ernie.default.svc:36543,"
            "ernie-2.ernie.default.svc:36543"
        ),
        "PADDLE_CURRENT_ENDPOINT": "ernie-2.ernie.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "ernie-2.ernie.default.svc",
        "PADDLE_NPROC_PER_NODE": "8",
    },
    ("xgboost.yaml", "master", 0): {
        "TRAINHOOK_JOB": "xgboost-iris",
        "TRAINHOOK_ROLE": "master",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_MASTER_HOSTS": XGB_MASTER_HOST,
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": XGB_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": XGB_MASTER_HOST,
        "MASTER_PORT": "9999",
        "WORLD_SIZE": "3",
        "RANK": "0",
        "WORKER_PORT": "9999",
        "WORKER_ADDRS": XGB_WORKER_HOSTS,
    },
    ("xgboost.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "xgboost-iris",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "1",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_MASTER_HOSTS": XGB_MASTER_HOST,
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": XGB_WORKER_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": XGB_MASTER_HOST,
        "MASTER_PORT": "9999",
        "WORLD_SIZE": "3",
        "RANK": "1",
        "WORKER_PORT": "9999",
        "WORKER_ADDRS": XGB_WORKER_HOSTS,
    },
    ("jax-kai.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "jax-kai",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": JAX_KAI_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jax-kai-0.jax-kai.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "2",
        "PROCESS_ID": "0",
        "JAX_COORDINATOR_ADDRESS": "jax-kai-0.jax-kai.default.svc:6666",
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "0",
    },
    ("jax-kai.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "jax-kai",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "1",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": JAX_KAI_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jax-kai-0.jax-kai.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "2",
        "PROCESS_ID": "1",
        "JAX_COORDINATOR_ADDRESS": "jax-kai-0.jax-kai.default.svc:6666",
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "1",
    },
    ("jax-kubernetes-gang.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "jax-gang",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "4",
        "TRAINHOOK_WORKER_HOSTS": JAX_GANG_HOSTS,
        "TRAINHOOK_WORKER_NUM": "4",
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jax-gang-0.jax-gang.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "4",
        "PROCESS_ID": "0",
        "JAX_COORDINATOR_ADDRESS": "jax-gang-0.jax-gang.default.svc:6666",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "0",
    },
    ("jax-kubernetes-gang.yaml", "worker", 3): {
        "TRAINHOOK_JOB": "jax-gang",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "3",
        "TRAINHOOK_RANK": "3",
        "TRAINHOOK_WORLD_SIZE": "4",
        "TRAINHOOK_WORKER_HOSTS": JAX_GANG_HOSTS,
        "TRAINHOOK_WORKER_NUM": "4",
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jax-gang-0.jax-gang.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "4",
        "PROCESS_ID": "3",
        "JAX_COORDINATOR_ADDRESS": "jax-gang-0.jax-gang.default.svc:6666",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "3",
    },
    ("jax.yaml", "worker", 0): {
        "TRAINHOOK_JOB": "jax-simple",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "0",
        "TRAINHOOK_RANK": "0",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": JAX_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jax-simple-0.jax-simple.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "2",
        "PROCESS_ID": "0",
        "JAX_COORDINATOR_ADDRESS": "jax-simple-0.jax-simple.default.svc:6666",
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "0",
    },
    ("jax.yaml", "worker", 1): {
        "TRAINHOOK_JOB": "jax-simple",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "1",
        "TRAINHOOK_WORLD_SIZE": "2",
        "TRAINHOOK_WORKER_HOSTS": JAX_HOSTS,
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "COORDINATOR_ADDRESS": "jax-simple-0.jax-simple.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "2",
        "PROCESS_ID": "1",
        "JAX_COORDINATOR_ADDRESS": "jax-simple-0.jax-simple.default.svc:6666",
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "1",
    },
}


def test_env_is_checked_for_rank_0_and_another_pod_of_every_example() -> None:
    for example in EXAMPLE_FILES:
        ranks = {rank for role, index, rank, _ in PODS[example] if (example, role, index) in ENV}
        assert 0 in ranks, example
        assert len(ranks) >= min(2, len(PODS[example])), example


@pytest.mark.parametrize(
    ("example", "role", "index"), sorted(ENV), ids=[f"{e}-{r}-{i}" for e, r, i in sorted(ENV)]
)
def test_training_container_env_is_exactly_the_contract(
    example: str, role: str, index: int
) -> None:
    pod = pod_of(example, role, index)
    assert literal_env(training_container(pod)) == ENV[(example, role, index)]
    assert pod.env == ENV[(example, role, index)]


def test_tf_config_is_compact_json_listing_the_cluster_in_role_order() -> None:
    tf_config = pod_of("tensorflow-ps.yaml", "worker", 0).env["TF_CONFIG"]
    assert json.loads(tf_config) == {
        "cluster": {
            "ps": ["dist-mnist-ps-0.dist-mnist.research.svc:2222"],
            "worker": [
                "dist-mnist-worker-0.dist-mnist.research.svc:2222",
                "dist-mnist-worker-1.dist-mnist.research.svc:2222",
            ],
        },
        "task": {"type": "worker", "index": 0},
        "environment": "cloud",
    }
    assert " " not in tf_config


def test_with_a_cluster_domain_every_host_ends_in_svc_and_the_domain() -> None:
    with open(EXAMPLES / "tensorflow-ps.yaml") as manifest:
        pods = render(list(yaml.safe_load_all(manifest)), cluster_domain="cluster.local")
    worker_1 = next(pod for pod in pods if (pod.role, pod.index) == ("worker", 1))
    assert worker_1.env["TF_CONFIG"] == (
        '{"cluster":{"ps":["dist-mnist-ps-0.dist-mnist.research.svc.cluster.local:2222"],'
        '"worker":["dist-mnist-worker-0.dist-mnist.research.svc.cluster.local:2222",'
        '"dist-mnist-worker-1.dist-mnist.research.svc.cluster.local:2222"]},'
        '"task":{"type":"worker","index":1},"environment":"cloud"}'
    )
    assert (
        worker_1.env["TRAINHOOK_PS_HOSTS"]
        == "dist-mnist-ps-0.dist-mnist.research.svc.cluster.local"
    )


def test_a_single_replica_tensorflow_job_gets_no_tf_config() -> None:
    assert "TF_CONFIG" not in pod_of("tensorflow-mnist.yaml", "worker", 0).env


def test_pytorch_init_container_gets_the_same_env_as_the_training_container() -> None:
    for index in (0, 1):
        pod = pod_of("pytorch.yaml", "worker", index)
        (init,) = pod.pod["spec"]["initContainers"]
        assert init["name"] == "wait-for-master"
        assert literal_env(init) == literal_env(training_container(pod))
        assert literal_env(init)["MASTER_ADDR"] == PT_MASTER_HOST


# ---------------------------------------------------------------------------------------------
# Resources, volumes and scheduling, per role.
# ---------------------------------------------------------------------------------------------

RESOURCES: dict[tuple[str, str], dict[str, dict[str, str]]] = {
    ("jax.yaml", "worker"): {"requests": {"cpu": "2", "memory": "4Gi"}},
    ("jax-kubernetes-gang.yaml", "worker"): {"requests": {"cpu": "2", "memory": "4Gi"}},
    ("jax-kai.yaml", "worker"): {
        "requests": {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "1"},
        "limits": {"nvidia.com/gpu": "1"},
    },
    ("mindspore.yaml", "scheduler"): {"requests": {"cpu": "1", "memory": "2Gi"}},
    ("mindspore.yaml", "worker"): {
        "requests": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
        "limits": {"memory": "32Gi", "nvidia.com/gpu": "1"},
    },
    ("mpi-horovod.yaml", "launcher"): {"requests": {"cpu": "1", "memory": "1Gi"}},
    ("mpi-horovod.yaml", "worker"): {"requests": {"cpu": "4", "memory": "8Gi"}},
    ("mpi-kueue.yaml", "launcher"): {"requests": {"cpu": "1", "memory": "1Gi"}},
    ("mpi-kueue.yaml", "worker"): {"requests": {"cpu": "4", "memory": "8Gi"}},
    ("mpi-pi-mpich.yaml", "launcher"): {"limits": {"cpu": "1", "memory": "1Gi"}},
    ("mpi-pi-mpich.yaml", "worker"): {"limits": {"cpu": "1", "memory": "1Gi"}},
    ("pytorch-coscheduling.yaml", "master"): {
        "requests": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    },
    ("pytorch-coscheduling.yaml", "worker"): {
        "requests": {"cpu": "32", "memory": "256Gi", "nvidia.com/gpu": "8"},
        "limits": {"nvidia.com/gpu": "8"},
    },
    ("paddle-collective-volcano.yaml", "worker"): {
        "requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "2"},
    },
    ("paddle-collective.yaml", "worker"): {
        "requests": {"cpu": "16", "memory": "64Gi", "nvidia.com/gpu": "2"},
        "limits": {"memory": "64Gi", "nvidia.com/gpu": "2"},
    },
    ("paddle-indexed-job.yaml", "worker"): {
        "requests": {"cpu": "64", "memory": "256Gi", "huawei.com/Ascend910": "8"},
        "limits": {"huawei.com/Ascend910": "8"},
    },
    ("paddle-ps.yaml", "ps"): {"requests": {"cpu": "4", "memory": "8Gi"}},
    ("paddle-ps.yaml", "worker"): {"requests": {"cpu": "4", "memory": "8Gi"}},
    ("pytorch.yaml", "master"): {"requests": {"cpu": "2", "memory": "4Gi"}},
    ("pytorch.yaml", "worker"): {"requests": {"cpu": "2", "memory": "4Gi"}},
    ("tensorflow-mnist.yaml", "worker"): {},
    ("tensorflow-ps.yaml", "ps"): {"requests": {"cpu": "2", "memory": "4Gi"}},
    ("tensorflow-ps.yaml", "worker"): {"requests": {"cpu": "4", "memory": "8Gi"}},
    ("xgboost.yaml", "master"): {},
    ("xgboost.yaml", "worker"): {},
}


def test_resources_are_written_down_for_every_role_of_every_example() -> None:
    assert sorted(RESOURCES) == sorted(
        {(example, role) for example in EXAMPLE_FILES for role, *_ in PODS[example]}
    )


@pytest.mark.parametrize(
    ("example", "role"), sorted(RESOURCES), ids=[f"{e}-{r}" for e, r in sorted(RESOURCES)]
)
def test_training_container_resources_are_the_users_plus_the_gpus(example: str, role: str) -> None:
    for pod in rendered(example):
        if pod.role == role:
            resources = training_container(pod).get("resources") or {}
            assert quantities(resources) == RESOURCES[(example, role)], pod.name


def test_the_gpu_limit_goes_to_the_training_container_only() -> None:
    for index in (0, 1):
        (init,) = pod_of("pytorch.yaml", "worker", index).pod["spec"]["initContainers"]
        assert "resources" not in init or not init["resources"]


DSHM_VOLUME = {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}
DSHM_MOUNT = {"name": "dshm", "mountPath": "/dev/shm"}
IMAGENET_VOLUME = {
    "name": "imagenet",
    "persistentVolumeClaim": {"claimName": "imagenet", "readOnly": True},
}
IMAGENET_MOUNT = {"name": "imagenet", "mountPath": "/data/imagenet", "readOnly": True}
LOGS_VOLUME = {"name": "logs", "emptyDir": {}}
LOGS_MOUNT = {"name": "logs", "mountPath": "/train"}

# (volumes of the pod, volume mounts of the training container), as sets of their JSON.
VOLUMES: dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {
    "jax.yaml": ([], []),
    "jax-kubernetes-gang.yaml": ([], []),
    "jax-kai.yaml": ([], []),
    "mindspore.yaml": ([], []),
    "paddle-collective-volcano.yaml": (
        [IMAGENET_VOLUME, DSHM_VOLUME],
        [IMAGENET_MOUNT, DSHM_MOUNT],
    ),
    "paddle-collective.yaml": ([DSHM_VOLUME], [DSHM_MOUNT]),
    "paddle-indexed-job.yaml": ([], []),
    "paddle-ps.yaml": ([], []),
    "pytorch.yaml": ([], []),
    "tensorflow-mnist.yaml": ([LOGS_VOLUME], [LOGS_MOUNT]),
    "tensorflow-ps.yaml": ([], []),
    "xgboost.yaml": ([], []),
}


def as_set(items: list[dict[str, Any]]) -> set[str]:
    return {json.dumps(item, sort_keys=True) for item in items}


@pytest.mark.parametrize("example", sorted(VOLUMES))
def test_pod_volumes_and_mounts_are_exactly_the_users_plus_shm(example: str) -> None:
    volumes, mounts = VOLUMES[example]
    for pod in rendered(example):
        assert as_set(pod.pod["spec"].get("volumes") or []) == as_set(volumes), pod.name
        assert as_set(training_container(pod).get("volumeMounts") or []) == as_set(mounts), pod.name


def test_shm_is_a_memory_backed_volume_of_the_asked_size_at_dev_shm() -> None:
    for example in ("paddle-collective.yaml", "paddle-collective-volcano.yaml"):
        for pod in rendered(example):
            assert DSHM_VOLUME in pod.pod["spec"]["volumes"]
            assert DSHM_MOUNT in training_container(pod)["volumeMounts"]


def test_volcano_pods_are_gang_scheduled_in_their_job_podgroup() -> None:
    for pod in rendered("paddle-collective-volcano.yaml"):
        assert pod.pod["spec"]["schedulerName"] == "volcano"
        annotations = pod.pod["metadata"]["annotations"]
        assert annotations[contract.VOLCANO_GROUP_NAME] == "resnet50-gang"
        assert annotations[contract.VOLCANO_TASK_SPEC] == "worker"
        assert pod.pod["spec"]["nodeSelector"] == {
            "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"
        }


def test_without_the_scheduler_annotation_pods_keep_the_default_scheduler() -> None:
    for pod in rendered("paddle-collective.yaml"):
        assert "schedulerName" not in pod.pod["spec"]
        annotations = pod.pod["metadata"].get("annotations") or {}
        assert contract.VOLCANO_GROUP_NAME not in annotations
        assert contract.VOLCANO_TASK_SPEC not in annotations


# ---------------------------------------------------------------------------------------------
# MPI: the launcher's hostfile and everyone's SSH keys.
# ---------------------------------------------------------------------------------------------

HOSTFILE_LINES = [
    "horovod-mnist-worker-0.horovod-mnist.default.svc slots=1",
    "horovod-mnist-worker-1.horovod-mnist.default.svc slots=1",
]


def projected_file_paths(pod: RenderedPod, field_path: str) -> set[str]:
    """Where, in the training container, a downwardAPI projection of `field_path` appears."""
    volume_files: dict[str, str] = {}
    for volume in pod.pod["spec"].get("volumes") or []:
        sources = [volume.get("downwardAPI")] + [
            source.get("downwardAPI")
            for source in (volume.get("projected") or {}).get("sources", [])
        ]
        for source in filter(None, sources):
            for item in source.get("items", []):
                if item.get("fieldRef", {}).get("fieldPath") == field_path:
                    volume_files[volume["name"]] = item["path"]
    paths = set()
    for mount in training_container(pod).get("volumeMounts") or []:
        if mount["name"] in volume_files:
            file = volume_files[mount["name"]]
            if mount.get("subPath") == file:
                paths.add(mount["mountPath"])
            elif not mount.get("subPath"):
                paths.add(mount["mountPath"].rstrip("/") + "/" + file)
    return paths


def test_mpi_launcher_hostfile_lists_every_worker_with_its_slots() -> None:
    launcher = pod_of("mpi-horovod.yaml", "launcher", 0)
    hostfile = launcher.pod["metadata"]["annotations"][contract.HOSTFILE]
    assert hostfile.splitlines() == HOSTFILE_LINES


def test_mpi_launcher_reads_the_hostfile_at_etc_mpi_hostfile() -> None:
    launcher = pod_of("mpi-horovod.yaml", "launcher", 0)
    field_path = f"metadata.annotations['{contract.HOSTFILE}']"
    assert projected_file_paths(launcher, field_path) == {"/etc/mpi/hostfile"}


def test_every_mpi_pod_mounts_the_job_ssh_secret_at_root_ssh() -> None:
    for pod in rendered("mpi-horovod.yaml"):
        secret_volumes = {
            volume["name"]
            for volume in pod.pod["spec"]["volumes"]
            if volume.get("secret", {}).get("secretName") == "horovod-mnist-ssh"
        }
        assert len(secret_volumes) == 1, pod.name
        mounts = {
            mount["mountPath"]
            for mount in training_container(pod)["volumeMounts"]
            if mount["name"] in secret_volumes
        }
        assert mounts == {"/root/.ssh"}, pod.name


def test_the_kubernetes_gang_example_names_its_podgroup_on_every_pod_and_renders_it() -> None:
    pods = rendered("jax-kubernetes-gang.yaml")
    assert {pod.pod["spec"]["schedulingGroup"]["podGroupName"] for pod in pods} == {"jax-gang"}
    assert all(pod.pod["spec"].get("schedulerName") is None for pod in pods)
    assert render_all(documents_of("jax-kubernetes-gang.yaml")).podgroups == [
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "jax-gang", "namespace": "default"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": "topology.example.com/rack"}]},
                "priorityClassName": "training",
            },
        }
    ]


def test_the_kai_example_joins_every_pod_to_one_podgroup_in_its_queue_within_a_rack() -> None:
    pods = rendered("jax-kai.yaml")
    for pod in pods:
        metadata = pod.pod["metadata"]
        assert pod.pod["spec"]["schedulerName"] == "kai-scheduler"
        assert metadata["labels"]["kai.scheduler/queue"] == "research"
        assert metadata["annotations"]["pod-group-name"] == "jax-kai"
        assert metadata["annotations"]["kai.scheduler/skip-podgrouper"] == "true"
    assert render_all(documents_of("jax-kai.yaml")).podgroups == [
        {
            "apiVersion": "scheduling.run.ai/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": "jax-kai", "namespace": "default"},
            "spec": {
                "minMember": 2,
                "queue": "research",
                "topologyConstraint": {
                    "topology": "cluster-topology",
                    "requiredTopologyLevel": "topology.example.com/rack",
                },
            },
        }
    ]


def test_the_non_root_mpich_pods_read_the_keys_in_the_users_home_by_their_fs_group() -> None:
    for pod in rendered("mpi-pi-mpich.yaml"):
        assert pod.pod["spec"]["securityContext"] == {
            "fsGroup": 1000,
            "fsGroupChangePolicy": "OnRootMismatch",
        }, pod.name
        volume = next(v for v in pod.pod["spec"]["volumes"] if "secret" in v)
        assert volume["secret"] == {"secretName": "pi-ssh", "defaultMode": 0o440}
        mounts = [m["mountPath"] for m in training_container(pod)["volumeMounts"]]
        assert "/home/mpiuser/.ssh" in mounts, pod.name
        assert pod.pod["spec"]["dnsConfig"] == {"searches": ["pi.default.svc.cluster.local"]}


def test_the_mpich_launcher_reads_host_colon_slots_lines() -> None:
    launcher = pod_of("mpi-pi-mpich.yaml", "launcher", 0)
    assert launcher.pod["metadata"]["annotations"][contract.HOSTFILE] == (
        "pi-worker-0.pi.default.svc:1\npi-worker-1.pi.default.svc:1\n"
    )
