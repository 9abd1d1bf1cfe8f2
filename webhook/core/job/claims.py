"""Who a job belongs to: the user who created its first workload.

Anyone allowed to create a StatefulSet or Job in a namespace can label it with any job. So the
webhook records on every workload it admits at creation who created it
(`trainhook.io/created-by`, the request's `userInfo.username`), and a job belongs to the creator
of its first workload that carries the record (the oldest `creationTimestamp`, then the name).
Workloads created before the record existed carry none and claim nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.core import contract
from webhook.core.job.workload import job_of
from webhook.core.objects import field_of, metadata_of, parse_time


@dataclass(frozen=True)
class Claim:
    """The user a job belongs to, and the workload that makes it theirs."""

    creator: str
    kind: str
    name: str


def creator_of(obj: Mapping[str, Any] | None) -> str | None:
    """Who created a workload, as the webhook recorded it; None for a workload without record
    (or whose annotations cannot be read)."""
    metadata = field_of(obj, "metadata") if obj is not None else None
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    creator = annotations.get(contract.CREATED_BY) if isinstance(annotations, dict) else None
    return creator if isinstance(creator, str) else None


def claim_of(workloads: Iterable[Mapping[str, Any]]) -> Claim | None:
    """The job's first creator among `workloads`: the oldest with a record, then by name."""
    first: tuple[tuple[bool, datetime, str, str], Claim] | None = None
    for obj in workloads:
        creator = creator_of(obj)
        if creator is None:
            continue
        metadata = metadata_of(obj)
        name = str(metadata.get("name") or "")
        kind = str(field_of(obj, "kind") or "")
        created = parse_time(metadata.get("creationTimestamp"))
        key = (created is None, created or datetime.min.replace(tzinfo=UTC), name, kind)
        if first is None or key < first[0]:
            first = (key, Claim(creator, kind, name))
    return None if first is None else first[1]


def claim_refusal(
    obj: Mapping[str, Any],
    kind: str,
    namespace: str,
    siblings: Iterable[Mapping[str, Any]],
    username: str,
    job: str | None = None,
) -> str | None:
    """Why `username` may not create the workload `obj` in its job; None when it may.

    A job whose workloads were created by someone else is theirs: joining it would change its
    topology (its pods restart) and lend it lifecycle settings (a TTL, a clean-pod policy).
    `job` is `job_of(obj)`, when the caller has read it."""
    job = job or job_of(obj)
    if job is None or not username:
        return None
    name = _name(obj)
    others = [
        s
        for s in siblings
        if job_of(s) == job and not (field_of(s, "kind") == kind and _name(s) == name)
    ]
    claim = claim_of(others)
    if claim is None or claim.creator == username:
        return None
    return (
        f"{contract.JOB}: job {job!r} in namespace {namespace} belongs to {claim.creator} "
        f"({claim.kind} {claim.name}); {kind} {name} was created by {username}: "
        f"give it its own {contract.JOB}"
    )


def claimed(
    obj: Mapping[str, Any], siblings: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The siblings that are `obj`'s job: those its first recorded creator created, and those
    without a record; another user's workload that got into the job anyway is no part of it."""
    claim = claim_of([obj, *siblings])
    if claim is None:
        return list(siblings)
    return [s for s in siblings if creator_of(s) in (None, claim.creator)]


def _name(obj: Mapping[str, Any]) -> str:
    return str(metadata_of(obj).get("name") or "")
