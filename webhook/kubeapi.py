"""JSON over the official `kubernetes` client: requests and watch streams as plain dicts.

The client's models are bypassed on purpose: the core takes objects shaped like the API's JSON
(camelCase keys), so responses are decoded straight from the wire. Authentication, TLS and
the API server address come from the client's configuration (in-cluster or kubeconfig).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import urllib3
from kubernetes import client, config

log = logging.getLogger("trainhook.kubeapi")

JSON = "application/json"
JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"

Query = Sequence[tuple[str, str | int | bool]]


class Unreachable(Exception):
    """The API server could not be reached or did not answer in time."""


class ApiError(Exception):
    """The API server answered with an error status."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        super().__init__(f"{status} {reason}: {message}")


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
        raise Unreachable(_reason(e)) from None
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


def request(
    api: client.ApiClient,
    method: str,
    path: str,
    *,
    query: Query = (),
    body: object = None,
    content_type: str = JSON,
    timeout: float | tuple[float, float] = 10.0,
) -> dict[str, Any]:
    """One request; the decoded JSON answer. Raises Unreachable or ApiError."""
    raw = _open(
        api, method, path, query=query, body=body, content_type=content_type, timeout=timeout
    )
    try:
        data = raw.data
    except urllib3.exceptions.HTTPError as e:
        raise Unreachable(_reason(e)) from None
    finally:
        raw.release_conn()
    try:
        decoded = json.loads(data)
    except ValueError:
        raise ApiError(raw.status, "BadResponse", "the answer is not JSON") from None
    if not isinstance(decoded, dict):
        raise ApiError(raw.status, "BadResponse", "the answer is not a JSON object")
    return decoded


class WatchStream:
    """The events of one watch request, as dicts; `close()` from any thread ends it.

    Iteration ends when the server closes the stream or nothing arrives for the read timeout.
    """

    def __init__(
        self,
        api: client.ApiClient,
        path: str,
        query: Query,
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
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
        try:
            for chunk in self._raw.stream(amt=None, decode_content=True):
                buffer += chunk
                *lines, buffer = buffer.split(b"\n")
                for line in lines:
                    if line.strip():
                        yield _event(line)
        except (urllib3.exceptions.HTTPError, OSError, ValueError) as e:
            if not self._closed.is_set() and not isinstance(e, urllib3.exceptions.ReadTimeoutError):
                raise Unreachable(_reason(e)) from None
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


def _event(line: bytes) -> dict[str, Any]:
    event = json.loads(line)
    if not isinstance(event, dict) or not isinstance(event.get("object"), Mapping):
        raise ValueError(f"not a watch event: {line[:80]!r}")
    return event
