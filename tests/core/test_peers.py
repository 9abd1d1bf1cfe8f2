"""Large jobs: peer lists once per job in a ConfigMap, pods of the same size at any scale."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import jsonpatch
import pytest

from tests.support.builders import statefulset
from webhook.core.errors import TrainhookError
from webhook.core.mutation.admit import Request, admit
from webhook.core.mutation.pod_mutation import PodMutation, mutate_pod
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import expand

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "contract.md"
# The one-liners docs/contract.md gives a script of a large job, run before the framework starts.
EVERY_LIST = (
    "import os; os.environ.update({k[:-5]: open(v).read() for k, v in list(os.environ.items()) "
    'if k.endswith("_FILE") and v.startswith("/etc/trainhook/")})'
)
TF_CONFIG = (
    'import json, os; c = json.load(open(os.environ["TF_CONFIG_FILE"])); '
    'c["task"] = {"type": os.environ["TRAINHOOK_ROLE"], '
    '"index": int(os.environ["TRAINHOOK_ROLE_INDEX"])}; os.environ["TF_CONFIG"] = json.dumps(c)'
)


def job(framework: str, namespace: str = "default", **roles: int) -> list[dict[str, Any]]:
    return [
        statefulset(f"big-{role}", framework, role=role, job="big", replicas=n, namespace=namespace)
        for role, n in roles.items()
    ]


def raw(documents: list[dict[str, Any]], name: str) -> dict[str, Any]:
    """The pod `name` as its StatefulSet controller creates it, before the webhook."""
    for document in documents:
        namespace = document["metadata"]["namespace"]
        mutated = mutate_workload(document, "CREATE", namespace, documents).workload
        for pod in expand(mutated, namespace):
            if pod["metadata"]["name"] == name:
                return pod
    raise KeyError(name)


def mutated(documents: list[dict[str, Any]], name: str) -> PodMutation:
    pod = raw(documents, name)
    return mutate_pod(pod, pod["metadata"]["namespace"])


def hosts(prefix: str, count: int, namespace: str = "default") -> str:
    return ",".join(f"{prefix}-{i}.big.{namespace}.svc" for i in range(count))


def added_bytes(documents: list[dict[str, Any]], name: str) -> int:
    """What Trainhook adds to one pod, as compact JSON bytes of the pod object."""
    pod = raw(documents, name)
    before = len(json.dumps(pod, separators=(",", ":")))
    return len(json.dumps(mutated(documents, name).pod, separators=(",", ":"))) - before


def digest(data: dict[str, str]) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()[:10]


def test_a_64_pod_job_keeps_its_host_lists_in_env_and_mounts_nothing() -> None:
    result = mutated(job("pytorch", master=1, worker=63), "big-worker-7")
    assert result.env["TRAINHOOK_MASTER_HOSTS"] == "big-master-0.big.default.svc"
    assert result.env["TRAINHOOK_WORKER_HOSTS"] == hosts("big-worker", 63)
    assert result.peers is None
    assert "volumes" not in result.pod["spec"]
    assert "schedulingGates" not in result.pod["spec"]


def test_a_65_pod_job_reads_its_host_lists_from_the_peers_configmap() -> None:
    result = mutated(job("pytorch", master=1, worker=64), "big-worker-7")
    data = {
        "TRAINHOOK_MASTER_HOSTS": "big-master-0.big.default.svc",
        "TRAINHOOK_WORKER_HOSTS": hosts("big-worker", 64),
    }
    name = f"big-peers-{digest(data)}"
    assert result.peers is not None
    assert (result.peers.name, result.peers.data) == (name, data)
    assert result.env == {
        "TRAINHOOK_JOB": "big",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "7",
        "TRAINHOOK_RANK": "8",
        "TRAINHOOK_WORLD_SIZE": "65",
        "TRAINHOOK_MASTER_HOSTS_FILE": "/etc/trainhook/TRAINHOOK_MASTER_HOSTS",
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS_FILE": "/etc/trainhook/TRAINHOOK_WORKER_HOSTS",
        "TRAINHOOK_WORKER_NUM": "64",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": "big-master-0.big.default.svc",
        "PET_MASTER_ADDR": "big-master-0.big.default.svc",
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "NNODES": "65",
        "PET_NNODES": "65",
        "NODE_RANK": "8",
        "PET_NODE_RANK": "8",
        "NPROC_PER_NODE": "1",
        "PET_NPROC_PER_NODE": "1",
        "WORLD_SIZE": "65",
        "RANK": "8",
    }
    # Not optional: the kubelet holds the pod until the sweeper has created the ConfigMap.
    assert result.pod["spec"]["volumes"] == [
        {"name": "trainhook-peers", "configMap": {"name": name}}
    ]
    assert result.pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "trainhook-peers", "mountPath": "/etc/trainhook", "readOnly": True}
    ]
    # Nor scheduled before the sweeper has proven the ConfigMap under that name its own.
    assert result.pod["spec"]["schedulingGates"] == [
        {"name": "trainhook.io/waiting-for-owned-objects"}
    ]


def test_every_pod_of_a_job_mounts_the_same_configmap_and_a_scale_names_a_new_one() -> None:
    documents = job("jax", worker=100)
    names = {mutated(documents, f"big-worker-{i}").env["PROCESS_ID"] for i in (0, 50, 99)}
    assert names == {"0", "50", "99"}
    found = [mutated(documents, f"big-worker-{i}").peers for i in (0, 50, 99)]
    peers = {files.name for files in found if files is not None}
    assert len(peers) == 1
    scaled = mutated(job("jax", worker=101), "big-worker-0").peers
    assert scaled is not None and scaled.name not in peers
    assert scaled.data["TRAINHOOK_WORKER_HOSTS"] == hosts("big-worker", 101)


def test_names_past_2560_bytes_of_hosts_move_even_a_small_job_to_the_configmap() -> None:
    # 64 hosts big-worker-<i>.big.<namespace>.svc: 2,549 bytes with a 17-letter namespace,
    # 2,613 with one letter more; the bound is 2,560.
    fits = mutated(job("jax", namespace="n" * 17, worker=64), "big-worker-0")
    assert len(fits.env["TRAINHOOK_WORKER_HOSTS"]) == 2549
    assert fits.peers is None
    over = mutated(job("jax", namespace="n" * 18, worker=64), "big-worker-0")
    assert over.peers is not None
    assert len(over.peers.data["TRAINHOOK_WORKER_HOSTS"]) == 2613
    assert "TRAINHOOK_WORKER_HOSTS" not in over.env


def test_a_large_tensorflow_pod_gets_tf_config_file_and_the_one_liner_rebuilds_tf_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    documents = job("tensorflow", chief=1, ps=2, worker=8189)
    result = mutated(documents, "big-worker-5")
    assert result.peers is not None
    assert {k: v for k, v in result.env.items() if k.startswith("TF_")} == {
        "TF_CONFIG_FILE": "/etc/trainhook/TF_CONFIG"
    }
    file = tmp_path / "TF_CONFIG"
    file.write_text(result.peers.data["TF_CONFIG"])
    # The pod's env as the process's, for the one-liner only (nothing leaks into this process).
    environ = {**result.env, "TF_CONFIG_FILE": str(file)}
    monkeypatch.setattr(os, "environ", environ)
    exec(TF_CONFIG, {})
    assert json.loads(environ["TF_CONFIG"]) == {
        "cluster": {
            "chief": ["big-chief-0.big.default.svc:2222"],
            "ps": hosts("big-ps", 2).replace(".svc", ".svc:2222").split(","),
            "worker": hosts("big-worker", 8189).replace(".svc", ".svc:2222").split(","),
        },
        "task": {"type": "worker", "index": 5},
        "environment": "cloud",
    }


def test_the_every_list_one_liner_gives_a_large_paddle_pod_the_lists_a_small_one_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    documents = job("paddle", ps=2, worker=100, heter=1)
    result = mutated(documents, "big-worker-3")
    assert result.peers is not None
    assert {k: v for k, v in result.env.items() if k.startswith("PADDLE_")} == {
        "PADDLE_JOB_ID": "big",
        "PADDLE_NNODES": "103",
        "PADDLE_MASTER": "big-worker-0.big.default.svc:36543",
        "PADDLE_TRAINER_ID": "3",
        "PADDLE_TRAINERS_NUM": "100",
        "PADDLE_TRAINER_ENDPOINTS_FILE": "/etc/trainhook/PADDLE_TRAINER_ENDPOINTS",
        "PADDLE_CURRENT_ENDPOINT": "big-worker-3.big.default.svc:36543",
        "PADDLE_PORT": "36543",
        "PADDLE_TRAINING_ROLE": "TRAINER",
        "PADDLE_TRAINER_NUM": "1",
        "PADDLE_PSERVERS_IP_PORT_LIST_FILE": "/etc/trainhook/PADDLE_PSERVERS_IP_PORT_LIST",
        "PADDLE_HETER_ENDPOINTS_FILE": "/etc/trainhook/PADDLE_HETER_ENDPOINTS",
    }
    for key, content in result.peers.data.items():
        (tmp_path / key).write_text(content)
    environ = {k: v.replace("/etc/trainhook/", f"{tmp_path}/") for k, v in result.env.items()}
    monkeypatch.setattr(os, "environ", environ)
    exec(EVERY_LIST.replace('"/etc/trainhook/"', repr(f"{tmp_path}/")), {})

    def endpoints(prefix: str, count: int) -> str:
        return hosts(prefix, count).replace(".svc", ".svc:36543")

    assert environ["PADDLE_TRAINER_ENDPOINTS"] == endpoints("big-worker", 100)
    assert environ["PADDLE_PSERVERS_IP_PORT_LIST"] == endpoints("big-ps", 2)
    assert environ["PADDLE_HETER_ENDPOINTS"] == endpoints("big-heter", 1)
    assert environ["TRAINHOOK_WORKER_HOSTS"] == hosts("big-worker", 100)


def test_the_contract_gives_both_one_liners_as_the_tests_run_them() -> None:
    text = CONTRACT.read_text()
    assert EVERY_LIST in text
    assert TF_CONFIG in text


def test_a_large_xgboost_pod_reads_worker_addrs_from_its_file() -> None:
    result = mutated(job("xgboost", master=1, worker=8191), "big-worker-0")
    assert result.peers is not None
    assert result.env["WORKER_ADDRS_FILE"] == "/etc/trainhook/WORKER_ADDRS"
    assert "WORKER_ADDRS" not in result.env
    assert result.peers.data["WORKER_ADDRS"] == hosts("big-worker", 8191)


def test_the_launcher_of_a_large_mpi_job_mounts_its_hostfile_from_the_configmap() -> None:
    documents = job("mpi", launcher=1, worker=100)
    documents[1]["spec"]["template"]["metadata"]["annotations"] = {
        "trainhook.io/nproc-per-node": "8"
    }
    result = mutated(documents, "big-launcher-0")
    assert result.peers is not None
    assert result.peers.data["hostfile"] == "".join(
        f"big-worker-{i}.big.default.svc slots=8\n" for i in range(100)
    )
    name = result.peers.name
    assert result.pod["spec"]["volumes"] == [
        {"name": "trainhook-peers", "configMap": {"name": name}},
        {"name": "mpi-ssh", "secret": {"secretName": "big-ssh", "defaultMode": 0o600}},
        {
            "name": "mpi-hostfile",
            "configMap": {
                "name": name,
                "items": [
                    {"key": "hostfile", "path": "hostfile"},
                    {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
                ],
            },
        },
    ]
    assert result.pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "trainhook-peers", "mountPath": "/etc/trainhook", "readOnly": True},
        {"name": "mpi-ssh", "mountPath": "/root/.ssh", "readOnly": True},
        {"name": "mpi-hostfile", "mountPath": "/etc/mpi", "readOnly": True},
    ]
    assert "trainhook.io/hostfile" not in result.pod["metadata"]["annotations"]
    assert result.env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"


def test_admitting_a_large_jobs_pod_twice_changes_nothing_the_second_time() -> None:
    pod = raw(job("tensorflow", worker=500), "big-worker-1")
    first = admit(Request("Pod", "CREATE", pod, "default"))
    assert first is not None
    patched = jsonpatch.apply_patch(pod, first.patch)
    again = admit(Request("Pod", "CREATE", patched, "default"))
    assert again is not None and again.patch == []


def test_lists_too_large_for_one_configmap_are_refused_with_the_sizes() -> None:
    documents = job("tensorflow", namespace="n" * 60, worker=8192)
    with pytest.raises(TrainhookError) as caught:
        mutated(documents, "big-worker-0")
    assert str(caught.value) == (
        "job big has 8192 pods whose peer lists take 1447840 bytes; one ConfigMap holds at "
        "most 1032192: use shorter workload, Service or namespace names, or fewer pods"
    )


FRAMEWORK_JOBS = {
    "pytorch": {"master": 1, "worker": 0},
    "tensorflow": {"chief": 1, "ps": 2, "worker": 0},
    "paddle": {"ps": 2, "worker": 0, "heter": 1},
    "mpi": {"launcher": 1, "worker": 0},
    "xgboost": {"master": 1, "worker": 0},
    "jax": {"worker": 0},
    "mindspore": {"scheduler": 1, "worker": 0},
}


def sized(framework: str, pods: int, namespace: str = "default") -> list[dict[str, Any]]:
    roles = FRAMEWORK_JOBS[framework]
    counts = {r: n or pods - sum(roles.values()) for r, n in roles.items()}
    return job(framework, namespace, **counts)


def largest_addition(framework: str, pods: int, namespace: str = "default") -> int:
    documents = sized(framework, pods, namespace)
    names = [f"big-{role}-0" for role in FRAMEWORK_JOBS[framework]]
    return max(added_bytes(documents, name) for name in names)


@pytest.mark.parametrize("framework", FRAMEWORK_JOBS)
def test_what_trainhook_adds_to_a_pod_stays_under_8_kib_at_the_bound_and_at_8192_pods(
    framework: str,
) -> None:
    # The longest namespace that keeps 64 pods' lists in env, whose host names then take
    # close to the 2,560 bytes the bound allows.
    length = next(
        n
        for n in range(30, 0, -1)
        if mutated(sized(framework, 64, "n" * n), "big-worker-0").peers is None
    )
    assert length in (16, 17)
    assert largest_addition(framework, 64, "n" * length) < 8192
    assert largest_addition(framework, 8192) < 8192


@pytest.mark.parametrize("framework", ["pytorch", "jax", "xgboost", "mindspore"])
def test_pods_of_8192_pod_jobs_are_as_small_as_a_64_pod_jobs(framework: str) -> None:
    assert largest_addition(framework, 8192) <= largest_addition(framework, 64)
