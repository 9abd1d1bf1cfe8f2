"""The workload view: what a labelled StatefulSet or Indexed Job means for its training job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.frameworks import FRAMEWORKS, Framework
from webhook.core.gang import job_gang
from webhook.core.objects import annotations_of, labels_of, template_of
from webhook.core.pods import training_container
from webhook.core.settings import (
    DNS_LABEL,
    Settings,
    allowed_list,
    processes_per_pod,
    read_settings,
)
from webhook.core.topology import Role, Topology

WORKLOAD_KINDS = ("StatefulSet", "Job")


@dataclass(frozen=True)
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
    name: str | None = (obj.get("metadata") or {}).get("name")
    return name


def read_framework(labels: Mapping[str, str]) -> Framework:
    name = labels[contract.FRAMEWORK]
    framework = FRAMEWORKS.get(name)
    if framework is None:
        raise InvalidSetting(contract.FRAMEWORK, name, allowed_list(tuple(FRAMEWORKS)))
    return framework


def read_job(labels: Mapping[str, str], default: str) -> str:
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


def read_role(labels: Mapping[str, str], framework: Framework) -> str:
    role = labels.get(contract.ROLE)
    if role is None:
        return framework.default_role
    if framework.roles and role not in framework.roles:
        raise InvalidSetting(
            contract.ROLE, role, f"{framework.name} roles are {', '.join(framework.roles)}"
        )
    if not (DNS_LABEL.match(role) and len(role) <= 63):
        raise InvalidSetting(contract.ROLE, role, "a DNS-1035 label")
    return role


def effective_annotations(obj: Mapping[str, Any]) -> dict[str, str]:
    """A workload's settings: its template's trainhook.io/ annotations, its own on top."""
    merged = {
        key: value
        for key, value in annotations_of(template_of(obj)).items()
        if key.startswith(contract.PREFIX)
    }
    merged.update(
        (key, value)
        for key, value in annotations_of(obj).items()
        if key.startswith(contract.PREFIX)
    )
    return merged


def read_workload(obj: Mapping[str, Any], namespace: str) -> Workload:
    """Read a labelled StatefulSet or Job; raise a one-line error for anything invalid."""
    kind = obj.get("kind")
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") or ""
    namespace = metadata.get("namespace") or namespace
    labels = labels_of(obj)
    framework = read_framework(labels)
    job = read_job(labels, name)
    role = read_role(labels, framework)
    settings = read_settings(effective_annotations(obj), framework)
    template = template_of(obj)
    nproc = processes_per_pod(
        template, training_container(template, framework.container, settings.container), settings
    )
    spec = obj.get("spec") or {}
    if kind == "StatefulSet":
        replicas = _count(spec.get("replicas", 1), "spec.replicas", name)
        start = _count((spec.get("ordinals") or {}).get("start", 0), "spec.ordinals.start", name)
        service = spec.get("serviceName") or job
        return Workload(
            kind,
            name,
            namespace,
            framework,
            job,
            role,
            replicas,
            settings,
            name,
            start,
            service,
            nproc,
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
        service = (template_of(obj).get("spec") or {}).get("subdomain") or job
        return Workload(
            kind,
            name,
            namespace,
            framework,
            job,
            role,
            completions,
            settings,
            name,
            0,
            service,
            nproc,
        )
    raise ValueError(f"not a workload kind: {kind!r}")


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
    job_gang(first.job, [(w.describe(), w.settings) for w in workloads])
    order = first.framework.order(by_role)
    roles = tuple(
        Role(name, w.replicas, w.pod_prefix, w.ordinal_start, w.service, w.nproc)
        for name in order
        if (w := by_role[name]).replicas > 0
    )
    return Topology(first.job, first.namespace, first.framework.name, roles, cluster_domain)
