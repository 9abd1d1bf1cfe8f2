"""The progress endpoint: Kubeflow Trainer v2's status protocol, served beside the sweeper.

A pod POSTs `{"trainerStatus": {...}}` to /apis/trainhook.io/v1/namespaces/NS/jobs/JOB/status
with its projected token as a bearer token. A report is taken only when a TokenReview says the
token is valid for the job's audience and the pod it was issued to (the review's pod-name and
pod-uid) is a live pod of that job. Reviews are remembered for a minute, reports are limited per
job, and the job's `trainhook.io/progress` is written at most once per `write_interval` per
job, whatever the pods send: a flood costs neither memory nor API writes beyond those bounds.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from webhook.core import contract
from webhook.core.job.progress import (
    MAX_BODY,
    POD_NAME_CLAIM,
    POD_UID_CLAIM,
    STATUS_PATH,
    BadReport,
    audience,
    parse_report,
    read_summary,
    summary,
    summary_text,
)
from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import JOBS, PODS, STATEFULSETS, TOKEN_REVIEWS
from webhook.sweeper.job.state import JobKey, job_key

log = logging.getLogger("trainhook.progress")

# What a Content-Type may be: JSON, none, or urllib's default (Trainer's own example sends it).
ACCEPTED_TYPES = ("", "application/json", "application/x-www-form-urlencoded")
IO_TIMEOUT = 10.0
DRAIN_AT_MOST = 1024 * 1024  # an oversized body read (and dropped) to answer 413 cleanly


@dataclass(frozen=True)
class Limits:
    reports_per_second: float = 1.0  # per job, after a burst
    burst: int = 10
    write_interval: float = 10.0  # seconds between two writes of one job's annotation
    max_jobs: int = 1000  # jobs remembered at once (buckets, pending summaries)
    reviews_per_second: float = 20.0  # TokenReviews for tokens not seen yet, all jobs together
    review_ttl: float = 60.0
    max_reviews: int = 4096
    concurrent: int = 16  # requests served at once


class _Bucket:
    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate, self.burst, self.tokens, self.at = rate, burst, float(burst), now

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict[str, Any]


def failure(code: int, reason: str, message: str) -> Answer:
    """A Kubernetes Status, as Trainer's status server answers errors."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure"}
    return Answer(code, body | {"message": message, "reason": reason, "code": code})


class ProgressDesk:
    """Takes reports (`handle`) and writes each job's summary at a bounded rate (`flush`)."""

    def __init__(
        self,
        kube: Kube,
        limits: Limits = Limits(),
        *,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.limits = limits
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._buckets: OrderedDict[JobKey, _Bucket] = OrderedDict()
        self._reviews: OrderedDict[str, tuple[float, str, str]] = OrderedDict()  # pod, uid
        self._review_bucket = _Bucket(
            limits.reviews_per_second, int(limits.reviews_per_second), clock()
        )
        self._pending: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        self._summaries: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        self._written_at: dict[JobKey, float] = {}
        self._pod_checkpoints: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        self.writes = 0  # annotation writes made, for /metrics and tests

    # --- a report --------------------------------------------------------------------------

    def handle(self, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
        match = STATUS_PATH.match(path)
        if match is None:
            return failure(404, "NotFound", f"no such endpoint {path[:100]}")
        key: JobKey = (match.group(1), match.group(2))
        content_type = headers.get("Content-Type", "").split(";")[0].strip().lower()
        if content_type not in ACCEPTED_TYPES:
            return failure(
                415, "UnsupportedMediaType", f"Content-Type {content_type}: send application/json"
            )
        refused = self._authorize(key, headers.get("Authorization", ""))
        if refused is not None:
            return refused
        with self._lock:
            bucket = self._buckets.pop(key, None) or _Bucket(
                self.limits.reports_per_second, self.limits.burst, self.clock()
            )
            self._buckets[key] = bucket
            while len(self._buckets) > self.limits.max_jobs:
                self._buckets.popitem(last=False)
            if not bucket.take(self.clock()):
                return failure(
                    429,
                    "TooManyRequests",
                    f"job {key[1]} reports more than {self.limits.reports_per_second:g} "
                    "times a second: report less often",
                )
        try:
            report = parse_report(body)
        except BadReport as error:
            return failure(
                error.status, "Invalid" if error.status == 422 else "BadRequest", str(error)
            )
        if report is None:
            return Answer(200, {})
        with self._lock:
            previous = self._summaries.get(key)
            if previous is None:
                previous = self._stored_summary(key)
            latest = summary(report, self.wall(), previous)
            self._summaries.pop(key, None)
            self._summaries[key] = latest
            self._pending.pop(key, None)
            self._pending[key] = latest
            for kept in (self._summaries, self._pending):
                while len(kept) > self.limits.max_jobs:
                    kept.popitem(last=False)
        return Answer(200, report.echo)

    def _authorize(self, key: JobKey, header: str) -> Answer | None:
        namespace, job = key
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not token.strip():
            return failure(401, "Unauthorized", "send the pod's token: Authorization: Bearer ...")
        token = token.strip()
        digest = hashlib.sha256(f"{namespace}/{job}\0{token}".encode()).hexdigest()
        now = self.clock()
        with self._lock:
            seen = self._reviews.get(digest)
            if seen is not None and now - seen[0] < self.limits.review_ttl:
                pod, uid = seen[1], seen[2]
                if not pod:
                    return failure(403, "Forbidden", f"this token may not report for job {job}")
                return None
            if not self._review_bucket.take(now):
                return failure(429, "TooManyRequests", "too many new tokens at once: retry later")
        try:
            pod, uid = self._review(namespace, job, token)
        except ApiError as error:
            log.warning("progress: cannot verify a token for job %s/%s: %s", namespace, job, error)
            return failure(503, "ServiceUnavailable", "cannot verify the token now: retry later")
        with self._lock:
            self._reviews.pop(digest, None)
            self._reviews[digest] = (now, pod, uid)
            while len(self._reviews) > self.limits.max_reviews:
                self._reviews.popitem(last=False)
        if not pod:
            return failure(403, "Forbidden", f"this token may not report for job {job}")
        return None

    def _review(self, namespace: str, job: str, token: str) -> tuple[str, str]:
        """The pod of `job` the token was issued to, or ("", "") when it belongs to none."""
        review = self.kube.create(
            TOKEN_REVIEWS,
            None,
            {
                "apiVersion": TOKEN_REVIEWS.api_version,
                "kind": TOKEN_REVIEWS.kind,
                "spec": {"token": token, "audiences": [audience(namespace, job)]},
            },
        )
        status = review.get("status") or {}
        if not status.get("authenticated") or audience(namespace, job) not in (
            status.get("audiences") or []
        ):
            return "", ""
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        pod = (extra.get(POD_NAME_CLAIM) or [""])[0]
        uid = (extra.get(POD_UID_CLAIM) or [""])[0]
        if not pod or not str(user.get("username", "")).startswith(
            f"system:serviceaccount:{namespace}:"
        ):
            return "", ""
        try:
            found = self.kube.get(PODS, namespace, pod)
        except ApiError as error:
            if error.status == 404:
                return "", ""
            raise
        metadata = found.get("metadata") or {}
        if job_key(PODS, found) != (namespace, job) or metadata.get("uid") != uid:
            return "", ""
        return pod, uid

    def latest(self) -> list[tuple[JobKey, dict[str, Any]]]:
        """The last summary of every job remembered, the most recent last."""
        with self._lock:
            return list(self._summaries.items())

    # --- writing ---------------------------------------------------------------------------

    def _stored_summary(self, key: JobKey) -> dict[str, Any] | None:
        for workload in self._workloads(key):
            found = read_summary((workload.get("metadata") or {}).get("annotations") or {})
            if found is not None:
                return found
        return None

    def _workloads(self, key: JobKey) -> list[dict[str, Any]]:
        namespace, _ = key
        found: list[dict[str, Any]] = []
        for resource in (STATEFULSETS, JOBS):
            try:
                items, _ = self.kube.list(resource, namespace, contract.FRAMEWORK)
            except ApiError:
                continue
            found += [item for item in items if job_key(resource, item) == key]
        return found

    def flush(self) -> None:
        """Write the summaries due: each job's at most once per write_interval."""
        now = self.clock()
        with self._lock:
            due = [
                (key, value)
                for key, value in self._pending.items()
                if now - self._written_at.get(key, -1e18) >= self.limits.write_interval
            ]
            for key, _ in due:
                del self._pending[key]
                self._written_at[key] = now
            for key in list(self._written_at):
                if now - self._written_at[key] > 10 * self.limits.write_interval:
                    del self._written_at[key]
        for key, value in due:
            self._write(key, value)

    def _write(self, key: JobKey, value: dict[str, Any]) -> None:
        namespace, _ = key
        text = json.dumps(value, separators=(",", ":"), sort_keys=True)
        annotations = {contract.PROGRESS: text, contract.PROGRESS_TEXT: summary_text(value)}
        patch = {"metadata": {"annotations": annotations}}
        for workload in self._workloads(key):
            resource = STATEFULSETS if workload["kind"] == "StatefulSet" else JOBS
            self._patch(resource, namespace, workload["metadata"]["name"], patch)
        checkpoint = value.get("checkpoint")
        if isinstance(checkpoint, dict) and self._pod_checkpoints.get(key) != checkpoint:
            self._mark_pods(key, checkpoint)

    def _mark_pods(self, key: JobKey, checkpoint: dict[str, Any]) -> None:
        """The last checkpoint on each of the job's pods too, where schedulers look when they
        choose what to preempt; written only when it changes."""
        namespace, job = key
        text = json.dumps(checkpoint, separators=(",", ":"), sort_keys=True)
        try:
            pods, _ = self.kube.list(PODS, namespace, f"{contract.JOB}={job}")
        except ApiError as error:
            log.warning("progress: cannot list the pods of %s/%s: %s", namespace, job, error)
            return
        for pod in pods:
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if job_key(PODS, pod) == key and annotations.get(contract.LAST_CHECKPOINT) != text:
                patch = {"metadata": {"annotations": {contract.LAST_CHECKPOINT: text}}}
                self._patch(PODS, namespace, pod["metadata"]["name"], patch)
        with self._lock:
            self._pod_checkpoints.pop(key, None)
            self._pod_checkpoints[key] = checkpoint
            while len(self._pod_checkpoints) > self.limits.max_jobs:
                self._pod_checkpoints.popitem(last=False)

    def _patch(self, resource: Any, namespace: str, name: str, patch: dict[str, Any]) -> None:
        try:
            self.kube.patch(resource, namespace, name, patch)
            self.writes += 1
        except ApiError as error:
            log.warning("progress: cannot write %s/%s: %s", namespace, name, error)


class _Certificate:
    """A certificate pair loaded again when its files change (a Secret volume is updated)."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.files = (cert_file, key_file)
        self._loaded: tuple[tuple[float, ...], ssl.SSLContext] | None = None
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        stamp = tuple(os.stat(path).st_mtime for path in self.files)
        with self._lock:
            if self._loaded is None or self._loaded[0] != stamp:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                context.load_cert_chain(*self.files)
                self._loaded = (stamp, context)
            return self._loaded[1]


def serve(
    desk: ProgressDesk, bind: str, cert_file: str, key_file: str
) -> tuple[ThreadingHTTPServer, threading.Event]:
    """Serve the endpoint over TLS on HOST:PORT, and flush every half second, in daemon
    threads; set the event and `shutdown()` the server to stop."""
    certificate = _Certificate(cert_file, key_file)
    certificate.context()  # a missing or bad pair fails here, at start
    slots = threading.BoundedSemaphore(desk.limits.concurrent)

    class Handler(BaseHTTPRequestHandler):
        timeout = IO_TIMEOUT  # a client that stalls is cut off

        def do_POST(self) -> None:
            if not slots.acquire(blocking=False):
                self._answer(failure(503, "ServiceUnavailable", "busy: retry later"))
                return
            try:
                self._post()
            finally:
                slots.release()

        def _post(self) -> None:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self._answer(failure(411, "LengthRequired", "send a Content-Length"))
                return
            if int(length) > MAX_BODY:
                # Read and dropped, in small pieces, so the client sees the answer rather
                # than a reset; past DRAIN_AT_MOST the connection is simply closed.
                left = int(length) if int(length) <= DRAIN_AT_MOST else 0
                while left > 0 and (piece := self.rfile.read(min(left, 16384))):
                    left -= len(piece)
                self.close_connection = True
                message = f"the body is {length} bytes; at most {MAX_BODY} are read"
                self._answer(failure(413, "RequestEntityTooLarge", message))
                return
            body = self.rfile.read(int(length))
            path = self.path.split("?", 1)[0]
            self._answer(desk.handle(path, dict(self.headers.items()), body))

        def do_GET(self) -> None:
            self._answer(failure(405, "MethodNotAllowed", "POST a report"))

        do_PUT = do_PATCH = do_DELETE = do_GET

        def _answer(self, answer: Answer) -> None:
            data = json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if answer.status == 429:
                self.send_header("Retry-After", "1")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def get_request(self) -> tuple[Any, Any]:
            connection, address = super().get_request()
            # The handshake happens in the request's thread, under its timeout, not here; each
            # connection gets the certificate as it is on disk now (a mounted Secret renews).
            tls = certificate.context().wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
            return tls, address

        def handle_error(self, request: Any, client_address: Any) -> None:
            # A failed handshake or a client gone mid-request: that client's problem only.
            log.debug("progress: connection from %s failed", client_address, exc_info=True)

    host, _, port = bind.rpartition(":")
    server = Server((host.strip("[]") or "0.0.0.0", int(port)), Handler)
    stop = threading.Event()

    def flusher() -> None:
        while not stop.wait(0.5):
            try:
                desk.flush()
            except Exception:  # one bad write must not stop the others
                log.exception("progress: flush failed")

    threading.Thread(target=server.serve_forever, name="progress", daemon=True).start()
    threading.Thread(target=flusher, name="progress-flush", daemon=True).start()
    return server, stop
