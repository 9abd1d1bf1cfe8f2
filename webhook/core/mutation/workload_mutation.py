"""Workload mutation: stamp the job's topology on a StatefulSet's or Indexed Job's pod template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Final

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.errors import Refused
from webhook.core.frameworks.jax import check_slices
from webhook.core.job.completeness import missing_roles
from webhook.core.job.node_exclusion import excludes_nodes
from webhook.core.job.restart_in_place import (
    add_restart_plumbing,
    remove_restart_plumbing,
    wants_in_place,
)
from webhook.core.job.workload import (
    Workload,
    build_topology,
    disagreement,
    job_of,
    member,
    read_workload,
)
from webhook.core.objects import annotations_of, field_of, labels_of, metadata_of, template_of
from webhook.core.shape.pods import training_container
from webhook.core.shape.topology import Topology, stamp

FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True, init=False)
class WorkloadMutation:
    workload: dict[str, Any]
    warnings: list[str]
    topology: Topology

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(self, workload: dict[str, Any], warnings: list[str], topology: Topology) -> None:
        object.__setattr__(self, "workload", workload)
        object.__setattr__(self, "warnings", warnings)
        object.__setattr__(self, "topology", topology)


def mutate_workload(
    obj: Mapping[str, Any],
    operation: str,
    namespace: str,
    siblings: Sequence[Mapping[str, Any]] = (),
    cluster_domain: str = "",
    old: Mapping[str, Any] | None = None,
) -> WorkloadMutation:
    """Stamp a labelled workload; `old` (on UPDATE) is the workload before the change, so what
    the webhook copied from an annotation since removed is removed from the template too."""
    draft = Draft(obj)
    own = annotations_of(obj)
    finished = operation == "UPDATE" and (
        own.get(contract.PHASE) in FINISHED or contract.SUSPENDED_REPLICAS in own
    )
    if operation == "UPDATE" and old is not None and not finished:
        _drop_stale_copies(draft, obj, old)
    current = draft.root  # the object without those copies: what its settings are read from
    workload = read_workload(current, namespace)
    peers = [workload, *sibling_workloads(workload, siblings)]
    topology = build_topology(peers, cluster_domain)
    if finished:
        # The sweeper scales a finished or suspended job to zero; its template keeps the stamp
        # it ran with (and will run with again once resumed).
        return WorkloadMutation(draft.root, [], topology)
    warnings: list[str] = []
    problem = None
    if not _alike(peers):
        problem = disagreement(workload.job, workload.framework, [member(w) for w in peers])
    if problem is not None:
        if operation == "CREATE":
            raise Refused(problem)
        # An update is how a user brings the roles back in line, one workload at a time. The
        # whole line (every role's value) is the sweeper's Event; a warning holds 120 characters.
        key = problem.split(":", 1)[0].split(" ", 1)[0]
        warnings.append(
            f"{key}: the roles of job {workload.job} disagree; set the same value on every "
            "workload of the job"
        )
    slices = workload.settings.tpu_slices
    if slices is not None and operation == "CREATE":
        check_slices(topology, slices)  # else every pod of it would be refused
    _label_template(draft, current, workload)
    _annotate_template(draft, current, topology, excludes_nodes(w.settings for w in peers))
    _restart_plumbing(draft, workload)
    spec: dict[str, Any] = field_of(obj, "spec") or {}
    if workload.kind == "StatefulSet" and operation == "CREATE":
        if not spec.get("serviceName"):
            draft.dict_at("spec")["serviceName"] = workload.service
        ordered = workload.settings.ordered_start
        if not ordered and spec.get("podManagementPolicy") != "Parallel":
            draft.dict_at("spec")["podManagementPolicy"] = "Parallel"
    if workload.kind == "Job" and not (template_spec(obj).get("subdomain")):
        draft.dict_at("spec", "template", "spec")["subdomain"] = workload.service
    if workload.kind == "Job" and operation == "CREATE":
        _hold_incomplete_job(draft, workload, topology, warnings)
    warnings += _headline_traps(draft.root, workload)
    return WorkloadMutation(draft.root, warnings, topology)


# The way out of an OrderedReady StatefulSet (the field is immutable), as docs/gitops.md and
# `trainhook describe` give it; the warning has room only for the why and what to do.
ORDERED_READY_TRAP: Final = (
    "podManagementPolicy OrderedReady: later pods wait for rank 0 to be Ready, rank 0 for them; "
    "recreate it with Parallel"
)


def ordered_ready_trap(obj: Mapping[str, Any], ordered_start: bool) -> bool:
    """Whether a StatefulSet starts its pods one after the other although its job did not ask
    for it (`trainhook.io/ordered-start`): one created before it was labelled keeps the API
    server's default OrderedReady, which cannot change."""
    spec: dict[str, Any] = field_of(obj, "spec") or {}
    policy = spec.get("podManagementPolicy")
    return field_of(obj, "kind") == "StatefulSet" and policy == "OrderedReady" and not ordered_start


def _headline_traps(obj: Mapping[str, Any], workload: Workload) -> list[str]:
    """Warnings for what would leave a labelled workload's pods waiting for each other for good:
    a start one pod after the other, and host names under a Service the sweeper does not make."""
    found = []
    if ordered_ready_trap(obj, workload.settings.ordered_start):
        found.append(ORDERED_READY_TRAP)
    if workload.service != workload.job:
        field = "serviceName" if workload.kind == "StatefulSet" else "subdomain"
        found.append(
            f"{field} {workload.service} is kept: host names end in it, but Trainhook makes only "
            f"the job's headless Service {workload.job}"
        )
    return found


def _alike(peers: Sequence[Workload]) -> bool:
    """Whether every role reads the very same settings and priority, as in most jobs (settings
    are shared by value): then they cannot disagree, and no member of the job need be made."""
    first = peers[0]
    return all(
        w.settings is first.settings and w.priority_class == first.priority_class for w in peers
    )


def _restart_plumbing(draft: Draft, workload: Workload) -> None:
    """A StatefulSet of a job restarted in place gets the attempt files, its restarter and its
    barrier (Indexed Jobs are recreated: their pods' failures belong to the Job controller)."""
    template = template_of(draft.root)
    settings = workload.settings
    if workload.kind == "StatefulSet" and wants_in_place(
        settings.restart_policy, settings.failure_rules
    ):
        training = training_container(template, workload.framework.container, settings.container)
        add_restart_plumbing(draft, template, training)
    else:
        remove_restart_plumbing(draft, template)


def _hold_incomplete_job(
    draft: Draft, workload: Workload, topology: Topology, warnings: list[str]
) -> None:
    """A Job created before a role its job needs: its pod template (and so its stamp) is
    immutable once it starts, so it is created suspended, which keeps the template open. The
    sweeper stamps it with the whole job and resumes it once every role is there. A Job the user
    suspended stays theirs to resume."""
    declared = workload.settings.roles
    missing = missing_roles(workload.framework, (r.name for r in topology.roles), declared)
    if not missing or (draft.root.get("spec") or {}).get("suspend"):
        return
    draft.dict_at("spec")["suspend"] = True
    draft.dict_at("metadata", "annotations")[contract.WAITING_FOR_ROLES] = ",".join(missing)
    warnings.append(
        f"{contract.WAITING_FOR_ROLES}: Job {workload.name} is created suspended until job "
        f"{workload.job} has its {', '.join(missing)}"
    )


def opt_out(obj: Mapping[str, Any], old: Mapping[str, Any]) -> dict[str, Any]:
    """A StatefulSet whose framework label was removed: take off its template what the webhook
    put there (the trainhook.io/ labels its selector does not use, the stamps, the copied
    settings), so its pods roll out as plain pods that never reach the webhook."""
    draft = Draft(obj)
    template = template_of(obj)
    selected = _selector_keys(obj)
    drop = [k for k in labels_of(template) if k.startswith(contract.PREFIX) and k not in selected]
    if drop:
        labels = draft.dict_at("spec", "template", "metadata", "labels")
        for key in drop:
            del labels[key]
    copied = annotations_of(old)
    current = annotations_of(template)
    stale = [
        key
        for key in current
        if key in (contract.TOPOLOGY, contract.HOSTS, contract.EXCLUDES_NODES)
        or (key in contract.POD_SETTINGS and copied.get(key) == current[key])
    ]
    if stale:
        annotations = draft.dict_at("spec", "template", "metadata", "annotations")
        for key in stale:
            del annotations[key]
    return draft.root


def _selector_keys(obj: Mapping[str, Any]) -> set[str]:
    selector = (obj.get("spec") or {}).get("selector") or {}
    keys = set(selector.get("matchLabels") or {})
    keys.update(e.get("key") for e in selector.get("matchExpressions") or [] if e.get("key"))
    return keys


def _drop_stale_copies(draft: Draft, obj: Mapping[str, Any], old: Mapping[str, Any]) -> None:
    """Remove from the template each pod setting copied from a workload annotation that the
    update removes (the template still holds the value the old workload had)."""
    before, now = annotations_of(old), annotations_of(obj)
    template = annotations_of(template_of(obj))
    stale = [
        key
        for key in contract.POD_SETTINGS
        if key in before and key not in now and template.get(key) == before[key]
    ]
    if stale:
        annotations = draft.dict_at("spec", "template", "metadata", "annotations")
        for key in stale:
            del annotations[key]


def sibling_workloads(workload: Workload, siblings: Sequence[Mapping[str, Any]]) -> list[Workload]:
    """The other workloads of the same job and namespace (the object itself left out)."""
    found = []
    for sibling in siblings:
        metadata = metadata_of(sibling)
        if field_of(sibling, "kind") == workload.kind and metadata.get("name") == workload.name:
            continue
        if job_of(sibling) != workload.job:
            continue
        if (metadata.get("namespace") or workload.namespace) != workload.namespace:
            continue
        found.append(_read_stored(sibling, workload.namespace))
    return found


def _read_stored(obj: Mapping[str, Any], namespace: str) -> Workload:
    """`read_workload` of a stored object, read once per version: the API server gives every
    change a new resourceVersion, so a uid and resourceVersion name one content for good."""
    metadata = metadata_of(obj)
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if not (isinstance(uid, str) and uid and isinstance(version, str) and version):
        return read_workload(obj, namespace)
    slot = _stored(uid, version, namespace)
    found = slot[0]
    if found is None:
        found = slot[0] = read_workload(obj, namespace)
    return found


# The workloads of the jobs being admitted at once, each a few hundred bytes; lru_cache bounds
# them and drops the least recently read, safely across the serving threads.
@lru_cache(maxsize=512)
def _stored(uid: str, version: str, namespace: str) -> list[Workload | None]:
    return [None]


def template_spec(obj: Mapping[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = template_of(obj).get("spec") or {}
    return spec


def _label_template(draft: Draft, obj: Mapping[str, Any], workload: Workload) -> None:
    wanted = {
        k: v
        for k, v in labels_of(obj).items()
        if k.startswith(contract.PREFIX) and k not in contract.WORKLOAD_ONLY_LABELS
    }
    wanted[contract.JOB] = workload.job
    wanted[contract.ROLE] = workload.role
    current = labels_of(template_of(obj))
    if any(current.get(key) != value for key, value in wanted.items()):
        draft.dict_at("spec", "template", "metadata", "labels").update(wanted)


def _annotate_template(
    draft: Draft, obj: Mapping[str, Any], topology: Topology, excluding: bool = False
) -> None:
    own = annotations_of(obj)
    # In the contract's order; most workloads carry no annotations at all.
    wanted: dict[str, str] = (
        {key: own[key] for key in contract.POD_SETTINGS if key in own} if own else {}
    )
    wanted.update(stamp(topology))
    if excluding:  # its pods read the nodes the job's restarts exclude (node_exclusion.py)
        wanted[contract.EXCLUDES_NODES] = "true"
    current = annotations_of(template_of(obj))
    if any(current.get(key) != value for key, value in wanted.items()):
        draft.dict_at("spec", "template", "metadata", "annotations").update(wanted)
