"""The sweeper's informers: what it watches, and what it keeps of each object it caches."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any, TypedDict

import msgspec

from webhook.core import contract
from webhook.kube.client import Kube, watch_event
from webhook.kube.informer import Informer
from webhook.kube.resources import (
    COMPUTE_DOMAINS,
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    JOBS,
    KAI_PODGROUPS,
    KUBERNETES_PODGROUPS,
    MANAGED_BY,
    MANAGER,
    PODGROUPS,
    PODS,
    SERVICES,
    STATEFULSETS,
    Resource,
)
from webhook.sweeper.job.podtable import PodTable
from webhook.sweeper.job.state import JobKey, job_key

OWNED_SELECTOR = f"{MANAGED_BY}={MANAGER}"
SELECTORS: dict[Resource, str] = {
    STATEFULSETS: contract.FRAMEWORK,
    JOBS: contract.FRAMEWORK,
    PODS: contract.JOB,
    SERVICES: OWNED_SELECTOR,
    PODGROUPS: OWNED_SELECTOR,
    COSCHEDULING_PODGROUPS: OWNED_SELECTOR,
    KAI_PODGROUPS: OWNED_SELECTOR,
    CONFIGMAPS: OWNED_SELECTOR,
}
# Served only where Volcano, scheduler-plugins or KAI is installed (Kubernetes' own PodGroup is
# watched only in the version discovery found served).
OPTIONAL = (
    PODGROUPS,
    COSCHEDULING_PODGROUPS,
    KAI_PODGROUPS,
    *KUBERNETES_PODGROUPS.values(),
    COMPUTE_DOMAINS,
)


def selectors(
    kubernetes_podgroup_api: str | None, compute_domains: bool = False
) -> dict[Resource, str]:
    """What the sweeper watches: SELECTORS, Kubernetes' PodGroups of the served version, and
    ComputeDomains where the cluster serves them."""
    found = dict(SELECTORS)
    if kubernetes_podgroup_api is not None:
        found[KUBERNETES_PODGROUPS[kubernetes_podgroup_api]] = OWNED_SELECTOR
    if compute_domains:
        found[COMPUTE_DOMAINS] = OWNED_SELECTOR
    return found


class PodTables:
    """Every job's PodTable, kept by the pods' watches (`changed` is their `on_object` hook):
    a change waits here until the job is reconciled, which takes the job's table (`of`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tables: dict[JobKey, PodTable] = {}
        self._pending: dict[JobKey, dict[str, Mapping[str, Any] | None]] = {}
        self._where: dict[tuple[str, str], JobKey] = {}  # pod -> its job
        # Versions of pods that a deletion or a replacement (another uid) superseded before
        # their job's table took them: handed to it first, so it sees the pod as it last was
        # before it went (a disruption that went, or a pod that no longer was one).
        self._stopped: dict[JobKey, list[tuple[str, Mapping[str, Any]]]] = {}

    def changed(
        self, name: tuple[str, str], key: JobKey | None, pod: Mapping[str, Any] | None
    ) -> None:
        """A pod (namespace, name) now held under job `key` (None: under none, or gone)."""
        with self._lock:
            before = self._where.pop(name, None)
            waiting = self._pending.get(before, {}).get(name[1]) if before is not None else None
            if waiting is not None and _uid(pod) != _uid(waiting):
                assert before is not None
                self._stopped.setdefault(before, []).append((name[1], waiting))
            if before is not None and (before != key or pod is None):
                self._pending.setdefault(before, {})[name[1]] = None
            if key is not None and pod is not None:
                self._where[name] = key
                self._pending.setdefault(key, {})[name[1]] = pod

    def of(self, key: JobKey) -> PodTable:
        """The job's table with every change so far (from the reconciling thread only)."""
        with self._lock:
            pending = self._pending.pop(key, {})
            stopped = self._stopped.pop(key, [])
            table = self._tables.get(key)
            if table is None:
                table = self._tables[key] = PodTable()
        for name, was in stopped:
            table.changed(name, was)
        for name, pod in pending.items():
            table.changed(name, pod)
        return table

    def forget_if_empty(self, key: JobKey) -> None:
        """Drop the table of a job that has no pod left (from the reconciling thread only)."""
        with self._lock:
            table = self._tables.get(key)
            if (
                table is not None
                and key not in self._pending
                and key not in self._stopped
                and len(table) == 0
            ):
                del self._tables[key]


def _uid(pod: Mapping[str, Any] | None) -> object:
    return None if pod is None else (pod.get("metadata") or {}).get("uid")


# Secrets are never listed or watched (a list reads every Secret it matches, whatever its
# label): the one a job needs, `<job>-ssh`, is read by name when the job is reconciled.


def watches(
    kube: Kube,
    *,
    namespaces: tuple[str, ...],
    on_change: Callable[[JobKey], None],
    resync_seconds: float,
    backoff_base: float,
    watched: Mapping[Resource, str] = SELECTORS,
    pod_tables: PodTables | None = None,
    pods_trickle_pause: float = 0.0,
) -> dict[tuple[Resource, str | None], Informer[JobKey]]:
    """One watch per resource and watched namespace (None: one watch of every namespace), so the
    sweeper needs permissions only in the namespaces it watches; the pods' watches keep each
    job's PodTable in `pod_tables`, and wait `pods_trickle_pause` between reads of a trickle."""
    return {
        (resource, namespace): watch_of(
            kube,
            resource,
            selector,
            namespace=namespace,
            on_change=on_change,
            resync_seconds=resync_seconds,
            backoff_base=backoff_base,
            pod_tables=pod_tables,
            pods_trickle_pause=pods_trickle_pause,
        )
        for resource, selector in watched.items()
        for namespace in (namespaces or (None,))
    }


def watch_of(
    kube: Kube,
    resource: Resource,
    selector: str,
    *,
    namespace: str | None = None,
    on_change: Callable[[JobKey], None] = lambda key: None,
    resync_seconds: float = 60.0,
    backoff_base: float = 1.0,
    pod_tables: PodTables | None = None,
    pods_trickle_pause: float = 0.0,
) -> Informer[JobKey]:
    """One resource's watch as the sweeper keeps it: pods slimmed (a change of what slim_pod
    drops is no change), handed to their jobs' PodTables and read at most every
    `pods_trickle_pause` when they trickle; other objects whole, as they come."""
    pods = resource == PODS
    informer: Informer[JobKey] = Informer(
        kube,
        resource,
        namespace=namespace,
        selector=selector,
        index=partial(job_key, resource),
        on_change=on_change,
        resync_seconds=resync_seconds,
        backoff_base=backoff_base,
        optional=resource in OPTIONAL,
        keep=_whole,
        unchanged=same_pod if pods else None,
        on_object=pod_tables.changed if pods and pod_tables else None,
        decode=pod_event if pods else None,
        trickle_pause=pods_trickle_pause if pods else 0.0,
    )
    if pods:  # slimmed like the version held: what did not change is held once
        informer.keep = partial(_slim_like_held, informer)
    return informer


def _slim_like_held(informer: Informer[JobKey], pod: dict[str, Any]) -> dict[str, Any]:
    metadata = pod.get("metadata") or {}
    return slim_pod(pod, informer.get(metadata.get("namespace") or "", metadata.get("name") or ""))


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


# What the sweeper keeps of a pod's status conditions, and how much of a termination message.
KEPT_CONDITIONS = ("Ready", "DisruptionTarget", "PodScheduled", "TerminationTarget")
# Where pods made before peers ConfigMaps held their large env values, one annotation each.
LARGE_VALUES = "trainhook.io/env."
MESSAGE_KEPT = 512


def slim_pod(pod: dict[str, Any], held: dict[str, Any] | None = None) -> dict[str, Any]:
    """Only what the sweeper decides on (the informer's `keep`): a pod's env, volumes and most
    annotations list its peers, so whole pods cost memory in the square of a job's size; this
    costs a few hundred bytes a pod, whatever the job. Given the version the cache holds, the
    parts equal to its parts are its own (shared already, and only the changed ones interned)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    kept_metadata = {
        key: metadata[key]
        for key in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "labels",
        )
        if key in metadata
    }
    kept_metadata["annotations"] = {
        key: value
        for key, value in (metadata.get("annotations") or {}).items()
        if key in (contract.JOB_COMPLETION_INDEX, contract.KUEUE_RETRIABLE_IN_GROUP)
        or (
            key.startswith(contract.PREFIX)
            and key not in (contract.HOSTFILE, contract.DISCOVER_HOSTS)
            and not key.startswith(LARGE_VALUES)
        )
    }
    owners = [
        {k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}
        for ref in metadata.get("ownerReferences") or []
        if ref.get("controller")
    ]
    if owners:
        kept_metadata["ownerReferences"] = owners
    kept_spec: dict[str, Any] = {
        "containers": [{"name": c.get("name")} for c in spec.get("containers") or []]
    }
    if spec.get("initContainers"):
        kept_spec["initContainers"] = [
            {k: c[k] for k in ("name", "restartPolicy") if k in c} for c in spec["initContainers"]
        ]
    for key in ("subdomain", "priorityClassName", "nodeName"):
        if key in spec:
            kept_spec[key] = spec[key]
    if spec.get("schedulingGates"):
        kept_spec["schedulingGates"] = [{"name": g.get("name")} for g in spec["schedulingGates"]]
    mounted = [  # the job's peers ConfigMap, by name
        {"name": v.get("name"), "configMap": {"name": v["configMap"].get("name")}}
        for v in spec.get("volumes") or []
        if isinstance(v.get("configMap"), dict)
    ]
    if mounted:
        kept_spec["volumes"] = mounted
    kept_status: dict[str, Any] = {key: status[key] for key in ("phase", "reason") if key in status}
    kept_status["conditions"] = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or []
        if c.get("type") in KEPT_CONDITIONS
    ]
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in status:
            kept_status[key] = [_slim_container_status(c) for c in status[key] or []]
    kept: dict[str, Any] = {
        "kind": pod.get("kind") or "Pod",
        "apiVersion": pod.get("apiVersion") or "v1",
        "metadata": kept_metadata,
        "spec": kept_spec,
        "status": kept_status,
    }
    shared: dict[str, Any] = _shared(kept) if held is None else _shared_like(kept, held)
    return shared


# What slim_pod reads of a pod, as msgspec decodes it: a pod watch event's line is read into this
# shape, every other field skipped as it is read (a pod's env, volume mounts and managedFields
# are most of its bytes), and slim_pod then holds what it holds of a whole pod.
class _Named(TypedDict, total=False):
    name: str | None


class _InitContainer(TypedDict, total=False):
    name: str | None
    restartPolicy: str | None


class _Volume(TypedDict, total=False):
    name: str | None
    configMap: _Named | None


class _OwnerReference(TypedDict, total=False):
    apiVersion: str | None
    kind: str | None
    name: str | None
    uid: str | None
    controller: bool | None


class _Metadata(TypedDict, total=False):
    name: str | None
    namespace: str | None
    uid: str | None
    resourceVersion: str | None
    creationTimestamp: str | None
    deletionTimestamp: str | None
    labels: dict[str, str] | None
    annotations: dict[str, str] | None
    ownerReferences: list[_OwnerReference] | None


class _Spec(TypedDict, total=False):
    containers: list[_Named] | None
    initContainers: list[_InitContainer] | None
    subdomain: str | None
    priorityClassName: str | None
    nodeName: str | None
    schedulingGates: list[_Named] | None
    volumes: list[_Volume] | None


class _Condition(TypedDict, total=False):
    type: str | None
    status: str | None
    reason: str | None
    message: str | None


class _Ended(TypedDict, total=False):
    exitCode: int | None
    reason: str | None
    message: str | None
    finishedAt: str | None
    startedAt: str | None


class _ContainerStatus(TypedDict, total=False):
    name: str | None
    restartCount: int | None
    state: dict[str, _Ended | None] | None
    lastState: dict[str, _Ended | None] | None


class _Status(TypedDict, total=False):
    phase: str | None
    reason: str | None
    conditions: list[_Condition] | None
    containerStatuses: list[_ContainerStatus] | None
    initContainerStatuses: list[_ContainerStatus] | None


class _Pod(TypedDict, total=False):
    kind: str | None
    apiVersion: str | None
    metadata: _Metadata | None
    spec: _Spec | None
    status: _Status | None


class _PodEvent(TypedDict):
    type: str
    object: _Pod


_POD_EVENT = msgspec.json.Decoder(_PodEvent)
_OF_A_POD = ("ADDED", "MODIFIED", "DELETED", "BOOKMARK")


def pod_event(line: bytes) -> dict[str, Any]:
    """A pod watch's event with only what slim_pod reads of its pod decoded. An event that is
    not of a pod (an ERROR's Status), or that the shape does not fit, is decoded whole."""
    try:
        event: dict[str, Any] = _POD_EVENT.decode(line)  # type: ignore[assignment]
    except (msgspec.MsgspecError, UnicodeDecodeError, RecursionError):
        return watch_event(line)
    if event["type"] not in _OF_A_POD:
        return watch_event(line)
    return event


def same_pod(held: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two held pods (slim_pod) differ in their resourceVersion alone: a change of what
    the sweeper does not keep (managedFields, probe times, IPs, ...) cannot change a decision."""
    return _without_version(held) == _without_version(new)


def _without_version(pod: Mapping[str, Any]) -> dict[str, Any]:
    metadata = dict(pod.get("metadata") or {})
    metadata.pop("resourceVersion", None)
    return {**pod, "metadata": metadata}


def _shared(value: Any) -> Any:
    """The same value with every string interned: the keys, and the labels, stamps, names and
    states that thousands of pods repeat, are then held once (a held pod takes 3.5 KB, not 6).
    Strings and other leaves are handled in place rather than by a call each: a pod has about
    a hundred of them, and this runs for every pod event."""
    kind = type(value)
    if kind is dict:
        return {
            _intern(key): (
                _intern(item)
                if type(item) is str
                else _shared(item)
                if type(item) in _NESTED
                else item
            )
            for key, item in value.items()
        }
    if kind is list:
        return [
            _intern(item) if type(item) is str else _shared(item) if type(item) in _NESTED else item
            for item in value
        ]
    if kind is str:
        return _intern(value)
    return value


_intern = sys.intern
_NESTED = (dict, list)


def _shared_like(value: Any, like: Any) -> Any:
    """`_shared(value)`, with what equals its counterpart in `like` (an earlier version) taken
    from `like`: a pod event changes a condition or a container's state, and the rest of the
    pod is held once across its versions, compared rather than interned again."""
    if value == like:
        return like
    kind = type(value)
    if kind is not type(like) or kind not in _NESTED:
        return _shared(value)
    if kind is dict:
        return {
            _intern(key): before
            if (before := like.get(key)) == item
            else _shared_like(item, before)
            for key, item in value.items()
        }
    if len(value) != len(like):
        return _shared(value)
    return [
        before if before == item else _shared_like(item, before)
        for item, before in zip(value, like, strict=True)
    ]


def _slim_container_status(status: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {"name": status.get("name"), "restartCount": status.get("restartCount")}
    for key in ("state", "lastState"):
        state = status.get(key) or {}
        kept[key] = {
            phase: {
                # the end of a message: a log's last lines say why it failed
                k: (v[-MESSAGE_KEPT:] if k == "message" and isinstance(v, str) else v)
                for k, v in (detail or {}).items()
                if k in ("exitCode", "reason", "message", "finishedAt", "startedAt")
            }
            for phase, detail in state.items()
        }
    return kept
