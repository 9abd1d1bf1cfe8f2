"""One resource listed and watched into a cache: the loop every Trainhook process uses.

The lookup cache (sibling workloads at admission), the sweeper (every labelled object) and the
self-managed certificates (their MutatingWebhookConfiguration) each run informers. An informer
lists once, a page at a time, then watches from the list's resourceVersion. A watch that ends
is resumed from the last resourceVersion it delivered (bookmarks included), as client-go does;
only a watch answered 410 Gone (the version is older than the API server keeps) is followed by
a fresh list, and a failure by a wait that doubles up to a cap. Objects are indexed by a key the
caller derives (a job, a name); every key whose objects changed is handed to `on_change`, after
a list every key seen before or after it, and every resync period every key held, so a key whose
change was missed is looked at again within one period without reading anything again.

Objects are held as the API sent them (kind and apiVersion filled in) unless `keep` says
otherwise, which is applied page by page as a list arrives; a change replaces an object whole
and never changes one in place, so callers may hold what they were handed without copying it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from webhook.kube.client import ApiError, Decode, Kube, WatchStream
from webhook.kube.resources import Resource

log = logging.getLogger("trainhook.kube")

Key = TypeVar("Key", bound=Hashable)
ObjectKey = tuple[str, str]  # (namespace, name)
# Watches that fail in a row (the API server unreachable, or answering errors) before the
# resource is listed afresh rather than watched again from the same version.
RELIST_AFTER_FAILURES = 3


def backoff(failures: int, base: float, cap: float = 60.0) -> float:
    """Seconds to wait after `failures` failures in a row: base, 2 base, 4 base, ... up to cap."""
    return float(min(cap, base * 2 ** max(0, failures - 1)))


def _held_as_sent(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


class Informer(Generic[Key]):
    """One resource of one namespace (None: every namespace), kept current by list and watch."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        namespace: str | None,
        selector: str,
        index: Callable[[dict[str, Any]], Key | None],
        on_change: Callable[[Key], None] = lambda key: None,
        resync_seconds: float,
        field_selector: str = "",
        keep: Callable[[dict[str, Any]], dict[str, Any] | None] = _held_as_sent,
        unchanged: Callable[[dict[str, Any], dict[str, Any]], bool] | None = None,
        backoff_base: float = 1.0,
        backoff_cap: float = 60.0,
        optional: bool = False,
        on_object: Callable[[ObjectKey, Key | None, dict[str, Any] | None], None] | None = None,
        decode: Decode | None = None,
        trickle_pause: float = 0.0,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.namespace = namespace
        self.selector = selector
        self.field_selector = field_selector
        self.index = index
        self.on_change = on_change
        self.keep = keep  # what of an object to hold; None: do not hold it
        # Whether a new version of a held object says nothing new to `on_change` (what `keep`
        # holds of it is the same): it is held, and no key is handed over.
        self.unchanged = unchanged
        self.resync_seconds = resync_seconds
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.optional = optional  # a resource that may not be served (Volcano's PodGroups)
        # Told of every object the cache now holds (with its key), or no longer holds (None,
        # None), in the cache's own order: what a caller keeps up to date object by object.
        self.on_object = on_object
        # How a watch event's line is read (the whole object by default): `keep` still applies
        # to what it gives.
        self.decode = decode
        # How long a watch that trickles waits between reads (WatchStream; 0: it never waits).
        self.trickle_pause = trickle_pause
        self.synced = threading.Event()
        self.lists = 0  # how many times the resource was listed, for logs and tests
        self.watches = 0  # how many watches were started
        self._objects: dict[ObjectKey, dict[str, Any]] = {}
        self._keys: dict[Key, set[ObjectKey]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream: WatchStream | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------------

    def start(self, name: str | None = None) -> Informer[Key]:
        """Run in a daemon thread of this process (start it after a fork, not before)."""
        self._thread = threading.Thread(
            target=self.run, name=name or f"watch-{self.resource.plural}", daemon=True
        )
        self._thread.start()
        return self

    def run(self) -> None:
        failures = 0
        version = ""  # where the next watch starts; empty: list first
        resync_at = time.monotonic() + self.resync_seconds
        while not self._stop.is_set():
            try:
                if not version:
                    version = self._list()
                    resync_at = time.monotonic() + self.resync_seconds
                version = self._watch(version)
                failures = 0
                if time.monotonic() >= resync_at:
                    self._resync()
                    resync_at = time.monotonic() + self.resync_seconds
            except ApiError as error:
                if error.status == 404 and self.optional:
                    self._replace({}, {})
                    self.synced.set()
                    version = ""
                    log.info("%s are not served here; looking again later", self.resource.plural)
                    self._stop.wait(self.resync_seconds)
                    continue
                if error.status == 410:  # a list's continue token or a version too old
                    log.info("%s: %s; relisting", self.resource.plural, error)
                    version = ""
                    continue
                failures += 1
                if failures >= RELIST_AFTER_FAILURES:
                    version = ""
                delay = backoff(failures, self.backoff_base, self.backoff_cap)
                log.warning("%s: %s; retrying in %.1fs", self.resource.plural, error, delay)
                self._stop.wait(delay)
            except Exception:
                failures += 1
                version = ""
                log.exception("%s: unexpected error", self.resource.plural)
                self._stop.wait(backoff(failures, self.backoff_base, self.backoff_cap))

    def stop(self, timeout: float = 0.0) -> None:
        """Stop the loop and end its watch; wait up to `timeout` for its thread when started."""
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.close()
        if self._thread is not None and timeout > 0:
            self._thread.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stop.is_set()

    # --- reading the cache -----------------------------------------------------------------

    def objects_of(self, key: Key) -> list[dict[str, Any]]:
        """The objects indexed under `key`, by namespace and name."""
        with self._lock:
            return [self._objects[name] for name in sorted(self._keys.get(key, ()))]

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def keys(self) -> set[Key]:
        with self._lock:
            return set(self._keys)

    # --- what the process itself wrote -----------------------------------------------------

    def remember(self, obj: dict[str, Any]) -> None:
        """Hold an object just written, unless the cache already holds a newer version."""
        name = self._name(obj)
        with self._lock:
            held = self._objects.get(name)
        if held is not None and _newer(held, obj):
            return
        self._put(obj, notify=False)

    def forget(self, namespace: str, name: str) -> None:
        with self._lock:
            self._unindex((namespace, name))
            self._objects.pop((namespace, name), None)
            self._told((namespace, name), None, None)

    # --- list and watch --------------------------------------------------------------------

    def _list(self) -> str:
        """Read every object a page at a time, keeping of each what `keep` says before the next
        page is read; the resourceVersion to watch from."""
        objects: dict[ObjectKey, dict[str, Any]] = {}
        keys: dict[Key, set[ObjectKey]] = {}
        pages = self.kube.pages(
            self.resource, self.namespace, self.selector, field_selector=self.field_selector
        )
        for page in pages:
            for obj in page:
                held = self._typed(obj)
                if held is None:
                    continue
                name = self._name(held)
                objects[name] = held
                key = self.index(held)
                if key is not None:
                    keys.setdefault(key, set()).add(name)
            page.clear()  # the whole objects go now, not when the next page has been read
        self.lists += 1
        self._replace(objects, keys)
        self.synced.set()
        return pages.resource_version

    def _watch(self, version: str) -> str:
        """Watch from `version` until the watch ends; the version to resume from, or "" when
        the API server no longer has `version` (410 Gone) and the resource must be listed."""
        if self._stop.is_set():
            return version
        stream = self.kube.watch(
            self.resource,
            self.namespace,
            self.selector,
            version,
            max(1, round(self.resync_seconds)),
            field_selector=self.field_selector,
            decode=self.decode,
            trickle_pause=self.trickle_pause,
        )
        self.watches += 1
        self._stream = stream
        if self._stop.is_set():
            stream.close()
        try:
            for event in stream:
                obj = event.get("object") or {}
                kind = event.get("type")
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        log.info("%s: watch expired (410 Gone); relisting", self.resource.plural)
                        return ""
                    reason = obj.get("reason") or "Error"
                    raise ApiError(obj.get("code") or 0, reason, obj.get("message") or "")
                if kind in ("ADDED", "MODIFIED"):
                    self._put(obj)
                elif kind == "DELETED":
                    self._remove(obj)
                version = _version(obj) or version  # a BOOKMARK carries only its version
        finally:
            self._stream = None
        return version

    # --- the store -------------------------------------------------------------------------

    def _name(self, obj: dict[str, Any]) -> ObjectKey:
        metadata = obj.get("metadata") or {}
        return (metadata.get("namespace") or "", metadata.get("name") or "")

    def _typed(self, obj: dict[str, Any]) -> dict[str, Any] | None:
        obj.setdefault("kind", self.resource.kind)
        obj.setdefault("apiVersion", self.resource.api_version)
        return self.keep(obj)

    def _put(self, obj: dict[str, Any], notify: bool = True) -> None:
        name = self._name(obj)
        held = self._typed(obj)
        key = self.index(held) if held is not None else None
        with self._lock:
            known = self._objects.get(name)
            # The event of a write this process already holds (remember) is no news to it.
            notify = notify and not (
                known is not None
                and held is not None
                and (
                    _version(known) == _version(held) != ""
                    or (self.unchanged is not None and self.unchanged(known, held))
                )
            )
            before = self._unindex(name)
            if held is None:
                self._objects.pop(name, None)
            else:
                self._objects[name] = held
                if key is not None:
                    self._keys.setdefault(key, set()).add(name)
            self._told(name, key, held)
        if notify:
            for changed in {before, key} - {None}:
                assert changed is not None
                self.on_change(changed)

    def _remove(self, obj: dict[str, Any]) -> None:
        name = self._name(obj)
        with self._lock:
            before = self._unindex(name)
            self._objects.pop(name, None)
            self._told(name, None, None)
        if before is not None:
            self.on_change(before)

    def _told(self, name: ObjectKey, key: Key | None, obj: dict[str, Any] | None) -> None:
        if self.on_object is not None:
            self.on_object(name, key if obj is not None else None, obj)

    def _unindex(self, name: ObjectKey) -> Key | None:
        old = self._objects.get(name)
        before = self.index(old) if old is not None else None
        if before is not None:
            names = self._keys.get(before, set())
            names.discard(name)
            if not names:
                self._keys.pop(before, None)
        return before

    def _replace(
        self, objects: dict[ObjectKey, dict[str, Any]], keys: dict[Key, set[ObjectKey]]
    ) -> None:
        with self._lock:
            touched = set(self._keys) | set(keys)
            if self.on_object is not None:
                for name in self._objects.keys() - objects.keys():
                    self.on_object(name, None, None)
                for name, obj in objects.items():
                    self.on_object(name, self.index(obj), obj)
            self._objects = objects
            self._keys = keys
        for key in sorted(touched, key=repr):
            self.on_change(key)

    def _resync(self) -> None:
        """Hand every key held to `on_change` again, from the cache."""
        for key in sorted(self.keys(), key=repr):
            self.on_change(key)


def _version(obj: dict[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")


def _newer(held: dict[str, Any], written: dict[str, Any]) -> bool:
    """Whether the held copy is newer than the written one (resourceVersions that are numbers,
    as etcd's are, compare; others are taken as the written one being current)."""
    a = str((held.get("metadata") or {}).get("resourceVersion") or "")
    b = str((written.get("metadata") or {}).get("resourceVersion") or "")
    return a.isdigit() and b.isdigit() and int(a) > int(b)
