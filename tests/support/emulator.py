"""The one Kubernetes API emulator of the tests: kmock, with what Trainhook relies on and kmock
leaves out.

kmock serves create, read, list, merge patch, delete and watch over real HTTP. This subclass
adds, like the API server:
  * `uid`, `creationTimestamp`, and a cluster-wide `resourceVersion` bumped on every write;
  * `metadata.resourceVersion` in a patch or PUT as a precondition (409 Conflict), and
    DeleteOptions `preconditions.uid`;
  * PUT (replace), which kmock answers with 404;
  * JSON patch (RFC 6902), a failed `test` or a bad path answered 422 as the API server does;
  * label selectors (`a`, `!a`, `a=b`, `a!=b`, comma = and) and `metadata.name`/
    `metadata.namespace` field selectors on list and watch;
  * lists in pages (`limit` and `continue`, `remainingItemCount`);
  * watches from a resourceVersion replaying the events after it, `timeoutSeconds`, and with
    `allowWatchBookmarks` a BOOKMARK event carrying the latest resourceVersion when the watch
    times out; a watch from a version older than the last `compact()` answered 410 Gone;
  * a garbage collector: objects whose owners (ownerReferences) are all gone are deleted.
And for tests: injected error statuses, a client cut off after its Nth write (`cut_writes_after`),
watches answered with 410 Gone, watches ended on demand, RBAC (`authorize`: a request it refuses
is answered 403 Forbidden, as the API server's authorizer does);
kmock's own DSL (`handler[...] << response`) and request log work as usual. For benches of
thousands of objects, `load()` puts objects in without a request, and `keep_requests = False`
stops kmock keeping every request (it scans them all on each new one).

The emulator runs on its own event loop in a background thread (`EmulatorThread`, or the
`emulator()` context manager), so the synchronous clients and threads of the code under test
talk to it as to a real API server.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import re
import secrets
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import aiohttp.web
import attrs
import jsonpatch
import jsonpointer
import kmock
import yaml
from kmock._internal import rendering
from kubernetes import client

from webhook.kube.client import Kube, api_client_for
from webhook.kube.resources import Resource

T = TypeVar("T")


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_matches(selector: str, obj: dict[str, Any]) -> bool:
    metadata = obj.get("metadata") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        path, _, value = term.replace("==", "=").partition("=")
        if metadata.get(path.strip().removeprefix("metadata.")) != value.strip():
            return False
    return True


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "metadata": {},
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@dataclass
class Fault:
    status: int
    method: str | None
    path: str
    times: int


@dataclass(frozen=True)
class Change:
    version: int
    resource: kmock.resource
    event: dict[str, Any]


@attrs.define(kw_only=True)
class Emulator(kmock.KubernetesEmulator):
    version: int = 0
    history: list[Change] = attrs.field(factory=list)
    unserved: set[str] = attrs.field(factory=set)  # plurals answered with 404
    log: list[tuple[str, str, int, float]] = attrs.field(factory=list)  # method, path, status, time
    # method, path, query string and User-Agent of every request, to tell clients apart
    asked: list[tuple[str, str, str, str]] = attrs.field(factory=list)
    _faults: list[Fault] = attrs.field(factory=list)
    _gone: dict[str, int] = attrs.field(factory=dict)  # plural: watches to answer 410 Gone
    _writes_left: int | None = None  # writes let through before every write is refused
    _cut_status: int = 500
    writes_made: int = 0  # writes let through since the cut was armed (Leases aside)
    writes_refused: int = 0
    _watch_epoch: int = 0
    compacted: int = 0  # watches from a version before this are answered 410 Gone
    keep_requests: bool = True  # kmock's request log, which its DSL scans on every request
    _tick: asyncio.Event | None = None
    _writes: asyncio.Lock = attrs.field(factory=asyncio.Lock)
    _guard: threading.Lock = attrs.field(factory=threading.Lock)
    # Tokens issued by TokenRequest: token -> (namespace, service account, audiences, pod, uid).
    tokens: dict[str, tuple[str, str, list[str], str, str]] = attrs.field(factory=dict)
    # RBAC: (method, path, query string, User-Agent) -> why the request is refused, or None.
    authorize: Callable[[str, str, str, str], str | None] | None = None

    # --- test controls (callable from any thread) -------------------------------------------

    def fail(
        self, status_code: int, *, method: str | None = None, path: str = "", times: int = 1
    ) -> None:
        with self._guard:
            self._faults.append(Fault(status_code, method, path, times))

    def cut_writes_after(self, writes: int, status_code: int = 500) -> None:
        """Let `writes` more writes through (POST, PUT, PATCH, DELETE; Leases aside), then
        answer every write with `status_code` until `restore_writes`: what a client that dies
        right after its `writes`-th write leaves behind, while it keeps its lease."""
        with self._guard:
            self._writes_left = writes
            self._cut_status = status_code
            self.writes_made = self.writes_refused = 0

    def restore_writes(self) -> None:
        with self._guard:
            self._writes_left = None

    def _cut(self, request: rendering.Request) -> bool:
        method, path = str(request.method.value), str(request.url.path)
        if method not in ("POST", "PUT", "PATCH", "DELETE") or "/leases" in path:
            return False
        with self._guard:
            if self._writes_left is None:
                return False
            if self._writes_left > 0:
                self._writes_left -= 1
                self.writes_made += 1
                return False
            self.writes_refused += 1
            return True

    def gone(self, plural: str, watches: int = 1) -> None:
        """Answer the next `watches` watches of a resource with 410 Gone."""
        with self._guard:
            self._gone[plural] = self._gone.get(plural, 0) + watches

    def end_watches(self) -> None:
        with self._guard:
            self._watch_epoch += 1

    def compact(self) -> None:
        """Forget the changes so far, as etcd's compaction does: a watch from an older version
        is answered 410 Gone. Call on the emulator's loop (EmulatorThread.call)."""
        self.compacted = self.version
        self.history.clear()
        self.end_watches()  # their places in the history are gone with it

    def load(self, resource: Resource, objects: list[dict[str, Any]]) -> None:
        """Store objects as created, without requests or watch events (for benches of
        thousands); call on the emulator's loop (EmulatorThread.call)."""
        key = kmock.resource(resource.group, resource.version, resource.plural)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for obj in objects:
            meta = obj.setdefault("metadata", {})
            meta.setdefault("uid", str(uuid.uuid4()))
            meta.setdefault("creationTimestamp", now)
            meta["resourceVersion"] = self._bump()
            self.objects[key, meta.get("namespace"), meta["name"]] = obj

    def change(self, resource: Resource, kind: str, obj: dict[str, Any]) -> None:
        """Store a changed object (MODIFIED) or drop one (DELETED) and tell its watches, without
        a request; call on the emulator's loop (EmulatorThread.call)."""
        key = kmock.resource(resource.group, resource.version, resource.plural)
        meta = obj["metadata"]
        meta["resourceVersion"] = self._bump()
        if kind == "DELETED":
            self.objects[key, meta.get("namespace"), meta["name"]].delete()
        else:
            self.objects[key, meta.get("namespace"), meta["name"]] = obj
        self._remember(key, kind, obj)

    # --- request handling -------------------------------------------------------------------

    async def _handle(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        response = await self._dispatch(request)
        entry = (str(request.method.value), str(request.url.path), response.status, time.time())
        self.log.append(entry)
        agent = request.headers.get("User-Agent", "")
        self.asked.append((entry[0], entry[1], str(request.url.query_string), agent))
        if not self.keep_requests:
            self._requests.clear()
        return response

    async def _dispatch(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        if self.authorize is not None:
            agent = request.headers.get("User-Agent", "")
            method, query = str(request.method.value), str(request.url.query_string)
            refused = self.authorize(method, str(request.url.path), query, agent)
            if refused is not None:
                return _json(status(403, "Forbidden", refused), 403)
        fault = self._take_fault(request)
        if fault is not None:
            return _json(status(fault.status, "InternalError", "injected fault"), fault.status)
        if self._cut(request):
            code = self._cut_status
            reason = "Conflict" if code == 409 else "InternalError"
            return _json(status(code, reason, "injected: writes cut off"), code)
        path = str(request.url.path)
        if str(request.method.value) == "POST" and path == TOKEN_REVIEWS:
            return self._token_review(request)
        requested = TOKEN_REQUEST.match(path)
        if str(request.method.value) == "POST" and requested:
            return self._token_request(request, requested.group(1), requested.group(2))
        if request.resource is None:
            return await super()._handle(request)
        if request.resource.plural in self.unserved:
            return _json(status(404, "NotFound", "the server could not find the resource"), 404)
        action = request.action
        if str(request.method.value) == "PUT" and request.name:
            async with self._writes:
                return self._replace(request)
        if action in (kmock.action.CREATE, kmock.action.UPDATE, kmock.action.DELETE):
            async with self._writes:
                answered = self._prepare(request)  # a refusal, or a JSON patch applied here
                if answered is not None:
                    return answered
                response = await super()._handle(request)
                if response.status < 300:
                    self._record(request)
                    if action == kmock.action.CREATE and not response.prepared:
                        response.set_status(201)
                return response
        return await super()._handle(request)

    def _token_request(
        self, request: rendering.Request, namespace: str, account: str
    ) -> aiohttp.web.StreamResponse:
        """TokenRequest as the kubelet makes it for a projected token: bound to a pod."""
        spec = (request.data or {}).get("spec") or {}
        bound = spec.get("boundObjectRef") or {}
        token = secrets.token_urlsafe(24)
        with self._guard:
            self.tokens[token] = (
                namespace,
                account,
                list(spec.get("audiences") or []),
                str(bound.get("name") or ""),
                str(bound.get("uid") or ""),
            )
        answer: dict[str, Any] = {"kind": "TokenRequest", "apiVersion": "authentication.k8s.io/v1"}
        answer["spec"] = spec
        answer["status"] = {"token": token, "expirationTimestamp": "2099-01-01T00:00:00Z"}
        return _json(answer, 201)

    def _token_review(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        """TokenReview as the API server answers it: the audiences must meet the token's."""
        spec = (request.data or {}).get("spec") or {}
        wanted = list(spec.get("audiences") or [])
        with self._guard:
            issued = self.tokens.get(str(spec.get("token") or ""))
        review: dict[str, Any] = {
            "kind": "TokenReview",
            "apiVersion": "authentication.k8s.io/v1",
            "spec": spec,
        }
        if issued is None:
            review["status"] = {"authenticated": False, "error": "invalid bearer token"}
            return _json(review, 201)
        namespace, account, audiences, pod, uid = issued
        common = [a for a in wanted if a in audiences] if wanted else audiences
        if not common:
            review["status"] = {
                "authenticated": False,
                "error": "token audiences are invalid for the target audiences",
            }
            return _json(review, 201)
        extra = {}
        if pod:
            extra = {
                "authentication.kubernetes.io/pod-name": [pod],
                "authentication.kubernetes.io/pod-uid": [uid],
            }
        review["status"] = {
            "authenticated": True,
            "audiences": common,
            "user": {
                "username": f"system:serviceaccount:{namespace}:{account}",
                "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"],
                "extra": extra,
            },
        }
        return _json(review, 201)

    def _take_fault(self, request: rendering.Request) -> Fault | None:
        with self._guard:
            for fault in self._faults:
                if fault.method and fault.method != str(request.method.value):
                    continue
                if fault.path not in str(request.url.path):
                    continue
                fault.times -= 1
                if fault.times <= 0:
                    self._faults.remove(fault)
                return fault
        return None

    def _key(self, request: rendering.Request, name: str | None = None) -> Any:
        return (request.resource, request.namespace, name or request.name)

    def _current(self, key: Any) -> dict[str, Any] | None:
        if key in self.objects and not self.objects[key].deleted:
            raw: dict[str, Any] = self.objects[key].raw
            return raw
        return None

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    def _prepare(self, request: rendering.Request) -> aiohttp.web.StreamResponse | None:
        data = request.data if isinstance(request.data, dict) else {}
        if request.action == kmock.action.CREATE:
            meta = data.setdefault("metadata", {})
            meta["namespace"] = request.namespace or meta.get("namespace")
            if self._current(self._key(request, meta.get("name"))) is not None:
                return _json(
                    status(409, "AlreadyExists", f"{meta.get('name')} already exists"), 409
                )
            meta["uid"] = str(uuid.uuid4())
            meta["resourceVersion"] = self._bump()
            meta["creationTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            meta["generation"] = 1
            return None
        current = self._current(self._key(request))
        if current is None:
            return _json(status(404, "NotFound", f"{request.name} not found"), 404)
        meta = current.get("metadata") or {}
        if request.action == kmock.action.DELETE:
            wanted = (data.get("preconditions") or {}).get("uid")
            if wanted and wanted != meta.get("uid"):
                return _json(status(409, "Conflict", "precondition failed: uid"), 409)
            return None
        content_type = request.headers.get("Content-Type", "")
        if "json-patch" in content_type:
            return self._json_patch(request, current)
        if not isinstance(request.data, dict):
            return _json(status(415, "UnsupportedMediaType", "a patch must be an object"), 415)
        wanted = (data.get("metadata") or {}).get("resourceVersion")
        if wanted and wanted != meta.get("resourceVersion"):
            return _json(status(409, "Conflict", "the object has been modified"), 409)
        data.setdefault("metadata", {})["resourceVersion"] = self._bump()
        if "spec" in data:
            data["metadata"]["generation"] = int(meta.get("generation") or 1) + 1
        return None

    def _json_patch(
        self, request: rendering.Request, current: dict[str, Any]
    ) -> aiohttp.web.StreamResponse:
        """Apply an RFC 6902 patch here and answer it, so kmock's merge never sees it."""
        try:
            body = jsonpatch.apply_patch(current, request.data)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException, TypeError) as e:
            return _json(status(422, "Invalid", f"the patch cannot be applied: {e}"), 422)
        meta = body.setdefault("metadata", {})
        old = current.get("metadata") or {}
        meta.update(uid=old.get("uid"), creationTimestamp=old.get("creationTimestamp"))
        meta["resourceVersion"] = self._bump()
        self.objects[self._key(request)].create(body)
        self._remember(request.resource, "MODIFIED", copy.deepcopy(body))
        return _json(body, 200)

    def _replace(self, request: rendering.Request) -> aiohttp.web.StreamResponse:
        key = self._key(request)
        current = self._current(key)
        if current is None:
            return _json(status(404, "NotFound", f"{request.name} not found"), 404)
        body = copy.deepcopy(request.data)
        meta = body.setdefault("metadata", {})
        old = current.get("metadata") or {}
        if meta.get("resourceVersion") and meta["resourceVersion"] != old.get("resourceVersion"):
            return _json(status(409, "Conflict", "the object has been modified"), 409)
        meta.update(uid=old.get("uid"), creationTimestamp=old.get("creationTimestamp"))
        meta["resourceVersion"] = self._bump()
        self.objects[key].create(body)
        self._remember(request.resource, "MODIFIED", body)
        return _json(body, 200)

    def _record(self, request: rendering.Request) -> None:
        if request.action == kmock.action.DELETE:
            lingering = self._current(self._key(request))
            if lingering is not None:  # finalizers hold it: marked for deletion, not yet gone
                lingering["metadata"]["resourceVersion"] = self._bump()
                self._remember(request.resource, "MODIFIED", copy.deepcopy(lingering))
                return
            last = copy.deepcopy(self.objects[self._key(request)].last.raw)
            last["metadata"]["resourceVersion"] = self._bump()
            self._remember(request.resource, "DELETED", last)
            self._collect_garbage()
            return
        name = request.name
        if request.action == kmock.action.CREATE:
            name = (request.data.get("metadata") or {}).get("name")
        current = self._current(self._key(request, name))
        kind = "ADDED" if request.action == kmock.action.CREATE else "MODIFIED"
        if current is not None:
            self._remember(request.resource, kind, copy.deepcopy(current))

    def _remember(self, resource: Any, kind: str, obj: dict[str, Any]) -> None:
        version = int(obj["metadata"]["resourceVersion"])
        self.history.append(Change(version, resource, {"type": kind, "object": obj}))
        tick, self._tick = self._tick, asyncio.Event()
        if tick is not None:
            tick.set()

    def _collect_garbage(self) -> None:
        while True:
            live = {
                (obj.raw.get("metadata") or {}).get("uid")
                for _, obj in self.objects.items()
                if not obj.deleted
            }
            orphans = [
                (key, obj)
                for key, obj in self.objects.items()
                if not obj.deleted
                and (refs := (obj.raw.get("metadata") or {}).get("ownerReferences"))
                and not any(ref.get("uid") in live for ref in refs)
            ]
            if not orphans:
                return
            for key, obj in orphans:
                last = copy.deepcopy(obj.raw)
                obj.delete()
                last["metadata"]["resourceVersion"] = self._bump()
                self._remember(key[0], "DELETED", last)

    # --- reads ------------------------------------------------------------------------------

    def _matches(self, request: rendering.Request, resource: Any, obj: dict[str, Any]) -> bool:
        meta = obj.get("metadata") or {}
        if resource != request.resource:
            return False
        if request.namespace and meta.get("namespace") != request.namespace:
            return False
        selector = request.params.get("labelSelector", "")
        fields = request.params.get("fieldSelector", "")
        return selector_matches(selector, meta.get("labels") or {}) and field_matches(fields, obj)

    async def _serve_list(self, request: rendering.Request) -> rendering.Payload:
        matching = sorted(
            (
                ((obj.raw["metadata"].get("namespace") or "", obj.raw["metadata"]["name"]), obj)
                for (resource, _, _), obj in self.objects.items()
                if not obj.deleted and self._matches(request, resource, obj.raw)
            ),
            key=lambda found: found[0],
        )
        version = str(self.version)
        token = request.params.get("continue") or ""
        if token:
            version, after = _read_continue(token)
            matching = [found for found in matching if found[0] > after]
        limit = int(request.params.get("limit") or 0)
        page = matching[:limit] if limit > 0 else matching
        metadata: dict[str, Any] = {"resourceVersion": version}
        if len(page) < len(matching):
            metadata["continue"] = _continue(version, page[-1][0])
            metadata["remainingItemCount"] = len(matching) - len(page)
        items = [copy.deepcopy(obj.raw) for _, obj in page]
        return {"kind": "List", "metadata": metadata, "items": items}

    async def _serve_watch(self, request: rendering.Request) -> AsyncIterator[rendering.Payload]:
        yield b""
        plural = (request.resource.plural if request.resource else "") or ""
        with self._guard:
            gone = self._gone.get(plural, 0) > 0
            if gone:
                self._gone[plural] -= 1
            epoch = self._watch_epoch
        if gone:
            error = status(410, "Expired", "too old resource version")
            yield {"type": "ERROR", "object": error}
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(request.params.get("timeoutSeconds") or 300)
        since = request.params.get("resourceVersion") or ""
        if since not in ("", "0") and int(since) < self.compacted:
            yield {"type": "ERROR", "object": status(410, "Expired", "too old resource version")}
            return
        if since in ("", "0"):
            for (resource, _, _), obj in list(self.objects.items()):
                if not obj.deleted and self._matches(request, resource, obj.raw):
                    yield {"type": "ADDED", "object": copy.deepcopy(obj.raw)}
            cursor = len(self.history)
        else:
            cursor = next(
                (i for i, change in enumerate(self.history) if change.version > int(since)),
                len(self.history),
            )
        while True:
            if self._tick is None:
                self._tick = asyncio.Event()
            tick = self._tick
            while cursor < len(self.history):
                change = self.history[cursor]
                cursor += 1
                if self._matches(request, change.resource, change.event["object"]):
                    yield change.event
            transport = request._raw_request.transport if request._raw_request else None
            if transport is None or transport.is_closing() or self._watch_epoch != epoch:
                return
            remaining = deadline - loop.time()
            if remaining <= 0:
                if request.params.get("allowWatchBookmarks") == "true":
                    yield _bookmark(request, str(self.version))
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tick.wait(), min(remaining, 0.2))


TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
TOKEN_REQUEST = re.compile(r"^/api/v1/namespaces/([^/]+)/serviceaccounts/([^/]+)/token$")


def _continue(version: str, after: tuple[str, str]) -> str:
    return base64.urlsafe_b64encode(json.dumps([version, *after]).encode()).decode()


def _read_continue(token: str) -> tuple[str, tuple[str, str]]:
    version, namespace, name = json.loads(base64.urlsafe_b64decode(token))
    return str(version), (namespace, name)


def _bookmark(request: rendering.Request, version: str) -> dict[str, Any]:
    resource = request.resource
    group = (resource.group if resource else "") or ""
    api_version = f"{group}/{resource.version}" if group and resource else "v1"
    return {
        "type": "BOOKMARK",
        "object": {"apiVersion": api_version, "metadata": {"resourceVersion": version}},
    }


def _json(body: dict[str, Any], code: int) -> aiohttp.web.Response:
    return aiohttp.web.Response(text=json.dumps(body), status=code, content_type="application/json")


# Resources the emulator knows beyond the built-in ones kmock infers, and whether namespaced.
RESOURCES = (
    ("apps/v1/statefulsets", "StatefulSet", True),
    ("batch/v1/jobs", "Job", True),
    ("v1/secrets", "Secret", True),
    ("v1/nodes", "Node", False),
    (
        "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
    ),
)


class EmulatorThread:
    """The emulator served on 127.0.0.1 from a background thread, until `stop()`.

    `url` and `api()` for the code under test; `create`, `read`, `merge`, `delete` and `send`
    (plain JSON over HTTP) for the test playing the rest of the cluster; `handler` and `run()`
    for kmock's DSL; `requests()` for what was asked.
    """

    def __init__(self, port: int | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="emulator", daemon=True)
        self.emulator = Emulator()
        self.server = kmock.Server(self.emulator, port=port)
        self.url = ""

    @property
    def handler(self) -> Emulator:
        return self.emulator

    def start(self) -> str:
        self.thread.start()
        self.call(self._enter)
        self.url = f"http://127.0.0.1:{self.server.port}"
        return self.url

    async def _enter(self) -> None:
        await self.emulator.__aenter__()
        await self.server.__aenter__()
        for resource, kind, namespaced in RESOURCES:
            self.emulator.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=namespaced)

    async def _exit(self) -> None:
        # End open watches and cut open connections, as a server that goes away would, instead
        # of waiting for clients that never hang up.
        self.emulator.end_watches()
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task() and "RequestHandler" in repr(task):
                task.cancel()
        await self.server.__aexit__(None, None, None)
        await self.emulator.__aexit__(None, None, None)

    def stop(self) -> None:
        try:
            # A loaded machine can take a while to cancel open watches; the loop stops anyway.
            self.call(self._exit, timeout=30)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=5)
            self.loop.close()

    def call(self, function: Callable[[], Any], timeout: float = 10) -> Any:
        """Run `function` (a coroutine function or a plain one) on the emulator's loop."""

        async def run() -> Any:
            result = function()
            return await result if asyncio.iscoroutine(result) else result

        return asyncio.run_coroutine_threadsafe(run(), self.loop).result(timeout)

    def run(self, function: Callable[[], T]) -> T:
        """Call `function` on the emulator's loop (for kmock's DSL, which is not thread-safe)."""
        result: T = self.call(function)
        return result

    def serve(self, resource: str, kind: str, namespaced: bool = True) -> None:
        """Serve one more resource (`group/version/plural`), as a cluster with an API enabled."""
        info = kmock.ResourceInfo(kind=kind, namespaced=namespaced)
        self.run(lambda: self.emulator.resources.__setitem__(resource, info))

    def api(self) -> Kube:
        return Kube(api_client_for(client.Configuration(host=self.url)))

    def requests(self) -> list[kmock.Request]:
        return self.run(lambda: list(self.emulator))

    def send(self, method: str, path: str, body: object = None, content_type: str = "") -> Any:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": content_type or "application/json"}
        req = urllib.request.Request(self.url + path, data, headers, method=method)
        with urllib.request.urlopen(req, timeout=10) as response:
            return json.loads(response.read())

    def create(self, path: str, obj: Mapping[str, Any]) -> Any:
        return self.send("POST", path, obj)

    def delete(self, path: str) -> Any:
        return self.send("DELETE", path)

    def merge(self, path: str, patch: Mapping[str, Any]) -> Any:
        return self.send("PATCH", path, patch, "application/merge-patch+json")

    def read(self, path: str) -> Any:
        """The object at `path`, or None when there is none."""
        try:
            return self.send("GET", path)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def objects(self, resource: Resource, namespace: str | None = None) -> list[dict[str, Any]]:
        """A snapshot of the live objects of one resource."""

        def read() -> list[dict[str, Any]]:
            return [
                copy.deepcopy(obj.raw)
                for (res, ns, _), obj in self.emulator.objects.items()
                if res.plural == resource.plural
                and (res.group or "") == resource.group
                and not obj.deleted
                and (namespace is None or ns == namespace)
            ]

        result: list[dict[str, Any]] = self.call(read)
        return sorted(result, key=lambda o: o["metadata"]["name"])


@contextlib.contextmanager
def emulator(port: int | None = None) -> Iterator[EmulatorThread]:
    running = EmulatorThread(port)
    running.start()
    try:
        yield running
    finally:
        running.stop()


def kubeconfig(path: Path, server: str) -> Path:
    """A kubeconfig for an API server at `server` that asks for no credentials."""
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "emulator", "cluster": {"server": server}}],
                "users": [{"name": "tests", "user": {}}],
                "contexts": [
                    {"name": "emulator", "context": {"cluster": "emulator", "user": "tests"}}
                ],
                "current-context": "emulator",
            }
        )
    )
    return path
