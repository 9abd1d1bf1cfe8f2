"""Pod mutation: a labelled pod learns its place in the job and gets its framework's env."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.compat import COMPATS, job_lists
from webhook.core.draft import Draft
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.fabrics.apply import apply_fabric, fabric_env
from webhook.core.fabrics.nvlink import add_nvlink_channel
from webhook.core.fabrics.preflight import (
    DCGM,
    DEFAULT_DCGM_LEVEL,
    NCCL,
    add_dcgm_preflight,
    add_preflight,
    check_dcgm,
    later_attempt,
    preflight_kinds,
    wants_attempts,
)
from webhook.core.fabrics.registry import profile_for
from webhook.core.frameworks import Framework, Placement
from webhook.core.frameworks.common import common_env
from webhook.core.frameworks.mpi import mount_ssh_keys
from webhook.core.job.colocation import colocate_pod
from webhook.core.job.completeness import missing_roles
from webhook.core.job.node_exclusion import exclude_nodes, excluded_by, wants_owner
from webhook.core.job.processes import gpu_count, processes_per_pod
from webhook.core.job.progress import ProgressEndpoint, add_progress
from webhook.core.job.restart_in_place import add_checkpoint_file
from webhook.core.job.settings import Settings, read_settings, wants_ssh_keys
from webhook.core.job.workload import (
    build_topology,
    job_of,
    read_framework,
    read_job,
    read_role,
    read_workload,
    replica_controller,
    template_only,
)
from webhook.core.keys import check_keys
from webhook.core.mutation.owned_objects import needed_objects
from webhook.core.mutation.pod_plumbing import keep_last_words, set_gpus, set_scheduler, set_shm
from webhook.core.mutation.workload_mutation import sibling_workloads
from webhook.core.objects import annotations_of, labels_of
from webhook.core.shape.peers import PeerFiles, inline, peer_files
from webhook.core.shape.pods import (
    PodIdentity,
    add_gate,
    add_volume,
    check_annotation_size,
    check_counts,
    env_by_name,
    equipped,
    identify,
    mount,
    training_container,
)
from webhook.core.shape.topology import Role, Topology, topology_from_stamp

PEERS_VOLUME = "trainhook-peers"
POD_TEMPLATE_HASH = "pod-template-hash"  # the label a Deployment's ReplicaSets put on pods


@dataclass(frozen=True)
class PodMutation:
    pod: dict[str, Any]
    warnings: list[str]
    placement: Placement
    env: dict[str, str]
    peers: PeerFiles | None = None  # the job's peers ConfigMap, for a job past the inline bound
    settings: Settings = dataclasses.field(default_factory=Settings)
    reading: PodReading | None = None


def owner_to_resolve(pod: Mapping[str, Any]) -> tuple[str, str] | None:
    """The StatefulSet or Job to read when a labelled pod carries no topology stamp, or when its
    job's restarts may exclude nodes (recorded on the workload, see core/job/node_exclusion.py)
    or decide whether it runs the preflight (core/fabrics/preflight.py)."""
    if contract.FRAMEWORK not in labels_of(pod):
        return None
    if contract.TOPOLOGY in annotations_of(pod) and not (
        wants_owner(pod) or wants_attempts(annotations_of(pod))
    ):
        return None
    identity = identify(pod)
    if identity.owner_kind == "Pod" or not identity.owner_name:
        return None
    return identity.owner_kind, identity.owner_name


@dataclass(frozen=True)
class PodReading:
    """What a pod's labels, annotations, owner and containers say: the same for every pod of
    one workload revision (its index aside)."""

    identity: PodIdentity
    framework: Framework
    role: str
    settings: Settings
    topology: Topology  # before an elastic pod beyond the stamp grows its role
    training: int | None
    gpus: int
    nproc: int
    service_links: bool


@dataclass(frozen=True, init=False)
class Place:
    """One pod's place and the env it gets there."""

    placement: Placement
    env: dict[str, str]
    field_env: dict[str, str]
    files: PeerFiles | None

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        placement: Placement,
        env: dict[str, str],
        field_env: dict[str, str],
        files: PeerFiles | None,
    ) -> None:
        object.__setattr__(self, "placement", placement)
        object.__setattr__(self, "env", env)
        object.__setattr__(self, "field_env", field_env)
        object.__setattr__(self, "files", files)


def mutate_pod(
    pod: Mapping[str, Any],
    namespace: str,
    *,
    owner: Mapping[str, Any] | None = None,
    siblings: Sequence[Mapping[str, Any]] = (),
    cluster_domain: str = "",
    coscheduling_scheduler: str = contract.DEFAULT_COSCHEDULING_SCHEDULER,
    own_written: Callable[[Mapping[str, Any], list[str]], None] | None = None,
    progress: ProgressEndpoint | None = None,
    proven: frozenset[str] = frozenset(),
) -> PodMutation:
    """Mutate a labelled pod; `progress` is where a job that reports its progress sends it, and
    `proven` the objects its owner records the sweeper has proven (`proven_objects`).
    `own_written`, when given, sees the pod and the warnings as they
    are once what differs between the pods of its workload is written, before the rest."""
    reading = read_pod(pod, namespace, owner, siblings, cluster_domain)
    place = place_pod(reading, reading.identity, pod)
    draft = Draft(pod)
    warnings: list[str] = []
    if reading.settings.report_progress:
        namespace = (pod.get("metadata") or {}).get("namespace") or namespace
        job = reading.topology.job
        added = add_progress(draft, pod, namespace, job, progress, reading.training)
        place = dataclasses.replace(place, env=place.env | added)
    write_own(draft, pod, reading.identity, place, reading.training, warnings)
    if own_written is not None:
        own_written(draft.root, warnings)
    write_shared(draft, pod, reading, place, coscheduling_scheduler, warnings, proven)
    exclude_nodes(draft, pod, excluded_by(owner))
    if reading.settings.checkpoint_on_stop is not None:
        add_checkpoint_file(draft, pod, reading.training)
    if reading.settings.preflight is not None:
        _add_preflight(draft, reading, owner)
    check_annotation_size(annotations_of(draft.root))
    return PodMutation(
        draft.root, warnings, place.placement, place.env, place.files, reading.settings, reading
    )


def read_pod(
    pod: Mapping[str, Any],
    namespace: str,
    owner: Mapping[str, Any] | None,
    siblings: Sequence[Mapping[str, Any]],
    cluster_domain: str,
) -> PodReading:
    """Read and check everything but the pod's index; raise a one-line error for bad input."""
    metadata = pod.get("metadata") or {}
    namespace = metadata.get("namespace") or namespace
    labels = labels_of(pod)
    annotations = annotations_of(pod)
    owners = metadata.get("ownerReferences") or []
    controller: Mapping[str, Any] = next((r for r in owners if r.get("controller")), {})
    if controller.get("kind") in contract.REPLICA_CONTROLLERS:
        raise replica_controller(*_replica_owner(controller, labels))
    framework = read_framework(labels)
    check_keys(labels, annotations)
    check_counts(pod)
    identity = identify(pod)
    job = read_job(labels, identity.owner_name or metadata.get("name") or "")
    role = read_role(labels, framework)
    settings = read_settings(annotations, framework)
    topology = _topology(
        pod, identity, framework, job, role, namespace, owner, siblings, cluster_domain
    )
    for single in framework.single:
        if topology.replicas(single) > 1:
            raise Refused(
                f"{contract.TOPOLOGY}: role {single} has {topology.replicas(single)} replicas; a "
                f"{framework.name} job has one {single}, which the other pods connect to: run "
                f"the others as {framework.default_role}s"
            )
    training = training_container(pod, framework.container, settings.container)
    return PodReading(
        identity,
        framework,
        role,
        settings,
        topology,
        training,
        gpu_count(pod, training, settings),
        processes_per_pod(pod, training, settings),
        (pod.get("spec") or {}).get("enableServiceLinks") is not False,
    )


def place_pod(reading: PodReading, identity: PodIdentity, pod: Mapping[str, Any]) -> Place:
    """The pod's index in its role, its placement and its env."""
    framework, role, settings = reading.framework, reading.role, reading.settings
    topology = _elastic_reach(reading.topology, identity, role, settings.elastic)
    index = _role_index(identity, topology, role)
    hostname = topology.role(role).hostname(index)
    port = topology.role(role).port  # the stamp's, when the job's roles differ in port
    if port is None:
        port = settings.port if settings.port is not None else framework.port
    elif settings.port is not None and settings.port != port:
        raise InvalidSetting(
            contract.PORT,
            annotations_of(pod).get(contract.PORT),
            f"{contract.HOSTS} gives role {role} port {port}, where its peers reach it: "
            "set the same",
        )
    lists = job_lists(framework.name, settings.compat)
    files = None if inline(topology) else peer_files(topology, port, lists)
    placement = Placement(
        topology,
        role,
        index,
        hostname,
        port,
        reading.nproc,
        settings.elastic,
        gpus=reading.gpus,
        service_links=reading.service_links,
        peers=files.name if files else None,
        max_restarts=settings.max_restarts,
        mpi_implementation=settings.mpi_implementation,
        ssh_auth_mount_path=settings.ssh_auth_mount_path,
        training=reading.training,
        tpu_slices=settings.tpu_slices,
    )
    compat = COMPATS[settings.compat] if settings.compat is not None else None
    env = common_env(placement) | framework.env(placement)
    if compat is not None:
        env |= compat.env(framework, placement)
    if settings.fabric is not None:
        env = fabric_env(env, settings.fabric)
    field_env = framework.field_env(placement) if framework.field_env is not None else {}
    return Place(placement, env, field_env, files)


def write_own(
    draft: Draft,
    pod: Mapping[str, Any],
    identity: PodIdentity,
    place: Place,
    training: int | None,
    warnings: list[str],
) -> None:
    """What differs between the pods of one workload: their labels, hostname and env."""
    _set_identity(draft, pod, place.placement, identity, warnings)
    _set_env(draft, pod, training, place.env, place.field_env, warnings)


def write_shared(
    draft: Draft,
    pod: Mapping[str, Any],
    reading: PodReading,
    place: Place,
    coscheduling_scheduler: str,
    warnings: list[str],
    proven: frozenset[str] = frozenset(),
) -> None:
    """What every pod of one workload gets alike: volumes, mounts, GPUs and its scheduler.
    (A framework's `pod_extras` reads only the role-wide part of the placement.)"""
    settings, placement = reading.settings, place.placement
    if place.files is not None:
        _mount_peers(draft, pod, reading.training, place.files)
    set_gpus(draft, pod, reading.training, settings)
    keep_last_words(draft, pod, reading.training)
    set_shm(draft, pod, reading.training, settings)
    set_scheduler(draft, pod, settings, placement, coscheduling_scheduler, warnings)
    colocate_pod(draft, pod, settings, placement.topology.job)
    if settings.fabric is not None:
        name = reading.framework.name
        apply_fabric(draft, pod, settings.fabric, name, reading.training, reading.gpus, warnings)
    if settings.nvlink_domain:
        add_nvlink_channel(draft, pod, placement.topology.job, reading.training)
    if reading.framework.pod_extras is not None:
        reading.framework.pod_extras(draft, pod, placement)
    if settings.ssh_keys and not reading.framework.ssh_keys:
        mount_ssh_keys(draft, pod, placement)  # as an MPI job's pods, for any framework
    compat = COMPATS[settings.compat] if settings.compat is not None else None
    if compat is not None and compat.pod_extras is not None:
        compat.pod_extras(draft, pod, placement)
    if reading.identity.owner_kind in ("StatefulSet", "Job"):
        present = (r.name for r in placement.topology.roles)
        if missing_roles(reading.framework, present, settings.roles):
            add_gate(draft, pod, contract.WAITING_FOR_ROLES)  # its world would be partial
    needed = needed_objects(
        placement.topology.job,
        place.files.name if place.files is not None else None,
        wants_ssh_keys(reading.framework, settings),
        settings.nvlink_domain,
    )
    if not proven.issuperset(needed):
        # Lifted once the sweeper has proven the ConfigMap, Secret or ComputeDomain the pod
        # mounts or claims from its own.
        add_gate(draft, pod, contract.WAITING_FOR_OWNED_OBJECTS)


def _add_preflight(draft: Draft, reading: PodReading, owner: Mapping[str, Any] | None) -> None:
    """The job's preflight, last of the pod's init containers; none once the job restarted,
    unless it runs on every attempt."""
    settings = reading.settings
    kinds = preflight_kinds(settings.preflight)
    if DCGM in kinds:
        value = str(settings.preflight)
        check_dcgm(draft.root["spec"], reading.training, reading.gpus, value, settings.gpu_resource)
    if later_attempt(owner) and not settings.preflight_every_attempt:
        return
    every_attempt = bool(settings.preflight_every_attempt)
    if DCGM in kinds:
        level = settings.preflight_dcgm_level or DEFAULT_DCGM_LEVEL
        add_dcgm_preflight(draft, reading.training, level, every_attempt)
    if NCCL in kinds:
        floor = settings.preflight_min_busbw
        if floor is None and settings.fabric is not None:
            floor = profile_for(settings.fabric).preflight_min_busbw
        add_preflight(draft, reading.training, floor, every_attempt)


def _replica_owner(controller: Mapping[str, Any], labels: Mapping[str, str]) -> tuple[str, str]:
    """The kind and name a user wrote: a ReplicaSet `<name>-<pod-template-hash>` is a
    Deployment's."""
    kind, name = str(controller.get("kind")), str(controller.get("name") or "")
    template_hash = labels.get(POD_TEMPLATE_HASH)
    suffix = f"-{template_hash}"
    if kind == "ReplicaSet" and template_hash and name.endswith(suffix) and name != suffix:
        return "Deployment", name.removesuffix(suffix)
    return kind, name


def _topology(
    pod: Mapping[str, Any],
    identity: PodIdentity,
    framework: Framework,
    job: str,
    role: str,
    namespace: str,
    owner: Mapping[str, Any] | None,
    siblings: Sequence[Mapping[str, Any]],
    cluster_domain: str,
) -> Topology:
    stamped = topology_from_stamp(
        annotations_of(pod),
        job=job,
        namespace=namespace,
        framework=framework.name,
        role_order=framework.roles,
        cluster_domain=cluster_domain,
    )
    if stamped is not None:
        return stamped
    if owner is not None:
        if job_of(owner) is None:
            owner_kind = str(owner.get("kind") or identity.owner_kind)
            raise template_only(owner_kind, identity.owner_name)
        workload = read_workload(owner, namespace)
        return build_topology([workload, *sibling_workloads(workload, siblings)], cluster_domain)
    if identity.owner_kind == "Pod" and identity.index is None:
        # A lone bare pod: a job of one, named as bare pods are by default.
        alone = Role(role, 1, pod=f"{job}-{role}", start=0, service=job)
        return Topology(job, namespace, framework.name, (alone,), cluster_domain)
    source = (
        f"its {identity.owner_kind} {identity.owner_name} could not be read (is the "
        f"{contract.FRAMEWORK} label on the {identity.owner_kind} itself, not only on its "
        "pod template?)"
        if identity.owner_kind != "Pod"
        else f"a bare pod with {contract.INDEX} must carry it"
    )
    raise Refused(
        f"pod of job {job} has no {contract.TOPOLOGY} annotation and {source}; "
        "a wrong world size is worse than a retry"
    )


def _elastic_reach(
    topology: Topology, identity: PodIdentity, role: str, elastic: tuple[int, int] | None
) -> Topology:
    """An elastic job scaled within min:max keeps its stamp (so no pod restarts for it): a pod
    beyond the stamp's replicas joins with the role counted up to it, and the rendezvous, not
    the stamp, decides the world size."""
    if elastic is None or not topology.has(role):
        return topology
    entry = topology.role(role)
    index = (identity.index or 0) - (entry.start if identity.owner_kind == "StatefulSet" else 0)
    if index < entry.replicas or topology.total - entry.replicas + index + 1 > elastic[1]:
        return topology
    grown = tuple(
        dataclasses.replace(r, replicas=index + 1) if r.name == role else r for r in topology.roles
    )
    return dataclasses.replace(topology, roles=grown)


def _role_index(identity: PodIdentity, topology: Topology, role: str) -> int:
    if not topology.has(role):
        raise Refused(
            f"role {role} has no replicas in the topology of job {topology.job} "
            f"({_counts(topology)}); the sweeper updates the stamp, retry"
        )
    entry = topology.role(role)
    index = (identity.index or 0) - (entry.start if identity.owner_kind == "StatefulSet" else 0)
    if not 0 <= index < entry.replicas:
        raise Refused(
            f"{role} {index} is outside the {entry.replicas} {role} replicas of job "
            f"{topology.job} ({_counts(topology)}); the sweeper updates the stamp, retry"
        )
    return index


def _counts(topology: Topology) -> str:
    return ", ".join(f"{role.name}={role.replicas}" for role in topology.roles)


def _set_identity(
    draft: Draft,
    pod: Mapping[str, Any],
    placement: Placement,
    identity: PodIdentity,
    warnings: list[str],
) -> None:
    wanted = identity_labels(placement)
    labels = labels_of(pod)
    if any(labels.get(key) != value for key, value in wanted.items()):
        draft.dict_at("metadata", "labels").update(wanted)
    spec = pod.get("spec") or {}
    service = placement.topology.role(placement.role).service
    if identity.owner_kind == "Pod":
        if spec.get("hostname") is None:
            draft.dict_at("spec")["hostname"] = placement.hostname
        if spec.get("subdomain") is None:
            draft.dict_at("spec")["subdomain"] = service
        elif spec["subdomain"] != service:
            warnings.append(
                f"subdomain {spec['subdomain']} is kept, but the pod's peers reach it under the "
                f"job's headless Service {service}"
            )
    check_hostname(draft.root.get("spec", {}).get("hostname"), placement)


def identity_labels(placement: Placement) -> dict[str, str]:
    """The labels that say which job, role, rank and role index a pod is."""
    return {
        contract.JOB: placement.topology.job,
        contract.ROLE: placement.role,
        contract.RANK: str(placement.rank),
        contract.ROLE_INDEX: str(placement.index),
    }


def check_hostname(hostname: object, placement: Placement) -> None:
    """Raises Refused for a hostname other than the one the pod's peers reach it by."""
    if hostname is not None and hostname != placement.hostname:
        raise Refused(
            f"pod hostname {hostname} does not match {placement.hostname}, the name its peers "
            f"use for {placement.role} {placement.index} of job {placement.topology.job}"
        )


def _mount_peers(
    draft: Draft, pod: Mapping[str, Any], training: int | None, files: PeerFiles
) -> None:
    """The job's peers ConfigMap at /etc/trainhook in the init and training containers. Not
    optional: the kubelet holds the pod until the sweeper has created it, so no pod runs with a
    partial list."""
    add_volume(draft, {"name": PEERS_VOLUME, "configMap": {"name": files.name}})
    for field, position, container in equipped(pod, training):
        mount(draft, field, position, container, PEERS_VOLUME, contract.WORKDIR_FILES)


def _set_env(
    draft: Draft,
    pod: Mapping[str, Any],
    training: int | None,
    env: dict[str, str],
    field_env: dict[str, str],
    warnings: list[str],
) -> None:
    """The init containers and the training container get the literal env and the fieldRef env
    (name -> fieldPath); sidecars get none, so a pod's cost does not grow with its containers."""
    wanted = env
    kept: list[str] = []
    for field, position, container in equipped(pod, training):
        existing = env_by_name(container.get("env") or [], wanted.keys() | field_env.keys())
        missing = [env_item(k, v) for k, v in wanted.items() if k not in existing]
        missing += [field_env_item(k, path) for k, path in field_env.items() if k not in existing]
        for name, value in wanted.items():
            item = existing.get(name)
            if item is not None and (item.get("value") != value or "valueFrom" in item):
                kept.append(f"{name} in container {container.get('name')}")
        for name, path in field_env.items():
            item = existing.get(name)
            if item is not None and _field_path(item) != path:
                kept.append(f"{name} in container {container.get('name')}")
        if missing:
            # Ours first, so the user's own env can refer to them as $(RANK) and the like.
            draft.dict_at("spec", field, position)["env"] = missing + list(
                container.get("env") or []
            )
    warnings.extend(f"env {item} was set by the user and is kept" for item in kept)


def env_item(name: str, value: str) -> dict[str, Any]:
    return {"name": name, "value": value}


def field_env_item(name: str, path: str) -> dict[str, Any]:
    """An env item the kubelet fills in from the pod's own fields."""
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def _field_path(item: Mapping[str, Any]) -> object:
    return ((item.get("valueFrom") or {}).get("fieldRef") or {}).get("fieldPath")
