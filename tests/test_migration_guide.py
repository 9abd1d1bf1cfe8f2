"""docs/migrating.md stays true: each operator manifest in it goes through `trainhook migrate`
and gives exactly the workloads and notes the guide shows after it, those render to the env each
framework needs, and every "no equivalent" it states is checked against the contract's keys.

The variables each framework's own launcher reads are checked exactly.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.core import contract
from webhook.core.migrate import migrate_one
from webhook.core.render import RenderedPod, render_all
from webhook.sweeper.decide import podgroup_spec
from webhook.sweeper.job.state import read_job_state

GUIDE_PATH = Path(__file__).parent.parent / "docs" / "migrating.md"
GUIDE = GUIDE_PATH.read_text()
WORKLOAD_APIS = ("apps/v1", "batch/v1")
OTHER_APIS = ("networking.k8s.io/v1",)  # what a job needs besides its workloads
OPERATORS = [
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "PyTorchJob"),
    ("kubeflow.org/v1", "TFJob"),
    ("kubeflow.org/v1", "PaddleJob"),
    ("kubeflow.org/v1", "XGBoostJob"),
    ("kubeflow.org/v1", "JAXJob"),
    ("kubeflow.org/v1", "MPIJob"),
    ("kubeflow.org/v2beta1", "MPIJob"),
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
    contract.ACTIVE_DEADLINE_SECONDS,
    contract.SUSPEND,
)


@cache
def examples() -> list[tuple[dict[str, Any], list[dict[str, Any]], list[str]]]:
    """(operator manifest, the workloads shown after it, the notes shown after those)."""
    blocks = re.findall(r"```(yaml|text)\n(.*?)```", GUIDE, flags=re.S)
    found: list[tuple[dict[str, Any], list[dict[str, Any]], list[str]]] = []
    position = 0
    while position < len(blocks):
        kind, text = blocks[position]
        assert kind == "yaml", text
        (operator,) = [d for d in yaml.safe_load_all(text) if d]
        shown = [d for d in yaml.safe_load_all(blocks[position + 1][1]) if d]
        position += 2
        notes: list[str] = []
        if position < len(blocks) and blocks[position][0] == "text":
            notes = blocks[position][1].splitlines()
            position += 1
        found.append((operator, shown, notes))
    return found


def pairs() -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    return [(operator, shown) for operator, shown, _ in examples()]


def test_every_operator_is_shown_next_to_the_workloads_that_replace_it() -> None:
    found = pairs()
    assert [(op["apiVersion"], op["kind"]) for op, _ in found] == OPERATORS
    for operator, shown in found:
        workloads = [w for w in shown if w["apiVersion"] not in OTHER_APIS]
        assert all(w["apiVersion"] in WORKLOAD_APIS for w in workloads)
        assert {w["metadata"]["labels"][contract.JOB] for w in workloads} == {
            operator["metadata"]["name"]
        }


@pytest.mark.parametrize("position", range(len(OPERATORS)))
def test_trainhook_migrate_gives_exactly_what_the_guide_shows(position: int) -> None:
    operator, shown, notes = examples()[position]
    migration = migrate_one(operator)
    assert migration.objects + migration.others == shown
    assert migration.notes == notes


def test_the_command_writes_the_same_stream_and_its_notes(tmp_path: Path) -> None:
    manifest = tmp_path / "jobs.yaml"
    manifest.write_text(yaml.safe_dump_all([op for op, _ in pairs()]))
    done = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "migrate", str(manifest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert list(yaml.safe_load_all(done.stdout)) == [w for _, ws in pairs() for w in ws]
    expected = [
        f"note: {manifest} document {n} ({op['kind']} {op['metadata']['name']}): {line}"
        for n, (op, _, notes) in enumerate(examples(), start=1)
        for line in notes
    ]
    assert done.stderr.splitlines() == expected


def test_the_guide_uses_only_known_keys_and_one_value_per_job_wide_setting() -> None:
    known = contract.known_keys()
    for _, shown in pairs():
        workloads = [w for w in shown if w["apiVersion"] not in OTHER_APIS]
        for workload in workloads:
            keys = {
                *workload["metadata"].get("annotations", {}),
                *workload["metadata"]["labels"],
            }
            assert {k for k in keys if k.startswith(contract.PREFIX)} <= known
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
        "activeDeadlineSeconds",
        "suspend",
        "nprocPerNode",
        "elasticPolicy",
        "schedulingPolicy",
        "successPolicy",
        "withGloo",
        "intranet",
        "slotsPerWorker",
        "mpiImplementation",
        "sshAuthMountPath",
        "runLauncherAsWorker",
        "policies",
        "plugins",
    ],
)
def test_the_field_table_maps_every_operator_field(field: str) -> None:
    table = GUIDE.split("## Fields and their annotations", 1)[1].split("\n## ", 1)[0]
    first_cells = [line.split("|")[1] for line in table.splitlines() if line.startswith("| ")]
    assert any(re.search(rf"\b{field}\b", cell) for cell in first_cells), field


def _candidate_key(field: str) -> str:
    """The annotation a field would have: `activeDeadlineSeconds` -> trainhook.io/active-deadline-
    seconds (the contract names its keys after the operators' fields)."""
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1-\2", field.rsplit(".", 1)[-1]).lower()
    return contract.PREFIX + words


def no_equivalent_fields() -> list[str]:
    """Every field the guide or a note shown in it says has no equivalent."""
    fields = []
    for line in GUIDE.splitlines():
        if "no equivalent" not in line:
            continue
        if line.startswith("| `"):
            fields += re.findall(r"`([A-Za-z.]+)`", line.split("|")[1])
        elif re.match(r"[\w.\[\]]+: ", line):  # a note
            fields.append(re.sub(r"\[\d+\]", "", line.split(": ", 1)[0]))
    return fields


def test_nothing_the_guide_calls_without_equivalent_has_an_annotation_now() -> None:
    fields = no_equivalent_fields()
    assert {"runLauncherAsWorker", "metrics"} <= {f.rsplit(".", 1)[-1] for f in fields}
    known = contract.known_keys()
    assert [f for f in fields if _candidate_key(f) in known] == []


def test_the_guide_no_longer_says_what_the_product_now_does() -> None:
    for stale in (
        "no equivalent for StatefulSets",
        "no whole-job restart",
        "`maxRestarts` has no annotation",
        "no action restarts the whole job",
        "`replicas: 0` |",
        "reads `COORDINATOR_ADDRESS`",
    ):
        assert stale not in GUIDE


@cache
def rendered(job: str) -> list[RenderedPod]:
    (workloads,) = [w for _, w in pairs() if w[0]["metadata"]["labels"][contract.JOB] == job]
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
    endpoint = host("elastic-ddp-worker-0", "elastic-ddp") + ":23456"
    assert env("elastic-ddp", "PET_RDZV_ENDPOINT") == [endpoint] * 2
    assert env("elastic-ddp", "PET_RDZV_ID") == ["elastic-ddp"] * 2
    assert env("elastic-ddp", "PET_MAX_RESTARTS") == ["3"] * 2  # trainhook.io/max-restarts
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
    first = host("paddle-simple-worker-0", "paddle-simple")
    assert env("paddle-simple", "PADDLE_MASTER") == ["127.0.0.1:37777", f"{first}:37777"]
    assert env("paddle-simple", "PADDLE_NNODES") == ["2", "2"]
    assert env("paddle-simple", "PADDLE_JOB_ID") == ["paddle-simple"] * 2
    endpoints = ",".join(
        host(f"paddle-simple-worker-{i}", "paddle-simple") + ":37777" for i in (0, 1)
    )
    assert env("paddle-simple", "PADDLE_TRAINER_ENDPOINTS") == [endpoints] * 2


def test_xgboostjob_gets_the_rabit_tracker_variables() -> None:
    assert env("xgboost-dist", "MASTER_ADDR") == [host("xgboost-dist-master-0", "xgboost-dist")] * 3
    assert env("xgboost-dist", "MASTER_PORT") == ["9999"] * 3
    assert env("xgboost-dist", "WORLD_SIZE") == ["3"] * 3
    assert env("xgboost-dist", "RANK") == ["0", "1", "2"]
    workers = ",".join(host(f"xgboost-dist-worker-{i}", "xgboost-dist") for i in (0, 1))
    assert env("xgboost-dist", "WORKER_ADDRS") == [workers] * 3


def test_jaxjob_gets_the_arguments_of_distributed_initialize() -> None:
    assert env("jax-dist", "COORDINATOR_ADDRESS") == [host("jax-dist-worker-0", "jax-dist")] * 2
    assert env("jax-dist", "COORDINATOR_PORT") == ["6666"] * 2
    assert env("jax-dist", "NUM_PROCESSES") == ["2"] * 2
    assert env("jax-dist", "PROCESS_ID") == ["0", "1"]
    # Kubeflow Trainer's names, the coordinator's read by a bare jax.distributed.initialize()
    coordinator = host("jax-dist-worker-0", "jax-dist") + ":6666"
    assert env("jax-dist", "JAX_COORDINATOR_ADDRESS") == [coordinator] * 2
    assert env("jax-dist", "JAX_NUM_PROCESSES") == ["2"] * 2
    assert env("jax-dist", "JAX_PROCESS_ID") == ["0", "1"]


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


def test_mpi_operator_mpijob_launcher_gets_its_hostfile_and_every_implementations_variables() -> (
    None
):
    launcher, *workers = rendered("pi")
    assert launcher.role == "launcher"
    assert launcher.pod["metadata"]["annotations"][contract.HOSTFILE] == "".join(
        host(f"pi-worker-{i}", "pi") + " slots=1\n" for i in (0, 1)
    )
    assert launcher.env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
    assert launcher.env["OMPI_MCA_plm_rsh_args"] == "-o ConnectionAttempts=10"
    assert [w.env["K_MPI_JOB_ROLE"] for w in workers] == ["worker", "worker"]


def test_paddle_operator_ps_job_runs_in_parameter_server_mode() -> None:
    servers = ",".join(host(f"wide-and-deep-ps-{i}", "wide-and-deep") + ":36000" for i in (0, 1))
    assert env("wide-and-deep", "TRAINING_ROLE") == ["PSERVER", "PSERVER", "TRAINER", "TRAINER"]
    assert env("wide-and-deep", "PADDLE_PSERVERS_IP_PORT_LIST") == [servers] * 4
    assert env("wide-and-deep", "PADDLE_TRAINER_ID") == ["0", "1", "0", "1"]  # compat: on ps too
    assert env("wide-and-deep", "PADDLE_CURRENT_ENDPOINT")[2] == (
        host("wide-and-deep-worker-0", "wide-and-deep") + ":36000"
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
    assert [str(lim.get("nvidia.com/gpu")) for lim in limits] == ["None", "1", "1"]


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
    jobs = {w[0]["metadata"]["labels"][contract.JOB] for _, w in pairs()}
    checked = set(re.findall(r'(?:env|rendered)\("([a-z0-9-]+)"', Path(__file__).read_text()))
    assert jobs == checked
