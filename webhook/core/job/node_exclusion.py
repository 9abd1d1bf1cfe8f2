"""Nodes a job's restarts keep its pods off (`exclude-node` on a failure rule).

The sweeper records the excluded nodes in the job's trainhook.io/status (`excludedNodes`, on
every StatefulSet and Job of the job, never on their pod templates: a template change would roll
the pods and a Job's template cannot change); the webhook writes them on each pod it admits for
the job as a required node affinity, so the pods a restart recreates are scheduled elsewhere. A
finished job records none: the exclusion ends with it. Pure: what is recorded, and the affinity.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.job.failure_rules import EXCLUDE_NODE
from webhook.core.job.settings import Settings
from webhook.core.objects import annotations_of

MAX_EXCLUDED: Final = 8  # nodes per job: the oldest exclusion goes first past it
RECORDED: Final = "excludedNodes"  # the field of trainhook.io/status
HOSTNAME: Final = "kubernetes.io/hostname"
MAX_NODE_NAME: Final = 253


def recorded_exclusions(value: object) -> tuple[str, ...]:
    """The excluded nodes a recorded trainhook.io/status (parsed) names: node names only, at
    most MAX_EXCLUDED, in the order they were excluded."""
    found = value.get(RECORDED) if isinstance(value, dict) else None
    if not isinstance(found, list):
        return ()
    names = [name for name in found if _node_name(name)]
    return tuple(dict.fromkeys(names))[-MAX_EXCLUDED:]


def excluded_by(owner: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The nodes the pods of `owner` (a StatefulSet or Job of a job) must keep off: none once
    the job has finished."""
    if owner is None:
        return ()
    annotations = annotations_of(owner)
    if annotations.get(contract.PHASE):
        return ()
    try:
        status = json.loads(annotations.get(contract.STATUS) or "{}")
    except ValueError:
        return ()
    return recorded_exclusions(status)


def excludes_nodes(settings: Iterable[Settings]) -> bool:
    """Whether a job (the settings of its workloads) has a failure rule that excludes nodes: its
    pod templates then carry trainhook.io/excludes-nodes."""
    return any(rule.exclude_node for s in settings for rule in s.failure_rules or ())


def wants_owner(pod: Mapping[str, Any]) -> bool:
    """Whether admitting `pod` reads its owner for the nodes it must keep off: its job has a
    rule that excludes nodes (its template says so)."""
    annotations = annotations_of(pod)
    return annotations.get(contract.EXCLUDES_NODES) == "true" or EXCLUDE_NODE in (
        annotations.get(contract.FAILURE_POLICY) or ""
    )


def exclusion_term(nodes: Sequence[str]) -> dict[str, Any]:
    """The node selector requirement that keeps a pod off `nodes`."""
    return {"key": HOSTNAME, "operator": "NotIn", "values": sorted(nodes)}


def exclude_nodes(draft: Draft, pod: Mapping[str, Any], nodes: Sequence[str]) -> bool:
    """Write the exclusion as a required node affinity: added to each of the pod's own node
    selector terms (they are ORed, so each must keep off the nodes), or as the one term when it
    has none. Nothing when every term has it already. Whether the pod was changed."""
    if not nodes:
        return False
    wanted = exclusion_term(nodes)
    required = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if terms and all(wanted in (term.get("matchExpressions") or []) for term in terms):
        return False
    path = (
        "spec",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    )
    written = draft.list_at(*path)
    if not written:
        written.append({"matchExpressions": [wanted]})
        return True
    for at, term in enumerate(list(written)):
        expressions = list(term.get("matchExpressions") or [])
        if wanted not in expressions:
            written[at] = {**term, "matchExpressions": [*expressions, wanted]}
    return True


def _node_name(name: object) -> bool:
    return (
        isinstance(name, str)
        and 0 < len(name) <= MAX_NODE_NAME
        and all(c.isalnum() or c in "-." for c in name)
    )
