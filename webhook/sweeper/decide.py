"""The sweeper's decision: from the current state of one job to the actions that converge it.

Pure and level-triggered: the same state always gives the same actions, and everything the
sweeper must remember (a job's phase, when it finished) is written on the job's own objects.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.gang import Gang, job_gang
from webhook.core.gang import podgroup_spec as core_podgroup_spec
from webhook.core.peers import PeerFiles, configmap, inline, peer_files
from webhook.core.requests import sum_requests
from webhook.core.topology import stamp, topology_from_stamp
from webhook.core.workload import Member, build_topology, disagreement
from webhook.kube.resources import (
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    JOBS,
    MANAGED_BY,
    MANAGER,
    PODGROUPS,
    PODS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    Resource,
)
from webhook.sweeper.actions import (
    Action,
    Create,
    CreateSshSecret,
    Decision,
    Delete,
    Emit,
    ObjectRef,
    Patch,
)
from webhook.sweeper.policy import DEFAULT_CLEAN_POD_POLICY, PHASES, judge, role_counts
from webhook.sweeper.sshkeys import host_patterns, ssh_config
from webhook.sweeper.state import JobState, Owned, WorkloadView, format_time, parse_time

# The workloads of one manifest are created one after the other: the job's topology is enforced
# once its newest workload is this old, not while the rest of the job is still being created.
SETTLE = timedelta(seconds=5)


@dataclass(frozen=True)
class Outcome:
    phase: str
    reason: str
    message: str | None  # None when read back from the workloads rather than judged now
    finished_at: datetime | None


def decide(state: JobState, now: datetime) -> Decision:
    decision = _decide(state, now)
    if not state.intruders:
        return decision
    return Decision((*_intruder_events(state), *decision.actions), decision.recheck_at)


def _decide(state: JobState, now: datetime) -> Decision:
    if state.problems:
        return Decision(tuple(_problem_events(state)))
    if not state.workloads:
        return Decision(tuple(_orphans(state)))
    outcome = recorded_outcome(state)
    if outcome is None:
        verdict = judge(state)
        if verdict is None:
            return _running(state, now)
        outcome = Outcome(verdict.phase, verdict.reason, verdict.message, now)
    return _finished(state, outcome, now)


def recorded_outcome(state: JobState) -> Outcome | None:
    """The phase the sweeper recorded on the job's workloads; the earliest one wins."""
    found: list[Outcome] = []
    for workload in state.workloads:
        phase = workload.annotations.get(contract.PHASE)
        if phase in PHASES:
            found.append(
                Outcome(
                    phase,
                    workload.annotations.get(contract.REASON) or phase,
                    None,
                    parse_time(workload.annotations.get(contract.FINISHED_AT)),
                )
            )
    if not found:
        return None
    timed = [o for o in found if o.finished_at is not None]
    return min(timed, key=lambda o: o.finished_at or datetime.min) if timed else found[0]


# --- a running job ------------------------------------------------------------------------


def _running(state: JobState, now: datetime) -> Decision:
    created = [w.created for w in state.workloads if w.created is not None]
    settled = max(created) + SETTLE if created else now
    try:
        actions = [
            *_service(state),
            *_cluster_services(state),
            *_podgroup(state),
            *_ssh_secret(state),
        ]
        # A large job's lists before any stamp that needs them: a pod restarted for a new
        # topology mounts a ConfigMap that already holds it.
        actions += _peers(state)
        if now >= settled:
            actions += _agreement(state)
            actions += _topology(state)
    except TrainhookError as error:
        first = state.workloads[0]
        return Decision((_event(state, first, "Warning", "InvalidJob", str(error)),))
    return Decision(tuple(actions), recheck_at=None if now >= settled else settled)


def labels(state: JobState) -> dict[str, str]:
    return {contract.JOB: state.job, MANAGED_BY: MANAGER}


def owner_references(state: JobState) -> list[dict[str, Any]]:
    """Every workload owns the job's Service, PodGroup and Secret: Kubernetes deletes them
    once the last workload is gone."""
    return [
        {"apiVersion": w.resource.api_version, "kind": w.kind, "name": w.name, "uid": w.uid}
        for w in state.workloads
        if w.uid
    ]


def _ports(state: JobState) -> list[int]:
    ports = (
        w.settings.port if w.settings.port is not None else w.framework.port
        for w in state.workloads
    )
    return list(dict.fromkeys(p for p in ports if p is not None))


def service_spec(state: JobState) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {contract.JOB: state.job},
    }
    name = state.framework.name
    ports = _ports(state)
    if ports:
        spec["ports"] = [
            {
                "name": name if i == 0 else f"{name}-{i}",
                "port": port,
                "targetPort": port,
                "protocol": "TCP",
            }
            for i, port in enumerate(ports)
        ]
    return spec


def _service(state: JobState) -> Iterable[Action]:
    spec = service_spec(state)
    existing = state.service
    if existing is None:
        yield Create(SERVICES, state.namespace, _body(state, "v1", "Service", state.job, spec))
        return
    if not existing.managed:
        if existing.spec.get("clusterIP") != "None":
            yield _event(
                state,
                state.workloads[0],
                "Warning",
                "ServiceNotHeadless",
                f"Service {state.job} was not created by Trainhook and is not headless "
                "(clusterIP: None): the job's pods cannot reach each other by hostname",
            )
        return
    wanted = {
        "ports": spec.get("ports"),
        "selector": spec["selector"],
        "publishNotReadyAddresses": True,
    }
    if _differs(existing, wanted) or _owners_differ(state, existing):
        yield _update(state, SERVICES, existing, wanted)


PODGROUP_RESOURCES = {r.api_version: r for r in (PODGROUPS, COSCHEDULING_PODGROUPS)}


def gang_of(state: JobState) -> Gang | None:
    """How the job is gang-scheduled; Refused when its workloads disagree."""
    members = [(f"{w.kind} {w.name}", w.settings) for w in state.workloads]
    return job_gang(state.job, members)


def cluster_service_specs(state: JobState) -> dict[str, dict[str, Any]]:
    """The ClusterIP Services the job's framework asks for, by name."""
    declare = state.framework.services
    if declare is None:
        return {}
    ports = _ports(state)
    wanted = declare(state.job, [w.role for w in state.workloads], ports[0] if ports else None)
    return {
        service.name: {
            "type": "ClusterIP",
            "selector": dict(service.selector),
            "ports": [
                {
                    "name": state.framework.name,
                    "port": service.port,
                    "targetPort": service.port,
                    "protocol": "TCP",
                }
            ],
        }
        for service in wanted
    }


def _cluster_services(state: JobState) -> Iterable[Action]:
    existing = {owned.name: owned for owned in state.cluster_services}
    for name, spec in cluster_service_specs(state).items():
        found = existing.get(name)
        if found is None:
            yield Create(SERVICES, state.namespace, _body(state, "v1", "Service", name, spec))
        elif not found.managed:
            yield _event(
                state,
                state.workloads[0],
                "Warning",
                "ServiceNotManaged",
                f"Service {name} was not created by Trainhook: the job's pods may reach the "
                "wrong address through it",
            )
        else:
            wanted = {"selector": spec["selector"], "ports": spec["ports"]}
            if _differs(found, wanted) or _owners_differ(state, found):
                yield _update(state, SERVICES, found, wanted)


def podgroup_spec(state: JobState) -> dict[str, Any] | None:
    """The spec of the job's PodGroup; None when the job has none."""
    found = podgroup_of(state)
    return found[1] if found else None


def podgroup_of(state: JobState) -> tuple[Resource, dict[str, Any]] | None:
    """The job's PodGroup, of whichever scheduler it names: its pods, their summed requests."""
    gang = gang_of(state)
    if gang is None:
        return None
    counts = role_counts(state)
    # A bare pod counts once: pods of a bare-pod job not created yet add no requests.
    parts = [(w.pod_requests, w.replicas) for w in state.workloads]
    priority = next((w.priority_class for w in state.workloads if w.priority_class), None)
    found = core_podgroup_spec(gang, sum(counts.values()), sum_requests(parts), priority)
    if found is None:
        return None
    api_version, spec = found
    return PODGROUP_RESOURCES[api_version], spec


def _podgroups(state: JobState) -> dict[Resource, Owned | None]:
    return {PODGROUPS: state.podgroup, COSCHEDULING_PODGROUPS: state.coscheduling_podgroup}


def _podgroup(state: JobState) -> Iterable[Action]:
    found = podgroup_of(state)
    wanted = found[0] if found else None
    for resource, existing in _podgroups(state).items():
        if resource != wanted and existing is not None and existing.managed:
            # The job now names another scheduler (or none): its old PodGroup goes.
            yield Delete(resource, state.namespace, existing.name, existing.uid)
    if found is None:
        return
    resource, spec = found
    existing = _podgroups(state)[resource]
    if existing is not None and not existing.managed:
        return
    if existing is None:
        body_spec = {k: v for k, v in spec.items() if v is not None}
        body = _body(state, resource.api_version, "PodGroup", state.job, body_spec)
        yield Create(resource, state.namespace, body)
    elif _differs(existing, spec) or _owners_differ(state, existing):
        yield _update(state, resource, existing, spec)


def _ssh_secret(state: JobState) -> Iterable[Action]:
    if not state.framework.ssh_keys:
        return
    if state.secret is not None:
        if not state.secret.managed:
            # Someone else's Secret under the name the pods mount: say so once, never replace it.
            first = state.workloads[0]
            yield _event(
                state,
                first,
                "Warning",
                "ForeignSecret",
                f"Secret {state.secret.name} was not made by Trainhook (it has no "
                f"{MANAGED_BY}={MANAGER} label), yet the job's pods mount it as their SSH keys; "
                "delete it so the sweeper makes one, or rename the job",
                key=state.secret.uid or state.secret.name,
            )
        return
    workers = [w for w in state.workloads if w.role == "worker"] or list(state.workloads)
    port = workers[0].settings.port or state.framework.port
    if port is None:  # a framework that talks ssh names its port
        return
    services = [w.service or state.job for w in state.workloads]
    yield CreateSshSecret(
        namespace=state.namespace,
        name=f"{state.job}-ssh",
        labels=labels(state),
        owners=tuple(owner_references(state)),
        ssh_config=ssh_config(host_patterns(state.namespace, services), port),
    )


def peer_files_of(state: JobState) -> dict[str, PeerFiles]:
    """By name, the peers ConfigMap of every topology the job's pods are created with: each
    workload's stamp, and the one the sweeper is about to stamp; none for a small job."""
    framework = state.framework

    def port(workload: WorkloadView) -> int | None:
        return workload.settings.port if workload.settings.port is not None else framework.port

    # Distinct (stamp, port) pairs first: a job of bare pods has one workload per pod.
    pairs = dict.fromkeys(
        (tuple(sorted(w.stamp.items())), port(w))
        for w in state.workloads
        if w.stamp.get(contract.TOPOLOGY)
    )
    cores = [w.workload for w in state.workloads if w.kind != "Pod"]
    if cores:
        wanted = tuple(sorted(stamp(build_topology(cores, state.cluster_domain)).items()))
        for workload_port in dict.fromkeys(port(w) for w in state.workloads):
            pairs[(wanted, workload_port)] = None
    found: dict[str, PeerFiles] = {}
    for stamp_items, stamp_port in pairs:
        topology = topology_from_stamp(
            dict(stamp_items),
            job=state.job,
            namespace=state.namespace,
            framework=framework.name,
            role_order=framework.roles,
            cluster_domain=state.cluster_domain,
        )
        if topology is None or inline(topology):
            continue
        files = peer_files(topology, stamp_port, framework.lists)
        found[files.name] = files
    return found


def _peers(state: JobState) -> Iterable[Action]:
    """Create the ConfigMaps the job's pods mount; delete the ones no pod mounts any more."""
    wanted = peer_files_of(state)
    existing = {owned.name for owned in state.peers}
    for name, files in wanted.items():
        if name not in existing:
            body = configmap(files, state.namespace)
            body["metadata"]["labels"] = labels(state)
            owners = owner_references(state)
            if owners:
                body["metadata"]["ownerReferences"] = owners
            yield Create(CONFIGMAPS, state.namespace, body)
    mounted = {pod.peers for pod in state.pods if not pod.terminating}
    for owned in state.peers:
        if owned.name not in wanted and owned.name not in mounted:
            yield Delete(CONFIGMAPS, state.namespace, owned.name, owned.uid)


def _body(state: JobState, api_version: str, kind: str, name: str, spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": state.namespace, "labels": labels(state)}
    owners = owner_references(state)
    if owners:
        metadata["ownerReferences"] = owners
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": spec}


def _differs(existing: Owned, wanted: dict[str, Any]) -> bool:
    return any(existing.spec.get(key) != value for key, value in wanted.items())


def _owners_differ(state: JobState, existing: Owned) -> bool:
    return existing.owners != frozenset(w.uid for w in state.workloads if w.uid)


def _update(state: JobState, resource: Any, existing: Owned, spec: dict[str, Any]) -> Patch:
    patch = {"metadata": {"ownerReferences": owner_references(state)}, "spec": spec}
    return Patch(resource, state.namespace, existing.name, patch, existing.resource_version)


def same_topology(stamped: str | None, wanted: str) -> bool:
    """Compare two topology stamps as ordered role lists, whatever their JSON spacing."""
    try:
        left = json.loads(stamped) if stamped else None
        right = json.loads(wanted)
    except ValueError:
        return False
    return isinstance(left, dict) and list(left.items()) == list(right.items())


def _topology(state: JobState) -> Iterable[Action]:
    """Keep every workload's stamp equal to the job's topology, then restart stale pods together."""
    workloads = [w for w in state.workloads if w.kind != "Pod"]
    if not workloads:
        return
    wanted = stamp(build_topology([w.workload for w in workloads]))
    topology = wanted[contract.TOPOLOGY]
    restamped = False
    for workload in workloads:
        if all(workload.stamp.get(key) == value for key, value in wanted.items()):
            continue
        status = workload.job_status
        if workload.kind == "StatefulSet" or (status and status.suspended and not status.started):
            restamped = restamped or workload.kind == "StatefulSet"
            patch = {"spec": {"template": {"metadata": {"annotations": wanted}}}}
            yield Patch(
                workload.resource, state.namespace, workload.name, patch, workload.resource_version
            )
        else:
            yield _event(
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
    stale = [
        pod
        for pod in state.pods
        if pod.owner_kind == "StatefulSet"
        and pod.owner_name in owners
        and not pod.terminating
        and not same_topology(pod.topology, topology)
    ]
    if not stale:
        return
    names = ", ".join(pod.name for pod in stale)
    first = next(w for w in workloads if w.kind == "StatefulSet")
    yield _event(
        state,
        first,
        "Normal",
        "TopologyChanged",
        f"restarting {len(stale)} pod(s) together for topology {topology}: {names}",
        key=topology,
    )
    for pod in stale:
        yield Delete(PODS, state.namespace, pod.name, pod.uid)


def _agreement(state: JobState) -> Iterable[Action]:
    """A job-wide setting its roles disagree on (admitted while its siblings could not be read,
    or changed since): one Warning on the first workload, for as long as it lasts."""
    members = [
        Member(w.role, f"{w.kind} {w.name}", w.settings, w.priority_class) for w in state.workloads
    ]
    problem = disagreement(state.job, state.framework, members)
    if problem is None:
        problem = _bare_pod_ports(state)
    if problem is not None:
        yield _event(state, state.workloads[0], "Warning", "SettingsDisagree", problem)


def _bare_pod_ports(state: JobState) -> str | None:
    """Bare pods whose hosts annotation records no ports reach every peer on their own port:
    those of one job must listen on one."""
    bare = [
        w
        for w in state.workloads
        if w.kind == "Pod" and '"port":' not in w.stamp.get(contract.HOSTS, "")
    ]
    ports = [(w, w.settings.port or w.framework.port) for w in bare]
    if len({port for _, port in ports}) < 2:
        return None
    listed = ", ".join(f"{w.role} (Pod {w.name}) {port}" for w, port in ports[:6])
    more = f" and {len(ports) - 6} more" if len(ports) > 6 else ""
    return (
        f"{contract.PORT} differs between the bare pods of job {state.job}: {listed}{more}; "
        f"set one, or record each role's port in {contract.HOSTS}"
    )


# --- a finished job -----------------------------------------------------------------------


def _finished(state: JobState, outcome: Outcome, now: datetime) -> Decision:
    finished_at = outcome.finished_at or now
    record = {
        contract.PHASE: outcome.phase,
        contract.FINISHED_AT: format_time(finished_at),
        contract.REASON: outcome.reason,
    }
    clean = state.setting("clean_pod_policy") or DEFAULT_CLEAN_POD_POLICY
    events: list[Action] = []
    patches: list[Action] = []
    for workload in state.workloads:
        patch: dict[str, Any] = {}
        recorded = all(workload.annotations.get(k) == v for k, v in record.items())
        if not recorded:
            patch["metadata"] = {"annotations": record}
            if workload.annotations.get(contract.PHASE) not in PHASES:
                message = outcome.message or f"job {state.job} {outcome.phase.lower()}"
                kind = "Normal" if outcome.phase == "Succeeded" else "Warning"
                events.append(_event(state, workload, kind, outcome.reason, message, outcome.phase))
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
            patches.append(
                Patch(
                    workload.resource,
                    state.namespace,
                    workload.name,
                    patch,
                    workload.resource_version,
                )
            )
    ttl = state.setting("ttl_seconds_after_finished")
    expires = finished_at + timedelta(seconds=ttl) if ttl is not None else None
    if expires is not None and now >= expires and not patches:
        return Decision(tuple(_delete_job(state)))
    actions = (*events, *patches, *_clean_pods(state, clean), *_release_gang(state))
    return Decision(actions, recheck_at=expires)


def _release_gang(state: JobState) -> Iterable[Action]:
    """A finished job's PodGroup goes once none of its pods is pending or running, so the job
    no longer holds its place (and its resources) in the scheduler's queue until its TTL."""
    if any(not pod.terminating and pod.phase in ("Pending", "Running") for pod in state.pods):
        return
    for resource, owned in _podgroups(state).items():
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
    yield from _orphans(state, only_orphans=False)
    for workload in state.workloads:
        yield Delete(workload.resource, state.namespace, workload.name, workload.uid)


def _orphans(state: JobState, only_orphans: bool = True) -> Iterable[Action]:
    """The sweeper's own objects of a job that is gone (or expired); never anyone else's."""
    if only_orphans and any(not pod.terminating for pod in state.pods):
        return
    for resource, owned in (
        (SERVICES, state.service),
        *((SERVICES, service) for service in state.cluster_services),
        *_podgroups(state).items(),
        (SECRETS, state.secret),
    ):
        if owned is not None and owned.managed:
            yield Delete(resource, state.namespace, owned.name, owned.uid)
    for owned in state.peers:
        yield Delete(CONFIGMAPS, state.namespace, owned.name, owned.uid)


# --- events -------------------------------------------------------------------------------


def _problem_events(state: JobState) -> Iterable[Action]:
    for problem in state.problems:
        target = ObjectRef(_api_version(problem.kind), problem.kind, problem.name, problem.uid)
        yield _emit(state, target, "Warning", "InvalidJob", problem.message, problem.message)


def _intruder_events(state: JobState) -> Iterable[Action]:
    for intruder in state.intruders:
        target = ObjectRef(PODS.api_version, "Pod", intruder.name, intruder.uid)
        yield _emit(state, target, "Warning", "NotInJob", intruder.message, "NotInJob")


def _api_version(kind: str) -> str:
    return {"StatefulSet": STATEFULSETS, "Job": JOBS}.get(kind, PODS).api_version


def _event(
    state: JobState, workload: WorkloadView, kind: str, reason: str, message: str, key: str = ""
) -> Emit:
    target = ObjectRef(workload.resource.api_version, workload.kind, workload.name, workload.uid)
    return _emit(state, target, kind, reason, message, key or message)


def _emit(
    state: JobState, target: ObjectRef, kind: str, reason: str, message: str, key: str
) -> Emit:
    """An Event named after what it says: recording the same thing twice finds it exists."""
    digest = hashlib.sha256(f"{target.uid}|{reason}|{key}".encode()).hexdigest()[:12]
    name = f"{target.name[:240]}.{digest}"
    return Emit(state.namespace, name, target, kind, reason, message)
