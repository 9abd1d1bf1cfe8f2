"""The admission entry point of the core: an object in, a JSONPatch and warnings out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.claims import claim_refusal, claimed, forged_creator
from webhook.core.contract import DEFAULT_COSCHEDULING_SCHEDULER
from webhook.core.draft import Draft
from webhook.core.errors import Refused
from webhook.core.gang import KUBERNETES_NOT_SERVED
from webhook.core.objects import annotations_of, labels_of
from webhook.core.patch import PatchOp, diff
from webhook.core.pod_mutation import mutate_pod, owner_to_resolve
from webhook.core.workload import job_of
from webhook.core.workload_mutation import mutate_workload, opt_out

__all__ = [
    "Outcome",
    "admit",
    "changed_outcome",
    "forged_creator",
    "job_of",
    "owner_to_resolve",
]

HANDLED = {
    ("Pod", "CREATE"),
    ("StatefulSet", "CREATE"),
    ("StatefulSet", "UPDATE"),
    ("Job", "CREATE"),
}


@dataclass(frozen=True)
class Outcome:
    patch: list[PatchOp]
    warnings: list[str]


def admit(
    obj: Mapping[str, Any],
    *,
    kind: str,
    operation: str,
    namespace: str,
    siblings: Sequence[Mapping[str, Any]] = (),
    owner: Mapping[str, Any] | None = None,
    cluster_domain: str = "",
    coscheduling_scheduler: str = DEFAULT_COSCHEDULING_SCHEDULER,
    old: Mapping[str, Any] | None = None,
    username: str = "",
    kubernetes_podgroups_served: bool | None = None,
) -> Outcome | None:
    """Mutate one admitted object; None when Trainhook has nothing to do with it.

    `old` is the object before an UPDATE (the AdmissionReview's oldObject), when known;
    `username` the requester (the AdmissionReview's userInfo.username): a workload created in (or
    relabelled into) a job that belongs to someone else is refused, every workload created
    records its creator, and a sibling another user created is left out of the topology.
    `kubernetes_podgroups_served` says whether the cluster serves Kubernetes' own PodGroup
    (None: not known); a job that asks for it where it is not served is refused.
    Raises `webhook.core.errors.TrainhookError` for invalid or refused input.
    """
    if (kind, operation) not in HANDLED:
        return None
    if kubernetes_podgroups_served is False and operation == "CREATE":
        _refuse_unserved_scheduler(obj)
    if kind == "Pod" and contract.FRAMEWORK in labels_of(obj):
        # A pod named by generateName has no name yet: the job it belongs to is checked there.
        pod = mutate_pod(
            obj,
            namespace,
            owner=owner,
            siblings=siblings,
            cluster_domain=cluster_domain,
            coscheduling_scheduler=coscheduling_scheduler,
        )
        return Outcome(diff(obj, pod.pod), pod.warnings)
    if kind == "Pod":
        return None
    if job_of(obj) is None:
        if kind == "StatefulSet" and old is not None and job_of(old) is not None:
            # The framework label was removed: the webhook's additions go with it.
            return Outcome(diff(obj, opt_out(obj, old)), [])
        return None
    joining = operation == "CREATE" or (old is not None and job_of(old) != job_of(obj))
    if joining:  # created, or relabelled into a job: by the job's owner only
        refusal = claim_refusal(obj, kind, namespace, siblings, username)
        if refusal is not None:
            raise Refused(refusal)
    siblings = claimed(obj, siblings)
    workload = mutate_workload(obj, operation, namespace, siblings, cluster_domain, old)
    mutated = workload.workload
    if operation == "CREATE" and username:
        draft = Draft(mutated)
        draft.dict_at("metadata", "annotations")[contract.CREATED_BY] = username
        mutated = draft.root
    return Outcome(diff(obj, mutated), workload.warnings)


def _refuse_unserved_scheduler(obj: Mapping[str, Any]) -> None:
    template = (obj.get("spec") or {}).get("template") or {}
    asked = annotations_of(obj).get(contract.SCHEDULER) or annotations_of(template).get(
        contract.SCHEDULER
    )
    labelled = contract.FRAMEWORK in labels_of(obj) or contract.FRAMEWORK in labels_of(template)
    if asked == "kubernetes" and labelled:
        raise Refused(f"{contract.SCHEDULER}: kubernetes: {KUBERNETES_NOT_SERVED}")


# What the sweeper records and decides on: a forged success, failure count or start time would
# end or fail a job as surely as a forged phase.
OUTCOME_KEYS = (
    contract.PHASE,
    contract.FINISHED_AT,
    contract.REASON,
    contract.SUCCEEDED,
    contract.FAILED_RUNS,
    contract.STATUS,
)


def changed_outcome(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """The outcome annotations (phase, finished-at, reason, and the successes, failed runs and
    state the sweeper records) `obj` sets or changes compared with `old` (None: a new object)."""
    now = annotations_of(obj)
    before = annotations_of(old) if old is not None else {}
    return [key for key in OUTCOME_KEYS if now.get(key) != before.get(key)]
