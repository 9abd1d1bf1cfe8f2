"""Workload mutation: stamp the job's topology on a StatefulSet's or Indexed Job's pod template."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.objects import annotations_of, labels_of
from webhook.core.topology import Topology, stamp
from webhook.core.workload import Workload, build_topology, job_of, read_workload

FINISHED = ("Succeeded", "Failed")


@dataclass(frozen=True)
class WorkloadMutation:
    workload: dict[str, Any]
    warnings: list[str]
    topology: Topology


def mutate_workload(
    obj: Mapping[str, Any],
    operation: str,
    namespace: str,
    siblings: Sequence[Mapping[str, Any]] = (),
    cluster_domain: str = "",
) -> WorkloadMutation:
    workload = read_workload(obj, namespace)
    peers = [workload, *sibling_workloads(workload, siblings)]
    topology = build_topology(peers, cluster_domain)
    draft = Draft(obj)
    own = annotations_of(obj)
    if operation == "UPDATE" and (
        own.get(contract.PHASE) in FINISHED or contract.SUSPENDED_REPLICAS in own
    ):
        # The sweeper scales a finished or suspended job to zero; its template keeps the stamp
        # it ran with (and will run with again once resumed).
        return WorkloadMutation(draft.root, [], topology)
    _label_template(draft, obj, workload)
    _annotate_template(draft, obj, topology)
    spec = obj.get("spec") or {}
    if workload.kind == "StatefulSet" and operation == "CREATE":
        if not spec.get("serviceName"):
            draft.dict_at("spec")["serviceName"] = workload.service
        ordered = workload.settings.ordered_start
        if not ordered and spec.get("podManagementPolicy") != "Parallel":
            draft.dict_at("spec")["podManagementPolicy"] = "Parallel"
    if workload.kind == "Job" and not (template_spec(obj).get("subdomain")):
        draft.dict_at("spec", "template", "spec")["subdomain"] = workload.service
    return WorkloadMutation(draft.root, [], topology)


def sibling_workloads(workload: Workload, siblings: Sequence[Mapping[str, Any]]) -> list[Workload]:
    """The other workloads of the same job and namespace (the object itself left out)."""
    found = []
    for sibling in siblings:
        metadata = sibling.get("metadata") or {}
        if sibling.get("kind") == workload.kind and metadata.get("name") == workload.name:
            continue
        if job_of(sibling) != workload.job:
            continue
        if (metadata.get("namespace") or workload.namespace) != workload.namespace:
            continue
        found.append(read_workload(sibling, workload.namespace))
    return found


def template_spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}


def _template(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return (obj.get("spec") or {}).get("template") or {}


def _label_template(draft: Draft, obj: Mapping[str, Any], workload: Workload) -> None:
    wanted = {k: v for k, v in labels_of(obj).items() if k.startswith(contract.PREFIX)}
    wanted[contract.JOB] = workload.job
    wanted[contract.ROLE] = workload.role
    current = labels_of(_template(obj))
    if any(current.get(key) != value for key, value in wanted.items()):
        draft.dict_at("spec", "template", "metadata", "labels").update(wanted)


def _annotate_template(draft: Draft, obj: Mapping[str, Any], topology: Topology) -> None:
    own = annotations_of(obj)
    wanted = {key: own[key] for key in contract.POD_SETTINGS if key in own}
    wanted.update(stamp(topology))
    current = annotations_of(_template(obj))
    if any(current.get(key) != value for key, value in wanted.items()):
        draft.dict_at("spec", "template", "metadata", "annotations").update(wanted)
