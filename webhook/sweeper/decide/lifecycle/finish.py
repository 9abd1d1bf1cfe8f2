"""A finished job: its outcome recorded, its Kueue pod group marked finished, its pods cleaned,
its gang released, and the job deleted once its TTL has passed; the sweeper's own objects of a
job that is gone.

Kueue counts a plain pod group finished when every pod of it has Succeeded, or when no pod of it
is active and one carries `kueue.x-k8s.io/retriable-in-group: "false"` (Kueue's pod controller,
`Finished`). A StatefulSet's pods never reach Succeeded (they are restarted, then scaled away),
so without the marker the group's Workload would keep holding its quota after the job ended.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from webhook.core import contract
from webhook.kube.resources import CONFIGMAPS, PODS, SECRETS, SERVICES
from webhook.sweeper.actions import Action, Decision, Delete, Patch, workload_patch
from webhook.sweeper.decide.compute_domain import compute_domain_leftovers
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.owned import podgroups
from webhook.sweeper.decide.policy import DEFAULT_CLEAN_POD_POLICY, PHASES
from webhook.sweeper.decide.records import Outcome
from webhook.sweeper.job.state import JobState, format_time


def unverified_outcome(state: JobState, outcome: Outcome) -> Decision:
    """An outcome recorded only on workloads the webhook did not admit: nobody judged who wrote
    it, so the sweeper neither records it further nor cleans, scales down or deletes anything on
    it; it says so, once per workload."""
    events: list[Action] = []
    for workload in state.workloads:
        phase = workload.annotations.get(contract.PHASE)
        if workload.attributed or phase not in PHASES:
            continue
        message = (
            f"{workload.kind} {workload.name} records {contract.PHASE}={phase} but no creator "
            f"({contract.CREATED_BY}): the webhook did not admit it into job {state.job}, so "
            "the sweeper does not clean pods, scale down or delete the job on that outcome; "
            "delete the job yourself, or recreate the workload without it"
        )
        events.append(event_on(state, workload, "Warning", "UnverifiedOutcome", message, phase))
    return Decision(tuple(events), phase=outcome.phase)


def finish_job(state: JobState, outcome: Outcome, now: datetime) -> Decision:
    finished_at = outcome.finished_at or now
    record = {
        contract.PHASE: outcome.phase,
        contract.FINISHED_AT: format_time(finished_at),
        contract.REASON: outcome.reason,
    }
    if outcome.status is not None:
        record[contract.STATUS] = outcome.status
    clean = state.settings.clean_pod_policy or DEFAULT_CLEAN_POD_POLICY
    ttl = state.settings.ttl_seconds_after_finished
    expires = finished_at + timedelta(seconds=ttl) if ttl is not None else None
    expired = expires is not None and now >= expires
    events: list[Action] = []
    patches: list[Action] = []
    for workload in state.workloads:
        patch: dict[str, Any] = {}
        recorded = all(workload.annotations.get(k) == v for k, v in record.items())
        # A job recorded before the label existed gets it, unless it is about to be deleted.
        unlabelled = workload.phase_label != outcome.phase and not expired
        if not recorded or unlabelled:
            # The label, for `kubectl get -l` and `kubectl wait`; the annotations, for the rest.
            patch["metadata"] = {"annotations": record, "labels": {contract.PHASE: outcome.phase}}
        if not recorded and workload.annotations.get(contract.PHASE) not in PHASES:
            message = outcome.message or f"job {state.job} {outcome.phase.lower()}"
            kind = "Normal" if outcome.phase == "Succeeded" else "Warning"
            events.append(event_on(state, workload, kind, outcome.reason, message, outcome.phase))
        if workload.kind == "StatefulSet" and workload.replicas != 0:
            patch["spec"] = {"replicas": 0}  # a finished pod must not be restarted to train again
        status = workload.job_status
        if (
            status is not None
            and clean in ("All", "Running")
            and not status.finished
            and not status.suspended
        ):
            patch["spec"] = {"suspend": True}  # stop the Job controller replacing cleaned pods
        if patch:
            patches.append(workload_patch(state, workload, patch))
    if expired and not patches:
        return Decision(tuple(_delete_job(state)))
    # The Kueue marker before the pods go: Kueue must see it on a pod of the group.
    actions = (
        *events,
        *kueue_finished_marker(state),
        *patches,
        *_clean_pods(state, clean),
        *_release_gang(state),
    )
    return Decision(actions, recheck_at=expires, phase=outcome.phase)


NOT_RETRIABLE = "false"


def kueue_finished_marker(state: JobState) -> Iterable[Action]:
    """Mark one pod of a finished Kueue job (one is enough; another once that one is gone)."""
    if not any(w.settings.scheduler == "kueue" for w in state.workloads):
        return
    kinds = ("StatefulSet", "Job", "Pod")
    if any(  # a pod carrying the marker is notable
        p.annotations.get(contract.KUEUE_RETRIABLE_IN_GROUP) == NOT_RETRIABLE
        for p in state.pod_facts.notable
        if p.owner_kind in kinds
    ):
        return
    pods = [p for p in state.pods if p.owner_kind in kinds]
    if not pods:
        return
    first = min(pods, key=lambda p: (p.terminating, p.name))
    yield Patch(
        PODS,
        state.namespace,
        first.name,
        {"metadata": {"annotations": {contract.KUEUE_RETRIABLE_IN_GROUP: NOT_RETRIABLE}}},
    )


def _release_gang(state: JobState) -> Iterable[Action]:
    """A finished job's PodGroup goes once none of its pods is pending or running, so the job
    no longer holds its place (and its resources) in the scheduler's queue until its TTL."""
    facts = state.pod_facts  # plain pods are pending or running
    if facts.plain or any(
        not pod.terminating and pod.phase in ("Pending", "Running") for pod in facts.notable
    ):
        return
    for resource, owned in podgroups(state).items():
        if owned is not None and owned.managed:
            yield Delete(resource, state.namespace, owned.name, owned.uid)


def _clean_pods(state: JobState, policy: str) -> Iterable[Action]:
    if policy == "None":
        return
    for pod in state.pods:
        if pod.terminating:
            continue
        if policy == "All" or pod.phase in ("Pending", "Running"):
            yield Delete(PODS, state.namespace, pod.name, pod.uid)


def _delete_job(state: JobState) -> Iterable[Action]:
    yield from orphans(state, only_orphans=False)
    for workload in state.workloads:
        yield Delete(workload.resource, state.namespace, workload.name, workload.uid)


def orphans(state: JobState, only_orphans: bool = True) -> Iterable[Action]:
    """The sweeper's own objects of a job that is gone (or expired); never anyone else's."""
    facts = state.pod_facts  # plain pods are not terminating
    if only_orphans and (facts.plain or any(not pod.terminating for pod in facts.notable)):
        return
    for resource, owned in (
        (SERVICES, state.service),
        *((SERVICES, service) for service in state.cluster_services),
        *podgroups(state).items(),
        (SECRETS, state.secret),
    ):
        if owned is not None and owned.managed:
            yield Delete(resource, state.namespace, owned.name, owned.uid)
    yield from compute_domain_leftovers(state)
    for owned in state.peers:
        yield Delete(CONFIGMAPS, state.namespace, owned.name, owned.uid)
