"""The operators' own example jobs (tests/corpus) migrate, render, admit, and give each pod what
its operator gave it, or a difference the migration guide names.

The operators' env comes from tests/support/operators.py, written from each operator's Go
source; Trainhook's from the same render `trainhook render` runs, and the admission path must
give every workload and pod exactly what render shows.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.e2e.kubelet import expand as expand_variables
from tests.e2e.kubelet import mapping_for
from tests.support import operators as op
from tests.support.pod_files import pod_files
from webhook.core import contract
from webhook.core.migrate import migrate
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.render import RenderedPod, expand, render_all

CORPUS = Path(__file__).parent / "corpus"
GUIDE = (Path(__file__).parent.parent / "docs" / "migrating.md").read_text()
NEWEST = kubernetes_validate.latest_version()


@dataclass(frozen=True)
class Case:
    job: str
    operator: op.Pods
    namespace: str = "default"
    hostfile: str | None = None  # the MPI launcher's, as the operator writes it
    framework: str | None = None  # trainhook migrate --framework
    roles: dict[str, str] = field(default_factory=dict)  # Volcano task -> Trainhook role
    files: Files = field(default_factory=dict)  # the files the operator gives each pod
    # Pods Trainhook runs beyond the operator's (a launcher the operator ran as a node too).
    extra_pods: int = 0


# (task or role, index) -> path -> what a script reading the file gets
Files = dict[tuple[str, int], dict[str, str]]
VOLCANO_SSH_KEYS = ("id_rsa", "id_rsa.pub", "authorized_keys", "config")


def mpi(job: str, pods_and_hostfile: tuple[op.Pods, str]) -> Case:
    return Case(job, pods_and_hostfile[0], hostfile=pods_and_hostfile[1])


def volcano(
    job: str,
    tasks: dict[str, int],
    plugins: set[str],
    *,
    pytorch: tuple[str, str, int] | None = None,
    mpi: tuple[str, str] | None = None,
    framework: str | None = None,
    roles: dict[str, str] | None = None,
) -> Case:
    """A Volcano Job as its plugins (pkg/controllers/job/plugins) give its pods env and files,
    the plugins its admission adds to a framework plugin (svc; ssh for mpi) included. Files: the
    svc plugin's `/etc/volcano/<task>.host` (its ConfigMap, mounted whole, also shows the
    VC_<TASK>_HOSTS and VC_<TASK>_NUM keys as files; scripts read the env), and the ssh plugin's
    keys under /root/.ssh (random, so compared by name)."""
    if pytorch is not None or mpi is not None:
        plugins = plugins | {"svc"}
    if mpi is not None:
        plugins = plugins | {"ssh"}
    pods = op.volcano_job(job, tasks, plugins, pytorch=pytorch, mpi=mpi)
    files: Files = {}
    for task, count in tasks.items():
        for index in range(count):
            found = files.setdefault((task, index), {})
            if "svc" in plugins:
                for other, n in tasks.items():
                    hosts = "\n".join(f"{job}-{other}-{i}.{job}" for i in range(n))
                    found[f"/etc/volcano/{other.replace('-', '_')}.host"] = hosts
            if "ssh" in plugins:
                for key in VOLCANO_SSH_KEYS:
                    found[f"/root/.ssh/{key}"] = f"<Secret {job}-ssh: {key}>"
    if roles is None:
        roles = {task: task for task in tasks}
    if mpi is not None:
        roles = {mpi[0]: "launcher", mpi[1]: "worker"}
    elif pytorch is not None:
        roles = {pytorch[0]: "master", pytorch[1]: "worker"}
    return Case(job, pods, framework=framework, roles=roles, files=files)


def trainer(job: str, nodes: int, plugin: str, nproc: str = "1") -> Case:
    """A Kubeflow Trainer TrainJob's trainer pods (`<job>-node-0-<i>`), as its plugins
    (pkg/runtime/framework/plugins/{torch,jax}) give the node container env: torch's PET_*
    (PET_NPROC_PER_NODE `auto`, which on pods without GPUs is the CPUs the node asks for, at
    least 1), jax's JAX_*; the coordinator is pod 0 on port 29500."""
    master = f"{job}-node-0-0.{job}"
    pods: op.Pods = {}
    for index in range(nodes):
        if plugin == "torch":
            env = {
                "PET_NNODES": str(nodes),
                "PET_NPROC_PER_NODE": nproc,
                "PET_NODE_RANK": str(index),
                "PET_MASTER_ADDR": master,
                "PET_MASTER_PORT": "29500",
            }
        else:
            env = {
                "JAX_NUM_PROCESSES": str(nodes),
                "JAX_PROCESS_ID": str(index),
                "JAX_COORDINATOR_ADDRESS": f"{master}:29500",
            }
        pods[("node", index)] = env
    return Case(job, pods, roles={"node": "worker"})


def trainer_mpi(job: str, nodes: int, slots: int, ssh: str) -> Case:
    """A Kubeflow Trainer TrainJob on an OpenMPI runtime with runLauncherAsNode, as its mpi
    plugin (pkg/runtime/framework/plugins/mpi/mpi.go) gives its pods: the launcher's node
    container the hostfile /etc/mpi/hostfile (the launcher, then `max(numNodes - 1, 1)` node
    pods, `slots=<numProcPerNode>`) and four OMPI_MCA_ variables; every pod the job's SSH keys
    (id_rsa, id_rsa.pub, authorized_keys) at the runtime's sshAuthMountPath. Trainhook runs the
    launcher as one pod more."""
    hosts = [f"{job}-launcher-0-0.{job}"] + [
        f"{job}-node-0-{i}.{job}" for i in range(max(nodes - 1, 1))
    ]
    hostfile = "".join(f"{host} slots={slots}\n" for host in hosts)
    keys = {f"{ssh}/{key}": f"<Secret {job}-ssh: {key}>" for key in TRAINER_SSH_KEYS}
    pods: op.Pods = {
        ("launcher", 0): {
            "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_set_default_slots": str(slots),
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        }
    }
    files: Files = {("launcher", 0): {"/etc/mpi/hostfile": hostfile, **keys}}
    for index in range(len(hosts) - 1):
        pods[("node", index)] = {}
        files[("node", index)] = dict(keys)
    return Case(job, pods, roles={"node": "worker"}, files=files, extra_pods=1)


TRAINER_SSH_KEYS = ("id_rsa", "id_rsa.pub", "authorized_keys")


def jobset(job: str, replicated: dict[str, tuple[int, int]]) -> Case:
    """A JobSet's pods: replicated Job R of (Jobs, pods per Job) has pods `<job>-R-<i>-<j>`. Its
    controller gives them no env, only labels and annotations (checked on their own below)."""
    pods: op.Pods = {}
    roles: dict[str, str] = {}
    for step, (jobs, per_job) in replicated.items():
        for index in range(jobs):
            role = step if jobs == 1 else f"{step}-{index}"
            roles[role] = role
            for pod in range(per_job):
                pods[(role, pod)] = {}
    return Case(job, pods, roles=roles)


CASES: dict[str, Case] = {
    "training-operator/pytorchjob-simple.yaml": Case(
        "pytorch-simple", op.pytorchjob("pytorch-simple", {"master": 1, "worker": 1}), "kubeflow"
    ),
    "training-operator/pytorchjob-elastic-imagenet.yaml": Case(
        "elastic-example-imagenet",
        op.pytorchjob("elastic-example-imagenet", {"worker": 2}, elastic=(1, 3), max_restarts=100),
    ),
    "training-operator/tfjob-dist-mnist.yaml": Case(
        "dist-mnist-for-e2e-test",
        op.tfjob("dist-mnist-for-e2e-test", "default", {"chief": 1, "ps": 1, "worker": 2}),
    ),
    "training-operator/tfjob-simple.yaml": Case(
        "tfjob-simple", op.tfjob("tfjob-simple", "kubeflow", {"worker": 2}), "kubeflow"
    ),
    "training-operator/paddlejob-simple-cpu.yaml": Case(
        "paddle-simple-cpu", op.kubeflow_paddlejob("paddle-simple-cpu", 2, port=37777), "kubeflow"
    ),
    "training-operator/xgboostjob-iris.yaml": Case(
        "xgboost-dist-iris-test-train",
        op.xgboostjob("xgboost-dist-iris-test-train", 2, master_port=9991, worker_port=9991),
    ),
    "training-operator/jaxjob-simple.yaml": Case(
        "jaxjob-simple", op.jaxjob("jaxjob-simple", 2), "kubeflow"
    ),
    "training-operator/mpijob-v1-tensorflow-mnist.yaml": mpi(
        "tensorflow-mnist", op.training_operator_mpijob("tensorflow-mnist", 2, 1)
    ),
    "mpi-operator/mpijob-pi.yaml": mpi("pi", op.mpi_operator_mpijob("pi", "default", 2, 1)),
    "mpi-operator/mpijob-pi-intel.yaml": mpi(
        "pi", op.mpi_operator_mpijob("pi", "default", 2, 1, "Intel")
    ),
    "mpi-operator/mpijob-pi-mpich.yaml": mpi(
        "pi", op.mpi_operator_mpijob("pi", "default", 2, 1, "MPICH")
    ),
    "mpi-operator/mpijob-horovod-tensorflow-mnist.yaml": mpi(
        "tensorflow-mnist", op.mpi_operator_mpijob("tensorflow-mnist", "default", 2, 1)
    ),
    "paddle-operator/paddlejob-simple.yaml": Case(
        "simple", op.paddle_operator_job("simple", {"worker": 2})
    ),
    "paddle-operator/paddlejob-wide-and-deep-service.yaml": Case(
        "wide-ande-deep-service",
        op.paddle_operator_job("wide-ande-deep-service", {"ps": 2, "worker": 2}),
    ),
    "ms-operator/msjob-wide-deep-ps-distribute.yaml": Case(
        "ms-widedeep-ps-distribute", op.msjob({"scheduler": 1, "ps": 2, "worker": 4})
    ),
    "ms-operator/msjob-wide-deep-dataparallel.yaml": Case(
        "ms-widedeep-dataparallel", op.msjob({"scheduler": 1, "worker": 4})
    ),
    "volcano/job-pytorch-plugin.yaml": volcano(
        "pytorch-job", {"master": 1, "worker": 2}, set(), pytorch=("master", "worker", 23456)
    ),
    "volcano/job-mpi-plugin.yaml": volcano(
        "lm-mpi-job", {"mpimaster": 1, "mpiworker": 2}, set(), mpi=("mpimaster", "mpiworker")
    ),
    # Without the mpi plugin: the ssh plugin and a launcher task and a worker task make it MPI.
    "volcano/job-mpi-ssh-svc.yaml": volcano(
        "lm-mpi-job",
        {"mpimaster": 1, "mpiworker": 2},
        {"ssh", "svc"},
        roles={"mpimaster": "launcher", "mpiworker": "worker"},
    ),
    "volcano/job-tensorflow-env-svc.yaml": volcano(
        "tensorflow-dist-mnist", {"ps": 1, "worker": 2}, {"env", "svc"}, framework="tensorflow"
    ),
    "volcano/job-mindspore-ssh-env-svc.yaml": volcano(
        "mindspore-cpu", {"pod": 8}, {"ssh", "env", "svc"}
    ),
    # No plugin: generic; the trainer task's TaskCompleted → CompleteJob ends the job.
    "volcano/job-paddle-ctr-trainer-completes.yaml": volcano(
        "ctr-volcano", {"pserver": 2, "trainer": 2}, set()
    ),
    "trainer/trainjob-torch-multi-node.yaml": trainer("multi-node-example", 3, "torch"),
    "trainer/trainjob-deepspeed-mpi.yaml": trainer_mpi(
        "deepspeed-example", 2, 1, "/home/mpiuser/.ssh"
    ),
    "jobset/jobset-pytorch-mnist.yaml": jobset("pytorch", {"workers": (1, 4)}),
}

# What an operator gives that Trainhook gives differently, by variable; docs/migrating.md names
# each one (test_every_difference_is_named_in_the_guide). Host names alone differing in form
# (a short name, or `<pod>.<namespace>.svc`, for Trainhook's `<pod>.<job>.<namespace>.svc`) are
# not listed: they resolve to the same pod.
DIFFERENCES: dict[str, str] = {
    # training-operator MPIJob v1 runs ranks through kubectl exec; Trainhook over SSH.
    "OMPI_MCA_plm_rsh_agent": "ssh, not kubexec.sh",
    # paddle: the master pod's own rendezvous address (launch starts its server on it).
    "POD_IP_DUMMY": "the master pod gets 127.0.0.1",
    "PADDLE_MASTER": "the master pod gets 127.0.0.1:<port>",
    # paddle-operator's own port, which it picks at random.
    "PADDLE_PORT": "a random port the operator picks; Trainhook sets the port it serves on",
    # ms-operator: the scheduler Service's IP comes through the kubelet's Service links.
    "MS_SCHED_HOST": "$(<SERVICE>_SERVICE_HOST)",
    "MS_NODE_ID": "the worker's index, not the pod name",
}


def _difference_key(name: str) -> str:
    return re.sub(r"^VC_(?!TASK_INDEX).*_(HOSTS|NUM)$", r"VC_<TASK>_\1", name)


@cache
def migrated(name: str) -> tuple[tuple[dict[str, Any], ...], tuple[str, ...]]:
    documents = [d for d in yaml.safe_load_all((CORPUS / name).read_text()) if d]
    (migration,) = migrate(documents, CASES[name].framework)
    return tuple(migration.objects), tuple(migration.notes)


@cache
def rendered(name: str) -> tuple[RenderedPod, ...]:
    return tuple(render_all(list(migrated(name)[0])).pods)


def test_the_corpus_has_every_kind_and_framework_and_every_file_a_case() -> None:
    files = {str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*.yaml")}
    assert files == set(CASES)
    kinds = set()
    for name in files:
        for doc in yaml.safe_load_all((CORPUS / name).read_text()):
            if doc:
                kinds.add((doc["apiVersion"], doc["kind"]))
    assert kinds == {
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
        ("trainer.kubeflow.org/v1alpha1", "TrainJob"),
        ("trainer.kubeflow.org/v1alpha1", "ClusterTrainingRuntime"),
        ("jobset.x-k8s.io/v1alpha2", "JobSet"),
    }
    frameworks = {pods[0].framework.name for pods in map(rendered, CASES)}
    assert frameworks == {
        "pytorch",
        "tensorflow",
        "paddle",
        "xgboost",
        "jax",
        "mpi",
        "mindspore",
        "generic",
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_file_says_where_it_came_from_and_its_license(name: str) -> None:
    header = (CORPUS / name).read_text().splitlines()[:3]
    assert re.fullmatch(
        r"# From https://github\.com/[\w.-]+/[\w.-]+ at commit [0-9a-f]{40},", header[0]
    )
    assert header[1].startswith("# ") and header[1].endswith(".")
    assert header[2].startswith("# License: Apache-2.0")


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_migrated_workloads_are_valid_and_admit_exactly_as_they_render(name: str) -> None:
    objects = list(migrated(name)[0])
    rendering = render_all(objects)
    namespace = CASES[name].namespace
    assert {o["metadata"]["labels"][contract.JOB] for o in objects} == {CASES[name].job}
    # StatefulSets first: a Job's template is fixed once it exists.
    kinds = [o["kind"] for o in objects]
    assert kinds == sorted(kinds, key=lambda k: k == "Job")
    for obj, shown in zip(objects, rendering.workloads, strict=True):
        kubernetes_validate.validate(obj, NEWEST, strict=True)
        siblings = [o for o in objects if o is not obj]
        request = Request(obj["kind"], "CREATE", obj, namespace)
        outcome = admit(request, Found(siblings=siblings))
        assert outcome is not None
        served = jsonpatch.apply_patch(copy.deepcopy(obj), outcome.patch)
        assert served == shown
    pods = {p.name: p.pod for p in rendering.pods}
    for workload in rendering.workloads:
        others = [w for w in rendering.workloads if w is not workload]
        for pod in expand(workload, namespace):
            request = Request("Pod", "CREATE", pod, namespace)
            outcome = admit(request, Found(siblings=others, owner=workload))
            assert outcome is not None
            served = jsonpatch.apply_patch(copy.deepcopy(pod), outcome.patch)
            assert served == pods[served["metadata"]["name"]]
            kubernetes_validate.validate(served, NEWEST, strict=True)


def _normalized(value: str, job: str, namespace: str) -> str:
    """Host names in one form: Trainhook's `<pod>.<job>.<ns>.svc`, the training-operator's
    `<pod>.<ns>.svc` and Volcano's `<pod>.<job>` all become `<pod>`."""
    for suffix in (f".{job}.{namespace}.svc", f".{namespace}.svc", f".{job}"):
        value = value.replace(suffix, "")
    return value


def _same(name: str, ours: str | None, theirs: str, case: Case) -> bool:
    if ours is None:
        return False
    ours, theirs = (_normalized(v, case.job, case.namespace) for v in (ours, theirs))
    if name == "TF_CONFIG":
        return bool(json.loads(ours) == json.loads(theirs))
    return ours == theirs


def kubelet_env(pod: RenderedPod) -> dict[str, str]:
    """The training container's literal env with `$(VAR)` expanded, as the kubelet does."""
    resolved: dict[str, str] = {}
    for var, value in pod.env.items():
        resolved[var] = expand_variables(value, mapping_for(resolved))
    return resolved


def env_differences(name: str) -> dict[str, tuple[str | None, str]]:
    case = CASES[name]
    pods = {(p.role, p.index): kubelet_env(p) for p in rendered(name)}
    found: dict[str, tuple[str | None, str]] = {}
    assert len(pods) == len(case.operator) + case.extra_pods
    for (where, index), theirs in case.operator.items():
        env = pods[(case.roles.get(where, where), index)]
        for var, value in theirs.items():
            if not _same(var, env.get(var), value, case):
                found.setdefault(var, (env.get(var), value))
    return found


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_pod_gets_its_operators_env_or_a_named_difference(name: str) -> None:
    unexplained = {
        var: values
        for var, values in env_differences(name).items()
        if _difference_key(var) not in DIFFERENCES
    }
    assert unexplained == {}


# Files an operator gives that Trainhook does not: (corpus file, path prefix) -> why;
# docs/migrating.md names each prefix.
FILE_DIFFERENCES: dict[tuple[str, str], str] = {
    # Trainer's launcher ran ranks too (runLauncherAsNode); Trainhook's hostfile lists workers.
    ("trainer/trainjob-deepspeed-mpi.yaml", "/etc/mpi/hostfile"): "the workers only",
}


def file_differences(name: str) -> dict[str, tuple[str | None, str]]:
    case = CASES[name]
    pods = {(p.role, p.index): pod_files(p) for p in rendered(name)}
    found: dict[str, tuple[str | None, str]] = {}
    for (where, index), theirs in case.files.items():
        ours = pods[(case.roles.get(where, where), index)]
        for path, value in theirs.items():
            mine = ours.get(path)
            if mine is None or _normalized(mine, case.job, case.namespace) != _normalized(
                value, case.job, case.namespace
            ):
                found.setdefault(path, (mine, value))
    return found


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.files))
def test_each_pod_gets_the_files_its_operator_gave_or_a_named_difference(name: str) -> None:
    unexplained = {
        path: values
        for path, values in file_differences(name).items()
        if not any(n == name and path.startswith(p) for n, p in FILE_DIFFERENCES)
    }
    assert unexplained == {}


def test_every_file_difference_is_named_in_the_guide() -> None:
    section = GUIDE.split("## What your pods get differently", 1)[1].split("\n## ", 1)[0]
    for _, prefix in FILE_DIFFERENCES:
        assert f"`{prefix}" in section, prefix
    seen = {
        (name, prefix)
        for name in CASES
        for path in file_differences(name)
        for listed, prefix in FILE_DIFFERENCES
        if listed == name and path.startswith(prefix)
    }
    assert seen == set(FILE_DIFFERENCES), "a listed difference no corpus file shows"


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.hostfile))
def test_the_mpi_launcher_gets_the_operators_hostfile(name: str) -> None:
    case = CASES[name]
    (launcher,) = [p for p in rendered(name) if p.role == "launcher"]
    hostfile = launcher.pod["metadata"]["annotations"][contract.HOSTFILE]
    assert case.hostfile is not None
    assert _normalized(hostfile, case.job, case.namespace) == _normalized(
        case.hostfile, case.job, case.namespace
    )


def test_every_difference_is_named_in_the_guide() -> None:
    section = GUIDE.split("## What your pods get differently", 1)[1].split("\n## ", 1)[0]
    for var in DIFFERENCES:
        assert f"`{var}`" in section, var
    seen = {_difference_key(v) for name in CASES for v in env_differences(name)}
    assert seen == set(DIFFERENCES), "a listed difference no corpus file shows"


def test_a_jobsets_pods_keep_its_names_and_its_controllers_labels_and_annotations() -> None:
    # The example's own MASTER_ADDR is pytorch-workers-0-0.pytorch: pod 0 under the Service
    # named after the JobSet, which Trainhook's headless Service is too.
    pods = rendered("jobset/jobset-pytorch-mnist.yaml")
    assert [p.name for p in pods] == [f"pytorch-workers-0-{i}" for i in range(4)]
    assert {p.pod["spec"]["subdomain"] for p in pods} == {"pytorch"}
    stamped = {
        "jobset.sigs.k8s.io/jobset-name": "pytorch",
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "1",
        "jobset.sigs.k8s.io/global-replicas": "1",
        "jobset.sigs.k8s.io/job-index": "0",
        "jobset.sigs.k8s.io/job-global-index": "0",
        "jobset.sigs.k8s.io/restart-attempt": "0",
    }
    for pod in pods:
        for where in ("labels", "annotations"):
            given = pod.pod["metadata"][where]
            assert {k: given[k] for k in stamped} == stamped
        index = pod.pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod.name.endswith(f"-{index}")


def test_a_volcano_task_whose_completion_ends_the_job_ends_the_migrated_job() -> None:
    # The parameter servers never exit: the job is done once every trainer has.
    objects, _ = migrated("volcano/job-paddle-ctr-trainer-completes.yaml")
    assert {o["metadata"]["annotations"][contract.SUCCESS_POLICY] for o in objects} == {
        "role=trainer"
    }


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_field_the_migration_drops_is_a_note_naming_it(name: str) -> None:
    for line in migrated(name)[1]:
        path, _, text = line.partition(": ")
        assert re.fullmatch(r"[\w.\[\]<>/-]+", path) and text, line
        assert "not a field trainhook migrate knows" not in text, line


def test_a_trainer_launcher_that_ran_as_a_node_leaves_the_hostfile_as_many_hosts_and_slots() -> (
    None
):
    name = "trainer/trainjob-deepspeed-mpi.yaml"
    theirs = CASES[name].files[("launcher", 0)]["/etc/mpi/hostfile"]
    (launcher,) = [p for p in rendered(name) if p.role == "launcher"]
    ours = pod_files(launcher)["/etc/mpi/hostfile"]
    assert ours == (
        "deepspeed-example-node-0-0.deepspeed-example.default.svc slots=1\n"
        "deepspeed-example-node-0-1.deepspeed-example.default.svc slots=1\n"
    )
    assert [line.split()[1] for line in ours.splitlines()] == [
        line.split()[1] for line in theirs.splitlines()
    ]
