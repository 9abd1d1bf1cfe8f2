"""Wire formats of admission.k8s.io/v1 as the API server sends and reads them."""

from __future__ import annotations

from typing import Any, Final, Literal, NotRequired, TypedDict

API_VERSION: Final = "admission.k8s.io/v1"
KIND: Final = "AdmissionReview"


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: GroupVersionKind
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    namespace: NotRequired[str]
    name: NotRequired[str]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]


class ResponseStatus(TypedDict):
    """The part of a metav1.Status the API server shows when it refuses an object."""

    code: int
    message: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]  # base64 of the JSON patch
    warnings: NotRequired[list[str]]
    status: NotRequired[ResponseStatus]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: str
    request: NotRequired[AdmissionRequest]
    response: NotRequired[AdmissionResponse]


class Status(TypedDict):
    """The body of an HTTP error: a metav1.Status, which the API server's client decodes."""

    apiVersion: Literal["v1"]
    kind: Literal["Status"]
    status: Literal["Failure"]
    code: int
    reason: str
    message: str


def failure_status(code: int, reason: str, message: str) -> Status:
    """The metav1.Status every error answer of the webhook carries."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }
