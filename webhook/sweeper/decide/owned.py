"""The objects the job owns: its Services, PodGroup, SSH Secret and peers ConfigMaps."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from webhook.core import contract
from webhook.core.compat import job_lists
from webhook.core.contract import PROVEN_OBJECTS
from webhook.core.errors import TrainhookError
from webhook.core.fabrics.nvlink import COMPUTE_DOMAIN_KIND, compute_domain_name
from webhook.core.frameworks.mpi import SSH_PORT
from webhook.core.job.gang import Gang, job_gang
from webhook.core.job.gang import podgroup_spec as core_podgroup_spec
from webhook.core.job.settings import wants_ssh_keys
from webhook.core.job.workload import build_topology
from webhook.core.mutation.owned_objects import proof_record
from webhook.core.shape.peers import PeerFiles, configmap, inline, peer_files
from webhook.core.shape.topology import stamp, topology_from_stamp
from webhook.kube.resources import (
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    KAI_PODGROUPS,
    KUBERNETES_PODGROUPS,
    MANAGED_BY,
    MANAGER,
    PODGROUPS,
    PODS,
    SECRETS,
    SERVICES,
    Resource,
)
from webhook.sweeper.actions import (
    Action,
    Create,
    CreateSshSecret,
    Delete,
    Emit,
    Patch,
    Recorded,
    workload_patch,
)
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.policy import role_counts
from webhook.sweeper.job.owned import Owned
from webhook.sweeper.job.state import JobState, WorkloadView
from webhook.sweeper.sshkeys import host_patterns, ssh_config


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


def service_actions(state: JobState) -> Iterable[Action]:
    spec = service_spec(state)
    existing = state.service
    if existing is None:
        yield Create(SERVICES, state.namespace, _body(state, "v1", "Service", state.job, spec))
        return
    if not existing.managed:
        if existing.spec.get("clusterIP") != "None":
            yield event_on(
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


PODGROUP_RESOURCES = {
    **{r.api_version: r for r in (PODGROUPS, COSCHEDULING_PODGROUPS, KAI_PODGROUPS)},
    **KUBERNETES_PODGROUPS,
}


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


def cluster_service_actions(state: JobState) -> Iterable[Action]:
    existing = {owned.name: owned for owned in state.cluster_services}
    for name, spec in cluster_service_specs(state).items():
        found = existing.get(name)
        if found is None:
            yield Create(SERVICES, state.namespace, _body(state, "v1", "Service", name, spec))
        elif not found.managed:
            yield event_on(
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
    members, resources = gang.minimum_of(parts)
    members = min(members, sum(counts.values()))
    found = core_podgroup_spec(gang, members, resources, priority, state.kubernetes_podgroup_api)
    if found is None:
        return None
    api_version, spec = found
    return PODGROUP_RESOURCES[api_version], spec


def podgroups(state: JobState) -> dict[Resource, Owned | None]:
    found = {
        PODGROUPS: state.podgroup,
        COSCHEDULING_PODGROUPS: state.coscheduling_podgroup,
        KAI_PODGROUPS: state.kai_podgroup,
    }
    if state.kubernetes_podgroup_api is not None:
        found[KUBERNETES_PODGROUPS[state.kubernetes_podgroup_api]] = state.kubernetes_podgroup
    return found


def podgroup_actions(state: JobState) -> Iterable[Action]:
    found = podgroup_of(state)
    wanted = found[0] if found else None
    for resource, existing in podgroups(state).items():
        if resource != wanted and existing is not None and existing.managed:
            # The job now names another scheduler (or none): its old PodGroup goes.
            yield Delete(resource, state.namespace, existing.name, existing.uid)
    if found is None:
        return
    resource, spec = found
    existing = podgroups(state)[resource]
    if existing is not None and not existing.managed:
        return
    if existing is None:
        if state.missing_roles():
            # Its size and requests are not known before every role is there, and no pod of
            # the job is scheduled meanwhile (held Jobs, gated pods): a PodGroup made now
            # would tell a queue a smaller gang than the job is.
            return
        body_spec = {k: v for k, v in spec.items() if v is not None}
        body = _body(state, resource.api_version, "PodGroup", state.job, body_spec)
        yield Create(resource, state.namespace, body)
    elif resource in KUBERNETES_PODGROUPS.values():
        yield from _kubernetes_podgroup_update(state, resource, existing, spec)
    elif _differs(existing, spec) or _owners_differ(state, existing):
        yield _update(state, resource, existing, spec)


def _kubernetes_podgroup_update(
    state: JobState, resource: Resource, existing: Owned, spec: dict[str, Any]
) -> Iterable[Action]:
    """Kubernetes' PodGroup is immutable but for its gang's minCount (and wholly so in
    v1alpha2): a change there is a patch, any other a new PodGroup (deleted now, created again
    on the next pass; the pods find it by name). Fields the job leaves out are not compared,
    as the API server may fill them (a default priority class)."""
    wanted = {key: value for key, value in spec.items() if value is not None}
    changed = {key for key, value in wanted.items() if existing.spec.get(key) != value}
    if not changed:
        if _owners_differ(state, existing):
            yield _update(state, resource, existing, {})
        return
    if changed == {"schedulingPolicy"} and (
        resource.api_version not in contract.KUBERNETES_IMMUTABLE_PODGROUP_APIS
        and "gang" in (existing.spec.get("schedulingPolicy") or {})
    ):
        yield _update(state, resource, existing, {"schedulingPolicy": wanted["schedulingPolicy"]})
        return
    yield Delete(resource, state.namespace, existing.name, existing.uid)


def ssh_secret_actions(state: JobState) -> Iterable[Action]:
    """Make the job's SSH keys, recording their digest on its workloads first; a Secret under
    the name that is not the one made so is never mounted: the job's pods wait, and one Warning
    names it (deleted when it carries Trainhook's label, so the sweeper makes the job's own)."""
    if not wants_ssh_keys(state.framework, state.settings):
        return
    secret = state.secret
    if secret is None:
        workers = [w for w in state.workloads if w.role == "worker"] or list(state.workloads)
        port = workers[0].settings.port or state.framework.port
        if not state.framework.ssh_keys:
            port = SSH_PORT  # a job that asked for keys: sshd on its own port, as Volcano's
        if port is None:  # a framework that talks ssh names its port
            return
        services = [w.service or state.job for w in state.workloads]
        yield CreateSshSecret(
            namespace=state.namespace,
            name=f"{state.job}-ssh",
            labels=labels(state),
            owners=tuple(owner_references(state)),
            ssh_config=ssh_config(host_patterns(state.namespace, services), port),
            record_on=tuple(
                Recorded(w.resource, w.name, w.resource_version) for w in state.workloads
            ),
        )
    elif ssh_keys_proven(state):
        return
    elif _made_before_digests(state, secret):
        record = {"metadata": {"annotations": {contract.SSH_KEYS_DIGEST: secret.digest}}}
        yield from (workload_patch(state, w, record) for w in state.workloads)
    elif not secret.managed:
        # Someone else's Secret under the name the pods mount: said once, never replaced.
        yield _foreign_secret(
            state,
            secret,
            f"it has no {MANAGED_BY}={MANAGER} label",
            "delete it so the sweeper makes the job's own SSH keys, or rename the job",
        )
    else:
        # Labelled as ours, but not the keys the sweeper recorded: someone else made or changed
        # it. Said once; deleted, so the sweeper makes the job's own.
        yield _foreign_secret(
            state,
            secret,
            "its keys are not those the sweeper made for the job, though it is labelled as "
            "Trainhook's",
            "the sweeper deletes it and makes the job's own",
        )
        yield Delete(SECRETS, state.namespace, secret.name, secret.uid)


def ssh_keys_proven(state: JobState) -> bool:
    """Whether the job's SSH Secret is the one the sweeper made: its data has the digest the
    sweeper recorded on the job's workloads before creating it (nobody else may write that
    annotation, and nobody can make other keys of that digest)."""
    secret = state.secret
    if secret is None or not secret.digest:
        return False
    recorded = {w.annotations.get(contract.SSH_KEYS_DIGEST) for w in state.workloads}
    return secret.digest in recorded


def _made_before_digests(state: JobState, secret: Owned) -> bool:
    """A Secret the sweeper made before it recorded digests: labelled, owned by the job's
    workloads, no digest recorded on any of them, and a pod of the job's StatefulSets or Jobs
    already runs without the gate (admitted before the gate existed; no pod of a new job does)."""
    return (
        secret.managed
        and bool(secret.digest)
        and _owned_by_job(state, secret)
        and not any(contract.SSH_KEYS_DIGEST in w.annotations for w in state.workloads)
        and (
            state.pod_facts.plain > 0  # a plain pod is one of those, ungated
            or any(
                p.owner_kind in ("StatefulSet", "Job")
                and not p.terminating
                and not p.waiting_for_owned_objects
                and not p.waiting_for_roles
                for p in state.pod_facts.notable
            )
        )
    )


def _foreign_secret(state: JobState, secret: Owned, why: str, remedy: str) -> Emit:
    name = secret.name
    return event_on(
        state,
        state.workloads[0],
        "Warning",
        "ForeignSecret",
        f"Secret {name} was not made by Trainhook for the job ({why}): the job's pods wait "
        f"({contract.WAITING_FOR_OWNED_OBJECTS}) and never mount it as their SSH keys; {remedy}",
        key=secret.uid or name,
    )


def _owned_by_job(state: JobState, owned: Owned) -> bool:
    """Whether `owned` is owned by one of the job's workloads, as the sweeper makes it from its
    creation: nobody can name a workload's uid before the workload exists."""
    return bool(owned.owners & {w.uid for w in state.workloads if w.uid})


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
    # The compat layer's lists too: the job has one (the webhook refuses roles that disagree).
    lists = job_lists(framework.name, state.settings.compat)
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
        files = peer_files(topology, stamp_port, lists)
        found[files.name] = files
    return found


def peers_actions(state: JobState, wanted: dict[str, PeerFiles]) -> Iterable[Action]:
    """Create the ConfigMaps the job's pods mount (`wanted`: `peer_files_of`); delete the ones
    no pod mounts any more. One under a wanted name with other content than the job's lists is
    never mounted: one Warning names it, and it is deleted when it carries Trainhook's label."""
    present = _present_peers(state)
    for name, files in wanted.items():
        found = present.get(name)
        if found is None:
            body = configmap(files, state.namespace)
            body["metadata"]["labels"] = labels(state)
            owners = owner_references(state)
            if owners:
                body["metadata"]["ownerReferences"] = owners
            taken = _foreign_peers(state, name, f"it has no {MANAGED_BY}={MANAGER} label")
            yield Create(CONFIGMAPS, state.namespace, body, on_conflict=taken)
        elif found.digest == files.digest:
            continue  # exactly the job's lists, immutable: harmless whoever made it
        elif not found.managed:
            yield _foreign_peers(state, name, f"it has no {MANAGED_BY}={MANAGER} label")
        else:
            yield _foreign_peers(
                state,
                name,
                "its content is not the job's lists, though it is labelled as Trainhook's",
                "the sweeper deletes it and makes the job's own",
            )
            yield Delete(CONFIGMAPS, state.namespace, name, found.uid)
    mounted = state.pod_facts.mounted_peers  # of the pods not terminating
    for owned in state.peers:
        if owned.name not in wanted and owned.name not in mounted:
            yield Delete(CONFIGMAPS, state.namespace, owned.name, owned.uid)


OWNED_RECHECK = timedelta(minutes=1)
OWNED_MADE = timedelta(seconds=1)


def _present_peers(state: JobState) -> dict[str, Owned]:
    return {o.name: o for o in (*state.foreign_peers, *state.forged_peers, *state.peers)}


def proven_peers(state: JobState, wanted: dict[str, PeerFiles]) -> set[str]:
    """The names of the peers ConfigMaps (of `wanted`: `peer_files_of`) that hold exactly the
    job's lists, immutable."""
    present = _present_peers(state)
    return {
        name
        for name, files in wanted.items()
        if name in present and present[name].digest == files.digest
    }


def owned_gate_actions(state: JobState, peers: set[str], domain: bool = True) -> Iterable[Action]:
    """Let the pods held for the job's ConfigMap (`peers`: those proven), Secret or
    ComputeDomain (`domain`: proven, or none asked for) be scheduled once each is proven the
    job's own (a pod also held for missing roles keeps this gate until that one is lifted)."""
    held = [  # gated pods are notable
        pod
        for pod in state.pod_facts.notable
        if pod.waiting_for_owned_objects and not pod.waiting_for_roles and not pod.terminating
    ]
    if not held:
        return
    keys = not wants_ssh_keys(state.framework, state.settings) or ssh_keys_proven(state)
    keys = keys and domain
    for pod in held:
        if keys and (pod.peers is None or pod.peers in peers):
            gates = [{"name": g} for g in pod.gates if g != contract.WAITING_FOR_OWNED_OBJECTS]
            patch = {"spec": {"schedulingGates": gates or None}}
            yield Patch(PODS, state.namespace, pod.name, patch, pod.resource_version)


def proof_records(
    state: JobState, peers: set[str], domain: bool
) -> dict[str, dict[str, str | None]]:
    """Per workload, the record of the objects its pods mount or claim that are proven the
    job's own (`peers`: its ConfigMaps proven; `domain`: it has a ComputeDomain, proven), where
    it is not already so: pods created once it is written need no gate's patch. A record that
    no longer holds is rewritten in the same look that finds it so."""
    names = [f"ConfigMap/{name}" for name in peers]
    keys = wants_ssh_keys(state.framework, state.settings)
    if keys and state.secret is not None and ssh_keys_proven(state):
        names.append(f"Secret/{state.secret.name}")
    if domain:
        names.append(f"{COMPUTE_DOMAIN_KIND}/{compute_domain_name(state.job)}")
    record = proof_record(names)
    return {
        workload.name: {PROVEN_OBJECTS: record or None}
        for workload in state.workloads
        if workload.kind != "Pod" and workload.annotations.get(PROVEN_OBJECTS, "") != record
    }


def waiting_for(state: JobState) -> list[str]:
    """The objects someone else made under the names of the job's own, which its pods wait
    for: `ConfigMap <name>`, `Secret <name>`."""
    found = []
    secret = state.secret
    if (
        wants_ssh_keys(state.framework, state.settings)
        and secret is not None
        and not ssh_keys_proven(state)
        and not _made_before_digests(state, secret)
    ):
        found.append(f"Secret {secret.name}")
    if state.peers or state.forged_peers or state.foreign_peers:
        present = _present_peers(state)
        try:
            wanted = peer_files_of(state)
        except TrainhookError:
            return found  # a job too large for one ConfigMap is said to be invalid
        for name, files in wanted.items():
            if name in present and present[name].digest != files.digest:
                found.append(f"ConfigMap {name}")
    return found


def owned_recheck(state: JobState, now: datetime, actions: list[Action]) -> datetime | None:
    """While pods wait for the job's ConfigMap or Secret, when to look at the job again: at once
    when this decision makes one they wait for (its write is no news to the sweeper's watches,
    and the Secret is not watched), else within a minute (an unlabelled ConfigMap or someone
    else's Secret is not watched, so its deletion comes as no event)."""
    held = [  # gated pods are notable
        pod
        for pod in state.pod_facts.notable
        if pod.waiting_for_owned_objects and not pod.terminating
    ]
    if not held:
        return None
    awaited = {pod.peers for pod in held}
    made = any(
        isinstance(action, CreateSshSecret)
        or (
            isinstance(action, Create)
            and action.resource == CONFIGMAPS
            and action.body["metadata"]["name"] in awaited
        )
        for action in actions
    )
    return now + (OWNED_MADE if made else OWNED_RECHECK)


def _foreign_peers(
    state: JobState,
    name: str,
    why: str,
    remedy: str = "delete it so the sweeper makes the job's own, or rename the job",
) -> Emit:
    return event_on(
        state,
        state.workloads[0],
        "Warning",
        "ForeignConfigMap",
        f"ConfigMap {name} was not made by Trainhook for the job ({why}): the job's pods wait "
        f"({contract.WAITING_FOR_OWNED_OBJECTS}) and never mount it as their peer lists; "
        f"{remedy}",
        key=name,
    )


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
