"""What every source kind shares: reading fields so none is dropped unseen, the notes, the
job-wide lifecycle, and the labelled workloads one job becomes."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS

STATEFULSET = "StatefulSet"
JOB = "Job"


class MigrationError(Exception):
    """What cannot work once migrated: one line naming the field, the value and why."""


@dataclass
class Notes:
    """One line per input field that has no exact equivalent, in the order they were met."""

    lines: list[str] = field(default_factory=list)
    tracked: list[Fields] = field(default_factory=list)

    def track(self, fields: Fields) -> Fields:
        """Report whatever `fields` leaves unread when the object is done."""
        self.tracked.append(fields)
        return fields

    def report_unread(self) -> None:
        for fields in self.tracked:
            for path in fields.unread():
                self.add(path, "not a field trainhook migrate knows; not carried over")

    def add(self, path: str, text: str) -> None:
        line = f"{path}: {text}"
        if line not in self.lines:
            self.lines.append(line)


class Fields:
    """A mapping read key by key: whatever was never read is reported, so no field of the input
    is dropped without a note."""

    def __init__(self, data: Any, path: str) -> None:
        if data is None:
            data = {}
        if not isinstance(data, Mapping):
            raise MigrationError(f"{path}: expected an object, got {type(data).__name__}")
        self.data: Mapping[str, Any] = data
        self.path = path
        self.read: set[str] = set()
        self.children: list[Fields] = []

    def at(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        value = self.data.get(key)
        return default if value is None else value

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def child(self, key: str) -> Fields:
        self.read.add(key)
        sub = Fields(self.data.get(key), self.at(key))
        self.children.append(sub)
        return sub

    def integer(self, key: str, low: int = 0) -> int | None:
        value = self.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise MigrationError(
                f"{self.at(key)}: invalid value {value!r}: a whole number >= {low}"
            )
        return value

    def text(self, key: str) -> str | None:
        value = self.get(key)
        return None if value is None else str(value)

    def unread(self) -> Iterable[str]:
        for key in self.data:
            if key not in self.read:
                yield self.at(key)
        for sub in self.children:
            yield from sub.unread()


@dataclass
class Role:
    """One role of the job: the workload that runs it."""

    role: str
    replicas: int
    template: dict[str, Any]
    path: str  # where the role came from, for notes
    kind: str = STATEFULSET
    annotations: dict[str, str] = field(default_factory=dict)  # the role's own settings
    name: str = ""  # the workload's name; <job>-<role> when empty


@dataclass
class Job:
    """What a source object becomes before it is written out as workloads."""

    name: str
    namespace: str | None
    framework: str
    roles: list[Role]
    annotations: dict[str, str] = field(default_factory=dict)  # job-wide, on every workload
    labels: dict[str, str] = field(default_factory=dict)  # the source's own metadata
    metadata_annotations: dict[str, str] = field(default_factory=dict)
    restart_policy: str | None = None  # the Indexed Jobs' template restartPolicy
    # What the job needs besides its workloads, as its source made it (a NetworkPolicy).
    others: list[dict[str, Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Migration:
    objects: list[dict[str, Any]]  # the labelled workloads
    notes: list[str]
    # Objects written after the workloads: what the job needs besides them (a NetworkPolicy).
    others: list[dict[str, Any]] = field(default_factory=list)


def metadata(
    source: Mapping[str, Any], kind: str, notes: Notes
) -> tuple[str, str | None, Fields, Fields]:
    """The name, namespace, metadata and spec of a source object, both read field by field."""
    meta = notes.track(Fields(source.get("metadata"), "metadata"))
    spec = notes.track(Fields(source.get("spec"), "spec"))
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise MigrationError(f"metadata.name: a {kind} needs a name")
    namespace = meta.get("namespace")
    return name, namespace, meta, spec


def carry_metadata(meta: Fields, job: Job, notes: Notes) -> None:
    """The source's labels and annotations go on every workload; the server-set fields and
    the trainhook.io/ keys (they would configure the job twice) do not."""
    for key, value in (meta.get("labels") or {}).items():
        if str(key).startswith(contract.PREFIX):
            notes.add(f"metadata.labels.{key}", "set by trainhook migrate itself; not carried over")
        else:
            job.labels[str(key)] = str(value)
    for key, value in (meta.get("annotations") or {}).items():
        if key == "kubectl.kubernetes.io/last-applied-configuration":
            continue
        if str(key).startswith(contract.PREFIX):
            notes.add(
                f"metadata.annotations.{key}", "set by trainhook migrate itself; not carried over"
            )
        else:
            job.metadata_annotations[str(key)] = str(value)
    for server_set in (
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "managedFields",
        "selfLink",
        "generateName",
        "ownerReferences",
        "finalizers",
        "deletionTimestamp",
    ):
        meta.get(server_set)


def template_of(replica: Fields, key: str = "template") -> dict[str, Any]:
    raw = replica.get(key)
    if not isinstance(raw, Mapping) or not isinstance(raw.get("spec"), Mapping):
        raise MigrationError(f"{replica.at(key)}: a pod template with a spec is required")
    containers = raw["spec"].get("containers")
    if not isinstance(containers, list) or not containers:
        raise MigrationError(f"{replica.at(key)}.spec.containers: at least one container")
    return copy.deepcopy(dict(raw))


WORKLOAD_NAME = re.compile(r"[^a-z0-9-]+")


def workload_name(job: str, role: Role) -> str:
    if role.name:
        return role.name
    return WORKLOAD_NAME.sub("-", f"{job}-{role.role}".lower())


def restart_policy_of_template(role: Role, job: Job, notes: Notes) -> dict[str, Any]:
    """The template as its workload needs it: a StatefulSet's pods always restart (the API
    server refuses anything else there), a Job's never with `Always`."""
    template = copy.deepcopy(role.template)
    spec = template["spec"]
    given = spec.get("restartPolicy")
    if role.kind == STATEFULSET:
        if given is not None and given != "Always":
            notes.add(
                f"{role.path}.template.spec.restartPolicy",
                f"{given!r} → removed: a StatefulSet's pods always restart their containers, "
                f"and {contract.RESTART_POLICY} decides when the job has failed",
            )
        spec.pop("restartPolicy", None)
    else:
        wanted = job.restart_policy or ("Never" if given == "Never" else "OnFailure")
        spec["restartPolicy"] = wanted
    return template


def workloads(job: Job, notes: Notes) -> list[dict[str, Any]]:
    """The labelled StatefulSets and Indexed Jobs of `job`, StatefulSets first (any order
    works, as `trainhook.io/roles` makes each pod wait for the whole job; this one reads best)."""
    ordered = sorted(job.roles, key=lambda r: r.kind == JOB)
    job_wide = {**job.annotations, **roles_annotation(job)}
    result = []
    for role in ordered:
        name = workload_name(job.name, role)
        labels = {
            **job.labels,
            contract.FRAMEWORK: job.framework,
            contract.JOB: job.name,
            contract.ROLE: role.role,
        }
        annotations = {**job.metadata_annotations, **job_wide, **role.annotations}
        meta: dict[str, Any] = {"name": name}
        if job.namespace:
            meta["namespace"] = job.namespace
        meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
        template = restart_policy_of_template(role, job, notes)
        template = {"metadata": dict(template.get("metadata") or {}), **template}
        template_meta = template["metadata"]
        if role.kind == STATEFULSET:
            template_meta.setdefault("labels", {})["app"] = name
            spec: dict[str, Any] = {
                "replicas": role.replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": template,
            }
            result.append(
                {"apiVersion": "apps/v1", "kind": STATEFULSET, "metadata": meta, "spec": spec}
            )
        else:
            if not template_meta:
                template.pop("metadata")
            spec = {
                "completionMode": "Indexed",
                "completions": role.replicas,
                "parallelism": role.replicas,
                "template": template,
            }
            result.append({"apiVersion": "batch/v1", "kind": JOB, "metadata": meta, "spec": spec})
    return result


def roles_annotation(job: Job) -> dict[str, str]:
    """`trainhook.io/roles` on every workload of a job with several roles: where a role could
    run alone (a PyTorch master), only it keeps that role's pods waiting for the others, so
    the workloads can be applied in any order."""
    names = FRAMEWORKS[job.framework].order(role.role for role in job.roles)
    return {contract.ROLES: ",".join(names)} if len(names) > 1 else {}


def check_roles(job: Job, allowed: Sequence[str], path: str) -> None:
    if not job.roles:
        raise MigrationError(f"{path}: no replicas to run")
    for role in job.roles:
        if allowed and role.role not in allowed:
            raise MigrationError(
                f"{role.path}: {role.role!r} is not a role of {job.framework} "
                f"({', '.join(allowed)})"
            )
