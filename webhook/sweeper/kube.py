"""The sweeper's API calls by resource, over the project's JSON shell of the `kubernetes` client.

Every failure surfaces as one exception type, `ApiError`; status 0 means the API server was
not reached or did not answer in time.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from kubernetes import client
from kubernetes.config.config_exception import ConfigException

from webhook import kubeapi
from webhook.kubeapi import MERGE_PATCH, ApiError, Unreachable
from webhook.sweeper.resources import Resource

__all__ = ["ApiError", "Kube", "WatchStream"]

Query = list[tuple[str, str | int | bool]]
REQUEST_TIMEOUT = 15.0
CONNECT_TIMEOUT = 5.0


class WatchStream:
    """A watch's events as dicts; `close()` from another thread ends the iteration."""

    def __init__(self, stream: kubeapi.WatchStream) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            yield from self._stream
        except Unreachable as error:
            raise ApiError(0, "Unreachable", str(error)) from None

    def close(self) -> None:
        self._stream.close()


class Kube:
    def __init__(self, api: client.ApiClient, timeout: float = REQUEST_TIMEOUT) -> None:
        self.api = api
        self.timeout = timeout

    @classmethod
    def from_environment(cls) -> Kube:
        """In a pod: its service account; elsewhere: the kubeconfig ($KUBECONFIG or ~/.kube)."""
        try:
            return cls(kubeapi.load_api_client())
        except (ConfigException, OSError) as error:
            raise ApiError(
                0, "NoConfiguration", f"cannot find a cluster to talk to: {error}"
            ) from None

    def get(self, resource: Resource, namespace: str, name: str) -> dict[str, Any]:
        return _typed(self._request("GET", resource.path(namespace, name)), resource)

    def list(
        self, resource: Resource, namespace: str | None, selector: str = ""
    ) -> tuple[list[dict[str, Any]], str]:
        """The objects (kind and apiVersion filled in, as a list leaves them out) and the
        resourceVersion to watch from."""
        query: Query = [("labelSelector", selector)] if selector else []
        answer = self._request("GET", resource.path(namespace), query=query)
        items = [_typed(item, resource) for item in answer.get("items") or []]
        return items, str((answer.get("metadata") or {}).get("resourceVersion") or "")

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        selector: str,
        resource_version: str,
        timeout_seconds: int,
    ) -> WatchStream:
        query: Query = [
            ("timeoutSeconds", timeout_seconds),
            ("allowWatchBookmarks", True),
        ]
        if selector:
            query.append(("labelSelector", selector))
        if resource_version:
            query.append(("resourceVersion", resource_version))
        try:
            stream = kubeapi.WatchStream(
                self.api,
                resource.path(namespace),
                query,
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=timeout_seconds + self.timeout,
            )
        except Unreachable as error:
            raise ApiError(0, "Unreachable", str(error)) from None
        return WatchStream(stream)

    def create(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        return _typed(self._request("POST", resource.path(namespace), body=body), resource)

    def patch(
        self, resource: Resource, namespace: str, name: str, patch: Mapping[str, Any]
    ) -> dict[str, Any]:
        path = resource.path(namespace, name)
        return _typed(self._request("PATCH", path, body=patch, content_type=MERGE_PATCH), resource)

    def replace(
        self, resource: Resource, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        return _typed(self._request("PUT", resource.path(namespace, name), body=body), resource)

    def delete(
        self, resource: Resource, namespace: str, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """The API's answer: the object if it lingers (finalizers, grace period), else a Status."""
        return self._request("DELETE", resource.path(namespace, name), body=body)

    def _request(
        self,
        method: str,
        path: str,
        *,
        query: Query | None = None,
        body: Mapping[str, Any] | None = None,
        content_type: str = kubeapi.JSON,
    ) -> dict[str, Any]:
        try:
            return kubeapi.request(
                self.api,
                method,
                path,
                query=query or [],
                body=dict(body) if body is not None else None,
                content_type=content_type,
                timeout=(CONNECT_TIMEOUT, self.timeout),
            )
        except Unreachable as error:
            raise ApiError(0, "Unreachable", str(error)) from None


def _typed(obj: dict[str, Any], resource: Resource) -> dict[str, Any]:
    obj.setdefault("kind", resource.kind)
    obj.setdefault("apiVersion", resource.api_version)
    return obj
