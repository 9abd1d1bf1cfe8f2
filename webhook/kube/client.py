"""The one client of the Kubernetes API: requests and watch streams as plain dicts, one error.

JSON over the official `kubernetes` client. Its models are bypassed on purpose: the core takes
objects shaped like the API's JSON (camelCase keys), so responses are decoded straight from the
wire. Authentication, TLS and the API server address come from the client's configuration
(in-cluster or kubeconfig). Every failure is an `ApiError`; status 0 means the API server was
not reached or did not answer in time.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException

from webhook.core import jsoncodec
from webhook.kube.resources import Resource

log = logging.getLogger("trainhook.kubeapi")

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"

Query = Sequence[tuple[str, str | int | bool]]


class ApiError(Exception):
    """The API server answered with an error status, or (status 0) was not reached in time."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}")

    @property
    def unreachable(self) -> bool:
        return self.status == 0


def _unreachable(error: Exception) -> ApiError:
    return ApiError(0, "Unreachable", _reason(error))


def load_api_client() -> client.ApiClient:
    """An ApiClient for the cluster this process runs in, else for the current kubeconfig
    context. Requests are not retried: callers bound their time and retry themselves."""
    configuration = client.Configuration()
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    else:
        config.load_kube_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
    return api_client_for(configuration)


def api_client_for(configuration: client.Configuration) -> client.ApiClient:
    configuration.retries = False
    return client.ApiClient(configuration)


def _open(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: Query = (),
    body: object = None,
    content_type: str = JSON,
    timeout: float | tuple[float, float],
) -> urllib3.BaseHTTPResponse:
    headers = {"Accept": JSON}
    if body is not None:
        headers["Content-Type"] = content_type
    params = [(k, str(v).lower() if isinstance(v, bool) else v) for k, v in query]
    method, url, header_params, serialized, post_params = api.param_serialize(
        method,
        path,
        query_params=params,
        header_params=headers,
        body=body,
        auth_settings=["BearerToken"],
    )
    try:
        response = api.call_api(
            method, url, header_params, serialized, post_params, _request_timeout=timeout
        )
    except urllib3.exceptions.HTTPError as e:
        raise _unreachable(e) from None
    raw: urllib3.BaseHTTPResponse = response.response
    if not 200 <= raw.status < 300:
        try:
            status = json.loads(raw.data)
        except (ValueError, urllib3.exceptions.HTTPError):
            status = {}
        raw.release_conn()
        if not isinstance(status, dict):
            status = {}
        raise ApiError(
            raw.status,
            str(status.get("reason") or raw.reason or ""),
            str(status.get("message") or "").splitlines()[0] if status.get("message") else "",
        )
    return raw


def _reason(error: Exception) -> str:
    reason = getattr(error, "reason", None)
    return str(reason or error).splitlines()[0]


Decode = Callable[[bytes], dict[str, Any]]  # one line of a watch stream: its event


# A read waited for its chunk when it took longer than this (an already received one takes
# microseconds); a stream trickles when such a read follows the last chunk within TRICKLE_GAP
# seconds, and fewer than TRICKLE_CHUNKS chunks came in the last TRICKLE_GAP.
WAITED = 0.001
TRICKLE_GAP = 1.0
TRICKLE_CHUNKS = 64


class WatchStream:
    """The events of one watch request, as dicts (`decode` reads each line, `watch_event` by
    default); `close()` from any thread ends it.

    Iteration ends when the server closes the stream or nothing arrives for the read timeout.

    With `trickle_pause`, a stream that trickles is read at most every that many seconds: after
    a chunk it had to wait for, the next read waits until the pause is over, so the events
    that came meanwhile are read with one wake-up of the thread, not one each (on a virtual
    machine each costs more CPU than decoding the event). The first event after a quiet
    second is read at once, and a stream as busy as TRICKLE_CHUNKS chunks a second is never
    paused, so what waits in the socket stays a few dozen events.
    """

    def __init__(
        self,
        api: client.ApiClient,
        path: str,
        query: Query,
        *,
        connect_timeout: float,
        read_timeout: float,
        decode: Decode | None = None,
        trickle_pause: float = 0.0,
    ) -> None:
        self._decode = decode or watch_event
        self._pause = trickle_pause
        self._raw = _open(
            api,
            "GET",
            path,
            query=[*query, ("watch", "true")],
            timeout=(connect_timeout, read_timeout),
        )
        self._closed = threading.Event()
        self._closing = threading.Lock()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        buffer = b""
        decode = self._decode
        arrivals: deque[float] = deque(maxlen=TRICKLE_CHUNKS)
        asked = time.monotonic()
        try:
            for chunk in self._raw.stream(amt=None, decode_content=True):
                arrived = time.monotonic()
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield decode(line)
                if self._pause:
                    if _trickles(arrivals, asked, arrived):
                        self._closed.wait(self._pause)
                    asked = time.monotonic()
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            if not self._closed.is_set() and not isinstance(e, urllib3.exceptions.ReadTimeoutError):
                raise _unreachable(e) from None
        finally:
            self._release()

    def close(self) -> None:
        """End the stream; safe from any thread. The iterating thread releases the connection."""
        with self._closing:
            if self._closed.is_set():
                return
            self._closed.set()
            # shutdown() wakes a read blocked in another thread; it fails when the stream
            # has ended and its connection is already closed or back in the pool.
            with contextlib.suppress(RuntimeError, ValueError, OSError):
                self._raw.shutdown()

    def _release(self) -> None:
        with self._closing:
            self._closed.set()
            self._raw.close()
            self._raw.release_conn()


def _trickles(arrivals: deque[float], asked: float, arrived: float) -> bool:
    """Whether a chunk asked for at `asked` and come at `arrived` came by a trickle: it had to
    be waited for, the chunk before it came less than TRICKLE_GAP earlier, and fewer than
    TRICKLE_CHUNKS came in that time. Its time joins `arrivals`, the last chunks' times."""
    trickles = (
        arrived - asked > WAITED
        and bool(arrivals)
        and arrived - arrivals[-1] < TRICKLE_GAP
        and not (len(arrivals) == TRICKLE_CHUNKS and arrived - arrivals[0] < TRICKLE_GAP)
    )
    arrivals.append(arrived)
    return trickles


def watch_event(line: bytes) -> dict[str, Any]:
    """One line of a watch stream, decoded whole; ValueError for what is not a watch event."""
    event = jsoncodec.loads(line)
    if not isinstance(event, dict) or not isinstance(event.get("object"), Mapping):
        raise ValueError(f"not a watch event: {line[:80]!r}")
    return event


REQUEST_TIMEOUT = 15.0
CONNECT_TIMEOUT = 5.0
# Objects per page of a list: the API server's default for client-go's informers.
LIST_PAGE = 500


class Kube:
    """Requests to one API server: by resource (typed objects back) or by path."""

    def __init__(self, api: client.ApiClient, timeout: float = REQUEST_TIMEOUT) -> None:
        self.api = api
        self.timeout = timeout

    @classmethod
    def from_environment(cls) -> Kube:
        """In a pod: its service account; elsewhere: the kubeconfig ($KUBECONFIG or ~/.kube)."""
        try:
            return cls(load_api_client())
        except (ConfigException, OSError) as error:
            raise ApiError(
                0, "NoConfiguration", f"cannot find a cluster to talk to: {error}"
            ) from None

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    # --- by resource -----------------------------------------------------------------------

    def get(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        *,
        timeout: float | tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        answer = self.request("GET", resource.path(namespace, name), timeout=timeout)
        return _typed(answer, resource)

    def list(
        self,
        resource: Resource,
        namespace: str | None,
        selector: str = "",
        *,
        field_selector: str = "",
        timeout: float | tuple[float, float] | None = None,
    ) -> tuple[list[dict[str, Any]], str]:
        """The objects (kind and apiVersion filled in, as a list leaves them out) and the
        resourceVersion to watch from."""
        pages = self.pages(
            resource, namespace, selector, field_selector=field_selector, timeout=timeout
        )
        items = [item for page in pages for item in page]
        return items, pages.resource_version

    def pages(
        self,
        resource: Resource,
        namespace: str | None,
        selector: str = "",
        *,
        field_selector: str = "",
        limit: int = LIST_PAGE,
        timeout: float | tuple[float, float] | None = None,
    ) -> Pages:
        """A list read `limit` objects at a time (limit and continue), so that a caller keeping
        only part of each object never holds a whole large list decoded at once."""
        return Pages(
            self, resource, namespace, _selectors(selector, field_selector), limit, timeout
        )

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        selector: str,
        resource_version: str,
        timeout_seconds: int,
        *,
        field_selector: str = "",
        connect_timeout: float = CONNECT_TIMEOUT,
        decode: Decode | None = None,
        trickle_pause: float = 0.0,
    ) -> WatchStream:
        query = [
            *_selectors(selector, field_selector),
            ("timeoutSeconds", timeout_seconds),
            ("allowWatchBookmarks", True),
        ]
        if resource_version:
            query.append(("resourceVersion", resource_version))
        return WatchStream(
            self.api,
            resource.path(namespace),
            query,
            connect_timeout=connect_timeout,
            read_timeout=timeout_seconds + self.timeout,
            decode=decode,
            trickle_pause=trickle_pause,
        )

    def create(
        self,
        resource: Resource,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        timeout: float | tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        answer = self.request("POST", resource.path(namespace), body=dict(body), timeout=timeout)
        return _typed(answer, resource)

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: object,
        *,
        content_type: str = MERGE_PATCH,
    ) -> dict[str, Any]:
        """A merge patch by default; a JSON patch (a list of operations) with JSON_PATCH."""
        path = resource.path(namespace, name)
        return _typed(self.request("PATCH", path, body=patch, content_type=content_type), resource)

    def replace(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: Mapping[str, Any],
        *,
        timeout: float | tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        path = resource.path(namespace, name)
        answer = self.request("PUT", path, body=dict(body), timeout=timeout)
        return _typed(answer, resource)

    def delete(
        self, resource: Resource, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The API's answer: the object if it lingers (finalizers, grace period), else a Status."""
        return self.request("DELETE", resource.path(namespace, name), body=dict(body))

    # --- by path ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Query = (),
        body: object = None,
        content_type: str = JSON,
        timeout: float | tuple[float, float] | None = None,
    ) -> dict[str, Any]:
        """One request; the decoded JSON answer. Raises ApiError."""
        raw = _open(
            self.api,
            method,
            path,
            query=query,
            body=body,
            content_type=content_type,
            timeout=timeout if timeout is not None else (CONNECT_TIMEOUT, self.timeout),
        )
        try:
            data = raw.data
        except urllib3.exceptions.HTTPError as e:
            raise _unreachable(e) from None
        finally:
            raw.release_conn()
        try:
            decoded = jsoncodec.loads(data)
        except ValueError:
            raise ApiError(raw.status, "BadResponse", "the answer is not JSON") from None
        if not isinstance(decoded, dict):
            raise ApiError(raw.status, "BadResponse", "the answer is not a JSON object")
        return decoded


def _selectors(labels: str, fields: str) -> list[tuple[str, str | int | bool]]:
    query: list[tuple[str, str | int | bool]] = []
    if labels:
        query.append(("labelSelector", labels))
    if fields:
        query.append(("fieldSelector", fields))
    return query


def _typed(obj: dict[str, Any], resource: Resource) -> dict[str, Any]:
    obj.setdefault("kind", resource.kind)
    obj.setdefault("apiVersion", resource.api_version)
    return obj


class Pages:
    """The pages of one list, in order; `resource_version` is the list's once the last page has
    been read (every page of a list is read at the version of its first)."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        namespace: str | None,
        query: Query,
        limit: int,
        timeout: float | tuple[float, float] | None,
    ) -> None:
        self._kube = kube
        self._resource = resource
        self._path = resource.path(namespace)
        self._query = list(query)
        self._limit = limit
        self._timeout = timeout
        self.resource_version = ""

    def __iter__(self) -> Iterator[list[dict[str, Any]]]:
        token = ""
        while True:
            query = [*self._query, ("limit", self._limit)]
            if token:
                query.append(("continue", token))
            answer = self._kube.request("GET", self._path, query=query, timeout=self._timeout)
            metadata = answer.get("metadata") or {}
            items = [_typed(item, self._resource) for item in answer.get("items") or []]
            del answer  # only this page's items stay, for as long as the caller wants them
            yield items
            token = str(metadata.get("continue") or "")
            if not token:
                self.resource_version = str(metadata.get("resourceVersion") or "")
                return
