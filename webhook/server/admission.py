"""One AdmissionReview in, one answer out: the admission server without the HTTP around it.

`review(body, content_type, context)` validates the request, fetches what the core needs from
the sibling lookup, calls the core and builds the response. It never raises for anything a client
sends: bad requests become a 4xx `Status` with a one-line message, invalid `trainhook.io/` input
an AdmissionReview that refuses the object with the core's message.
"""

from __future__ import annotations

import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal, Protocol

from webhook.core import jsoncodec
from webhook.core.contract import DEFAULT_COSCHEDULING_SCHEDULER
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import ProgressEndpoint
from webhook.core.limits import one_line
from webhook.core.mutation.admit import Found, Lookups, Policy, Request, admit, job_of, lookups
from webhook.core.mutation.owned_objects import proven_for
from webhook.server.reviews import (
    API_VERSION,
    KIND,
    AdmissionResponse,
    AdmissionReview,
    Status,
    failure_status,
)
from webhook.server.shape import KINDS as SHAPED_KINDS
from webhook.server.shape import malformed

MAX_BODY_BYTES: Final = 3 * 1024 * 1024
OPERATIONS: Final = ("CREATE", "UPDATE", "DELETE", "CONNECT")

Result = Literal["mutated", "allowed", "denied", "rejected"]


class Lookup(Protocol):
    """Reads of a job's workloads as the core needs them (`webhook.kube.lookup.SiblingCache`)."""

    def siblings(
        self, namespace: str, job: str, *, exclude: tuple[str, str] | None = None
    ) -> Sequence[Mapping[str, Any]] | None:
        """The StatefulSets and Jobs of `job` but `exclude`; None when the API is unreachable."""
        ...

    def get(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        """One StatefulSet or Job; None when it does not exist or cannot be read."""
        ...

    def cached(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        """One StatefulSet or Job as the cache holds it, never read from the API; None when
        the cache does not hold it."""
        ...


@dataclass(frozen=True, slots=True)
class Context:
    """What every admission shares: the server's settings and its view of the cluster."""

    cluster_domain: str = ""
    coscheduling_scheduler: str = DEFAULT_COSCHEDULING_SCHEDULER
    lookup: Lookup | None = None
    # Who may change the outcome the sweeper records on a job's objects; "" when not configured.
    sweeper_username: str = ""
    # Whether the cluster serves Kubernetes' own PodGroup (None: not asked, or not answered).
    kubernetes_podgroups_served: bool | None = None
    # Whether the cluster serves ComputeDomains (None: not asked, or not answered).
    compute_domains_served: bool | None = None
    progress: ProgressEndpoint | None = None  # where pods that report progress are sent
    # What the core is told of these settings: made once, as every admission passes it.
    policy: Policy = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        policy = Policy(
            cluster_domain=self.cluster_domain,
            coscheduling_scheduler=self.coscheduling_scheduler,
            sweeper_username=self.sweeper_username,
            kubernetes_podgroups_served=self.kubernetes_podgroups_served,
            compute_domains_served=self.compute_domains_served,
            progress=self.progress,
        )
        object.__setattr__(self, "policy", policy)


@dataclass(slots=True, init=False)
class Record:
    """What one request was and what became of it: the log line and the metrics."""

    result: Result
    uid: str = ""
    kind: str = ""
    namespace: str = ""
    name: str = ""
    operation: str = ""
    dry_run: bool = False
    patch_bytes: int = 0
    warnings: int = 0
    detail: str = ""
    error: str = ""  # a short reason for requests that were not AdmissionReviews
    lookup_unavailable: bool = False

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        result: Result,
        uid: str = "",
        kind: str = "",
        namespace: str = "",
        name: str = "",
        operation: str = "",
        dry_run: bool = False,
        patch_bytes: int = 0,
        warnings: int = 0,
        detail: str = "",
        error: str = "",
        lookup_unavailable: bool = False,
    ) -> None:
        self.result = result
        self.uid = uid
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.operation = operation
        self.dry_run = dry_run
        self.patch_bytes = patch_bytes
        self.warnings = warnings
        self.detail = detail
        self.error = error
        self.lookup_unavailable = lookup_unavailable


@dataclass(frozen=True, slots=True, init=False)
class Answer:
    status: int
    body: AdmissionReview | Status
    record: Record

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(self, status: int, body: AdmissionReview | Status, record: Record) -> None:
        object.__setattr__(self, "status", status)
        object.__setattr__(self, "body", body)
        object.__setattr__(self, "record", record)


class BadRequest(Exception):
    def __init__(self, status: int, error: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.error = error
        self.message = message


def review(body: bytes, content_type: str | None, context: Context) -> Answer:
    """Answer one POST /mutate: a 200 AdmissionReview, or a 4xx Status for a bad request."""
    try:
        document = _decode(body, content_type)
    except BadRequest as bad:
        return rejected(bad)
    return review_document(document, len(body), context)


def review_document(document: object, size: int, context: Context) -> Answer:
    """`review` of a body of `size` bytes once it is decoded into `document`."""
    try:
        decoded = _read_review(document, size)
    except BadRequest as bad:
        return rejected(bad)
    return _admit(decoded, context)


def too_large(size: int | None) -> BadRequest:
    told = f"{size} bytes" if size is not None else "larger than that"
    return BadRequest(
        413, "too_large", f"request body is {told}; the limit is {MAX_BODY_BYTES // 2**20} MiB"
    )


def rejected(bad: BadRequest, record: Record | None = None) -> Answer:
    """A 4xx Status for a request that is not one the server can answer with a review."""
    record = record or Record("rejected")
    record.result, record.detail, record.error = "rejected", bad.message, bad.error
    reason = _REASONS.get(bad.status, "BadRequest")
    return Answer(bad.status, failure_status(bad.status, reason, bad.message), record)


_REASONS: Final = {
    400: "BadRequest",
    408: "Timeout",
    413: "RequestEntityTooLarge",
    415: "UnsupportedMediaType",
    422: "Invalid",
    431: "RequestHeaderFieldsTooLarge",
    503: "ServiceUnavailable",
}


@dataclass(frozen=True, slots=True, init=False)
class _Decoded:
    """A decoded AdmissionReview: what the answer echoes, and the request for the core (None
    for operations without an object)."""

    api_version: str
    uid: str
    kind: str
    operation: str
    namespace: str
    name: str
    dry_run: bool
    request: Request | None

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        api_version: str,
        uid: str,
        kind: str,
        operation: str,
        namespace: str,
        name: str,
        dry_run: bool,
        request: Request | None,
    ) -> None:
        object.__setattr__(self, "api_version", api_version)
        object.__setattr__(self, "uid", uid)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "operation", operation)
        object.__setattr__(self, "namespace", namespace)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "dry_run", dry_run)
        object.__setattr__(self, "request", request)


def _decode(body: bytes, content_type: str | None) -> object:
    media_type = (content_type or "").partition(";")[0].strip().lower()
    if media_type != "application/json":
        got = repr(content_type) if content_type else "none"
        raise BadRequest(415, "content_type", f"Content-Type must be application/json, got {got}")
    if len(body) > MAX_BODY_BYTES:
        raise too_large(len(body))
    if not body or body.isspace():  # read to the first character, not copied
        raise BadRequest(400, "not_json", "request body is empty; expected an AdmissionReview")
    try:
        return jsoncodec.loads(body)
    except UnicodeDecodeError as error:
        raise BadRequest(
            400, "not_json", f"request body is not UTF-8 text: {error.reason}"
        ) from None
    except json.JSONDecodeError as error:
        raise BadRequest(
            400,
            "not_json",
            f"request body is not JSON: {error.msg} at line {error.lineno} column {error.colno}",
        ) from None
    except RecursionError:
        raise BadRequest(400, "not_json", "request body is JSON nested too deeply") from None


def _read_review(document: object, size: int = 0) -> _Decoded:
    if not isinstance(document, dict):
        raise _invalid("not_review", f"expected an AdmissionReview object, got {_what(document)}")
    kind = document.get("kind")
    if kind != KIND:
        raise _invalid("not_review", f"expected kind AdmissionReview, got {_shown(kind)}")
    api_version = document.get("apiVersion")
    if api_version != API_VERSION:
        raise _invalid(
            "version",
            f"AdmissionReview apiVersion {_shown(api_version)} is not served; "
            f"send {API_VERSION} (admissionReviewVersions: [v1])",
        )
    request = document.get("request")
    if not isinstance(request, dict):
        raise _invalid("missing_field", f"AdmissionReview has no request object ({_what(request)})")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise _invalid("missing_field", f"request.uid must be a non-empty string, got {_what(uid)}")
    gvk = request.get("kind")
    object_kind = gvk.get("kind") if isinstance(gvk, dict) else None
    if not isinstance(object_kind, str) or not object_kind:
        raise _invalid("missing_field", "request.kind.kind must name the kind of the object")
    operation = request.get("operation")
    if operation not in OPERATIONS:
        raise _invalid(
            "missing_field",
            f"request.operation must be one of {', '.join(OPERATIONS)}, got {_shown(operation)}",
        )
    namespace = request.get("namespace", "")
    name = request.get("name", "")
    if not isinstance(namespace, str) or not isinstance(name, str):
        raise _invalid("missing_field", "request.namespace and request.name must be strings")
    obj = request.get("object")
    if operation in ("CREATE", "UPDATE"):
        if not isinstance(obj, dict):
            raise _invalid(
                "missing_field",
                f"request.object must be the {object_kind} being admitted, got {_what(obj)}",
            )
        if obj.get("kind") != object_kind:
            raise _invalid(
                "missing_field",
                f"request.object.kind {_shown(obj.get('kind'))} does not match "
                f"request.kind.kind {_shown(object_kind)}",
            )
        if not isinstance(obj.get("metadata", {}), dict):
            raise _invalid("missing_field", "request.object.metadata must be an object")
        if object_kind in SHAPED_KINDS and not isinstance(obj.get("spec", {}), dict):
            raise _invalid(
                "malformed_object",
                "request.object.spec must be an object, got "
                + ("null" if obj.get("spec") is None else _what(obj.get("spec"))),
            )
    else:
        obj = None
    dry_run = request.get("dryRun") is True
    old = request.get("oldObject")
    user = request.get("userInfo")
    username = user.get("username") if isinstance(user, dict) else None
    core_request = None
    if obj is not None:
        core_request = Request(
            kind=object_kind,
            operation=operation,
            object=obj,
            namespace=namespace,
            name=name,
            old=old if isinstance(old, dict) else None,
            username=username if isinstance(username, str) else "",
            dry_run=dry_run,
            size=size,
        )
    return _Decoded(
        api_version, uid, object_kind, operation, namespace, name, dry_run, core_request
    )


def _admit(decoded: _Decoded, context: Context) -> Answer:
    request = decoded.request
    record = Record(
        "allowed",
        uid=decoded.uid,
        kind=decoded.kind,
        namespace=decoded.namespace,
        name=request.object_name if request is not None else decoded.name,
        operation=decoded.operation,
        dry_run=decoded.dry_run,
    )
    response: AdmissionResponse = {"uid": decoded.uid, "allowed": True}
    answer_body: AdmissionReview = {
        "apiVersion": decoded.api_version,
        "kind": KIND,
        "response": response,
    }
    if request is None:
        return Answer(200, answer_body, record)
    warnings: list[str] = []
    try:
        found = _look_up(request, context.lookup, warnings, record)
        outcome = admit(request, found, context.policy)
    except TrainhookError as error:
        message = one_line(str(error))
        response["allowed"] = False
        response["status"] = {"code": error.status_code, "message": message}
        record.result = "denied"
        record.detail = message
        return Answer(200, answer_body, record)
    except Exception:
        # Only a client other than the API server sends an object its schema does not allow;
        # for one that the schema allows, this is a fault of the webhook and stays one.
        problem = malformed(request.object, request.kind)
        if problem is None:
            raise
        return rejected(_invalid("malformed_object", problem), record)
    if outcome is not None:
        warnings.extend(outcome.warnings)
        if outcome.patch:
            patch = jsoncodec.dumps(outcome.patch)
            response["patchType"] = "JSONPatch"
            # base64.b64encode's own call, without the Python function around it
            response["patch"] = binascii.b2a_base64(patch, newline=False).decode("ascii")
            record.result = "mutated"
            record.patch_bytes = len(patch)
    if warnings:
        response["warnings"] = warnings
        record.warnings = len(warnings)
    return Answer(200, answer_body, record)


def _look_up(request: Request, lookup: Lookup | None, warnings: list[str], record: Record) -> Found:
    """Read what the core asks for: the other workloads of a workload's job; for a pod without
    a stamp, its owner and the owner's siblings; for a pod of a StatefulSet or Job, the objects
    its controller records as proven, from the cache alone."""
    wanted = lookups(request)
    if lookup is None:
        return Found()
    found = _read(request, wanted, lookup, warnings, record)
    if wanted.proof is None:
        return found
    kind, name, uid = wanted.proof
    proven = proven_for(lookup.cached(request.namespace, kind, name), uid)
    return Found(found.siblings, found.owner, proven) if proven else found


def _read(
    request: Request, wanted: Lookups, lookup: Lookup, warnings: list[str], record: Record
) -> Found:
    if wanted.job is not None and wanted.itself is not None:
        return Found(
            _siblings(lookup, request.namespace, wanted.job, wanted.itself, warnings, record)
        )
    if wanted.owner is None:
        return Found()
    owner = lookup.get(request.namespace, *wanted.owner)
    job = None if owner is None else job_of(owner)
    if owner is None or job is None:
        return Found((), owner)  # the core refuses a pod whose topology cannot be known
    siblings = _siblings(lookup, request.namespace, job, wanted.owner, warnings, record)
    return Found(siblings, owner)


def _siblings(
    lookup: Lookup,
    namespace: str,
    job: str,
    itself: tuple[str, str],
    warnings: list[str],
    record: Record,
) -> Sequence[Mapping[str, Any]]:
    found = lookup.siblings(namespace, job, exclude=itself)
    if found is None:
        warnings.append(_unavailable(job))
        record.lookup_unavailable = True
        return ()
    return found


def _unavailable(job: str) -> str:
    # A job name is a DNS label (at most 63 characters), so this stays under 120.
    return f"API unreachable: job {job} admitted with the roles known so far"


def _invalid(error: str, message: str) -> BadRequest:
    return BadRequest(422, error, message)


def _what(value: object) -> str:
    if value is None:
        return "nothing"
    return {
        dict: "an object",
        list: "an array",
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
    }.get(type(value), type(value).__name__)


def _shown(value: object) -> str:
    if isinstance(value, str):
        return repr(value[:60])
    return _what(value)
