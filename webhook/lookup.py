"""Sibling lookup for multi-role jobs: a watch-backed cache of labelled StatefulSets and Jobs.

When one workload of a job is admitted, the others of the same job and namespace (its siblings)
shape the topology. They are read from a cache that lists and then watches every StatefulSet
and Job labelled `trainhook.io/framework`, cluster-wide. When the cache holds nothing for a
job, one direct read of the namespace answers instead, bounded by `read_timeout` (1 s).

Start one cache per gunicorn worker, after the fork (threads do not survive a fork):

    from webhook.lookup import SiblingCache
    from webhook.kubeapi import load_api_client

    cache = SiblingCache(load_api_client()).start()   # e.g. in the app factory or post_fork
    cache.synced()                                     # for /readyz
    cache.siblings(namespace, job, exclude=(kind, name))  # list of dicts, or None
    cache.get(namespace, "StatefulSet", name)           # the owner of an unstamped pod

The objects are dicts shaped like the API's JSON (camelCase keys), without managedFields. They
are the cache's own, handed out without a copy: a change in the cluster replaces an object
whole and never changes one in place, so what a caller holds stays as it was read, and callers
only read them (the core never changes what it is given). Workloads being deleted (with a
deletionTimestamp) are not siblings.

RBAC: get, list and watch on statefulsets (apps) and jobs (batch), cluster-wide.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from webhook import contract
from webhook.kubeapi import ApiError, Unreachable, WatchStream, request
from webhook.workload import job_of

log = logging.getLogger("trainhook.lookup")

DEFAULT_READ_TIMEOUT = 1.0
DEFAULT_WATCH_SECONDS = 300


@dataclass(frozen=True)
class WorkloadResource:
    kind: str
    group_version: str
    plural: str

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        path = f"/apis/{self.group_version}"
        if namespace is not None:
            path += f"/namespaces/{namespace}"
        path += f"/{self.plural}"
        return path if name is None else f"{path}/{name}"


RESOURCES = {
    "StatefulSet": WorkloadResource("StatefulSet", "apps/v1", "statefulsets"),
    "Job": WorkloadResource("Job", "batch/v1", "jobs"),
}

ObjectKey = tuple[str, str, str]  # kind, namespace, name


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


class SiblingCache:
    """Labelled StatefulSets and Jobs of every namespace, kept current by list and watch."""

    def __init__(
        self,
        api: client.ApiClient,
        *,
        read_timeout: float = DEFAULT_READ_TIMEOUT,
        watch_seconds: int = DEFAULT_WATCH_SECONDS,
        backoff: tuple[float, float] = (0.5, 30.0),
    ) -> None:
        self._api = api
        self._read_timeout = read_timeout
        self._watch_seconds = watch_seconds
        self._backoff = backoff
        self._lock = threading.Lock()
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._jobs: dict[ObjectKey, tuple[str, str]] = {}  # object -> (namespace, job)
        self._by_job: dict[tuple[str, str], set[ObjectKey]] = {}
        self._synced: set[str] = set()
        self._stop = threading.Event()
        self._streams: dict[str, WatchStream] = {}
        self._threads: list[threading.Thread] = []

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> SiblingCache:
        for kind in RESOURCES:
            thread = threading.Thread(
                target=self._reflect, args=(kind,), name=f"trainhook-lookup-{kind}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        with self._lock:
            streams = list(self._streams.values())
        for stream in streams:
            stream.close()
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def synced(self) -> bool:
        """True once every kind has been listed; stays True while the watches reconnect."""
        with self._lock:
            return len(self._synced) == len(RESOURCES)

    def wait_synced(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not self.synced():
            if time.monotonic() >= deadline or self._stop.is_set():
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
        with self._lock:
            keys = sorted(self._by_job.get((namespace, job), ()))
            found = [self._objects[k] for k in keys if (k[0], k[2]) != exclude]
        if found:
            return found
        return self._read_siblings(namespace, job, exclude)

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        """One StatefulSet or Job; on a cache miss, a direct read bounded by the read timeout.
        None when it does not exist or cannot be read."""
        resource = RESOURCES.get(kind)
        if resource is None:
            raise ValueError(f"kind {kind!r}: only {', '.join(RESOURCES)} are looked up")
        with self._lock:
            cached = self._objects.get((kind, namespace, name))
            if cached is not None:
                return cached
        try:
            obj = request(
                self._api, "GET", resource.path(namespace, name), timeout=self._read_timeout
            )
        except ApiError as e:
            if e.status != 404:
                log.warning("cannot read %s %s/%s: %s", kind, namespace, name, e)
            return None
        except Unreachable as e:
            log.warning(
                "cannot reach the API server to read %s %s/%s: %s", kind, namespace, name, e
            )
            return None
        return _trimmed(obj)

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
                listed = request(
                    self._api,
                    "GET",
                    resource.path(namespace),
                    query=[("labelSelector", contract.FRAMEWORK)],
                    timeout=left,
                )
            except (ApiError, Unreachable) as e:
                log.warning("cannot read the siblings of job %s/%s: %s", namespace, job, e)
                return None
            for item in listed.get("items") or ():
                obj = _with_kind(item, resource)
                name = (obj.get("metadata") or {}).get("name")
                if job_of(obj) == job and (kind, name) != exclude and not _deleting(obj):
                    found.append(_trimmed(obj))
        return sorted(found, key=lambda o: (o["kind"], o["metadata"]["name"]))

    # --- the store -------------------------------------------------------------------------

    def _put(self, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        key = (obj["kind"], metadata.get("namespace", ""), metadata.get("name", ""))
        job = job_of(obj)
        with self._lock:
            self._forget(key)
            if job is None or _deleting(obj):
                return
            self._objects[key] = _trimmed(obj)
            self._jobs[key] = (key[1], job)
            self._by_job.setdefault((key[1], job), set()).add(key)

    def _delete(self, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        with self._lock:
            self._forget((obj["kind"], metadata.get("namespace", ""), metadata.get("name", "")))

    def _forget(self, key: ObjectKey) -> None:
        self._objects.pop(key, None)
        job = self._jobs.pop(key, None)
        if job is not None:
            members = self._by_job[job]
            members.discard(key)
            if not members:
                del self._by_job[job]

    def _replace(self, kind: str, items: list[dict[str, Any]]) -> None:
        with self._lock:
            for key in [k for k in self._objects if k[0] == kind]:
                self._forget(key)
        for item in items:
            self._put(item)
        with self._lock:
            self._synced.add(kind)

    # --- list and watch --------------------------------------------------------------------

    def _reflect(self, kind: str) -> None:
        resource = RESOURCES[kind]
        delay = self._backoff[0]
        while not self._stop.is_set():
            try:
                version = self._list(resource)
                delay = self._backoff[0]
                while not self._stop.is_set():
                    version = self._watch(resource, version)
            except _Gone:
                log.info("watch of %s expired; listing again", resource.plural)
                continue
            except (ApiError, Unreachable, ValueError) as e:
                log.warning("lookup of %s failed, retrying in %.1fs: %s", resource.plural, delay, e)
            self._stop.wait(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, self._backoff[1])

    def _list(self, resource: WorkloadResource) -> str:
        listed = request(
            self._api,
            "GET",
            resource.path(),
            query=[("labelSelector", contract.FRAMEWORK)],
            timeout=(self._read_timeout * 5, 60.0),
        )
        items = [_with_kind(item, resource) for item in listed.get("items") or ()]
        self._replace(resource.kind, items)
        version: str = (listed.get("metadata") or {}).get("resourceVersion") or ""
        return version

    def _watch(self, resource: WorkloadResource, version: str) -> str:
        """One watch request; the resourceVersion to continue from when it ends."""
        timeout_seconds = int(self._watch_seconds * random.uniform(1.0, 1.1))
        query: list[tuple[str, str | int | bool]] = [
            ("labelSelector", contract.FRAMEWORK),
            ("allowWatchBookmarks", True),
            ("timeoutSeconds", timeout_seconds),
        ]
        if version:
            query.append(("resourceVersion", version))
        stream = WatchStream(
            self._api,
            resource.path(),
            query,
            connect_timeout=self._read_timeout * 5,
            read_timeout=timeout_seconds + 10,
        )
        with self._lock:
            self._streams[resource.kind] = stream
        if self._stop.is_set():
            stream.close()
        for event in stream:
            kind, obj = event.get("type"), event["object"]
            if kind == "ERROR":
                code = obj.get("code")
                if code == 410:
                    raise _Gone()
                raise ApiError(int(code or 500), str(obj.get("reason")), str(obj.get("message")))
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if kind in ("ADDED", "MODIFIED"):
                self._put(_with_kind(obj, resource))
            elif kind == "DELETED":
                self._delete(_with_kind(obj, resource))
        return version


def _with_kind(obj: dict[str, Any], resource: WorkloadResource) -> dict[str, Any]:
    """List items carry no kind or apiVersion; the core needs both."""
    obj.setdefault("kind", resource.kind)
    obj.setdefault("apiVersion", resource.group_version)
    return obj


def _trimmed(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata")
    if isinstance(metadata, dict) and "managedFields" in metadata:
        obj = {**obj, "metadata": {k: v for k, v in metadata.items() if k != "managedFields"}}
    return obj


def _deleting(obj: Mapping[str, Any]) -> bool:
    return bool((obj.get("metadata") or {}).get("deletionTimestamp"))


def start_sibling_cache(api: client.ApiClient | None = None) -> SiblingCache:
    """A started cache for this process, talking to the in-cluster API server (or kubeconfig)."""
    if api is None:
        from webhook.kubeapi import load_api_client

        api = load_api_client()
    return SiblingCache(api).start()
