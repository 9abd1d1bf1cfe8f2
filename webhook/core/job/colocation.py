"""Keeping a job within one domain of a node label (a rack, a block), on the pod's side.

Each scheduler reads the placement where it looks: Kueue from the pod's Topology Aware
Scheduling annotations, the default scheduler and coscheduling from a pod affinity to the job's
own pods, Volcano, KAI and Kubernetes' own gang from the PodGroup (see `gang`), so a pod gets only
what its scheduler reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.job.settings import Settings
from webhook.core.objects import annotations_of

AFFINITY_WEIGHT = 100  # the most a preferred term weighs: the job's neighbours first


@dataclass(frozen=True)
class Colocation:
    """Keep every pod of the job within one domain of a node label."""

    key: str  # the node label key whose value names the domain
    required: bool  # False: preferred, the scheduler may spread the job when it must
    tier: str | None = None  # Volcano's HyperNode tier (a number or a name) for the same domains
    kai_topology: str | None = None  # the KAI Topology object that has the key as a level


def colocation_of(settings: Settings) -> Colocation | None:
    """The placement one workload asks for; None without `trainhook.io/placement-topology`."""
    if settings.placement_topology is None:
        return None
    required = settings.placement in (None, "required")
    return Colocation(
        settings.placement_topology, required, settings.placement_tier, settings.kai_topology
    )


def colocate_pod(draft: Draft, pod: Mapping[str, Any], settings: Settings, job: str) -> None:
    """What the pod's scheduler reads to keep the job within one domain."""
    colocation = colocation_of(settings)
    if colocation is None:
        return
    if settings.scheduler == "kueue":
        _kueue_topology(draft, pod, colocation)
    elif settings.scheduler in (None, "coscheduling") or (
        settings.scheduler == "kubernetes" and not colocation.required
    ):
        # Kubernetes' PodGroup constraint is required only: a preferred one is an affinity.
        _job_affinity(draft, pod, colocation, job)


def _kueue_topology(draft: Draft, pod: Mapping[str, Any], colocation: Colocation) -> None:
    """Kueue TAS: each role (a PodSet of the pod group) within one domain, its pods in the
    order of their index within the role (Kueue ranks within a PodSet, from 0)."""
    wanted, other = contract.KUEUE_REQUIRED_TOPOLOGY, contract.KUEUE_PREFERRED_TOPOLOGY
    if not colocation.required:
        wanted, other = other, wanted
    annotations = annotations_of(pod)
    target = {wanted: colocation.key, contract.KUEUE_POD_INDEX_LABEL: contract.ROLE_INDEX}
    if other in annotations:
        del draft.dict_at("metadata", "annotations")[other]  # Kueue refuses both at once
    if any(annotations.get(key) != value for key, value in target.items()):
        draft.dict_at("metadata", "annotations").update(target)


def _job_affinity(draft: Draft, pod: Mapping[str, Any], colocation: Colocation, job: str) -> None:
    """A pod affinity to the job's own pods in the domain: the first pod lands anywhere, the
    others follow it. Best effort: nothing reserves the domain for the rest of the job."""
    term: dict[str, Any] = {
        "labelSelector": {"matchLabels": {contract.JOB: job}},
        "topologyKey": colocation.key,
    }
    affinity = ((pod.get("spec") or {}).get("affinity") or {}).get("podAffinity") or {}
    field, entry = "requiredDuringSchedulingIgnoredDuringExecution", term
    if not colocation.required:
        field = "preferredDuringSchedulingIgnoredDuringExecution"
        entry = {"weight": AFFINITY_WEIGHT, "podAffinityTerm": term}
    if entry in (affinity.get(field) or []):
        return
    draft.list_at("spec", "affinity", "podAffinity", field).append(entry)
