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
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import (
    POD_NAME_CLAIM,
    POD_UID_CLAIM,
    STATUS_PATH,
    BadReport,
    audience,
    parse_report,
    read_summary,
    step_seconds,
    straggler_threshold,
    summary,
    summary_text,
    timing_only,
)
from webhook.core.objects import annotations_of, labels_of
from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import JOBS, PODS, STATEFULSETS, TOKEN_REVIEWS
from webhook.sweeper.job.members import member_pods, reporter_refusal
from webhook.sweeper.job.state import JobKey, job_key
from webhook.sweeper.job.stragglers import Stragglers, read_stragglers, record_text

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
class Reporter:
    """The pod a token was issued to, as its review found it: the rank a report speaks for."""

    pod: str
    uid: str
    node: str
    rank: int | None


UNKNOWN = "?"  # a job's stragglers annotation before this replica has written it
EXPIRE_EVERY = 5.0  # seconds between two looks for ranks that stopped reporting


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


def same_ranks(workloads: Sequence[Mapping[str, Any]], text: str | None) -> bool:
    """Whether the job's workloads name the ranks `text` flags already (this replica's record or
    another's, which each judges the reports it receives): the record then stays as it is, with
    when they were flagged, and no write."""

    def flagged(annotations: Mapping[str, str]) -> tuple[int, set[tuple[str, str]]]:
        record = read_stragglers(annotations)
        if record is None:
            return 0, set()
        return record.count, {(s.pod, s.node) for s in record.flagged}

    ours = flagged({contract.STRAGGLERS: text} if text else {})
    return all(flagged(annotations_of(w)) == ours for w in workloads)


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
        # token digest -> (when, why it was refused: "" when taken, the pod it was issued to)
        self._reviews: OrderedDict[str, tuple[float, str, Reporter | None]] = OrderedDict()
        self._namespace_reviews: OrderedDict[str, _Bucket] = OrderedDict()
        self._review_bucket = _Bucket(
            limits.reviews_per_second_total, int(limits.reviews_per_second_total), clock()
        )
        self._pending: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        self._summaries: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        self._written_at: dict[JobKey, float] = {}
        self._pod_checkpoints: OrderedDict[JobKey, dict[str, Any]] = OrderedDict()
        # Each job's ranks' step times (trainhook.io/straggler-threshold, read at each review),
        # and its trainhook.io/stragglers to write (None: remove it) and as last written.
        self.stragglers = Stragglers(limits.max_jobs)
        self._thresholds: OrderedDict[JobKey, float | None] = OrderedDict()
        self._straggler_pending: OrderedDict[JobKey, str | None] = OrderedDict()
        self._straggler_written: OrderedDict[JobKey, str | None] = OrderedDict()
        self._expired_at = -1e18
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
        refused, reporter = self._authorize(key, headers.get("Authorization", ""))
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
        seconds = step_seconds(report)
        if seconds is not None and reporter is not None:
            self._step_time(key, reporter, seconds)
        if timing_only(report):  # a rank's own step time: the job's summary stays
            return Answer(200, report.echo)
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

    def _step_time(self, key: JobKey, reporter: Reporter, seconds: float) -> None:
        """A rank's step time, judged against the job's other ranks; the job's stragglers
        annotation is written at the next flush when what it says changed."""
        with self._lock:
            threshold = self._thresholds.get(key)
            if threshold is None:
                self.stragglers.forget(key)
                self._straggler_due(key, None)
                return
            job = self.stragglers.report(
                key, threshold, reporter.pod, reporter.uid, reporter.node, reporter.rank,
                seconds, self.wall(),
            )  # fmt: skip
            self._straggler_due(key, record_text(job.record()), job.settled())

    def _straggler_due(self, key: JobKey, text: str | None, settled: bool = True) -> None:
        """Under the lock: the job's annotation is to be written unless it says `text` already.
        A replica that has not judged every rank yet flags none, and removes none it did not
        write: another replica may have heard more of the job's reports."""
        self._straggler_pending.pop(key, None)
        written = self._straggler_written.get(key, UNKNOWN)
        if text is None and written == UNKNOWN and not settled:
            return
        if written != text:
            self._straggler_pending[key] = text
            while len(self._straggler_pending) > self.limits.max_jobs:
                self._straggler_pending.popitem(last=False)

    def forget(self, key: JobKey) -> None:
        """A job gone: its ranks' step times go with it."""
        with self._lock:
            self.stragglers.forget(key)
            for kept in (self._straggler_pending, self._straggler_written, self._thresholds):
                kept.pop(key, None)

    def straggling(self) -> list[tuple[JobKey, int]]:
        """How many ranks each job that judges its ranks has flagged, for /metrics."""
        with self._lock:
            return [(key, len(job.flagged())) for key, job in self.stragglers.jobs.items()]

    def _authorize(self, key: JobKey, header: str) -> tuple[Answer | None, Reporter | None]:
        namespace, job = key
        scheme, _, token = header.partition(" ")
        if scheme != "Bearer" or not token.strip():
            answer = failure(401, "Unauthorized", "send the pod's token: Authorization: Bearer ...")
            return answer, None
        token = token.strip()
        digest = hashlib.sha256(f"{namespace}/{job}\0{token}".encode()).hexdigest()
        now = self.clock()
        with self._lock:
            seen = self._reviews.get(digest)
            if seen is not None and now - seen[0] < self.limits.review_ttl:
                return (_refused(job, seen[1]), None) if seen[1] else (None, seen[2])
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
                ), None
            if not self._review_bucket.take(now):
                answer = failure(429, "TooManyRequests", "too many new tokens at once: retry later")
                return answer, None
        try:
            refusal, reporter = self._review(namespace, job, token)
        except ApiError as error:
            log.warning("progress: cannot verify a token for job %s/%s: %s", namespace, job, error)
            answer = failure(503, "ServiceUnavailable", "cannot verify the token now: retry later")
            return answer, None
        with self._lock:
            self._reviews.pop(digest, None)
            self._reviews[digest] = (now, refusal, reporter)
            while len(self._reviews) > self.limits.max_reviews:
                self._reviews.popitem(last=False)
        return (_refused(job, refusal), None) if refusal else (None, reporter)

    def _review(self, namespace: str, job: str, token: str) -> tuple[str, Reporter | None]:
        """Why the token may not report for `job` ("" when it may): it must be valid for the
        job's audience and bound to a live pod the webhook admitted into the job, of a
        workload that reports; and, when it may, the pod it speaks for."""
        refusal, found, workloads = self._reviewed(namespace, job, token)
        if refusal or found is None:
            return refusal, None
        self._read_threshold((namespace, job), workloads)
        rank = labels_of(found).get(contract.RANK, "")
        return "", Reporter(
            found["metadata"]["name"],
            found["metadata"]["uid"],
            str((found.get("spec") or {}).get("nodeName") or ""),
            int(rank) if rank.isdigit() else None,
        )

    def _read_threshold(self, key: JobKey, workloads: Sequence[Mapping[str, Any]]) -> None:
        """The job's trainhook.io/straggler-threshold, as its own workloads set it."""
        threshold = None
        for workload in member_pods(key[0], key[1], workloads, ())[0]:
            try:
                threshold = straggler_threshold(
                    annotations_of(workload).get(contract.STRAGGLER_THRESHOLD)
                )
            except TrainhookError:
                continue
            if threshold is not None:
                break
        with self._lock:
            self._thresholds.pop(key, None)
            self._thresholds[key] = threshold
            while len(self._thresholds) > self.limits.max_jobs:
                self._thresholds.popitem(last=False)

    def _reviewed(
        self, namespace: str, job: str, token: str
    ) -> tuple[str, dict[str, Any] | None, list[dict[str, Any]]]:
        """The refusal ("" when none), the pod the token was issued to and the job's
        workloads."""
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
            return "the token is not valid for the job's audience", None, []
        user = status.get("user") or {}
        extra = user.get("extra") or {}
        pod = (extra.get(POD_NAME_CLAIM) or [""])[0]
        uid = (extra.get(POD_UID_CLAIM) or [""])[0]
        if not pod or not uid:
            return "the token is bound to no pod", None, []
        if not str(user.get("username", "")).startswith(f"system:serviceaccount:{namespace}:"):
            return f"the token is not of a service account of namespace {namespace}", None, []
        try:
            found = self.kube.get(PODS, namespace, pod)
        except ApiError as error:
            if error.status == 404:
                return f"the pod it was issued to, {pod}, is gone", None, []
            raise
        if job_key(PODS, found) != (namespace, job):
            return f"the pod it was issued to, {pod}, is not a pod of the job", None, []
        workloads = self._workloads((namespace, job))
        refusal = reporter_refusal(namespace, job, found, uid, workloads) or ""
        return refusal, found, workloads

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
            if now - self._expired_at >= EXPIRE_EVERY:  # the ranks that stopped reporting
                self._expired_at = now
                for key in self.stragglers.expire(self.wall()):
                    self._straggler_due(key, record_text(self.stragglers.record(key)))
            keys = list(dict.fromkeys([*self._pending, *self._straggler_pending]))
            due = [
                (key, self._pending.pop(key, None), self._straggler_pending.pop(key, UNKNOWN))
                for key in keys
                if now - self._written_at.get(key, -1e18) >= self.limits.write_interval
            ]
            for key, _, _ in due:
                self._written_at[key] = now
            for key in list(self._written_at):
                if now - self._written_at[key] > 10 * self.limits.write_interval:
                    del self._written_at[key]
        for key, value, stragglers in due:
            self._write(key, value, stragglers)

    def _write(
        self, key: JobKey, value: dict[str, Any] | None, stragglers: str | None = UNKNOWN
    ) -> None:
        namespace, _ = key
        annotations: dict[str, str | None] = {}
        if value is not None:
            annotations[contract.PROGRESS] = json.dumps(
                value, separators=(",", ":"), sort_keys=True
            )
            annotations[contract.PROGRESS_TEXT] = summary_text(value)
        workloads, _ = self._members(key)
        if not workloads:  # the job is gone: what was kept of its ranks goes too
            self.forget(key)
            return
        if stragglers != UNKNOWN and not same_ranks(workloads, stragglers):
            annotations[contract.STRAGGLERS] = stragglers
        patch = {"metadata": {"annotations": annotations}}
        written = True
        for workload in workloads if annotations else ():
            resource = STATEFULSETS if workload["kind"] == "StatefulSet" else JOBS
            written &= self._patch(resource, namespace, workload["metadata"]["name"], patch)
        if stragglers != UNKNOWN and written:
            with self._lock:
                self._straggler_written.pop(key, None)
                self._straggler_written[key] = stragglers
                while len(self._straggler_written) > self.limits.max_jobs:
                    self._straggler_written.popitem(last=False)
        checkpoint = (value or {}).get("checkpoint")
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

    def _patch(self, resource: Any, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        try:
            self.kube.patch(resource, namespace, name, patch)
            self.writes += 1
            return True
        except ApiError as error:
            log.warning("progress: cannot write %s/%s: %s", namespace, name, error)
            return False
