"""The workload view: what a labelled StatefulSet or Indexed Job means for its training job."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, dataclass
from functools import lru_cache
from typing import Any

from webhook.core import contract
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.frameworks import FRAMEWORKS, Framework
from webhook.core.frameworks.mpi import check_ssh_user
from webhook.core.job.failure_rules import Rule
from webhook.core.job.gang import job_gang
from webhook.core.job.processes import processes_per_pod
from webhook.core.job.settings import (
    EVERY_ROLE,
    JOB_SETTINGS,
    ROLES_THAT_SET_IT,
    Settings,
    read_settings,
)
from webhook.core.keys import check_keys
from webhook.core.objects import annotations_of, field_of, labels_of, metadata_of, template_of
from webhook.core.shape.pods import check_counts, training_container
from webhook.core.shape.topology import Role, Topology
from webhook.core.values import DNS_LABEL, allowed_list

WORKLOAD_KINDS = ("StatefulSet", "Job")


@dataclass(frozen=True, init=False)
class Workload:
    """One role of a job, as played by a StatefulSet or an Indexed Job."""

    kind: str
    name: str
    namespace: str
    framework: Framework
    job: str
    role: str
    replicas: int
    settings: Settings
    pod_prefix: str  # pod i is named `<pod_prefix>-<i + ordinal_start>`
    ordinal_start: int
    service: str  # the headless Service its pods live under
    nproc: int = 1  # processes per pod (trainhook.io/nproc-per-node, else one per GPU)
    priority_class: str | None = None  # its pod template's priorityClassName

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        kind: str,
        name: str,
        namespace: str,
        framework: Framework,
        job: str,
        role: str,
        replicas: int,
        settings: Settings,
        pod_prefix: str,
        ordinal_start: int,
        service: str,
        nproc: int = 1,
        priority_class: str | None = None,
    ) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "namespace", namespace)
        object.__setattr__(self, "framework", framework)
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "role", role)
        object.__setattr__(self, "replicas", replicas)
        object.__setattr__(self, "settings", settings)
        object.__setattr__(self, "pod_prefix", pod_prefix)
        object.__setattr__(self, "ordinal_start", ordinal_start)
        object.__setattr__(self, "service", service)
        object.__setattr__(self, "nproc", nproc)
        object.__setattr__(self, "priority_class", priority_class)

    def describe(self) -> str:
        return f"{self.kind} {self.name}"


def job_of(obj: Mapping[str, Any]) -> str | None:
    """The job a labelled object belongs to; None when it is not labelled for Trainhook."""
    labels = labels_of(obj)
    if contract.FRAMEWORK not in labels:
        return None
    job = labels.get(contract.JOB)
    if job is not None:
        return job
    name: str | None = metadata_of(obj).get("name")
    return name


def read_framework(labels: dict[str, str]) -> Framework:
    name = labels.get(contract.FRAMEWORK)
    if name is None:
        raise InvalidSetting(contract.FRAMEWORK, None, allowed_list(tuple(FRAMEWORKS)))
    framework = FRAMEWORKS.get(name)
    if framework is None:
        raise InvalidSetting(contract.FRAMEWORK, name, allowed_list(tuple(FRAMEWORKS)))
    return framework


def read_job(labels: dict[str, str], default: str) -> str:
    job = labels.get(contract.JOB)
    if job is None:
        if not (DNS_LABEL.match(default) and len(default) <= 63):
            raise InvalidSetting(
                contract.JOB,
                None,
                f"the job name defaults to the workload name {default!r}, which is not a "
                "DNS-1035 label (it names the headless Service): set the label",
            )
        return default
    if not (DNS_LABEL.match(job) and len(job) <= 63):
        raise InvalidSetting(
            contract.JOB, job, "a DNS-1035 label: lower-case letters, digits and '-', at most 63"
        )
    return job


def read_role(labels: dict[str, str], framework: Framework) -> str:
    role = labels.get(contract.ROLE)
    if role is None:
        return framework.default_role
    if role in framework.roles:
        return role  # the framework's own role names are DNS-1035 labels
    if framework.roles:
        raise InvalidSetting(
            contract.ROLE, role, f"{framework.name} roles are {', '.join(framework.roles)}"
        )
    if not (DNS_LABEL.match(role) and len(role) <= 63):
        raise InvalidSetting(contract.ROLE, role, "a DNS-1035 label")
    return role


def _effective(own: Mapping[str, str], template: Mapping[str, Any]) -> dict[str, str]:
    """A workload's settings: its template's trainhook.io/ annotations, its own on top."""
    merged = {
        key: value
        for key, value in annotations_of(template).items()
        if key.startswith(contract.PREFIX)
    }
    merged.update((key, value) for key, value in own.items() if key.startswith(contract.PREFIX))
    return merged


def template_only(kind: str, name: str) -> Refused:
    """The refusal for a workload whose pod template carries the labels but not itself."""
    return Refused(
        f"{kind} {name}: the {contract.PREFIX} labels are on its pod template only; put them "
        f"on the {kind} itself (its metadata.labels), where Trainhook reads the job"
    )


def replica_controller(kind: str, name: str) -> Refused:
    """The refusal for a labelled Deployment, ReplicaSet and the like, or a pod of one."""
    return Refused(
        f"{kind} {name}: Trainhook runs labelled StatefulSets, Indexed Jobs and bare Pods; a "
        f"{kind}'s pods have no stable names or indexes to find their peers by: use a StatefulSet"
    )


def read_workload(obj: Mapping[str, Any], namespace: str) -> Workload:
    """Read a labelled StatefulSet or Job; raise a one-line error for anything invalid."""
    kind = field_of(obj, "kind")
    metadata = metadata_of(obj)
    name = metadata.get("name") or ""
    namespace = metadata.get("namespace") or namespace
    labels = labels_of(obj)
    template = template_of(obj)
    if contract.FRAMEWORK not in labels and contract.FRAMEWORK in labels_of(template):
        raise template_only(str(kind), name)
    framework = read_framework(labels)
    annotations = annotations_of(obj)
    check_keys(labels, annotations)
    check_keys(labels_of(template), annotations_of(template))
    job = read_job(labels, name)
    role = read_role(labels, framework)
    effective = _effective(annotations, template)
    settings = read_settings(effective, framework)
    if settings.roles is not None and role not in settings.roles:
        raise InvalidSetting(
            contract.ROLES,
            effective.get(contract.ROLES),
            f"the job's roles must include {role}, the role of {kind} {name}",
        )
    check_counts(template)
    training = training_container(template, framework.container, settings.container)
    if framework.check_template is not None:
        framework.check_template(template, settings.ssh_auth_mount_path, training)
    if settings.ssh_keys and not framework.ssh_keys:
        check_ssh_user(template, settings.ssh_auth_mount_path, training)  # as an MPI job's
    nproc = processes_per_pod(template, training, settings)
    spec: dict[str, Any] = field_of(obj, "spec") or {}
    template_spec: dict[str, Any] = template.get("spec") or {}
    priority = template_spec.get("priorityClassName")
    if kind == "StatefulSet":
        replicas = _count(spec.get("replicas", 1), "spec.replicas", name)
        ordinals: dict[str, Any] = spec.get("ordinals") or {}
        start = _count(ordinals.get("start", 0), "spec.ordinals.start", name)
        service = spec.get("serviceName") or job
        _check_single(framework, role, replicas, kind, name)
        return Workload(
            kind=kind,
            name=name,
            namespace=namespace,
            framework=framework,
            job=job,
            role=role,
            replicas=replicas,
            settings=settings,
            pod_prefix=name,
            ordinal_start=start,
            service=service,
            nproc=nproc,
            priority_class=priority,
        )
    if kind == "Job":
        if spec.get("completionMode") != "Indexed":
            raise Refused(
                f"Job {name}: a training job needs spec.completionMode: Indexed, so each pod "
                "gets a stable index (found "
                f"{spec.get('completionMode') or 'NonIndexed'})"
            )
        completions = _count(spec.get("completions", 1), "spec.completions", name)
        parallelism = _count(spec.get("parallelism", 1), "spec.parallelism", name)
        if parallelism != completions:
            raise Refused(
                f"Job {name}: spec.parallelism ({parallelism}) must equal spec.completions "
                f"({completions}) so that every rank runs at once"
            )
        service = template_spec.get("subdomain") or job
        _check_single(framework, role, completions, kind, name)
        return Workload(
            kind=kind,
            name=name,
            namespace=namespace,
            framework=framework,
            job=job,
            role=role,
            replicas=completions,
            settings=settings,
            pod_prefix=name,
            ordinal_start=0,
            service=service,
            nproc=nproc,
            priority_class=priority,
        )
    raise ValueError(f"not a workload kind: {kind!r}")


def _check_single(framework: Framework, role: str, replicas: int, kind: str, name: str) -> None:
    if role in framework.single and replicas > 1:
        raise Refused(
            f"{kind} {name}: {contract.ROLE} {role} has {replicas} replicas; a {framework.name} "
            f"job has one {role}, which the other pods connect to: run the others as "
            f"{framework.default_role}s"
        )


def _count(value: object, field: str, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidSetting(field, value, f"{name}: a whole number >= 0")
    return value


def build_topology(workloads: Sequence[Workload], cluster_domain: str = "") -> Topology:
    """The topology of one job from all of its workloads (one per role)."""
    first = workloads[0]
    by_role: dict[str, Workload] = {}
    for workload in workloads:
        if workload.framework.name != first.framework.name:
            raise Refused(
                f"{contract.FRAMEWORK}: job {first.job!r} mixes frameworks "
                f"{first.framework.name!r} ({first.describe()}) and "
                f"{workload.framework.name!r} ({workload.describe()})"
            )
        other = by_role.get(workload.role)
        if other is not None and other.describe() != workload.describe():
            raise Refused(
                f"{contract.ROLE}: role {workload.role!r} of job {first.job!r} is played by both "
                f"{other.describe()} and {workload.describe()}; give each its own role"
            )
        by_role[workload.role] = workload
    order = first.framework.order(by_role)
    roles = tuple(
        (
            name,
            w.replicas,
            w.pod_prefix,
            w.ordinal_start,
            w.service,
            w.nproc,
            w.settings.port if w.settings.port is not None else w.framework.port,
        )
        for name in order
        if (w := by_role[name]).replicas > 0
    )
    return _topology(first.job, first.namespace, first.framework.name, roles, cluster_domain)


@lru_cache(maxsize=64)
def _topology(
    job: str,
    namespace: str,
    framework: str,
    roles: tuple[tuple[str, int, str, int, str, int, int | None], ...],
    cluster_domain: str,
) -> Topology:
    """A job's topology, checked once per distinct set of roles and shared from then on (it is
    frozen; the host lists it makes are kept with it). Keyed by the roles' fields, so a
    topology already made costs no Role built again."""
    return Topology(job, namespace, framework, tuple(Role(*role) for role in roles), cluster_domain)


@dataclass(frozen=True)
class Member:
    """One workload (or bare pod) of a job, as far as the job-wide settings go."""

    role: str
    what: str  # e.g. "StatefulSet pt-master"
    settings: Settings
    priority_class: str | None = None


def member(workload: Workload) -> Member:
    return Member(workload.role, workload.describe(), workload.settings, workload.priority_class)


def disagreement(job: str, framework: Framework, members: Sequence[Member]) -> str | None:
    """One line naming a job-wide setting whose roles disagree and their values; None if none."""
    if len(members) < 2:
        return None
    first = members[0]
    if all(
        m.settings is first.settings and m.priority_class == first.priority_class for m in members
    ):
        return None  # most jobs: every role reads the same (settings are shared by value)
    if len({_job_wide(m) for m in members}) == 1:
        return None
    # In role order, so the line is the same whichever workload is admitted (or rendered) last.
    position = {role: i for i, role in enumerate(framework.order(m.role for m in members))}
    members = sorted(members, key=lambda m: (position.get(m.role, len(position)), m.what))
    try:
        job_gang(job, [(m.what, m.settings) for m in members])
    except Refused as refused:
        return str(refused)
    # Those every role must set alike first, then the PodGroup's priority, then the rest.
    checks: list[tuple[str, Callable[[Member], object], str, bool]] = [
        _check(setting) for setting in _agreed(EVERY_ROLE)
    ]
    if any(m.settings.scheduler is not None for m in members):
        checks.append(
            (
                "spec.template.spec.priorityClassName",
                lambda m: m.priority_class,
                "its PodGroup takes one",
                False,
            )
        )
    checks += [_check(setting) for setting in _agreed(ROLES_THAT_SET_IT)]
    for key, value_of, why, unset_counts in checks:
        values = [(m, value_of(m)) for m in members]
        if not unset_counts:
            values = [(m, v) for m, v in values if v is not None]
        if len({_shown(v) for _, v in values}) > 1:
            listed = ", ".join(f"{m.role} ({m.what}) {_shown(v)}" for m, v in values[:6])
            more = f" and {len(values) - 6} more" if len(values) > 6 else ""
            return (
                f"{key} differs between the roles of job {job}: {listed}{more}; set one value "
                f"on every workload of the job ({why})"
            )
    return None


def _agreed(agree: str) -> tuple[Field[Any], ...]:
    return tuple(setting for setting in JOB_SETTINGS if setting.metadata["agree"] == agree)


def _check(setting: Field[Any]) -> tuple[str, Callable[[Member], object], str, bool]:
    """(key, its value on a member, why it is job-wide, whether a role without it counts)."""

    def value_of(m: Member) -> object:
        return getattr(m.settings, setting.name)

    unset_counts = setting.metadata["agree"] == EVERY_ROLE
    return (setting.metadata["key"], value_of, setting.metadata["why"], unset_counts)


_MUST_AGREE = _agreed(EVERY_ROLE) + _agreed(ROLES_THAT_SET_IT)


def _job_wide(m: Member) -> tuple[object, ...]:
    settings = m.settings
    gang = (
        settings.scheduler,
        settings.queue,
        settings.schedule_timeout_seconds,
        settings.min_available,
        settings.placement_topology,
        settings.placement,
        settings.placement_tier,
        settings.kai_topology,
    )
    return (*(getattr(settings, s.name) for s in _MUST_AGREE), *gang, m.priority_class)


def _shown(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, tuple) and value and isinstance(value[0], Rule):
        return repr("; ".join(rule.text for rule in value))
    if isinstance(value, tuple) and all(isinstance(v, str) for v in value):
        return repr(",".join(value))
    if isinstance(value, tuple):
        return ":".join(map(str, value))
    return repr(value) if isinstance(value, str) else str(value)
