"""Who may write what on a job's objects: the outcome the sweeper records and the creator the
webhook records. Beside `webhook.core.job.claims` (whose job a workload may join), these are the
admission rules about authority rather than about the job's shape."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.job.claims import creator_of
from webhook.core.job.workload import WORKLOAD_KINDS, job_of
from webhook.core.limits import one_line, shown
from webhook.core.objects import annotations_of, labels_of

_MEMBER_KINDS = (*WORKLOAD_KINDS, "Pod")

# What the sweeper records and decides on: a forged success, failure count or start time would
# end or fail a job as surely as a forged phase. The progress summary and a pod's last checkpoint
# come from reports the sweeper verified; schedulers and people read them, and the stragglers it
# flags from them keep a restart off their nodes, so nobody else writes them either. The SSH
# keys' digest is what proves the job's Secret the one the sweeper made, and the proven objects
# let pods mount them ungated.
OUTCOME_KEYS = (
    contract.PHASE,
    contract.FINISHED_AT,
    contract.REASON,
    contract.SUCCEEDED,
    contract.FAILED_RUNS,
    contract.STATUS,
    contract.PROGRESS,
    contract.PROGRESS_TEXT,
    contract.LAST_CHECKPOINT,
    contract.STRAGGLERS,
    contract.SSH_KEYS_DIGEST,
    contract.PROVEN_OBJECTS,
)


def changed_outcome(obj: Mapping[str, Any], old: Mapping[str, Any] | None) -> list[str]:
    """The outcome annotations (phase, finished-at, reason, and the successes, failed runs and
    state the sweeper records) and the phase label `obj` sets or changes compared with `old`
    (None: a new object)."""
    now = annotations_of(obj)
    before = annotations_of(old) if old is not None else {}
    if before or any(key in now for key in OUTCOME_KEYS):
        changed = [key for key in OUTCOME_KEYS if now.get(key) != before.get(key)]
    else:
        changed = []  # most requests: nothing recorded before, none written now
    labels, labelled = labels_of(obj), labels_of(old) if old is not None else {}
    if labels.get(contract.PHASE) != labelled.get(contract.PHASE):
        changed.append(f"label {contract.PHASE}")
    return changed


@dataclass(frozen=True, slots=True, init=False)
class Membership:
    """Which job a request's object is labelled for, which it was before an UPDATE, and whether
    the request brings it into a job (`joins`): read once per review, for every rule below."""

    job: str | None
    before: str | None
    joins: bool

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(self, job: str | None, before: str | None, joins: bool) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "before", before)
        object.__setattr__(self, "joins", joins)


def membership(obj: Mapping[str, Any], old: Mapping[str, Any] | None, operation: str) -> Membership:
    previous = old if operation == "UPDATE" else None
    job = job_of(obj)
    before = job_of(previous) if previous is not None else None
    return Membership(job, before, _joins(job, before, previous is not None, operation))


def joins(obj: Mapping[str, Any], old: Mapping[str, Any] | None, operation: str) -> bool:
    """Whether the request brings `obj` into a job: a labelled object created, or an update that
    labels it or moves it to another job. Such an update is judged as a creation: the object was
    never admitted into this job, so nothing it carries was vetted (an object created without the
    framework label never reaches the webhook)."""
    return membership(obj, old, operation).joins


def _joins(job: str | None, before: str | None, had_old: bool, operation: str) -> bool:
    if job is None:
        return False
    if operation == "CREATE":
        return True
    return operation == "UPDATE" and had_old and before != job


def forged_outcome(
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    kind: str,
    operation: str,
    username: str,
    sweeper_username: str,
    member: Membership | None = None,
) -> str | None:
    """Why a request may not carry the outcome annotations it does; None when it may.

    The sweeper records a job's phase, when it finished and why on the job's objects and
    believes them from then on, so nobody else may write them: a request that brings an object
    into a job (a CREATE, or an UPDATE that labels or relabels it) carrying them is refused
    whatever the object carried before (the sweeper only ever patches them onto existing
    members), and so is any other UPDATE of a labelled object, or one that unlabels it, that
    changes them, unless it comes from the sweeper's user."""
    if kind not in _MEMBER_KINDS:
        return None
    previous = old if operation == "UPDATE" else None
    member = member or membership(obj, old, operation)
    if member.job is None and member.before is None:
        return None
    joining = member.joins
    changed = changed_outcome(obj, None if joining else previous)
    if not changed:
        return None
    sweeper = sweeper_username
    if sweeper and username == sweeper:
        return None
    if not joining and not sweeper:
        return None  # no sweeper named: updates cannot be told apart
    keys = ", ".join(changed)
    return one_line(
        f"{keys}: written only by the Trainhook sweeper, which acts on them "
        f"({'it runs as ' + sweeper if sweeper else 'it never creates objects with them'}); "
        f"remove {'them' if len(changed) > 1 else 'it'} from the {kind}"
    )


def forged_creator(
    obj: Mapping[str, Any],
    old: Mapping[str, Any] | None,
    kind: str,
    operation: str,
    username: str,
    member: Membership | None = None,
) -> str | None:
    """Why a request may not carry the `trainhook.io/created-by` it does; None when it may.

    Only the webhook writes it, as the workload joins a job: a CREATE may carry only the
    requester's own name (the webhook's earlier answer, when it is called again); an UPDATE that
    labels or relabels the workload gets the requester's name recorded over whatever it carried
    (written out of the webhook's sight, so never trusted); any other UPDATE may not set,
    change or remove it."""
    if kind not in WORKLOAD_KINDS:
        return None
    previous = old if operation == "UPDATE" else None
    member = member or membership(obj, old, operation)
    if member.job is None and member.before is None:
        return None
    now = creator_of(obj)
    key = contract.CREATED_BY
    if member.joins:
        if operation == "UPDATE" or now is None or now == username:
            return None  # a labelling update: the webhook records its requester over whatever
        return (
            f"{key}: {shown(now)} is not the user creating this {kind} "
            f"({username or 'unknown'}); the Trainhook webhook records it, so leave it out"
        )
    if operation != "UPDATE" or previous is None or not _readable(previous):
        return None  # only a client other than the API server sends no readable oldObject
    before = creator_of(previous)
    if now == before:
        return None
    recorded = shown(before) if before is not None else "none recorded"
    change = f"sets {shown(now)}" if now is not None else "removes it"
    return (
        f"{key}: recorded by the Trainhook webhook when the {kind} was created ({recorded}) "
        f"and never changed; this update {change}"
    )


def _readable(obj: Mapping[str, Any]) -> bool:
    metadata = obj.get("metadata")
    return isinstance(metadata, Mapping) and isinstance(metadata.get("annotations") or {}, Mapping)
