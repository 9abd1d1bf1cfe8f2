"""The topology stamp: every workload's pod template carries the job's topology, and pods
started with another one restart together.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from webhook.core import contract
from webhook.core.job.workload import build_topology
from webhook.core.shape.topology import stamp
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Action, Delete, Patch, workload_patch
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.marks import pod_warning
from webhook.sweeper.job.pods import PodView
from webhook.sweeper.job.state import JobState, WorkloadView


def same_topology(stamped: str | None, wanted: str) -> bool:
    """Compare two topology stamps as ordered role lists, whatever their JSON spacing."""
    try:
        left = json.loads(stamped) if stamped else None
        right = json.loads(wanted)
    except ValueError:
        return False
    return isinstance(left, dict) and list(left.items()) == list(right.items())


def elastic_scale(stamped: str | None, wanted: str, elastic: tuple[int, int] | None) -> bool:
    """Whether an elastic job only changed its replica counts, staying within min:max."""
    if elastic is None:
        return False
    try:
        left = json.loads(stamped) if stamped else None
        right = json.loads(wanted)
    except ValueError:
        return False
    if not isinstance(left, dict) or not isinstance(right, dict) or list(left) != list(right):
        return False
    total = sum(v for v in right.values() if isinstance(v, int))
    return elastic[0] <= total <= elastic[1]


def topology_actions(state: JobState) -> Iterable[Action]:
    """Keep every workload's stamp equal to the job's topology, then restart stale pods together;
    once the job has every role, resume the Jobs held for them and let gated pods start."""
    workloads = [w for w in state.workloads if w.kind != "Pod"]
    if not workloads:
        return
    wanted = stamp(build_topology([w.workload for w in workloads]))
    topology = wanted[contract.TOPOLOGY]
    elastic = state.settings.elastic
    complete = not state.missing_roles()
    restamped = False
    for workload in workloads:
        held = contract.WAITING_FOR_ROLES in workload.annotations and workload.kind == "Job"
        if held and complete and workload.job_status and not workload.job_status.started:
            yield _release_held_job(state, workload, wanted)
            continue
        if all(workload.stamp.get(key) == value for key, value in wanted.items()):
            continue
        if elastic_scale(workload.stamp.get(contract.TOPOLOGY), topology, elastic) and all(
            workload.stamp.get(key) == value
            for key, value in wanted.items()
            if key != contract.TOPOLOGY
        ):
            continue  # scaled within min:max: the rendezvous takes it, nothing restarts
        status = workload.job_status
        if workload.kind == "StatefulSet" or (status and status.suspended and not status.started):
            restamped = restamped or workload.kind == "StatefulSet"
            patch = {"spec": {"template": {"metadata": {"annotations": wanted}}}}
            yield workload_patch(state, workload, patch)
        else:
            yield event_on(
                state,
                workload,
                "Warning",
                "TopologyStale",
                f"Job {workload.name} runs with topology {workload.stamp.get(contract.TOPOLOGY)} "
                f"but the job is now {topology}; a started Job's pod template cannot change: "
                "delete and recreate it",
                key=topology,
            )
    if restamped:
        return  # restart pods once their StatefulSets carry the new stamp
    owners = {w.name for w in workloads if w.kind == "StatefulSet"}
    current: dict[str | None, bool] = {}  # the pods of a job share a handful of stamps

    def is_current(stamped: str | None) -> bool:
        if stamped not in current:
            current[stamped] = same_topology(stamped, topology) or elastic_scale(
                stamped, topology, elastic
            )
        return current[stamped]

    facts = state.pod_facts
    if complete:  # gated pods are notable
        yield from _lift_gates(state, [p for p in facts.notable if is_current(p.topology)])
    if all(is_current(stamped) for stamped in facts.topologies):
        return
    stale = [
        pod
        for pod in state.pods
        if pod.owner_kind == "StatefulSet"
        and pod.owner_name in owners
        and not pod.terminating
        and not is_current(pod.topology)
    ]
    # A pod made of its StatefulSet's current template was stamped with the current topology:
    # another one on it was written since by someone else, and restarts nothing.
    current_revision = {w.name: w for w in workloads if w.kind == "StatefulSet"}
    forged = [
        pod
        for pod in stale
        if pod.topology is not None
        and pod.revision
        and pod.revision == current_revision[pod.owner_name].update_revision
    ]
    for pod in forged:
        yield from forged_topology(state, pod, current_revision[pod.owner_name])
    stale = [pod for pod in stale if pod not in forged]
    if not stale:
        return
    names = ", ".join(pod.name for pod in stale)
    first = next(w for w in workloads if w.kind == "StatefulSet")
    yield event_on(
        state,
        first,
        "Normal",
        "TopologyChanged",
        f"restarting {len(stale)} pod(s) together for topology {topology}: {names}",
        key=topology,
    )
    for pod in stale:
        yield Delete(PODS, state.namespace, pod.name, pod.uid)


def forged_topology(state: JobState, pod: PodView, owner: WorkloadView) -> Iterable[Action]:
    """A Warning, and the pod's topology set back to its template's stamp."""
    stamped = owner.stamp.get(contract.TOPOLOGY)
    shown = pod.topology or ""
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    yield pod_warning(
        state,
        pod,
        "ForgedMark",
        f"pod {pod.name} carries {contract.TOPOLOGY}={shown}, but was created from "
        f"StatefulSet {owner.name}'s current template, whose stamp is {stamped}: ignored, "
        "and set back",
        f"{contract.TOPOLOGY}={pod.topology}",
    )
    patch = {"metadata": {"annotations": {contract.TOPOLOGY: stamped}}}
    yield Patch(PODS, state.namespace, pod.name, patch)


def _release_held_job(state: JobState, workload: WorkloadView, wanted: dict[str, str]) -> Patch:
    """A Job the webhook created suspended for a missing role: the job now has them all, so it
    gets the whole job's stamp (its template may change while it has never started) and runs."""
    patch: dict[str, Any] = {
        "metadata": {"annotations": {contract.WAITING_FOR_ROLES: None}},
        "spec": {"suspend": False},
    }
    if any(workload.stamp.get(key) != value for key, value in wanted.items()):
        patch["spec"]["template"] = {"metadata": {"annotations": wanted}}
    return workload_patch(state, workload, patch)


def _lift_gates(state: JobState, current: Sequence[PodView]) -> Iterable[Action]:
    """Let the pods held for missing roles be scheduled: every role is there and their stamp
    is the job's (a stale one is restarted instead)."""
    for pod in current:
        if pod.waiting_for_roles and not pod.terminating:
            remaining = [{"name": gate} for gate in pod.gates if gate != contract.WAITING_FOR_ROLES]
            patch = {"spec": {"schedulingGates": remaining or None}}
            yield Patch(PODS, state.namespace, pod.name, patch, pod.resource_version)
