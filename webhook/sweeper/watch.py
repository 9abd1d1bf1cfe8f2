"""Watch-backed caches of the labelled objects, and the queue of jobs to look at."""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from webhook.sweeper.kube import ApiError, Kube, WatchStream
from webhook.sweeper.resources import Resource
from webhook.sweeper.state import JobKey, job_key, metadata_of

log = logging.getLogger("trainhook.sweeper")

ObjectKey = tuple[str, str]  # (namespace, name)


def backoff(failures: int, base: float, cap: float = 60.0) -> float:
    """Seconds to wait after `failures` failures in a row: base, 2 base, 4 base, ... up to cap."""
    return float(min(cap, base * 2 ** max(0, failures - 1)))


class WorkQueue:
    """Jobs due for a look, each at most once, earliest first; a key can be scheduled later."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._due: dict[JobKey, float] = {}
        self._heap: list[tuple[float, JobKey]] = []
        self._ready = threading.Condition()

    def add(self, key: JobKey, delay: float = 0.0) -> None:
        due = self._clock() + max(0.0, delay)
        with self._ready:
            if key in self._due and self._due[key] <= due:
                return
            self._due[key] = due
            heapq.heappush(self._heap, (due, key))
            self._ready.notify()

    def pop(self, timeout: float) -> JobKey | None:
        """The next due key, waiting at most `timeout` seconds for one."""
        deadline = self._clock() + timeout
        with self._ready:
            while True:
                while self._heap and self._due.get(self._heap[0][1]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier add
                now = self._clock()
                if self._heap and self._heap[0][0] <= now:
                    _, key = heapq.heappop(self._heap)
                    del self._due[key]
                    return key
                wait = deadline - now
                if self._heap:
                    wait = min(wait, self._heap[0][0] - now)
                if wait <= 0:
                    return None
                self._ready.wait(wait)

    def __len__(self) -> int:
        with self._ready:
            return len(self._due)


def _newer(held: dict[str, Any], written: dict[str, Any]) -> bool:
    """Whether the held copy is newer than the written one (resourceVersions that are numbers,
    as etcd's are, compare; others are taken as the written one being current)."""
    a = str(metadata_of(held).get("resourceVersion") or "")
    b = str(metadata_of(written).get("resourceVersion") or "")
    return a.isdigit() and b.isdigit() and int(a) > int(b)


class Informer:
    """One resource listed and watched into a cache indexed by job. A watch that ends (every
    resync period at the latest) or answers 410 Gone is followed by a fresh list, and every job
    seen in a list is handed to `on_change`: a missed event costs at most one resync period."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        namespace: str | None,
        selector: str,
        on_change: Callable[[JobKey], None],
        resync_seconds: float,
        backoff_base: float = 1.0,
        optional: bool = False,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.on_change = on_change
        self.resync_seconds = resync_seconds
        self.backoff_base = backoff_base
        self.optional = optional  # a resource that may not be served (Volcano's PodGroups)
        self.synced = threading.Event()
        self.lists = 0  # how many times the resource was listed, for logs and tests
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._jobs: dict[JobKey, set[ObjectKey]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None

    def run(self) -> None:
        failures = 0
        while not self._stop.is_set():
            try:
                self._list_and_watch()
                failures = 0
            except ApiError as error:
                if error.status == 404 and self.optional:
                    self._replace([])
                    self.synced.set()
                    log.info("%s are not served here; looking again later", self.resource.plural)
                    self._stop.wait(self.resync_seconds)
                    continue
                failures += 1
                delay = backoff(failures, self.backoff_base)
                log.warning("%s: %s; retrying in %.1fs", self.resource.plural, error, delay)
                self._stop.wait(delay)
            except Exception:
                failures += 1
                log.exception("%s: unexpected error", self.resource.plural)
                self._stop.wait(backoff(failures, self.backoff_base))

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()

    def objects_of(self, key: JobKey) -> list[dict[str, Any]]:
        with self._lock:
            return [self._objects[name] for name in sorted(self._jobs.get(key, ()))]

    def jobs(self) -> set[JobKey]:
        with self._lock:
            return set(self._jobs)

    def remember(self, obj: dict[str, Any]) -> None:
        """Hold an object just written, unless the cache already holds a newer version."""
        name = self._key(obj)
        with self._lock:
            held = self._objects.get(name)
        if held is not None and _newer(held, obj):
            return
        self._put(obj, notify=False)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._unindex((namespace, name))
            self._objects.pop((namespace, name), None)

    def _list_and_watch(self) -> None:
        """List, then watch until the watch ends (at the resync period at the latest)."""
        items, version = self.kube.list(self.resource, self.namespace, self.selector)
        self.lists += 1
        self._replace(items)
        self.synced.set()
        if self._stop.is_set():
            return
        stream = self.kube.watch(
            self.resource,
            self.namespace,
            self.selector,
            version,
            max(1, round(self.resync_seconds)),
        )
        self._stream = stream
        if self._stop.is_set():
            stream.close()
        try:
            for event in stream:
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    if obj.get("code") == 410:
                        log.info("%s: watch expired (410 Gone); relisting", self.resource.plural)
                        return
                    reason = obj.get("reason") or "Error"
                    raise ApiError(obj.get("code") or 0, reason, obj.get("message") or "")
                if event.get("type") in ("ADDED", "MODIFIED"):
                    self._put(obj)
                elif event.get("type") == "DELETED":
                    self._remove(obj)
        finally:
            self._stream = None

    def _key(self, obj: dict[str, Any]) -> ObjectKey:
        metadata = metadata_of(obj)
        return (metadata.get("namespace") or "", metadata.get("name") or "")

    def _put(self, obj: dict[str, Any], notify: bool = True) -> None:
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        name = self._key(obj)
        job = job_key(self.resource, obj)
        with self._lock:
            before = self._unindex(name)
            self._objects[name] = obj
            if job is not None:
                self._jobs.setdefault(job, set()).add(name)
        for key in {before, job} - {None} if notify else ():
            assert key is not None
            self.on_change(key)

    def _remove(self, obj: dict[str, Any]) -> None:
        name = self._key(obj)
        with self._lock:
            before = self._unindex(name)
            self._objects.pop(name, None)
        if before is not None:
            self.on_change(before)

    def _unindex(self, name: ObjectKey) -> JobKey | None:
        old = self._objects.get(name)
        before = job_key(self.resource, old) if old is not None else None
        if before is not None:
            names = self._jobs.get(before, set())
            names.discard(name)
            if not names:
                self._jobs.pop(before, None)
        return before

    def _replace(self, items: list[dict[str, Any]]) -> None:
        with self._lock:
            touched = set(self._jobs)
            self._objects = {}
            self._jobs = {}
            for obj in items:
                name = self._key(obj)
                self._objects[name] = obj
                job = job_key(self.resource, obj)
                if job is not None:
                    self._jobs.setdefault(job, set()).add(name)
            touched |= set(self._jobs)
        for key in sorted(touched):
            self.on_change(key)
