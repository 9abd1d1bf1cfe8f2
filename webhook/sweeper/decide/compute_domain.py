"""The job's NVLink domain: one ComputeDomain (NVIDIA's DRA driver for GPUs) per job whose roles
ask for it with trainhook.io/nvlink-domain, whose channel the pods of those roles claim.

It is the sweeper's, proven so as its Service is: Trainhook's managed-by label and an owner
reference to the job's workloads by uid, which nobody can write before the workloads exist. One
under the job's name that is not proven so is someone else's: said once, never changed or
deleted, and the job's pods, which the webhook creates with the scheduling gate
trainhook.io/waiting-for-owned-objects, stay gated: they never claim its channel.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from webhook.core import contract
from webhook.core.fabrics.nvlink import NOT_SERVED, compute_domain, compute_domain_name
from webhook.kube.resources import COMPUTE_DOMAINS, MANAGED_BY, MANAGER
from webhook.sweeper.actions import Action, Create, Delete, Emit, Patch
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.owned import labels, owner_references
from webhook.sweeper.job.owned import Owned
from webhook.sweeper.job.state import JobState

UNAVAILABLE = "NVLinkDomainUnavailable"


def nvlink_pods(state: JobState) -> int:
    """How many pods of the job claim its NVLink domain: those of the roles that ask for it."""
    return sum(w.replicas for w in state.workloads if w.settings.nvlink_domain)


def compute_domain_body(state: JobState) -> dict[str, Any]:
    """The job's ComputeDomain (core/fabrics/nvlink.py), labelled as the sweeper's and owned by
    the job's workloads."""
    body = compute_domain(state.job, state.namespace, nvlink_pods(state))
    body["metadata"]["labels"] = labels(state)
    owners = owner_references(state)
    if owners:
        body["metadata"]["ownerReferences"] = owners
    return body


def unavailable_message(state: JobState) -> str | None:
    """Why the job cannot have its NVLink domain (the cluster serves no ComputeDomain), or
    None: what its status says while its pods wait."""
    if state.compute_domains_served or not nvlink_pods(state):
        return None
    return (
        f"{contract.NVLINK_DOMAIN}: the job's pods claim an IMEX channel of ComputeDomain "
        f"{compute_domain_name(state.job)}, but {NOT_SERVED}"
    )


def proven(state: JobState, owned: Owned) -> bool:
    """Whether `owned` is the ComputeDomain the sweeper made for the job: labelled as
    Trainhook's, owned by one of the job's workloads by uid, naming the job's channel."""
    channel = (owned.spec.get("channel") or {}).get("resourceClaimTemplate") or {}
    return (
        owned.managed
        and bool(owned.owners & {w.uid for w in state.workloads if w.uid})
        and channel.get("name") == compute_domain_name(state.job)
    )


def compute_domain_ready(state: JobState) -> bool:
    """Whether the pods of the job may claim its channel (they wait, gated, until then): its
    ComputeDomain is the one the sweeper made, or the job asks for none."""
    owned = state.compute_domain
    return not nvlink_pods(state) or (owned is not None and proven(state, owned))


def compute_domain_actions(state: JobState) -> Iterable[Action]:
    """Make the job's ComputeDomain once every role is there; keep its owners those of the job
    (its spec is immutable); say once that one under its name is someone else's, or that the
    cluster serves none."""
    if not nvlink_pods(state):
        return
    unavailable = unavailable_message(state)
    if unavailable is not None:
        yield event_on(state, state.workloads[0], "Warning", UNAVAILABLE, unavailable)
        return
    existing = state.compute_domain
    name = compute_domain_name(state.job)
    if existing is None:
        if state.missing_roles():
            return  # its size is not known before every role is there
        taken = _foreign(state, name, f"it has no {MANAGED_BY}={MANAGER} label")
        yield Create(COMPUTE_DOMAINS, state.namespace, compute_domain_body(state), taken)
    elif not proven(state, existing):
        why = (
            "it is labelled as Trainhook's but not owned by the job's workloads, or names "
            "another channel"
            if existing.managed
            else f"it has no {MANAGED_BY}={MANAGER} label"
        )
        yield _foreign(state, name, why, key=existing.uid or name)
    elif existing.owners != frozenset(w.uid for w in state.workloads if w.uid):
        patch = {"metadata": {"ownerReferences": owner_references(state)}}
        yield Patch(COMPUTE_DOMAINS, state.namespace, name, patch, existing.resource_version)


def compute_domain_leftovers(state: JobState) -> Iterable[Action]:
    """The job's ComputeDomain once the job is deleted: while its workloads are there, the one
    proven the sweeper's; after, one labelled as Trainhook's that was owned by workloads (the
    garbage collector removes it too)."""
    owned = state.compute_domain
    if owned is None:
        return
    if proven(state, owned) if state.workloads else (owned.managed and owned.owners):
        yield Delete(COMPUTE_DOMAINS, state.namespace, owned.name, owned.uid)


def _foreign(state: JobState, name: str, why: str, key: str = "") -> Emit:
    return event_on(
        state,
        state.workloads[0],
        "Warning",
        "ForeignComputeDomain",
        f"ComputeDomain {name} was not made by Trainhook for the job ({why}): the sweeper "
        f"never changes or deletes it, and the job's pods wait "
        f"({contract.WAITING_FOR_OWNED_OBJECTS}) and never claim its channel; delete it so "
        "the sweeper makes the job's own, or rename the job",
        key=key or name,
    )
