"""Kubeflow Trainer v2: a TrainJob with the TrainingRuntime or ClusterTrainingRuntime it names.

Trainer runs the runtime's JobSet: its trainer step (the replicated Job labelled
`trainer.kubeflow.org/trainjob-ancestor-step: trainer`, one Job `<trainjob>-node-0` of
`numNodes` Indexed pods named `<trainjob>-node-0-<i>` under the Service `<trainjob>`) with the
TrainJob's `trainer` (image, command, args, env, resourcesPerNode) in its `node` container. Its
plugins (pkg/runtime/framework/plugins) give that container:

* torch: PET_NNODES, PET_NPROC_PER_NODE (`auto`; on pods without GPUs the CPUs the node's
  resources ask for, at least 1), PET_NODE_RANK (the completion index), PET_MASTER_ADDR (pod 0)
  and PET_MASTER_PORT 29500;
* jax: JAX_NUM_PROCESSES, JAX_PROCESS_ID (the completion index), JAX_COORDINATOR_ADDRESS
  (pod 0 on 29500);
* mpi: the launcher (the trainer step) gets the hostfile `/etc/mpi/hostfile` of the nodes with
  `slots=<numProcPerNode>` and OMPI_MCA_orte_default_hostfile, _keep_fqdn_hostnames,
  _set_default_slots and OMPI_MCA_plm_rsh_args; launcher and nodes mount the job's SSH keys at
  the runtime's sshAuthMountPath;
* no framework policy (plainml): nothing.

The migrated job is one labelled Indexed Job named as Trainer's (an MPI runtime's: a launcher
Job and a Job of its nodes), so the pods keep their names and the frameworks' own variables
carry the same values; port 29500 is `trainhook.io/port`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from webhook.core import contract
from webhook.core.migrate.base import (
    JOB,
    Fields,
    Job,
    MigrationError,
    Notes,
    Role,
    carry_metadata,
    metadata,
)

API_GROUP = "trainer.kubeflow.org"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")
ANCESTOR = "trainer.kubeflow.org/trainjob-ancestor-step"
TRAINER_STEP = "trainer"
NODE = "node"  # the trainer step's Job and container
PORT = 29500  # Trainer's ContainerTrainerPort
# The runtime's ML policy -> (framework, role of its nodes)
POLICIES = {"torch": ("pytorch", "worker"), "jax": ("jax", "worker"), "mpi": ("mpi", "launcher")}
LAUNCHER = "launcher"  # an MPI runtime's launcher step, when no step is labelled the trainer
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")
# Policies Trainer has that trainhook migrate does not read yet -> why
UNREAD_POLICIES = {
    "flux": "Flux has no Trainhook framework",
    "xgboost": "Trainer's XGBoost runtime is not read yet",
}

# A runtime by (kind, namespace or None for a ClusterTrainingRuntime, name).
RuntimeKey = tuple[str, str | None, str]
Runtimes = Mapping[RuntimeKey, Mapping[str, Any]]


def runtime_key(document: Mapping[str, Any]) -> RuntimeKey | None:
    """The key a runtime document is found by, or None for any other document."""
    api = str(document.get("apiVersion") or "")
    kind = str(document.get("kind"))
    if api.split("/")[0] != API_GROUP or kind not in RUNTIME_KINDS:
        return None
    meta = document.get("metadata") or {}
    namespace = None if kind == RUNTIME_KINDS[0] else str(meta.get("namespace") or "")
    return kind, namespace, str(meta.get("name"))


def migrate_trainjob(
    source: Mapping[str, Any], key: tuple[str, str], notes: Notes, runtimes: Runtimes
) -> Job:
    name, namespace, meta, spec = metadata(source, key[1], notes)
    reference = spec.child("runtimeRef")
    kind = reference.text("kind") or RUNTIME_KINDS[0]
    reference.get("apiGroup")
    runtime_name = reference.text("name")
    found_key: RuntimeKey = (
        kind,
        None if kind == RUNTIME_KINDS[0] else str(namespace or ""),
        str(runtime_name),
    )
    runtime = runtimes.get(found_key)
    if runtime is None:
        raise MigrationError(
            f"spec.runtimeRef: {kind} {runtime_name} is not in the input: give its manifest "
            "with the TrainJob (kubectl get clustertrainingruntimes NAME -o yaml)"
        )
    where = f"{kind}/{runtime_name}.spec"
    runtime_spec = notes.track(Fields(runtime.get("spec"), where))
    policy = runtime_spec.child("mlPolicy")
    chosen = [p for p in (*POLICIES, *UNREAD_POLICIES) if policy.has(p)]
    for unread in chosen:
        if unread in UNREAD_POLICIES:
            raise MigrationError(f"{policy.at(unread)}: {UNREAD_POLICIES[unread]}")
    framework, role = POLICIES[chosen[0]] if chosen else ("generic", NODE)
    job = Job(name=name, namespace=namespace, framework=framework, roles=[])
    carry_metadata(meta, job, notes)
    steps = runtime_spec.child("template").child("spec")
    if framework == "mpi":
        _mpi(name, steps, policy, spec.child("trainer"), job, notes)
        _pod_group(runtime_spec, job, notes)
        _lifecycle(spec, job, notes)
        _trainjob_fields(spec, notes)
        return job
    template, replicated = _trainer_step(steps, notes)
    trainer = spec.child("trainer")
    runtime_nodes = policy.integer("numNodes", 1)
    nodes = trainer.integer("numNodes", 1) or runtime_nodes or 1
    container = _node_container(template, replicated)
    _apply_trainer(trainer, container, replicated)
    job.roles.append(
        Role(
            role=role,
            replicas=nodes,
            template=template,
            path=replicated,
            kind=JOB,
            name=f"{name}-{NODE}-0",
        )
    )
    if framework != "generic":
        job.annotations[contract.PORT] = str(PORT)
    if chosen and chosen[0] == "torch":
        torch = policy.child("torch")
        if torch.has("envInjection"):
            torch.get("envInjection")
            notes.add(
                torch.at("envInjection"),
                "no equivalent: only the trainer's pods get the PET_* variables",
            )
        _nproc(trainer, container, job)
    elif trainer.has("numProcPerNode"):
        notes.add(
            trainer.at("numProcPerNode"),
            f"{trainer.get('numProcPerNode')!r} has no equivalent: {framework} runs one process "
            "per pod",
        )
    if chosen:
        policy.child(chosen[0])
    _pod_group(runtime_spec, job, notes)
    _lifecycle(spec, job, notes)
    _trainjob_fields(spec, notes)
    return job


def _trainjob_fields(spec: Fields, notes: Notes) -> None:
    for field_name, why in (
        (
            "initializer",
            "Trainhook runs no step before the trainer: run the dataset and model "
            "initializers as init containers of the trainer",
        ),
        ("runtimePatches", "not applied: put what they set in the runtime's template"),
        ("managedBy", "no controller owns the workloads"),
    ):
        if spec.has(field_name):
            notes.add(spec.at(field_name), f"{spec.get(field_name)!r}: {why}")


def _trainer_step(steps: Fields, notes: Notes) -> tuple[dict[str, Any], str]:
    """The pod template of the runtime's trainer step, and where it is; the other steps are
    notes, and so are the JobSet's fields beyond its replicated Jobs."""
    jobs = steps.get("replicatedJobs") or []
    if not isinstance(jobs, list):
        raise MigrationError(f"{steps.at('replicatedJobs')}: expected a list of replicated Jobs")
    found: tuple[dict[str, Any], str] | None = None
    for position, raw in enumerate(jobs):
        where = f"{steps.at('replicatedJobs')}[{position}]"
        replicated = Fields(raw, where)
        step_name = replicated.text("name")
        job_template = replicated.get("template") or {}
        labels = (job_template.get("metadata") or {}).get("labels") or {}
        is_trainer = labels.get(ANCESTOR) == TRAINER_STEP or (
            step_name == NODE
            and not any(
                ((j.get("template") or {}).get("metadata") or {}).get("labels", {}).get(ANCESTOR)
                == TRAINER_STEP
                for j in jobs
                if isinstance(j, Mapping)
            )
        )
        if not is_trainer:
            notes.add(
                where,
                f"{step_name!r} has no equivalent: Trainhook runs the trainer's pods only; run "
                "this step as an init container of the trainer, or as a Job of its own",
            )
            continue
        if found is not None:
            raise MigrationError(f"{where}: a second trainer step; Trainer runs one")
        notes.track(replicated)
        count = replicated.integer("replicas", 1)
        if count not in (None, 1):
            notes.add(replicated.at("replicas"), f"{count} → 1: the trainer is one Job of nodes")
        job_spec = notes.track(Fields(job_template.get("spec"), f"{where}.template.spec"))
        pod = job_spec.get("template")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            raise MigrationError(f"{job_spec.at('template')}: a pod template with a spec")
        for field_name in job_spec.data:
            if field_name in ("template", "completions", "parallelism", "completionMode"):
                job_spec.get(field_name)
            else:
                notes.add(
                    job_spec.at(str(field_name)),
                    f"{job_spec.get(str(field_name))!r} has no equivalent on the trainer's Job",
                )
        found = (copy.deepcopy(dict(pod)), f"{where}.template.spec.template")
    for field_name in steps.data:
        if field_name != "replicatedJobs":
            notes.add(
                steps.at(str(field_name)),
                f"{steps.get(str(field_name))!r} has no equivalent: the job is its trainer's "
                "pods, done as the framework's success rule says",
            )
    if found is None:
        raise MigrationError(
            f"{steps.at('replicatedJobs')}: no trainer step (a replicated Job labelled "
            f"{ANCESTOR}: {TRAINER_STEP}, or named {NODE})"
        )
    return found


def _node_container(template: dict[str, Any], path: str) -> dict[str, Any]:
    containers = template["spec"].get("containers")
    if not isinstance(containers, list) or not containers:
        raise MigrationError(f"{path}.spec.containers: at least one container")
    named = [c for c in containers if isinstance(c, dict) and c.get("name") == NODE]
    return named[0] if named else containers[0]


def _apply_trainer(trainer: Fields, container: dict[str, Any], path: str) -> None:
    """The TrainJob's trainer in the node container, as Trainer's builder puts it there."""
    for field_name in ("image", "command", "args"):
        value = trainer.get(field_name)
        if value is not None:
            container[field_name] = copy.deepcopy(value)
    env = trainer.get("env") or []
    if env:
        given = {e.get("name"): e for e in env if isinstance(e, Mapping)}
        kept = [e for e in container.get("env") or [] if e.get("name") not in given]
        container["env"] = kept + [copy.deepcopy(dict(e)) for e in given.values()]
    resources = trainer.get("resourcesPerNode")
    if resources is not None:
        container["resources"] = copy.deepcopy(resources)


def _nproc(trainer: Fields, container: Mapping[str, Any], job: Job) -> None:
    """PET_NPROC_PER_NODE as Trainer's torch plugin writes it: the TrainJob's numProcPerNode,
    else `auto`, which on pods without GPUs is the CPUs the node's resources ask for."""
    given = trainer.integer("numProcPerNode", 1)
    resources = container.get("resources") or {}
    gpus = any(
        str(name).endswith("/gpu")
        for bound in ("limits", "requests")
        for name in resources.get(bound) or {}
    )
    if given is None and not gpus:
        given = max(1, _cpus(resources))
    if given is not None:
        job.annotations[contract.NPROC_PER_NODE] = str(given)


def _cpus(resources: Mapping[str, Any]) -> int:
    """The whole CPUs of a request, else of a limit (Kubernetes rounds a quantity's Value up)."""
    for bound in ("requests", "limits"):
        value = (resources.get(bound) or {}).get("cpu")
        if value is not None:
            text = str(value)
            cores = float(text[:-1]) / 1000 if text.endswith("m") else float(text)
            return int(-(-cores // 1))
    return 0


def _pod_group(runtime_spec: Fields, job: Job, notes: Notes) -> None:
    group = runtime_spec.child("podGroupPolicy")
    if group.has("coscheduling"):
        coscheduling = group.child("coscheduling")
        job.annotations[contract.SCHEDULER] = "coscheduling"
        timeout = coscheduling.integer("scheduleTimeoutSeconds", 1)
        if timeout is not None:
            job.annotations[contract.SCHEDULE_TIMEOUT_SECONDS] = str(timeout)
    if group.has("volcano"):
        volcano = group.child("volcano")
        job.annotations[contract.SCHEDULER] = "volcano"
        if volcano.has("networkTopology"):
            notes.add(
                volcano.at("networkTopology"),
                f"{volcano.get('networkTopology')!r} is not carried over: set "
                f"{contract.PLACEMENT_TOPOLOGY}, {contract.PLACEMENT_TIER} and "
                f"{contract.PLACEMENT} on the workload",
            )


def _lifecycle(spec: Fields, job: Job, notes: Notes) -> None:
    suspend = spec.get("suspend")
    if suspend is True:
        job.annotations[contract.SUSPEND] = "true"
    deadline = spec.integer("activeDeadlineSeconds", 1)
    if deadline is not None:
        job.annotations[contract.ACTIVE_DEADLINE_SECONDS] = str(deadline)


def _mpi(name: str, steps: Fields, policy: Fields, trainer: Fields, job: Job, notes: Notes) -> None:
    """An MPI runtime (pkg/runtime/framework/plugins/mpi): its launcher step, with the
    TrainJob's trainer, runs mpirun; its node step's pods are the hosts of the hostfile."""
    mpi = policy.child("mpi")
    launcher, launcher_at, node, node_at, parallelism = _mpi_steps(steps, notes)
    container = _node_container(launcher, launcher_at)
    _apply_trainer(trainer, container, launcher_at)
    as_node = mpi.get("runLauncherAsNode") is True
    resources = trainer.get("resourcesPerNode")
    if as_node and resources is not None:
        # Trainer gives the node pods the trainer's resources too when the launcher is a node.
        _node_container(node, node_at)["resources"] = copy.deepcopy(resources)
    policy.integer("numNodes", 1)
    given = trainer.integer("numNodes", 1)
    # Trainer's node pods: the TrainJob's numNodes (less the launcher when it is a node, at
    # least 1), else the node step's own parallelism.
    trainer_count = max(given - 1, 1) if as_node and given is not None else given
    count = parallelism if trainer_count is None else trainer_count
    hosts = count + 1 if as_node else count
    job.roles.append(
        Role(
            role=LAUNCHER,
            replicas=1,
            template=launcher,
            path=launcher_at,
            kind=JOB,
            name=f"{name}-{LAUNCHER}-0",
        )
    )
    slots = trainer.integer("numProcPerNode", 1)
    if slots is None:
        slots = mpi.integer("numProcPerNode", 1) or 1
        gpus = _gpus(resources if resources is not None else container.get("resources") or {})
        if slots == 1 and gpus > 1:
            slots = gpus  # Trainer: one slot per GPU when the runtime says 1
    else:
        mpi.get("numProcPerNode")
    job.roles.append(
        Role(
            role="worker",
            replicas=hosts,
            template=node,
            path=node_at,
            kind=JOB,
            name=f"{name}-{NODE}-0",
            annotations={contract.NPROC_PER_NODE: str(slots)},
        )
    )
    implementation = mpi.text("mpiImplementation") or MPI_IMPLEMENTATIONS[0]
    if implementation not in MPI_IMPLEMENTATIONS:
        raise MigrationError(
            f"{mpi.at('mpiImplementation')}: invalid value {implementation!r}: one of "
            + ", ".join(MPI_IMPLEMENTATIONS)
        )
    if implementation != MPI_IMPLEMENTATIONS[0]:
        job.annotations[contract.MPI_IMPLEMENTATION] = implementation
    mount = mpi.text("sshAuthMountPath")
    if mount is not None and mount.rstrip("/") != contract.MPI_SSH_PATH:
        job.annotations[contract.SSH_AUTH_MOUNT_PATH] = mount
    if as_node:
        notes.add(
            mpi.at("runLauncherAsNode"),
            f"true → the launcher runs no ranks: Trainer's {hosts} hosts (the launcher and "
            f"{count} node{'s' if count != 1 else ''}) are {hosts} worker pods of the node step, "
            "and the launcher is one pod more, which keeps the trainer's resources",
        )


def _gpus(resources: Mapping[str, Any]) -> int:
    """GPUs of a container's limits (else requests), whatever the vendor's resource name."""
    for bound in ("limits", "requests"):
        for resource, value in (resources.get(bound) or {}).items():
            if str(resource).endswith("/gpu"):
                try:
                    return int(str(value))
                except ValueError:
                    return 0
    return 0


def _mpi_steps(steps: Fields, notes: Notes) -> tuple[dict[str, Any], str, dict[str, Any], str, int]:
    """The pod templates of an MPI runtime's launcher (the trainer step, else the step named
    launcher) and node steps, where they are, and the node step's parallelism."""
    jobs = steps.get("replicatedJobs") or []
    if not isinstance(jobs, list):
        raise MigrationError(f"{steps.at('replicatedJobs')}: expected a list of replicated Jobs")
    labelled = any(
        isinstance(j, Mapping)
        and ((j.get("template") or {}).get("metadata") or {}).get("labels", {}).get(ANCESTOR)
        == TRAINER_STEP
        for j in jobs
    )
    launcher: tuple[dict[str, Any], str] | None = None
    node: tuple[dict[str, Any], str, int] | None = None
    for position, raw in enumerate(jobs):
        where = f"{steps.at('replicatedJobs')}[{position}]"
        replicated = Fields(raw, where)
        step_name = replicated.text("name")
        job_template = replicated.get("template") or {}
        labels = (job_template.get("metadata") or {}).get("labels") or {}
        is_launcher = labels.get(ANCESTOR) == TRAINER_STEP or (
            not labelled and step_name == LAUNCHER
        )
        if not is_launcher and step_name != NODE:
            notes.add(
                where,
                f"{step_name!r} has no equivalent: Trainhook runs the launcher's and the nodes' "
                "pods only; run this step as an init container of the launcher, or as a Job of "
                "its own",
            )
            continue
        notes.track(replicated)
        count = replicated.integer("replicas", 1)
        if count not in (None, 1):
            notes.add(replicated.at("replicas"), f"{count} → 1: Trainer runs one Job of each")
        depends = replicated.get("dependsOn")
        if depends is not None:
            notes.add(
                replicated.at("dependsOn"),
                f"{depends!r}: the launcher starts with the nodes; mpirun retries its SSH "
                "connections (ConnectionAttempts=10) until their sshd listens",
            )
        job_spec = notes.track(Fields(job_template.get("spec"), f"{where}.template.spec"))
        pod = job_spec.get("template")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            raise MigrationError(f"{job_spec.at('template')}: a pod template with a spec")
        parallelism = job_spec.integer("parallelism", 1) or 1
        for field_name in job_spec.data:
            if field_name in ("template", "completions", "completionMode"):
                job_spec.get(field_name)
            elif field_name != "parallelism":
                notes.add(
                    job_spec.at(str(field_name)),
                    f"{job_spec.get(str(field_name))!r} has no equivalent on the {step_name} Job",
                )
        found = (copy.deepcopy(dict(pod)), f"{where}.template.spec.template")
        if is_launcher:
            if launcher is not None:
                raise MigrationError(f"{where}: a second launcher step; Trainer runs one")
            launcher = found
        else:
            if node is not None:
                raise MigrationError(f"{where}: a second node step; Trainer runs one")
            node = (*found, parallelism)
    _mpi_jobset_fields(steps, notes)
    if launcher is None:
        raise MigrationError(
            f"{steps.at('replicatedJobs')}: no launcher step (a replicated Job labelled "
            f"{ANCESTOR}: {TRAINER_STEP}, or named {LAUNCHER}): Trainer's MPI runtime runs "
            "mpirun there"
        )
    if node is None:
        raise MigrationError(
            f"{steps.at('replicatedJobs')}: no node step (a replicated Job named {NODE}): "
            "Trainer's MPI runtime runs its ranks there"
        )
    return launcher[0], launcher[1], node[0], node[1], node[2]


def _mpi_jobset_fields(steps: Fields, notes: Notes) -> None:
    """What Trainhook does anyway is read without a note: the job succeeds with its launcher,
    and its headless Service publishes the pods before they are ready."""
    for field_name in steps.data:
        value = steps.get(str(field_name))
        if field_name == "replicatedJobs":
            continue
        if field_name == "successPolicy" and value == {
            "operator": "All",
            "targetReplicatedJobs": [LAUNCHER],
        }:
            continue
        if field_name == "network" and value == {"publishNotReadyAddresses": True}:
            continue
        notes.add(
            steps.at(str(field_name)),
            f"{value!r} has no equivalent: an MPI job is done when its launcher is, and its "
            "headless Service publishes every pod from its start",
        )
