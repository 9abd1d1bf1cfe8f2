"""Hypothesis strategies for what the API server sends the webhook.

Labelled StatefulSets (apps/v1) and Indexed Jobs (batch/v1) of every framework, as users write
them and as the API server has defaulted them before mutating admission runs; the pods their
controllers create; and bare Pods that carry their topology themselves. Every generated object is
one the API server would send: valid settings, volumes that every mount refers to, unique names.

Each strategy object is built once (at import or through a cache): hypothesis validates every new
strategy object, which costs more than drawing from it.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st

from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.objects import annotations_of
from webhook.core.render import expand

Obj = dict[str, Any]
T = TypeVar("T")

KINDS = ("StatefulSet", "Job")
NAMESPACES = ("default", "ml-team")
DOMAINS = ("", "cluster.local")  # the webhook's --cluster-domain
GENERIC_ROLES = ("worker", "trainer", "server", "data-loader")
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "huawei.com/Ascend910")
SHM_SIZES = ("64Mi", "512Mi", "1Gi", "1.5Gi", "2G", "100M", "16Gi")
NAMES = ("a", "ddp", "bert-large", "llm7b", "x-1", "resnet50", "t5-ft")
LABEL_VALUES = ("", "a", "v1", "team.ml", "A-b_c.9", "x" * 63)
# Keys with '/' and '~': the API server rejects '~' in keys only after mutating admission ran.
# (Trainhook refuses a trainhook.io/ key it does not know, so none of those.)
USER_LABEL_KEYS = ("app", "team", "example.com/a~b", "example.com/owner", "example.org/x~1y")
USER_ANNOTATION_KEYS = (
    "description",
    "example.com/a~b",
    "a~b/c~d",
    "example.com/x~1y",
    "argocd.argoproj.io/sync-wave",
)
ENV_VALUES = ("", "0", "1", "7", "$(TRAINHOOK_RANK)", "localhost", "a b=c", "ü/~1", '{"k": 1}')
# Variables a user may set; most of them are ones the webhook sets too.
ENV_NAMES = (
    "DATA_DIR",
    "POD_NAME",
    "TRAINHOOK_JOB",
    "TRAINHOOK_RANK",
    "TRAINHOOK_WORLD_SIZE",
    "TRAINHOOK_WORKER_HOSTS",
    "PYTHONUNBUFFERED",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "NPROC_PER_NODE",
    "TF_CONFIG",
    "PADDLE_TRAINER_ID",
    "MS_ROLE",
    "K_MPI_JOB_ROLE",
    "COORDINATOR_ADDRESS",
)
ENV_SOURCES: tuple[Obj, ...] = (
    {},
    {"valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{contract.RANK}']"}}},
    {"valueFrom": {"secretKeyRef": {"name": "creds", "key": "token"}}},
)
# (volume, where containers mount it); "shm" and "dshm" are a user's own /dev/shm.
VOLUMES: tuple[tuple[Obj, str], ...] = (
    ({"name": "data", "emptyDir": {}}, "/data"),
    ({"name": "config", "configMap": {"name": "train-config"}}, "/etc/config"),
    ({"name": "cache", "persistentVolumeClaim": {"claimName": "dataset-cache"}}, "/cache"),
    ({"name": "shm", "emptyDir": {"medium": "Memory"}}, "/dev/shm"),
    ({"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}, "/dev/shm"),
    ({"name": "ssh", "secret": {"secretName": "my-keys", "defaultMode": 384}}, "/root/.ssh"),
)
RESOURCE_SHAPES = ("none", "empty", "cpu", "gpu-limit", "gpu-both")
SERVICE_ACCOUNT_VOLUME = "kube-api-access-x7k2p"
SERVICE_ACCOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
OWNER_UID = "6b1d2c3e-0000-4000-8000-000000000001"

booleans = st.booleans()


@functools.cache
def one_of(options: tuple[T, ...]) -> st.SearchStrategy[T]:
    return st.sampled_from(options)


@functools.cache
def integers(low: int, high: int) -> st.SearchStrategy[int]:
    return st.integers(low, high)


@functools.cache
def subsets(options: tuple[T, ...], low: int, high: int) -> st.SearchStrategy[list[T]]:
    return st.lists(st.sampled_from(options), min_size=low, max_size=high, unique=True)


def maybe(draw: st.DrawFn, options: tuple[T, ...]) -> T | None:
    """None or one of the options."""
    chosen: T | None = draw(one_of((None, *options)))
    return chosen


def mapping(draw: st.DrawFn, keys: tuple[str, ...], values: tuple[str, ...]) -> dict[str, str]:
    return {key: draw(one_of(values)) for key in draw(subsets(keys, 0, 3))}


@dataclass(frozen=True)
class PodRealism:
    """What the controllers and the API server's built-in admission add to a pod before us."""

    owner_reference: bool
    generate_name: bool
    defaults: bool


@dataclass
class TrainingJob:
    """The workloads of one job, as the API server sends them on CREATE."""

    framework: str
    job: str
    namespace: str
    workloads: list[Obj]
    realism: PodRealism
    cluster_domain: str


@dataclass
class BarePodJob:
    """Bare Pods of one job, each carrying the topology stamp and its index."""

    framework: str
    job: str
    namespace: str
    topology: dict[str, int]
    cluster_domain: str
    pods: list[Obj] = field(default_factory=list)


@dataclass(frozen=True)
class Update:
    """What a user changes in a stored StatefulSet (a scale, a re-applied manifest)."""

    position: int  # which workload of the job
    replicas: int | None  # a new replica count
    drop_stamp: bool  # the template re-applied without the webhook's annotations (GitOps)
    gpus: str | None  # a new trainhook.io/gpus


# --- settings --------------------------------------------------------------------------------


def _elastic(draw: st.DrawFn) -> str:
    low = draw(integers(1, 3))
    return f"{low}:{low + draw(integers(0, 3))}"


SETTINGS: dict[str, Callable[[st.DrawFn], str]] = {
    contract.PORT: lambda draw: str(draw(integers(1, 65535))),
    contract.GPUS: lambda draw: str(draw(integers(0, 8))),
    contract.GPU_RESOURCE: lambda draw: draw(one_of(GPU_RESOURCES)),
    contract.SHM_SIZE: lambda draw: draw(one_of(SHM_SIZES)),
    contract.SCHEDULER: lambda draw: draw(one_of(("volcano", "coscheduling", "kueue"))),
    contract.SCHEDULE_TIMEOUT_SECONDS: lambda draw: str(draw(integers(1, 3600))),
    contract.NPROC_PER_NODE: lambda draw: str(draw(integers(1, 8))),
    contract.QUEUE: lambda draw: draw(one_of(("default", "research"))),
    contract.SUCCESS_POLICY: lambda draw: draw(one_of(("all", "rank0", "any-worker"))),
    contract.BACKOFF_LIMIT: lambda draw: str(draw(integers(0, 5))),
    contract.ELASTIC: _elastic,
}


def job_settings(draw: st.DrawFn, framework: str) -> dict[str, str]:
    """trainhook.io/ annotations with valid values, shared by a job's workloads."""
    keys = tuple(key for key in SETTINGS if key != contract.ELASTIC or framework == "pytorch")
    chosen = {key: SETTINGS[key](draw) for key in draw(subsets(keys, 0, len(keys)))}
    if contract.SCHEDULER not in chosen:
        chosen.pop(contract.QUEUE, None)  # a queue without a scheduler is refused
    return chosen


def role_settings(draw: st.DrawFn, settings: dict[str, str]) -> dict[str, str]:
    """A role's settings: the job's, with sometimes a port and processes of its own (per-role
    settings; the job-wide ones stay shared)."""
    own = dict(settings)
    if draw(booleans):
        own[contract.PORT] = str(draw(integers(1, 65535)))
    if draw(booleans):
        own[contract.NPROC_PER_NODE] = str(draw(integers(1, 8)))
    return own


def place_settings(
    draw: st.DrawFn, settings: dict[str, str], container_names: list[str]
) -> tuple[dict[str, str], dict[str, str]]:
    """Split settings between a workload's own annotations and its template's (or both)."""
    chosen = dict(settings)
    if draw(booleans):
        chosen[contract.CONTAINER] = draw(one_of(tuple(container_names)))
    ordered = maybe(draw, ("true", "false"))
    if ordered is not None:
        chosen[contract.ORDERED_START] = ordered
    own: dict[str, str] = {}
    template: dict[str, str] = {}
    for key, value in chosen.items():
        where = draw(one_of(("workload", "workload", "template", "both")))
        if where != "template":
            own[key] = value
        if where != "workload":
            template[key] = value
    return own, template


# --- containers and pod specs ----------------------------------------------------------------


def env_item(draw: st.DrawFn, name: str) -> Obj:
    if draw(booleans):
        return {"name": name, "value": draw(one_of(ENV_VALUES))}
    return {"name": name, **copy.deepcopy(ENV_SOURCES[draw(integers(0, len(ENV_SOURCES) - 1))])}


def resources(draw: st.DrawFn, gpu_resource: str, gpus: str | None) -> Obj | None:
    """A container's resources; a limit of the job's GPU resource agrees with trainhook.io/gpus
    (`gpus`), as Trainhook refuses one that contradicts it."""
    shape = draw(one_of(RESOURCE_SHAPES))
    if shape == "none":
        return None
    if shape == "empty":
        return {}
    result: Obj = {
        "limits": {"cpu": "4", "memory": "16Gi"},
        "requests": {"cpu": "500m", "memory": "8Gi"},
    }
    if shape != "cpu":
        resource = draw(one_of((gpu_resource, *GPU_RESOURCES)))
        count = str(draw(integers(1, 8)))
        if resource == gpu_resource and gpus is not None:
            count = gpus
        result["limits"][resource] = count
        if shape == "gpu-both":
            result["requests"][resource] = count
    return result


def container(
    draw: st.DrawFn,
    name: str,
    volumes: list[tuple[Obj, str]],
    gpu_resource: str,
    defaults: bool,
    gpus: str | None = None,
) -> Obj:
    result: Obj = {"name": name, "image": draw(one_of(("trainer:1", "python:3.11")))}
    if draw(booleans):
        result["command"] = ["python", "train.py"]
    env = [env_item(draw, each) for each in draw(subsets(ENV_NAMES, 0, 4))]
    if env:
        result["env"] = env
    mounts: list[Obj] = []
    for volume, path in volumes:
        if path not in {m["mountPath"] for m in mounts} and draw(booleans):
            mounts.append({"name": volume["name"], "mountPath": path})
    if mounts:
        result["volumeMounts"] = mounts
    limits = resources(draw, gpu_resource, gpus)
    if limits is not None:
        result["resources"] = limits
    if defaults:
        result |= {
            "terminationMessagePath": "/dev/termination-log",
            "terminationMessagePolicy": "File",
            "imagePullPolicy": "IfNotPresent",
        }
        result.setdefault("resources", {})
    return result


def pod_spec(
    draw: st.DrawFn,
    framework: str,
    restart_policies: tuple[str, ...],
    gpu_resource: str,
    defaults: bool,
    gpus: str | None = None,
) -> tuple[Obj, list[str]]:
    """A pod spec and its container names."""
    default_container = FRAMEWORKS[framework].container or "main"
    pool = tuple(dict.fromkeys((default_container, "main", "sidecar", "metrics")))
    names = draw(subsets(pool, 1, 3))
    init_names = draw(subsets(("init", "fetch-data"), 0, 2))
    volumes = [VOLUMES[i] for i in draw(subsets(tuple(range(len(VOLUMES))), 0, 4))]
    spec: Obj = {
        "containers": [
            container(draw, each, volumes, gpu_resource, defaults, gpus) for each in names
        ]
    }
    if init_names:
        spec["initContainers"] = [
            container(draw, each, volumes, gpu_resource, defaults, gpus) for each in init_names
        ]
    if volumes:
        spec["volumes"] = [copy.deepcopy(volume) for volume, _ in volumes]
    if restart_policies:
        spec["restartPolicy"] = draw(one_of(restart_policies))
    scheduler = maybe(draw, ("volcano", "my-scheduler"))
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    if defaults:
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec |= {
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "securityContext": {},
        }
    return spec, names


# --- workloads -------------------------------------------------------------------------------


def managed_fields(api_version: str) -> list[Obj]:
    return [
        {
            "manager": "kubectl-client-side-apply",
            "operation": "Update",
            "apiVersion": api_version,
            "time": "2026-01-01T00:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:labels": {f"f:{contract.FRAMEWORK}": {}}}},
        }
    ]


def workload(
    draw: st.DrawFn,
    framework: str,
    job: str | None,
    role: str,
    namespace: str,
    settings: dict[str, str],
    kinds: tuple[str, ...] = KINDS,
) -> Obj:
    """A StatefulSet or Indexed Job of one role; `job` None: no job label, its name is the job."""
    kind = draw(one_of(kinds))
    name = f"{job}-{role}" if job is not None else draw(one_of(NAMES))
    defaults = draw(booleans)
    gpu_resource = settings.get(contract.GPU_RESOURCE, "nvidia.com/gpu")
    restart = ("Never", "OnFailure") if kind == "Job" else ()
    gpus = settings.get(contract.GPUS)
    pod, container_names = pod_spec(draw, framework, restart, gpu_resource, defaults, gpus)
    own_settings, template_settings = place_settings(draw, settings, container_names)

    labels = mapping(draw, USER_LABEL_KEYS, LABEL_VALUES) | {contract.FRAMEWORK: framework}
    if job is not None:
        labels[contract.JOB] = job
    if role != FRAMEWORKS[framework].default_role or draw(booleans):
        labels[contract.ROLE] = role
    metadata: Obj = {"name": name, "labels": labels}
    if draw(booleans):
        metadata["namespace"] = namespace
    annotations = mapping(draw, USER_ANNOTATION_KEYS, LABEL_VALUES) | own_settings
    if annotations:
        metadata["annotations"] = annotations
    api_version = "apps/v1" if kind == "StatefulSet" else "batch/v1"
    if defaults:
        metadata["managedFields"] = managed_fields(api_version)

    template_labels = mapping(draw, USER_LABEL_KEYS, LABEL_VALUES)
    if kind == "StatefulSet":
        template_labels["app"] = name  # what its selector matches
    template_annotations = mapping(draw, USER_ANNOTATION_KEYS, LABEL_VALUES) | template_settings
    template_metadata = {
        key: value
        for key, value in (("labels", template_labels), ("annotations", template_annotations))
        if value
    }
    # The framework's coordinator roles (a PyTorch master, an MPI launcher) have at most one.
    replicas = draw(integers(0, 1 if role in FRAMEWORKS[framework].single else 6))
    service = maybe(draw, (job or name, f"{name}-svc"))
    spec: Obj
    if kind == "StatefulSet":
        spec = {"selector": {"matchLabels": {"app": name}}}
        if replicas != 1 or defaults or draw(booleans):
            spec["replicas"] = replicas
        if service is not None:
            spec["serviceName"] = service
        if draw(booleans):
            spec["ordinals"] = {"start": draw(integers(0, 3))}
        policy = "OrderedReady" if defaults else maybe(draw, ("Parallel",))
        if policy is not None:
            spec["podManagementPolicy"] = policy
        if defaults:
            spec |= {
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "revisionHistoryLimit": 10,
                "persistentVolumeClaimRetentionPolicy": {
                    "whenDeleted": "Retain",
                    "whenScaled": "Retain",
                },
            }
    else:
        spec = {"completionMode": "Indexed", "completions": replicas, "parallelism": replicas}
        if service is not None:
            pod["subdomain"] = service
        if defaults:
            # Field defaults only: the selector and the controller-uid labels are generated
            # after mutating admission.
            spec |= {
                "backoffLimit": 6,
                "suspend": False,
                "podReplacementPolicy": "TerminatingOrFailed",
            }
    spec["template"] = {"spec": pod}
    if bool(template_metadata) or draw(booleans):
        spec["template"]["metadata"] = template_metadata
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def roles(draw: st.DrawFn, framework: str) -> list[str]:
    return draw(subsets(FRAMEWORKS[framework].roles or GENERIC_ROLES, 1, 3))


@st.composite
def _training_jobs(draw: st.DrawFn, with_statefulset: bool) -> TrainingJob:
    framework = draw(one_of(tuple(sorted(FRAMEWORKS))))
    chosen = roles(draw, framework)
    job = draw(one_of(NAMES))
    labelled = len(chosen) > 1 or draw(booleans)
    namespace = draw(one_of(NAMESPACES))
    settings = job_settings(draw, framework)
    workloads = [
        workload(
            draw,
            framework,
            job if labelled else None,
            role,
            namespace,
            role_settings(draw, settings),
            ("StatefulSet",) if with_statefulset and position == 0 else KINDS,
        )
        for position, role in enumerate(chosen)
    ]
    if not labelled:
        job = workloads[0]["metadata"]["name"]
    realism = PodRealism(draw(booleans), draw(booleans), draw(booleans))
    return TrainingJob(framework, job, namespace, workloads, realism, draw(one_of(DOMAINS)))


training_jobs = _training_jobs(with_statefulset=False)
"""One job of one framework: a workload per role, each a StatefulSet or an Indexed Job."""


jobs_with_a_statefulset = _training_jobs(with_statefulset=True)


@st.composite
def _statefulset_updates(draw: st.DrawFn) -> tuple[TrainingJob, Update]:
    job = draw(jobs_with_a_statefulset)
    positions = tuple(i for i, w in enumerate(job.workloads) if w["kind"] == "StatefulSet")
    position = draw(one_of(positions))
    framework = FRAMEWORKS[job.framework]
    role = job.workloads[position]["metadata"]["labels"].get(contract.ROLE, framework.default_role)
    update = Update(
        position=position,
        replicas=maybe(draw, tuple(range(2 if role in framework.single else 7))),
        drop_stamp=draw(booleans),
        gpus=maybe(draw, tuple(map(str, range(9)))),
    )
    return job, update


statefulset_updates = _statefulset_updates()
"""A job with at least one StatefulSet, and a change a user makes to one of them."""


def updated(stored: Obj, update: Update) -> Obj:
    """The object the API server sends on UPDATE after the user's change to `stored`."""
    result = copy.deepcopy(stored)
    if update.replicas is not None:
        result["spec"]["replicas"] = update.replicas
    template_metadata = result["spec"]["template"].setdefault("metadata", {})
    if update.drop_stamp:
        annotations = template_metadata.get("annotations") or {}
        for key in (contract.TOPOLOGY, contract.HOSTS):
            annotations.pop(key, None)
        if not annotations:
            template_metadata.pop("annotations", None)  # the API server omits an empty map
    if update.gpus is not None:
        result["metadata"].setdefault("annotations", {})[contract.GPUS] = update.gpus
        # The user changes the containers' own GPU limits with it, or Trainhook refuses them.
        settings = {**annotations_of(result["spec"]["template"]), **annotations_of(result)}
        resource = settings.get(contract.GPU_RESOURCE, "nvidia.com/gpu")
        for each in result["spec"]["template"]["spec"]["containers"]:
            limits = (each.get("resources") or {}).get("limits") or {}
            if resource in limits:
                limits[resource] = update.gpus
    return result


# --- pods ------------------------------------------------------------------------------------


def controller_pods(workload: Obj, namespace: str, realism: PodRealism) -> list[Obj]:
    """The pods the StatefulSet or Job controller creates, as the webhook receives them."""
    pods = expand(workload, namespace)
    name = workload["metadata"]["name"]
    for pod in pods:
        metadata = pod["metadata"]
        if realism.owner_reference:
            metadata["ownerReferences"] = [
                {
                    "apiVersion": workload["apiVersion"],
                    "kind": workload["kind"],
                    "name": name,
                    "uid": OWNER_UID,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        if workload["kind"] == "StatefulSet":
            metadata["labels"]["controller-revision-hash"] = f"{name}-7d9f8c6b5"
        elif realism.generate_name:
            # Job pods are named by generateName; the name is empty while admission runs.
            metadata["generateName"] = metadata.pop("name") + "-"
        if realism.defaults:
            with_api_server_defaults(pod)
    return pods


def with_api_server_defaults(pod: Obj) -> None:
    """What defaulting and the built-in admission plugins add before webhooks are called."""
    spec = pod["spec"]
    spec |= {
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "enableServiceLinks": True,
        "priority": 0,
        "preemptionPolicy": "PreemptLowerPriority",
        "tolerations": [
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
    }
    sources = [
        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
    ]
    spec.setdefault("volumes", []).append(
        {"name": SERVICE_ACCOUNT_VOLUME, "projected": {"defaultMode": 420, "sources": sources}}
    )
    for field_name in ("initContainers", "containers"):
        for each in spec.get(field_name) or []:
            each.setdefault("volumeMounts", []).append(
                {
                    "name": SERVICE_ACCOUNT_VOLUME,
                    "readOnly": True,
                    "mountPath": SERVICE_ACCOUNT_PATH,
                }
            )


def bare_pod(
    draw: st.DrawFn,
    case: BarePodJob,
    role: str,
    index: int,
    settings: dict[str, str],
    defaults: bool,
) -> Obj:
    framework, job = case.framework, case.job
    gpu_resource = settings.get(contract.GPU_RESOURCE, "nvidia.com/gpu")
    restart = ("Never", "OnFailure", "Always")
    gpus = settings.get(contract.GPUS)
    spec, container_names = pod_spec(draw, framework, restart, gpu_resource, defaults, gpus)
    own, template = place_settings(draw, settings, container_names)
    annotations = mapping(draw, USER_ANNOTATION_KEYS, LABEL_VALUES) | own | template
    annotations[contract.TOPOLOGY] = json.dumps(case.topology, separators=(",", ":"))
    labels = mapping(draw, USER_LABEL_KEYS, LABEL_VALUES)
    labels |= {contract.FRAMEWORK: framework, contract.JOB: job}
    if role != FRAMEWORKS[framework].default_role or draw(booleans):
        labels[contract.ROLE] = role
    if case.topology[role] > 1 or draw(booleans):
        labels[contract.INDEX] = str(index)
    hostname = f"{job}-{role}-{index}"
    if draw(booleans):
        spec["hostname"] = hostname
    if draw(booleans):
        spec["subdomain"] = job
    metadata: Obj = {"name": hostname, "labels": labels, "annotations": annotations}
    if draw(booleans):
        metadata["namespace"] = case.namespace
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}
    if defaults:
        with_api_server_defaults(pod)
    return pod


@st.composite
def _bare_pod_jobs(draw: st.DrawFn) -> BarePodJob:
    framework = draw(one_of(tuple(sorted(FRAMEWORKS))))
    single = FRAMEWORKS[framework].single  # a PyTorch master, an MPI launcher: one at most
    counts = {
        role: draw(integers(0, 1 if role in single else 4)) for role in roles(draw, framework)
    }
    job, namespace, domain = draw(one_of(NAMES)), draw(one_of(NAMESPACES)), draw(one_of(DOMAINS))
    case = BarePodJob(framework, job, namespace, counts, domain)
    settings = job_settings(draw, framework)
    defaults = draw(booleans)
    case.pods = [
        bare_pod(draw, case, role, index, settings, defaults)
        for role, count in counts.items()
        for index in range(count)
    ]
    return case


bare_pod_jobs = _bare_pod_jobs()
"""Bare Pods of a job: each carries the topology stamp (roles in any order), role and index."""
