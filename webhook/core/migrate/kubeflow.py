"""The replica-spec family: Kubeflow's PyTorchJob, TFJob, PaddleJob, XGBoostJob, JAXJob and
MPIJob (v1 and mpi-operator's v2beta1), and ms-operator's MSJob. One table row per kind."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.job.settings import GANG_MINIMUM_SCHEDULERS
from webhook.core.migrate.base import (
    JOB,
    Fields,
    Job,
    MigrationError,
    Notes,
    Role,
    carry_metadata,
    check_roles,
    metadata,
    template_of,
)


@dataclass(frozen=True)
class Kind:
    framework: str
    replica_specs: str  # the spec key holding the replica types
    # replica type -> role; a type not listed is refused
    roles: Mapping[str, str]
    # roles run as Indexed Jobs (they run to completion while the others serve)
    job_roles: tuple[str, ...] = ()
    # the container the operator reads the port from, and that port's name
    port_from: tuple[str, str] = ("", "")
    run_policy_at_spec: tuple[str, ...] = ()  # older kinds keep some runPolicy fields in spec


KINDS: dict[tuple[str, str], Kind] = {
    ("kubeflow.org/v1", "PyTorchJob"): Kind(
        "pytorch",
        "pytorchReplicaSpecs",
        {"Master": "master", "Worker": "worker"},
        port_from=("pytorch", "pytorchjob-port"),
    ),
    ("kubeflow.org/v1", "TFJob"): Kind(
        "tensorflow",
        "tfReplicaSpecs",
        {
            "Chief": "chief",
            "Master": "master",
            "PS": "ps",
            "Worker": "worker",
            "Evaluator": "evaluator",
        },
    ),
    ("kubeflow.org/v1", "PaddleJob"): Kind(
        "paddle",
        "paddleReplicaSpecs",
        {"Master": "master", "Worker": "worker"},
        port_from=("paddle", "master"),
    ),
    ("kubeflow.org/v1", "XGBoostJob"): Kind(
        "xgboost",
        "xgbReplicaSpecs",
        {"Master": "master", "Worker": "worker"},
        port_from=("xgboost", "xgboostjob-port"),
    ),
    ("kubeflow.org/v1", "JAXJob"): Kind(
        "jax", "jaxReplicaSpecs", {"Worker": "worker"}, port_from=("jax", "jaxjob-port")
    ),
    ("kubeflow.org/v1", "MPIJob"): Kind(
        "mpi",
        "mpiReplicaSpecs",
        {"Launcher": "launcher", "Worker": "worker"},
        job_roles=("launcher",),
        run_policy_at_spec=("cleanPodPolicy",),
    ),
    ("kubeflow.org/v2beta1", "MPIJob"): Kind(
        "mpi",
        "mpiReplicaSpecs",
        {"Launcher": "launcher", "Worker": "worker"},
        job_roles=("launcher",),
    ),
    ("mindspore.gitee.com/v1", "MSJob"): Kind(
        "mindspore",
        "msReplicaSpecs",
        {"Scheduler": "scheduler", "PS": "ps", "Worker": "worker"},
    ),
}

# The training-operator's API version (its kinds' replica types are taken in any case).
TRAINING_OPERATOR = "kubeflow.org/v1"
# runPolicy.cleanPodPolicy -> trainhook.io/clean-pod-policy
CLEAN_POD_POLICIES = {"All": "All", "Running": "Running", "None": "None"}
# A replica's restartPolicy -> trainhook.io/restart-policy; Always has none (a success ends it)
RESTART_POLICIES = {"OnFailure": "OnFailure", "ExitCode": "ExitCode", "Never": "Never"}
# successPolicy (TFJob, MSJob) -> trainhook.io/success-policy
SUCCESS_POLICIES = {"": None, "AllWorkers": "all"}
# Schedulers a template may name for gang scheduling -> trainhook.io/scheduler
GANG_SCHEDULERS = {
    "volcano": "volcano",
    "scheduler-plugins-scheduler": "coscheduling",
    contract.DEFAULT_COSCHEDULING_SCHEDULER: "coscheduling",
}
# mpiImplementation -> trainhook.io/mpi-implementation
MPI_IMPLEMENTATIONS = {"OpenMPI": "OpenMPI", "Intel": "Intel", "MPICH": "MPICH"}
# The Kubeflow PodGroup's default scheduler when a queue is asked for without one.
DEFAULT_GANG_SCHEDULER = "volcano"


def migrate_replica_job(source: Mapping[str, Any], key: tuple[str, str], notes: Notes) -> Job:
    kind = KINDS[key]
    name, namespace, meta, spec = metadata(source, key[1], notes)
    job = Job(name=name, namespace=namespace, framework=kind.framework, roles=[])
    carry_metadata(meta, job, notes)
    replica_specs = spec.child(kind.replica_specs)
    policies: dict[str, str] = {}
    # The training-operator's defaulting takes a replica type in any case (setTypeNameToCamelCase).
    any_case = {t.lower(): r for t, r in kind.roles.items()} if key[0] == TRAINING_OPERATOR else {}
    for replica_type in replica_specs.data:
        role = kind.roles.get(str(replica_type)) or any_case.get(str(replica_type).lower())
        if role in [r.role for r in job.roles]:
            raise MigrationError(
                f"{replica_specs.at(str(replica_type))}: a second {role} replica type; the "
                "operator keeps one of them"
            )
        if role is None:
            raise MigrationError(
                f"{replica_specs.at(str(replica_type))}: unknown replica type for {key[1]} "
                f"({', '.join(kind.roles)})"
            )
        replica = replica_specs.child(str(replica_type))
        replicas = replica.integer("replicas")
        replicas = 1 if replicas is None else replicas
        restart = replica.text("restartPolicy")
        if restart is not None:
            policies[role] = restart
        job.roles.append(
            Role(
                role=role,
                replicas=replicas,
                template=template_of(replica),
                path=replica.path,
                kind=JOB if role in kind.job_roles else "StatefulSet",
            )
        )
    order = FRAMEWORKS[kind.framework].roles
    job.roles.sort(key=lambda r: order.index(r.role))
    check_roles(job, order, replica_specs.path)
    _restart_policy(job, policies, notes, replica_specs.path)
    _port(job, kind)
    minimum, where = _run_policy(spec, job, notes, kind)
    _success_policy(spec, job, notes)
    FRAMEWORK_FIELDS.get(kind.framework, _nothing)(spec, job, notes, key)
    gang_minimum(minimum, job, notes, where)
    return job


def _nothing(spec: Fields, job: Job, notes: Notes, key: tuple[str, str]) -> None:
    pass


def _port(job: Job, kind: Kind) -> None:
    """The port the operator gives peers: the container port of that name in the training
    container, per role (Trainhook's defaults are the operator's)."""
    container_name, port_name = kind.port_from
    default = FRAMEWORKS[kind.framework].port
    for role in job.roles:
        for container in role.template["spec"]["containers"]:
            if container.get("name") != container_name:
                continue
            for port in container.get("ports") or []:
                if port.get("name") == port_name and port.get("containerPort") != default:
                    role.annotations[contract.PORT] = str(port.get("containerPort"))


def _restart_policy(job: Job, policies: dict[str, str], notes: Notes, path: str) -> None:
    """One restart policy per job where the operator had one per replica type: the first role's
    in role order decides, as the sweeper does."""
    mapped: dict[str, str] = {}
    for role in job.roles:
        given = policies.get(role.role)
        if given is None:
            continue
        where = f"{role.path}.restartPolicy"
        if given == "Always":
            notes.add(
                where,
                "'Always' has no equivalent, because a success ends the job; "
                "failed containers restart (OnFailure)",
            )
            continue
        if given not in RESTART_POLICIES:
            raise MigrationError(
                f"{where}: invalid value {given!r}: OnFailure, ExitCode, Never or Always"
            )
        mapped[role.role] = RESTART_POLICIES[given]
    values = list(dict.fromkeys(mapped.values()))
    if not values:
        return
    chosen = mapped[next(r.role for r in job.roles if r.role in mapped)]
    if len(values) > 1:
        differing = ", ".join(f"{role}: {policy}" for role, policy in mapped.items())
        notes.add(
            path,
            f"restart policies differ per replica type ({differing}); "
            f"{contract.RESTART_POLICY} is one per job: {chosen!r}, the first role's",
        )
    if chosen != "OnFailure":
        job.annotations[contract.RESTART_POLICY] = chosen
    job.restart_policy = "Never" if chosen == "Never" else "OnFailure"


def _run_policy(spec: Fields, job: Job, notes: Notes, kind: Kind) -> tuple[int | None, str]:
    """The runPolicy's annotations; returns schedulingPolicy.minAvailable and where it is, for
    the gang check once the job's elastic range is known."""
    run = spec.child("runPolicy")
    sources = [run] + [spec] * bool(kind.run_policy_at_spec)
    for fields in sources:
        clean = fields.text("cleanPodPolicy")
        if clean is not None:
            if clean not in CLEAN_POD_POLICIES:
                raise MigrationError(
                    f"{fields.at('cleanPodPolicy')}: invalid value {clean!r}: All, Running or None"
                )
            job.annotations[contract.CLEAN_POD_POLICY] = CLEAN_POD_POLICIES[clean]
    lifecycle(run, job, notes)
    scheduling = run.child("schedulingPolicy")
    queue = scheduling.text("queue")
    scheduler = _template_scheduler(job)
    timeout = scheduling.integer("scheduleTimeoutSeconds", 1)
    if queue is not None or timeout is not None or scheduler is not None:
        chosen = scheduler or ("coscheduling" if timeout is not None else DEFAULT_GANG_SCHEDULER)
        job.annotations[contract.SCHEDULER] = chosen
        if scheduler is None:
            notes.add(
                scheduling.path,
                f"gang scheduling with {contract.SCHEDULER}: {chosen!r} (the templates name "
                "no gang scheduler)",
            )
        if queue is not None and chosen != "coscheduling":
            job.annotations[contract.QUEUE] = queue
        elif queue is not None:
            notes.add(
                scheduling.at("queue"), "no equivalent with coscheduling, which has no queues"
            )
        if timeout is not None and chosen == "coscheduling":
            job.annotations[contract.SCHEDULE_TIMEOUT_SECONDS] = str(timeout)
        elif timeout is not None:
            notes.add(
                scheduling.at("scheduleTimeoutSeconds"),
                f"no equivalent with {chosen}: only coscheduling has a schedule timeout",
            )
    priority_and_resources(scheduling, job, notes)
    managed_by = run.text("managedBy")
    if managed_by is not None:
        notes.add(run.at("managedBy"), "no equivalent, because no controller owns the workloads")
    return scheduling.integer("minAvailable"), scheduling.at("minAvailable")


def lifecycle(run: Fields, job: Job, notes: Notes) -> None:
    """backoffLimit, activeDeadlineSeconds, ttlSecondsAfterFinished and suspend of a runPolicy."""
    backoff = run.integer("backoffLimit")
    if backoff is not None:
        # The operator fails the job once its restarts reach N; Trainhook, as a Job, allows N.
        job.annotations[contract.BACKOFF_LIMIT] = str(max(backoff - 1, 0))
    for field_name, key, low in (
        ("activeDeadlineSeconds", contract.ACTIVE_DEADLINE_SECONDS, 1),
        ("ttlSecondsAfterFinished", contract.TTL_SECONDS_AFTER_FINISHED, 0),
    ):
        value = run.integer(field_name, low)
        if value is not None:
            job.annotations[key] = str(value)
    suspend = run.get("suspend")
    if suspend is True:
        job.annotations[contract.SUSPEND] = "true"
    elif suspend not in (None, False):
        raise MigrationError(f"{run.at('suspend')}: invalid value {suspend!r}: true or false")


def gang_minimum(minimum: int | None, job: Job, notes: Notes, path: str) -> None:
    """A gang's minimum other than every pod of the job (or an elastic job's minimum of
    nodes) becomes trainhook.io/min-available where the job's scheduler reads one."""
    elastic = job.annotations.get(contract.ELASTIC)
    pods = sum(r.replicas for r in job.roles)
    wanted = int(elastic.split(":")[0]) if elastic else pods
    if minimum is None or minimum == wanted:
        return
    scheduler = job.annotations.get(contract.SCHEDULER)
    if scheduler is None:
        notes.add(path, f"{minimum} has no equivalent: the job names no gang scheduler")
    elif scheduler not in GANG_MINIMUM_SCHEDULERS:
        notes.add(
            path, f"{minimum} has no equivalent with {scheduler}, which admits a pod group whole"
        )
    elif not 1 <= minimum <= pods:
        notes.add(
            path,
            f"{minimum} has no equivalent: a gang's minimum is from 1 to the job's {pods} pod(s)",
        )
    else:
        job.annotations[contract.MIN_AVAILABLE] = str(minimum)


def priority_and_resources(scheduling: Fields, job: Job, notes: Notes) -> None:
    """A schedulingPolicy's priorityClass goes to the pods; its minResources is computed."""
    priority = scheduling.text("priorityClass")
    if priority is not None:
        for role in job.roles:
            role.template["spec"].setdefault("priorityClassName", priority)
    if scheduling.has("minResources"):
        scheduling.get("minResources")
        notes.add(
            scheduling.at("minResources"),
            "computed: the PodGroup's minResources is the sum of the job's pods' requests",
        )


def _template_scheduler(job: Job) -> str | None:
    names = {role.template["spec"].get("schedulerName") for role in job.roles}
    names.discard(None)
    for name in names:
        if name in GANG_SCHEDULERS:
            for role in job.roles:
                role.template["spec"].pop("schedulerName", None)
            return GANG_SCHEDULERS[str(name)]
    return None


def _success_policy(spec: Fields, job: Job, notes: Notes) -> None:
    if not spec.has("successPolicy"):
        spec.get("successPolicy")
        return
    given = spec.text("successPolicy") or ""
    if given not in SUCCESS_POLICIES:
        raise MigrationError(f"spec.successPolicy: invalid value {given!r}: '' or AllWorkers")
    mapped = SUCCESS_POLICIES[given]
    if mapped is not None:
        job.annotations[contract.SUCCESS_POLICY] = mapped
        notes.add(
            "spec.successPolicy",
            f"{given!r} → {contract.SUCCESS_POLICY}: {mapped!r}, which also waits for the "
            "other roles' pods",
        )


# ---------------------------------------------------------------------------------------------
# What each framework's kind adds to the replica specs.


def _pytorch(spec: Fields, job: Job, notes: Notes, key: tuple[str, str]) -> None:
    nproc = spec.text("nprocPerNode")
    if not spec.has("elasticPolicy") and not any(r.role == "master" for r in job.roles):
        raise MigrationError(
            f"spec.{KINDS[key].replica_specs}: Workers without a Master or an elasticPolicy: the "
            "training-operator gives their pods no MASTER_ADDR, RANK or WORLD_SIZE, so torchrun's "
            "nodes never meet; add a Master of one replica (rank 0) or an elasticPolicy"
        )
    elastic = spec.child("elasticPolicy")
    if nproc is None and elastic.get("nProcPerNode") is None:
        # training-operator 1.9's default (DefaultNprocPerNode), which it passes to torchrun.
        _cpu_auto(job, notes, "spec.nprocPerNode", "absent (the operator's default 'auto')")
    if nproc is not None:
        _nproc(nproc, job, notes, "spec.nprocPerNode")
    if not elastic.data:
        return
    low, high = elastic.integer("minReplicas", 1), elastic.integer("maxReplicas", 1)
    if low is None or high is None:
        workers = sum(r.replicas for r in job.roles)
        low, high = low or workers, high or workers
    job.annotations[contract.ELASTIC] = f"{low}:{high}"
    restarts = elastic.integer("maxRestarts")
    if restarts is not None:
        job.annotations[contract.MAX_RESTARTS] = str(restarts)
    per_node = elastic.integer("nProcPerNode", 1)
    if per_node is not None:
        _nproc(str(per_node), job, notes, elastic.at("nProcPerNode"))
    backend = elastic.text("rdzvBackend")
    if backend not in (None, "c10d"):
        notes.add(
            elastic.at("rdzvBackend"), f"{backend!r} → 'c10d': torchrun's own rendezvous on pod 0"
        )
    for name, instead in (
        ("rdzvHost", "pod 0 of the job"),
        ("rdzvPort", f"{contract.PORT}"),
        ("rdzvId", "the job's name"),
    ):
        if elastic.has(name):
            notes.add(elastic.at(name), f"{elastic.get(name)!r} → {instead}")
    conf = elastic.get("rdzvConf")
    if conf:
        value = ",".join(f"{c.get('key')}={c.get('value')}" for c in conf)
        _add_env(job, "PET_RDZV_CONF", value)
    if elastic.get("standalone"):
        notes.add(
            elastic.at("standalone"),
            "no equivalent: the rendezvous is always pod 0 (PET_RDZV_ENDPOINT)",
        )
    if elastic.has("metrics"):
        elastic.get("metrics")
        notes.add(
            elastic.at("metrics"),
            "no equivalent, because Trainhook creates no HorizontalPodAutoscaler; one you point "
            "at the StatefulSet's scale works, and scaling within the elastic range restarts "
            "no pod",
        )


def _nproc(value: str, job: Job, notes: Notes, path: str) -> None:
    if value in ("auto", "gpu"):
        job.annotations[contract.NPROC_PER_NODE] = "auto"
        if value == "gpu":
            notes.add(path, "'gpu' → 'auto': one process per GPU of the training container")
        else:
            _cpu_auto(job, notes, path, "'auto'")
        return
    if value == "cpu":
        notes.add(
            path, "'cpu' has no equivalent, because Trainhook counts GPUs, not cores; 1 per pod"
        )
        return
    if not value.isdigit() or int(value) < 1:
        raise MigrationError(f"{path}: invalid value {value!r}: a whole number, auto, gpu or cpu")
    job.annotations[contract.NPROC_PER_NODE] = value


def _cpu_auto(job: Job, notes: Notes, path: str, given: str) -> None:
    """torchrun reads `auto` as the GPU count, Trainhook's `auto` too; on a pod without GPUs
    torchrun starts os.cpu_count() processes (the node's CPUs), which no one knows before the pod
    is scheduled: Trainhook starts 1, and says so."""
    if any(_gpus(role.template) for role in job.roles):
        return
    notes.add(
        path,
        f"{given} → 1 process per pod: torchrun reads 'auto' on a pod without GPUs as "
        "os.cpu_count(), the CPUs of the node it lands on; set "
        f"{contract.NPROC_PER_NODE} to the processes per pod the job ran",
    )


def _gpus(template: Mapping[str, Any]) -> bool:
    """Whether a container of the template asks for GPUs (a resource named .../gpu)."""
    for container in template["spec"]["containers"]:
        resources = container.get("resources") or {}
        for bound in ("limits", "requests"):
            if any(str(name).endswith("/gpu") for name in resources.get(bound) or {}):
                return True
    return False


def _add_env(job: Job, name: str, value: str) -> None:
    for role in job.roles:
        container = role.template["spec"]["containers"][0]
        env = container.setdefault("env", [])
        if not any(e.get("name") == name for e in env):
            env.append({"name": name, "value": value})


def _tensorflow(spec: Fields, job: Job, notes: Notes, key: tuple[str, str]) -> None:
    if spec.get("enableDynamicWorker"):
        notes.add(
            "spec.enableDynamicWorker",
            "no equivalent: scaling restarts the job's pods with the new TF_CONFIG",
        )


_mindspore = _tensorflow


def _mpi(spec: Fields, job: Job, notes: Notes, key: tuple[str, str]) -> None:
    workers = [role for role in job.roles if role.role == "worker"]
    slots = spec.integer("slotsPerWorker", 1)
    if slots is not None:
        for role in workers:
            role.annotations[contract.NPROC_PER_NODE] = str(slots)
    main = spec.text("mainContainer")
    if main is not None:
        job.annotations[contract.CONTAINER] = main
    implementation = spec.text("mpiImplementation")
    if implementation is not None:
        if implementation not in MPI_IMPLEMENTATIONS:
            raise MigrationError(
                f"spec.mpiImplementation: invalid value {implementation!r}: OpenMPI, Intel or MPICH"
            )
        if implementation != "OpenMPI":  # the default
            job.annotations[contract.MPI_IMPLEMENTATION] = MPI_IMPLEMENTATIONS[implementation]
    mount = spec.text("sshAuthMountPath")
    if mount is not None and mount != contract.MPI_SSH_PATH:
        job.annotations[contract.SSH_AUTH_MOUNT_PATH] = mount
    if spec.get("runLauncherAsWorker"):
        notes.add(
            "spec.runLauncherAsWorker",
            "no equivalent yet: the hostfile lists the workers only, so count only their "
            "slots in mpirun -n",
        )
    policy = spec.text("launcherCreationPolicy")
    if policy not in (None, "AtStartup"):
        notes.add(
            "spec.launcherCreationPolicy",
            f"{policy!r} has no equivalent, because the launcher starts with the job; mpirun "
            "retries its SSH connections (ConnectionAttempts=10)",
        )
    if key[0] == "kubeflow.org/v2beta1" and not any(
        contract.PORT in r.annotations for r in workers
    ):
        # The images are out of sight; mpi-operator's base images set sshd's port to 2222.
        notes.add(
            "spec.mpiReplicaSpecs.Worker",
            f"SSH goes to port {FRAMEWORKS['mpi'].port} ({contract.PORT}); images built on "
            "mpi-operator's base images (mpioperator/openmpi, intel, mpich) run sshd on 2222: "
            f'for them set {contract.PORT}: "2222" on the job\'s workloads',
        )
    if key[0] == "kubeflow.org/v1":
        notes.add(
            "spec.mpiReplicaSpecs.Worker",
            "the training-operator starts ranks with kubectl exec; Trainhook, like mpi-operator "
            "v2, over SSH: the worker image must run sshd (its keys are mounted from the job's "
            "Secret)",
        )
    for role in workers:
        container = role.template["spec"]["containers"][0]
        if not container.get("command") and not container.get("args"):
            notes.add(
                f"{role.path}.template",
                "the worker runs its image's own command: it must serve SSH (sshd -De) for "
                "mpirun to reach it",
            )


FRAMEWORK_FIELDS = {
    "pytorch": _pytorch,
    "tensorflow": _tensorflow,
    "mindspore": _mindspore,
    "mpi": _mpi,
}
