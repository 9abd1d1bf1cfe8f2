"""What the sweeper says of an object labelled into a job that is not the job's to act on: a
workload another user created or the webhook never admitted, a pod not of the job's workloads."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.job.claims import Claim, claim_of, creator_of
from webhook.core.objects import labels_of, metadata_of


@dataclass(frozen=True)
class Problem:
    """A workload the sweeper cannot act on, and why (one line for a person)."""

    kind: str
    name: str
    uid: str
    message: str


def claimed(
    workloads: list[Mapping[str, Any]], job: str
) -> tuple[list[Mapping[str, Any]], list[tuple[Mapping[str, Any], Problem]], list[Problem]]:
    """The job's workloads (its first creator's, and those recording none); the others, each with
    why it is ignored; and why each kept StatefulSet or Job recording no creator is kept."""
    claim = claim_of(workloads)
    kept, strangers, unattributed = [], [], []
    for obj in workloads:
        creator = creator_of(obj)
        if claim is None or creator is None or creator == claim.creator:
            kept.append(obj)
            if creator is None and obj.get("kind") != "Pod":
                unattributed.append(_unattributed(obj, job, claim))
        else:
            strangers.append((obj, _stranger(obj, creator, job, claim)))
    return kept, strangers, unattributed


def _unattributed(obj: Mapping[str, Any], job: str, claim: Claim | None) -> Problem:
    owner = f", which belongs to {claim.creator}" if claim is not None else ""
    return _labelled_problem(
        obj,
        job,
        f"records no creator ({contract.CREATED_BY}): the webhook did not admit it into the "
        f"job{owner} (it was made before creators were recorded, or while the webhook was not "
        "asked); the sweeper manages it with the job but acts on no outcome recorded on it "
        "(no pod cleanup, scale-down or deletion): recreate it to have it attributed",
    )


def _stranger(obj: Mapping[str, Any], creator: str, job: str, claim: Claim) -> Problem:
    return _labelled_problem(
        obj,
        job,
        f"was created by {creator}, and the job belongs to {claim.creator} "
        f"({claim.kind} {claim.name}); the sweeper ignores it",
    )


def _labelled_problem(obj: Mapping[str, Any], job: str, but: str) -> Problem:
    """A problem with an object labelled into `job`, saying what else it is."""
    metadata = metadata_of(obj)
    kind, name = str(obj.get("kind") or ""), metadata.get("name") or ""
    text = f"{kind} {name} is labelled {contract.JOB}={job} but {but}"
    return Problem(kind, name, metadata.get("uid") or "", text)


def intruder(
    pod: Mapping[str, Any], job: str, members: set[tuple[str, str]], why: str = ""
) -> Problem:
    metadata = metadata_of(pod)
    name = metadata.get("name") or ""
    workloads = ", ".join(f"{kind} {workload}" for kind, workload in sorted(members))
    because = f": {why}" if why else ""
    labelled = labels_of(pod).get(contract.JOB) == job
    claims = f"is labelled {contract.JOB}={job}" if labelled else f"names job {job}"
    return Problem(
        "Pod",
        name,
        metadata.get("uid") or "",
        f"pod {name} {claims} but is not a pod of the job's workloads "
        f"({workloads}){because}; the sweeper ignores it",
    )


def why_unproven(pod: Mapping[str, Any]) -> str:
    """Why a pod naming a workload of the job as its controller is not that workload's."""
    if contract.JOB not in labels_of(pod):
        return (
            f"it lacks the {contract.JOB} label the webhook gives the pods it admits into the job"
        )
    return "its controller is not one of them by uid"
