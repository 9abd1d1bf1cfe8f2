"""kmock's Kubernetes emulator on 127.0.0.1, run from a thread of its own so that tests and
the code under test can use the synchronous `kubernetes` client against it.

The emulator ignores label and field selectors; `SelectingEmulator` applies the forms the
webhook sends (`key`, `!key`, `key=value`, `key!=value`, `metadata.name=...`) to lists and
watches, so that a test sees what a real API server would send.
"""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from concurrent.futures import Future
from contextlib import contextmanager
from typing import Any, TypeVar

import attrs
import kmock
from kubernetes import client

from webhook.kube.client import Kube, api_client_for

T = TypeVar("T")

RESOURCES = (
    ("apps/v1/statefulsets", "StatefulSet", True),
    ("batch/v1/jobs", "Job", True),
    ("v1/secrets", "Secret", True),
    (
        "admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        False,
    ),
)


def selector_matches(selector: str, labels: Mapping[str, str]) -> bool:
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value.lstrip("="):
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def field_matches(selector: str, obj: Mapping[str, Any]) -> bool:
    metadata = obj.get("metadata") or {}
    for term in filter(None, selector.split(",")):
        path, value = term.split("=", 1)
        if metadata.get(path.removeprefix("metadata.")) != value:
            return False
    return True


def selected(request: kmock.Request, obj: Mapping[str, Any]) -> bool:
    labels = (obj.get("metadata") or {}).get("labels") or {}
    return selector_matches(request.params.get("labelSelector", ""), labels) and field_matches(
        request.params.get("fieldSelector", ""), obj
    )


@attrs.define(kw_only=True)
class SelectingEmulator(kmock.KubernetesEmulator):
    async def _serve_list(self, request: kmock.Request) -> Any:
        listed = await super()._serve_list(request)
        listed["items"] = [item for item in listed["items"] if selected(request, item)]
        return listed

    async def _serve_watch(self, request: kmock.Request) -> AsyncIterator[Any]:
        async for event in super()._serve_watch(request):
            if not isinstance(event, dict) or selected(request, event.get("object") or {}):
                yield event


class Emulator:
    """A started emulator: `url`, `api()` for a client, and JSON helpers for the test side."""

    def __init__(self, port: int | None = None) -> None:
        self._port = port
        self._loop = asyncio.new_event_loop()
        self._ready: Future[None] = Future()
        self._stopping: asyncio.Event | None = None
        self.handler: SelectingEmulator
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="kmock", daemon=True)

    def start(self) -> Emulator:
        self._thread.start()
        self._ready.result(10)
        return self

    def stop(self) -> None:
        if self._stopping is not None:
            self._loop.call_soon_threadsafe(self._stopping.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as e:  # reported to start() rather than lost in the thread
            if not self._ready.done():
                self._ready.set_exception(e)
        finally:
            self._loop.close()

    async def _serve(self) -> None:
        self._stopping = asyncio.Event()
        async with SelectingEmulator() as handler, kmock.Server(handler, port=self._port) as server:
            for resource, kind, namespaced in RESOURCES:
                handler.resources[resource] = kmock.ResourceInfo(kind=kind, namespaced=namespaced)
            self.handler = handler
            self.url = str(server.url).rstrip("/")
            self._ready.set_result(None)
            await self._stopping.wait()
            # Cut open connections (watches never end by themselves), as a server that goes
            # away would, instead of waiting for them to finish.
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task() and "RequestHandler" in repr(task):
                    task.cancel()

    def run(self, fn: Callable[[], T]) -> T:
        """Call `fn` on the emulator's loop (for kmock's DSL, which is not thread-safe)."""

        async def call() -> T:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), self._loop).result(10)

    def api(self) -> Kube:
        configuration = client.Configuration(host=self.url)
        return Kube(api_client_for(configuration))

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

    def read(self, path: str) -> Any | None:
        try:
            return self.send("GET", path)
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    def requests(self) -> list[kmock.Request]:
        return self.run(lambda: list(self.handler))


@contextmanager
def emulator(port: int | None = None) -> Iterator[Emulator]:
    running = Emulator(port).start()
    try:
        yield running
    finally:
        running.stop()
