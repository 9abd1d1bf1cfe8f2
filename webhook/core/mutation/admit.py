"""The admission entry point of the core: a request in, a JSONPatch and warnings out.

Every admission rule is decided here or below: who may write a job's outcome and its creator
(`webhook.core.job.authority`), whose job a workload may join (`webhook.core.job.claims`), and what
the object becomes (workload and pod mutation). The server only decodes the review, looks up
what `lookups()` names, calls `admit()` and encodes the answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.contract import DEFAULT_COSCHEDULING_SCHEDULER
from webhook.core.draft import Draft
from webhook.core.errors import Refused
from webhook.core.fabrics.nvlink import refuse_unserved_nvlink
from webhook.core.job.authority import forged_creator, forged_outcome, membership
from webhook.core.job.claims import claim_refusal, claimed
from webhook.core.job.gang import KUBERNETES_NOT_SERVED
from webhook.core.job.progress import ProgressEndpoint
from webhook.core.job.workload import WORKLOAD_KINDS, job_of
from webhook.core.limits import WARNING_AT_MOST, one_line
from webhook.core.mutation.owned_objects import workload_controller
from webhook.core.mutation.pod_mutation import owner_to_resolve
from webhook.core.mutation.pod_patches import pod_patch
from webhook.core.mutation.workload_mutation import mutate_workload, opt_out
from webhook.core.objects import annotations_of, labels_of
from webhook.core.patch import PatchOp, diff

__all__ = [
    "Found",
    "Lookups",
    "Outcome",
    "Policy",
    "Request",
    "admit",
    "job_of",
    "lookups",
    "owner_to_resolve",
]

HANDLED = {
    ("Pod", "CREATE"),
    ("StatefulSet", "CREATE"),
    ("StatefulSet", "UPDATE"),
    ("Job", "CREATE"),
    ("Job", "UPDATE"),  # only one that brings the Job into a job: its template is immutable
}


@dataclass(frozen=True, init=False)
class Request:
    """One admission request as the API server sends it (the AdmissionReview's request)."""

    kind: str
    operation: str
    # As decoded: typed as dicts, so the compiled core reads them through dict's own methods.
    object: dict[str, Any]
    namespace: str = ""
    name: str = ""
    # The object before an UPDATE, as sent (the AdmissionReview's oldObject); None otherwise.
    old: dict[str, Any] | None = None
    username: str = ""  # userInfo.username: the requester
    dry_run: bool = False
    size: int = 0  # the review's bytes, 0 when unknown

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        kind: str,
        operation: str,
        object: dict[str, Any],
        namespace: str = "",
        name: str = "",
        old: dict[str, Any] | None = None,
        username: str = "",
        dry_run: bool = False,
        size: int = 0,
    ) -> None:
        self._set(kind, operation, object, namespace, name, old, username, dry_run, size)

    def _set(
        self,
        kind: str,
        operation: str,
        obj: dict[str, Any],
        namespace: str,
        name: str,
        old: dict[str, Any] | None,
        username: str,
        dry_run: bool,
        size: int,
    ) -> None:
        """`__init__`'s work, apart from it: its argument `object` hides the builtin."""
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "operation", operation)
        object.__setattr__(self, "object", obj)
        object.__setattr__(self, "namespace", namespace)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "old", old)
        object.__setattr__(self, "username", username)
        object.__setattr__(self, "dry_run", dry_run)
        object.__setattr__(self, "size", size)

    @property
    def object_name(self) -> str:
        """The request's name, else the object's name or generateName."""
        metadata = self.object.get("metadata")
        if self.name or not isinstance(metadata, dict):
            return self.name
        name = metadata.get("name") or metadata.get("generateName") or ""
        return name if isinstance(name, str) else ""


@dataclass(frozen=True, init=False)
class Found:
    """What the server read for a request, as `lookups()` asked: the other workloads of the job
    and, for a pod without a topology stamp, the StatefulSet or Job that owns it; for a pod of a
    StatefulSet or Job, the objects the sweeper records on it as proven (`proven_objects`)."""

    siblings: Sequence[Mapping[str, Any]] = ()
    owner: Mapping[str, Any] | None = None
    proven: frozenset[str] = frozenset()

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        siblings: Sequence[Mapping[str, Any]] = (),
        owner: Mapping[str, Any] | None = None,
        proven: frozenset[str] = frozenset(),
    ) -> None:
        object.__setattr__(self, "siblings", siblings)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "proven", proven)


@dataclass(frozen=True)
class Policy:
    """The webhook's settings that admission decisions depend on."""

    cluster_domain: str = ""
    coscheduling_scheduler: str = DEFAULT_COSCHEDULING_SCHEDULER
    # Who may change the outcome the sweeper records on a job's objects; "" when not configured.
    sweeper_username: str = ""
    # Whether the cluster serves Kubernetes' own PodGroup (None: not known); a job that asks for
    # it where it is not served is refused.
    kubernetes_podgroups_served: bool | None = None
    # Whether the cluster serves NVIDIA's ComputeDomain (None: not known); a job that asks for an
    # NVLink domain where it is not served is refused.
    compute_domains_served: bool | None = None
    progress: ProgressEndpoint | None = None  # where pods of jobs that report progress report


@dataclass(frozen=True, init=False)
class Outcome:
    patch: list[PatchOp]
    warnings: list[str]

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(self, patch: list[PatchOp], warnings: list[str]) -> None:
        # Each warning one line of at most 120 characters, the key that it is about first.
        warnings[:] = [one_line(w, WARNING_AT_MOST) for w in warnings]
        object.__setattr__(self, "patch", patch)
        object.__setattr__(self, "warnings", warnings)


@dataclass(frozen=True, init=False)
class Lookups:
    """What to read before admitting: the job whose workloads are siblings (leaving out
    `itself`), the owner (kind, name) of a pod to read first, whose job then names them, and
    the controller (kind, name, uid) of a pod whose record of proven objects is read from the cache
    alone (`proof`)."""

    job: str | None = None
    itself: tuple[str, str] | None = None
    owner: tuple[str, str] | None = None
    proof: tuple[str, str, str] | None = None

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        job: str | None = None,
        itself: tuple[str, str] | None = None,
        owner: tuple[str, str] | None = None,
        proof: tuple[str, str, str] | None = None,
    ) -> None:
        object.__setattr__(self, "job", job)
        object.__setattr__(self, "itself", itself)
        object.__setattr__(self, "owner", owner)
        object.__setattr__(self, "proof", proof)


def lookups(request: Request) -> Lookups:
    """What `admit()` needs read from the cluster for `request`; nothing for requests it does
    not act on, so those cost no read."""
    if (request.kind, request.operation) not in HANDLED:
        return Lookups()
    if request.kind in WORKLOAD_KINDS:
        job = job_of(request.object)
        if job is None:
            return Lookups()
        return Lookups(job=job, itself=(request.kind, request.object_name))
    pod = request.object
    if contract.FRAMEWORK not in labels_of(pod):
        return Lookups()
    return Lookups(owner=owner_to_resolve(pod), proof=workload_controller(pod))


def admit(
    request: Request, found: Found | None = None, policy: Policy | None = None
) -> Outcome | None:
    """Admit one request: None when Trainhook has nothing to do with it.

    A workload created in (or relabelled into) a job that belongs to someone else is refused,
    every workload created records its creator, and a sibling another user created is left out
    of the topology. Raises `webhook.core.errors.TrainhookError` for invalid or refused input.
    """
    found = found or Found()
    policy = policy or Policy()
    obj, kind, operation = request.object, request.kind, request.operation
    previous = trusted_old(request)
    member = membership(obj, previous, operation)
    forged = forged_outcome(
        obj, previous, kind, operation, request.username, policy.sweeper_username, member
    ) or forged_creator(obj, previous, kind, operation, request.username, member)
    if forged is not None:
        raise Refused(forged)
    if kind == "Pod" and member.joins and operation == "UPDATE":
        raise Refused(_pod_relabelled(obj, previous))
    if (kind, operation) not in HANDLED:
        return None
    if policy.kubernetes_podgroups_served is False and operation == "CREATE":
        _refuse_unserved_scheduler(obj)
    if policy.compute_domains_served is False and operation == "CREATE":
        refuse_unserved_nvlink(obj)
    namespace = request.namespace
    siblings = found.siblings
    if kind == "Pod" and contract.FRAMEWORK in labels_of(obj):
        # A pod named by generateName has no name yet: the job it belongs to is checked there.
        patch, pod_warnings = pod_patch(
            obj,
            namespace,
            owner=found.owner,
            siblings=siblings,
            cluster_domain=policy.cluster_domain,
            coscheduling_scheduler=policy.coscheduling_scheduler,
            progress=policy.progress,
            review_bytes=request.size,
            proven=found.proven,
        )
        return Outcome(patch, pod_warnings)
    if kind == "Pod":
        return None
    if member.job is None:
        if kind == "StatefulSet" and previous is not None and member.before is not None:
            # The framework label was removed: the webhook's additions go with it.
            return Outcome(diff(obj, opt_out(obj, previous)), [])
        return None
    joining = member.joins
    if joining:  # created, labelled or relabelled into a job: by the job's owner only
        refusal = claim_refusal(obj, kind, namespace, siblings, request.username, member.job)
        if refusal is not None:
            raise Refused(refusal)
    if kind == "Job" and operation == "UPDATE":
        if not joining:
            return None
        # A Job's template cannot change once created; it joins with its creator recorded, and
        # its pods are stamped from it as they are created.
        mutated: Mapping[str, Any] = obj
        warnings: list[str] = []
    else:
        workload = mutate_workload(
            obj, operation, namespace, claimed(obj, siblings), policy.cluster_domain, previous
        )
        mutated, warnings = workload.workload, workload.warnings
    if joining and request.username:
        draft = Draft(mutated)
        draft.dict_at("metadata", "annotations")[contract.CREATED_BY] = request.username
        mutated = draft.root
    return Outcome(diff(obj, mutated), warnings)


def _refuse_unserved_scheduler(obj: Mapping[str, Any]) -> None:
    template = (obj.get("spec") or {}).get("template") or {}
    asked = annotations_of(obj).get(contract.SCHEDULER) or annotations_of(template).get(
        contract.SCHEDULER
    )
    labelled = contract.FRAMEWORK in labels_of(obj) or contract.FRAMEWORK in labels_of(template)
    if asked == "kubernetes" and labelled:
        raise Refused(f"{contract.SCHEDULER}: kubernetes: {KUBERNETES_NOT_SERVED}")


def _pod_relabelled(pod: Mapping[str, Any], old: Mapping[str, Any] | None) -> str:
    job = job_of(pod)
    before = job_of(old) if old is not None else None
    change = "labels it for" if before is None else f"moves it from job {before!r} to"
    return (
        f"{contract.JOB}: a pod joins a job only when it is created (its rank and peers are set "
        f"then, and a pod's containers cannot change); this update {change} job {job!r}: "
        "create a new pod instead"
    )


def trusted_old(request: Request) -> dict[str, Any] | None:
    """The object before an UPDATE, when its labels and annotations read as the API server
    sends them: what tells a labelling update from any other, and what the webhook copied. Only
    a client other than the API server sends one that is not; the request is then judged as if
    nothing were known of the object before."""
    old = request.old
    if request.operation != "UPDATE" or old is None or old.get("kind") != request.kind:
        return None
    metadata = old.get("metadata") or {}
    if not isinstance(metadata, dict):
        return None
    readable = all(
        isinstance(pairs, dict) and all(isinstance(v, str) for v in pairs.values())
        for pairs in (metadata.get("labels") or {}, metadata.get("annotations") or {})
    )
    return old if readable else None
