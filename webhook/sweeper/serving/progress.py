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
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.core import contract
from webhook.core.job.progress import (
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
from webhook.sweeper.job.members import member_pods, reporter_refusal
from webhook.sweeper.job.state import JobKey, job_key

log = logging.getLogger("trainhook.progress")

# What a Content-Type may be: JSON, none, or urllib's default (Trainer's own example sends it).
ACCEPTED_TYPES = ("", "application/json", "application/x-www-form-urlencoded")
IO_TIMEOUT = 10.0
HEADER_BYTES = 16 * 1024  # a request line and headers; a pod's are a few hundred bytes
DRAIN_AT_MOST = 1024 * 1024  # an oversized body read (and dropped) to answer 413 cleanly


@dataclass(frozen=True)
class Limits:
    reports_per_second: float = 1.0  # per job, after a burst
    burst: int = 10
    write_interval: float = 10.0  # seconds between two writes of one job's annotation
    max_jobs: int = 1000  # jobs remembered at once (buckets, pending summaries)
    # TokenReviews for tokens not seen yet: per namespace (one tenant's junk tokens spend its
    # own budget, not another's), and for all namespaces together.
    reviews_per_second: float = 5.0
    review_burst: int = 20
    reviews_per_second_total: float = 50.0
    review_ttl: float = 60.0
    max_reviews: int = 4096
    concurrent: int = 16  # reports handled at once
    connections: int = 64  # connections (and their threads) held at once
    header_seconds: float = 5.0  # from a connection's start (TLS handshake and all), or the
    # end of its previous request, to the end of the headers
    body_seconds: float = 10.0  # for the whole body


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


def _refused(job: str, why: str) -> Answer:
    return failure(403, "Forbidden", f"this token may not report for job {job}: {why}")


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
        namespaces: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.limits = limits
        # The sweeper's namespaces (empty: every one): a report for a job elsewhere is answered
        # without a TokenReview or a read, which its Roles would refuse anyway.
        self.namespaces = frozenset(namespaces)
        self.clock = clock
        self.wall = wall
        self._lock = threading.Lock()
        self._buckets: OrderedDict[JobKey, _Bucket] = OrderedDict()
        # token digest -> (when, why it was refused: "" when taken)
        self._reviews: OrderedDict[str, tuple[float, str]] = OrderedDict()
        self._namespace_reviews: OrderedDict[str, _Bucket] = OrderedDict()
        self._review_bucket = _Bucket(
            limits.reviews_per_second_total, int(limits.reviews_per_second_total), clock()
        )
        self._pending: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        self._summaries: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        self._written_at: dict[JobKey, float] = {}
        self._pod_checkpoints: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        # One flush at a time: a flush returns once what was due is written, whoever began it.
        self._flushing = threading.Lock()
        self.writes = 0  # annotation writes made, for /metrics and tests

    # --- a report --------------------------------------------------------------------------

    def handle(self, path: str, headers: Mapping[str, str], body: bytes) -> Answer:
        match = STATUS_PATH.match(path)
        if match is None:
            return failure(404, "NotFound", f"no such endpoint {path[:100]}")
        key: JobKey = (match.group(1), match.group(2))
        if self.namespaces and key[0] not in self.namespaces:
            return failure(
                404,
                "NotFound",
                f"no job {key[0]}/{key[1]} here: namespace {key[0]} is not one this sweeper serves",
            )
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
                return _refused(job, seen[1]) if seen[1] else None
            bucket = self._namespace_reviews.pop(namespace, None) or _Bucket(
                self.limits.reviews_per_second, self.limits.review_burst, now
            )
            self._namespace_reviews[namespace] = bucket
            while len(self._namespace_reviews) > self.limits.max_jobs:
                self._namespace_reviews.popitem(last=False)
            if not bucket.take(now):
                return failure(
                    429,
                    "TooManyRequests",
                    f"too many new tokens from namespace {namespace} at once: retry later",
                )
            if not self._review_bucket.take(now):
                return failure(429, "TooManyRequests", "too many new tokens at once: retry later")
        try:
            refusal = self._review(namespace, job, token)
        except ApiError as error:
            log.warning("progress: cannot verify a token for job %s/%s: %s", namespace, job, error)
            return failure(503, "ServiceUnavailable", "cannot verify the token now: retry later")
        with self._lock:
            self._reviews.pop(digest, None)
            self._reviews[digest] = (now, refusal)
            while len(self._reviews) > self.limits.max_reviews:
                self._reviews.popitem(last=False)
        return _refused(job, refusal) if refusal else None

    def _review(self, namespace: str, job: str, token: str) -> str:
        """Why the token may not report for `job` ("" when it may): it must be valid for the
        job's audience and bound to a live pod the webhook admitted into the job, of a
        workload that reports."""
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
            return "the token is not valid for the job's audience"
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        pod = (extra.get(POD_NAME_CLAIM) or [""])[0]
        uid = (extra.get(POD_UID_CLAIM) or [""])[0]
        if not pod or not uid:
            return "the token is bound to no pod"
        if not str(user.get("username", "")).startswith(f"system:serviceaccount:{namespace}:"):
            return f"the token is not of a service account of namespace {namespace}"
        try:
            found = self.kube.get(PODS, namespace, pod)
        except ApiError as error:
            if error.status == 404:
                return f"the pod it was issued to, {pod}, is gone"
            raise
        if job_key(PODS, found) != (namespace, job):
            return f"the pod it was issued to, {pod}, is not a pod of the job"
        return reporter_refusal(namespace, job, found, uid, self._workloads((namespace, job))) or ""

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

    def _members(
        self, key: JobKey, pods: Sequence[Mapping[str, Any]] = ()
    ) -> tuple[list[Any], list[Any]]:
        """The job's own workloads (another user's labelled into it left out) and, of `pods`,
        the job's own."""
        return member_pods(key[0], key[1], self._workloads(key), pods)

    def flush(self) -> None:
        """Write the summaries due: each job's at most once per write_interval."""
        with self._flushing:
            self._flush()

    def _flush(self) -> None:
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
        workloads, _ = self._members(key)
        for workload in workloads:
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
        _, members = self._members(key, [pod for pod in pods if job_key(PODS, pod) == key])
        for pod in members:  # the job's own pods, not every pod carrying its label
            annotations = (pod.get("metadata") or {}).get("annotations") or {}
            if annotations.get(contract.LAST_CHECKPOINT) != text:
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
