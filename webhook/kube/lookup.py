"""Sibling lookup for multi-role jobs: a watch-backed cache of labelled StatefulSets and Jobs.

When one workload of a job is admitted, the others of the same job and namespace (its siblings)
shape the topology. They are read from a cache that lists and then watches every StatefulSet
and Job labelled `trainhook.io/framework`, cluster-wide. When the cache holds nothing for a
job, one direct read of the namespace answers instead, bounded by `read_timeout` (1 s).

Start one cache per gunicorn worker, after the fork (threads do not survive a fork):

    from webhook.kube.client import Kube
    from webhook.kube.lookup import SiblingCache

    cache = SiblingCache(Kube.from_environment()).start()  # e.g. in the app factory or post_fork
    cache.synced()                                     # for /readyz
    cache.siblings(namespace, job, exclude=(kind, name))  # list of dicts, or None
    cache.get(namespace, "StatefulSet", name)           # the owner of an unstamped pod
    cache.cached(namespace, "StatefulSet", name)        # the same from the cache alone

The objects are dicts shaped like the API's JSON (camelCase keys), without managedFields. They
are the cache's own, handed out without a copy: a change in the cluster replaces an object
whole and never changes one in place, so what a caller holds stays as it was read, and callers
only read them (the core never changes what it is given). Workloads being deleted (with a
deletionTimestamp) are not siblings.

RBAC: get, list and watch on statefulsets (apps) and jobs (batch), cluster-wide; with
`namespaces` given, one list and watch per namespace, so the grants are needed only there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core import contract
from webhook.core.job.workload import job_of
from webhook.kube.client import ApiError, Kube
from webhook.kube.informer import Informer
from webhook.kube.resources import JOBS, STATEFULSETS, Resource

log = logging.getLogger("trainhook.lookup")

DEFAULT_READ_TIMEOUT = 1.0
DEFAULT_WATCH_SECONDS = 300

RESOURCES: dict[str, Resource] = {"StatefulSet": STATEFULSETS, "Job": JOBS}

JobKey = tuple[str, str]  # namespace, job


class SiblingCache:
    """Labelled StatefulSets and Jobs of every namespace (or of `namespaces`), kept current by
    list and watch."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespaces: Sequence[str] = (),
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        watch_seconds: int = DEFAULT_WATCH_SECONDS,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self._kube = kube
        self._read_timeout = read_timeout
        self._informers = {
            (kind, namespace): Informer(
                kube,
                resource,
                namespace=namespace,
                selector=contract.FRAMEWORK,
                index=_job_key,
                keep=_held,
                resync_seconds=watch_seconds,
                backoff_base=backoff[0],
                backoff_cap=backoff[1],
            )
            for kind, resource in RESOURCES.items()
            for namespace in (tuple(namespaces) or (None,))
        }

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> SiblingCache:
        for (kind, namespace), informer in self._informers.items():
            informer.start(name=f"trainhook-lookup-{kind}" + (f"-{namespace}" if namespace else ""))
        return self

    def stop(self, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        for informer in self._informers.values():
            informer.stop()
        for informer in self._informers.values():
            informer.stop(max(0.001, deadline - time.monotonic()))

    def synced(self) -> bool:
        """True once every kind has been listed; stays True while the watches reconnect."""
        return all(informer.synced.is_set() for informer in self._informers.values())

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced():
            if time.monotonic() >= deadline or any(i.stopped for i in self._informers.values()):
                return False
            time.sleep(0.02)
        return True

    # --- queries ---------------------------------------------------------------------------

    def siblings(
        self, namespace: str, job: str, *, exclude: tuple[str, str] | None = None
    ) -> list[dict[str, Any]] | None:
        """The StatefulSets and Jobs of `job` in `namespace`, except `exclude` (kind, name),
        sorted by kind and name. On a cache miss, one direct read bounded by the read timeout;
        None when that read fails (the API server is unreachable or refuses)."""
        found = [
            obj
            for kind in sorted(RESOURCES)
            for obj in self._objects_of(kind, namespace, job)
            if (kind, obj["metadata"]["name"]) != exclude
        ]
        if found:
            return found
        return self._read_siblings(namespace, job, exclude)

    def cached(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """One StatefulSet or Job as the cache holds it; None on a miss, never a read."""
        if kind not in RESOURCES:
            return None
        informer = self._informer(kind, namespace)
        return informer.get(namespace, name) if informer is not None else None

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """One StatefulSet or Job; on a cache miss, a direct read bounded by the read timeout.
        None when it does not exist or cannot be read."""
        resource = RESOURCES.get(kind)
        if resource is None:
            raise ValueError(f"kind {kind!r}: only {', '.join(RESOURCES)} are looked up")
        informer = self._informer(kind, namespace)
        cached = informer.get(namespace, name) if informer is not None else None
        if cached is not None:
            return cached
        try:
            obj = self._kube.get(resource, namespace, name, timeout=self._read_timeout)
        except ApiError as e:
            if e.unreachable:
                log.warning(
                    "cannot reach the API server to read %s %s/%s: %s", kind, namespace, name, e
                )
            elif e.status != 404:
                log.warning("cannot read %s %s/%s: %s", kind, namespace, name, e)
            return None
        return _trimmed(obj)

    def _informer(self, kind: str, namespace: str) -> Informer[JobKey] | None:
        """The watch of `kind` that covers `namespace`; None outside the watched namespaces."""
        return self._informers.get((kind, namespace)) or self._informers.get((kind, None))

    def _objects_of(self, kind: str, namespace: str, job: str) -> list[dict[str, Any]]:
        informer = self._informer(kind, namespace)
        return informer.objects_of((namespace, job)) if informer is not None else []

    def _read_siblings(
        self, namespace: str, job: str, exclude: tuple[str, str] | None
    ) -> list[dict[str, Any]] | None:
        deadline = time.monotonic() + self._read_timeout
        found: list[dict[str, Any]] = []
        for kind, resource in RESOURCES.items():
            left = deadline - time.monotonic()
            if left <= 0:
                log.warning("reading the siblings of job %s/%s took too long", namespace, job)
                return None
            try:
                listed, _ = self._kube.list(resource, namespace, contract.FRAMEWORK, timeout=left)
            except ApiError as e:
                log.warning("cannot read the siblings of job %s/%s: %s", namespace, job, e)
                return None
            for obj in listed:
                name = (obj.get("metadata") or {}).get("name")
                if job_of(obj) == job and (kind, name) != exclude and not _deleting(obj):
                    found.append(_trimmed(obj))
        return sorted(found, key=lambda o: (o["kind"], o["metadata"]["name"]))


def _job_key(obj: Mapping[str, Any]) -> JobKey | None:
    job = job_of(obj)
    return None if job is None else ((obj.get("metadata") or {}).get("namespace", ""), job)


def _held(obj: dict[str, Any]) -> dict[str, Any] | None:
    """What the cache keeps of a listed or watched object: nothing of one that is not labelled
    or is being deleted (it is no sibling), and no managedFields."""
    return None if job_of(obj) is None or _deleting(obj) else _trimmed(obj)


def _trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return obj


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def start_sibling_cache(kube: Kube | None = None, namespaces: Sequence[str] = ()) -> SiblingCache:
    """A started cache for this process, talking to the in-cluster API server (or kubeconfig),
    watching `namespaces` (empty: every namespace)."""
    return SiblingCache(kube or Kube.from_environment(), namespaces=namespaces).start()
