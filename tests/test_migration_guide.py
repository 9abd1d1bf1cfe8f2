"""docs/migrating.md: every Trainhook manifest renders to the env its framework needs.

Each YAML block of the guide is either an operator's manifest or the labelled workloads that
replace it; the latter go through the same render as `trainhook render`, and the variables each
framework's own launcher reads are checked exactly.
"""

from __future__ import annotations

import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core import contract
from webhook.core.render import RenderedPod, render_all
from webhook.sweeper.decide import podgroup_spec
from webhook.sweeper.state import read_job_state

GUIDE = (Path(__file__).parent.parent / "docs" / "migrating.md").read_text()
WORKLOAD_APIS = ("apps/v1", "batch/v1")
OPERATORS = [
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "TFJob"),
    ("kubeflow.org/v1", "PaddleJob"),
    ("kubeflow.org/v1", "XGBoostJob"),
    ("kubeflow.org/v1", "JAXJob"),
    ("kubeflow.org/v1", "MPIJob"),
    ("batch.paddlepaddle.org/v1", "PaddleJob"),
    ("mindspore.gitee.com/v1", "MSJob"),
    ("batch.volcano.sh/v1alpha1", "Job"),
]
# Settings that peers or the gang depend on, and the job's lifecycle: one value per job.
JOB_WIDE = (
    contract.PORT,
    contract.SCHEDULER,
    contract.QUEUE,
    contract.SUCCESS_POLICY,
    contract.CLEAN_POD_POLICY,
    contract.BACKOFF_LIMIT,
    contract.RESTART_POLICY,
    contract.TTL_SECONDS_AFTER_FINISHED,
)
KNOWN_ANNOTATIONS = {
    value
    for name, value in vars(contract).items()
    if name.isupper() and isinstance(value, str) and value.startswith(contract.PREFIX)
}


@cache
def blocks() -> list[list[dict[str, Any]]]:
    found = re.findall(r"```yaml\n(.*?)```", GUIDE, flags=re.S)
    return [[doc for doc in yaml.safe_load_all(block) if doc] for block in found]


def pairs() -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """(operator manifest, the Trainhook workloads after it), in the guide's order."""
    documents = blocks()
    result = []
    for operator, trainhook in zip(documents[::2], documents[1::2], strict=True):
        assert len(operator) == 1
        result.append((operator[0], trainhook))
    return result


def test_every_operator_is_shown_next_to_the_workloads_that_replace_it() -> None:
    found = pairs()
    assert [(op["apiVersion"], op["kind"]) for op, _ in found] == OPERATORS
    for operator, workloads in found:
        assert all(w["apiVersion"] in WORKLOAD_APIS for w in workloads)
        assert {w["metadata"]["labels"].get(contract.JOB, w["metadata"]["name"]) for w in workloads}
        assert (
            workloads[0]["metadata"]["labels"].get(contract.JOB, workloads[0]["metadata"]["name"])
            == operator["metadata"]["name"]
        )


def test_the_guide_uses_only_known_keys_and_one_value_per_job_wide_setting() -> None:
    for _, workloads in pairs():
        for workload in workloads:
            keys = {
                *workload["metadata"].get("annotations", {}),
                *workload["metadata"]["labels"],
            }
            assert {k for k in keys if k.startswith(contract.PREFIX)} <= KNOWN_ANNOTATIONS
        for key in JOB_WIDE:
            values = {(w["metadata"].get("annotations") or {}).get(key) for w in workloads}
            assert len(values) == 1, (workloads[0]["metadata"]["name"], key, values)


@pytest.mark.parametrize(
    "field",
    [
        "replicas",
        "restartPolicy",
        "cleanPodPolicy",
        "backoffLimit",
        "ttlSecondsAfterFinished",
        "nprocPerNode",
        "elasticPolicy",
        "schedulingPolicy",
        "successPolicy",
        "withGloo",
        "intranet",
        "slotsPerWorker",
    ],
)
def test_the_field_table_maps_every_operator_field(field: str) -> None:
    table = GUIDE.split("## Fields and their annotations", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| `")]
    assert any(re.search(rf"\b{field}\b", cell) for cell in first_cells), field


@cache
def rendered(job: str) -> list[RenderedPod]:
    (workloads,) = [w for _, w in pairs() if w[0]["metadata"]["name"].startswith(job)]
    return render_all(workloads).pods


def env(job: str, var: str) -> list[str | None]:
    return [pod.env.get(var) for pod in rendered(job)]


def host(pod: str, job: str) -> str:
    return f"{pod}.{job}.default.svc"


def test_pytorchjob_master_and_workers() -> None:
    master = host("mnist-ddp-master-0", "mnist-ddp")
    assert env("mnist-ddp", "MASTER_ADDR") == [master] * 3
    assert env("mnist-ddp", "PET_MASTER_ADDR") == [master] * 3
    assert env("mnist-ddp", "MASTER_PORT") == ["23456"] * 3
    assert env("mnist-ddp", "WORLD_SIZE") == ["3"] * 3
    assert env("mnist-ddp", "RANK") == ["0", "1", "2"]
    assert [p.pod["spec"]["schedulerName"] for p in rendered("mnist-ddp")] == ["volcano"] * 3


def test_elastic_pytorchjob_gives_torchrun_its_rendezvous() -> None:
    assert env("elastic-ddp", "PET_NNODES") == ["2:4"] * 2
    assert env("elastic-ddp", "PET_NPROC_PER_NODE") == ["2"] * 2
    assert env("elastic-ddp", "PET_RDZV_BACKEND") == ["c10d"] * 2
    endpoint = host("elastic-ddp-0", "elastic-ddp") + ":23456"
    assert env("elastic-ddp", "PET_RDZV_ENDPOINT") == [endpoint] * 2
    assert env("elastic-ddp", "PET_RDZV_ID") == ["elastic-ddp"] * 2
    assert env("elastic-ddp", "PET_MAX_RESTARTS") == ["3"] * 2  # the user's own, kept
    assert env("elastic-ddp", "WORLD_SIZE") == ["4"] * 2  # processes: 2 pods x 2
    assert env("elastic-ddp", "RANK") == ["0", "2"]


def test_tfjob_ps_and_workers_get_the_cluster_in_tf_config() -> None:
    configs = [json.loads(value or "") for value in env("dist-mnist", "TF_CONFIG")]
    cluster = {
        "ps": [host("dist-mnist-ps-0", "dist-mnist") + ":2222"],
        "worker": [host(f"dist-mnist-worker-{i}", "dist-mnist") + ":2222" for i in (0, 1)],
    }
    assert [c["cluster"] for c in configs] == [cluster] * 3
    assert [c["task"] for c in configs] == [
        {"type": "ps", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
    ]


def test_paddlejob_collective_finds_its_master_on_the_annotated_port() -> None:
    first = host("paddle-simple-0", "paddle-simple")
    assert env("paddle-simple", "PADDLE_MASTER") == ["127.0.0.1:37777", f"{first}:37777"]
    assert env("paddle-simple", "PADDLE_NNODES") == ["2", "2"]
    assert env("paddle-simple", "PADDLE_JOB_ID") == ["paddle-simple"] * 2
    endpoints = ",".join(host(f"paddle-simple-{i}", "paddle-simple") + ":37777" for i in (0, 1))
    assert env("paddle-simple", "PADDLE_TRAINER_ENDPOINTS") == [endpoints] * 2


def test_xgboostjob_gets_the_rabit_tracker_variables() -> None:
    assert env("xgboost-dist", "MASTER_ADDR") == [host("xgboost-dist-master-0", "xgboost-dist")] * 3
    assert env("xgboost-dist", "MASTER_PORT") == ["9999"] * 3
    assert env("xgboost-dist", "WORLD_SIZE") == ["3"] * 3
    assert env("xgboost-dist", "RANK") == ["0", "1", "2"]
    workers = ",".join(host(f"xgboost-dist-worker-{i}", "xgboost-dist") for i in (0, 1))
    assert env("xgboost-dist", "WORKER_ADDRS") == [workers] * 3


def test_jaxjob_gets_the_arguments_of_distributed_initialize() -> None:
    assert env("jax-dist", "COORDINATOR_ADDRESS") == [host("jax-dist-0", "jax-dist")] * 2
    assert env("jax-dist", "COORDINATOR_PORT") == ["6666"] * 2
    assert env("jax-dist", "NUM_PROCESSES") == ["2"] * 2
    assert env("jax-dist", "PROCESS_ID") == ["0", "1"]


def test_mpijob_launcher_gets_a_hostfile_with_the_slots_per_worker() -> None:
    launcher, *workers = rendered("tf-mnist-mpi")
    assert launcher.role == "launcher"
    assert launcher.pod["metadata"]["annotations"][contract.HOSTFILE] == "".join(
        host(f"tf-mnist-mpi-worker-{i}", "tf-mnist-mpi") + " slots=2\n" for i in (0, 1)
    )
    for var in ("OMPI_MCA_orte_default_hostfile", "PRTE_MCA_prte_default_hostfile"):
        assert launcher.env[var] == contract.MPI_HOSTFILE_PATH
    for pod in (launcher, *workers):
        secrets = [v["secret"]["secretName"] for v in pod.pod["spec"]["volumes"] if "secret" in v]
        assert secrets == ["tf-mnist-mpi-ssh"]


def test_paddle_operator_ps_job_runs_in_parameter_server_mode() -> None:
    servers = ",".join(host(f"wide-and-deep-ps-{i}", "wide-and-deep") + ":36543" for i in (0, 1))
    assert env("wide-and-deep", "TRAINING_ROLE") == ["PSERVER", "PSERVER", "TRAINER", "TRAINER"]
    assert env("wide-and-deep", "PADDLE_PSERVERS_IP_PORT_LIST") == [servers] * 4
    assert env("wide-and-deep", "PADDLE_TRAINER_ID") == [None, None, "0", "1"]
    assert env("wide-and-deep", "PADDLE_CURRENT_ENDPOINT")[2] == (
        host("wide-and-deep-worker-0", "wide-and-deep") + ":36543"
    )


def test_msjob_scheduler_and_workers_get_mindspores_networking() -> None:
    assert env("ms-widedeep", "MS_ROLE") == ["MS_SCHED", "MS_WORKER", "MS_WORKER"]
    assert env("ms-widedeep", "MS_SCHED_PORT") == ["2222"] * 3
    assert env("ms-widedeep", "MS_WORKER_NUM") == ["2"] * 3
    assert env("ms-widedeep", "MS_SERVER_NUM") == ["0"] * 3
    link = "$(MS_WIDEDEEP_MS_SCHEDULER_SERVICE_HOST)"
    assert env("ms-widedeep", "MS_SCHED_HOST") == [None, link, link]  # the scheduler: its pod IP
    limits = [
        p.pod["spec"]["containers"][0].get("resources", {}).get("limits", {})
        for p in rendered("ms-widedeep")
    ]
    assert [lim.get("nvidia.com/gpu") for lim in limits] == [None, "1", "1"]


def test_volcano_job_becomes_a_gang_of_every_pod_in_its_queue() -> None:
    pods = rendered("pytorch-vc")
    assert env("pytorch-vc", "MASTER_ADDR") == [host("pytorch-vc-master-0", "pytorch-vc")] * 3
    assert env("pytorch-vc", "WORLD_SIZE") == ["3"] * 3
    assert env("pytorch-vc", "RANK") == ["0", "1", "2"]
    assert [p.pod["spec"]["schedulerName"] for p in pods] == ["volcano"] * 3
    groups = [p.pod["metadata"]["annotations"][contract.VOLCANO_GROUP_NAME] for p in pods]
    assert groups == ["pytorch-vc"] * 3
    (workloads,) = [w for _, w in pairs() if w[0]["metadata"]["name"] == "pytorch-vc-master"]
    state = read_job_state("default", "pytorch-vc", workloads=render_all(workloads).workloads)
    spec = podgroup_spec(state)
    assert spec is not None
    assert (spec["minMember"], spec["queue"]) == (3, "research")


def test_every_trainhook_manifest_of_the_guide_has_its_env_checked() -> None:
    jobs = {
        w[0]["metadata"]["labels"].get(contract.JOB, w[0]["metadata"]["name"]) for _, w in pairs()
    }
    checked = set(re.findall(r'(?:env|rendered)\("([a-z0-9-]+)"', Path(__file__).read_text()))
    assert jobs == checked
