"""The admission entry point of the core: an object in, a JSONPatch and warnings out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.contract import DEFAULT_COSCHEDULING_SCHEDULER
from webhook.core.objects import annotations_of
from webhook.core.patch import PatchOp, diff
from webhook.core.pod_mutation import mutate_pod, owner_to_resolve
from webhook.core.workload import job_of
from webhook.core.workload_mutation import mutate_workload

__all__ = ["Outcome", "admit", "changed_outcome", "job_of", "owner_to_resolve"]

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
) -> Outcome | None:
    """Mutate one admitted object; None when Trainhook has nothing to do with it.

    Raises `webhook.core.errors.TrainhookError` for invalid or refused input.
    """
    if (kind, operation) not in HANDLED or job_of(obj) is None:
        return None
    if kind == "Pod":
        pod = mutate_pod(
            obj,
            namespace,
            owner=owner,
            siblings=siblings,
            cluster_domain=cluster_domain,
            coscheduling_scheduler=coscheduling_scheduler,
        )
        return Outcome(diff(obj, pod.pod), pod.warnings)
    workload = mutate_workload(obj, operation, namespace, siblings, cluster_domain)
    return Outcome(diff(obj, workload.workload), workload.warnings)


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
