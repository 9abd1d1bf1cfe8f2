"""Prometheus metrics of the admission server, correct across several gunicorn workers.

With PROMETHEUS_MULTIPROC_DIR set (before this module is imported), every worker writes its
samples to files there and `/metrics` sums them, whichever worker answers the scrape.
"""

from __future__ import annotations

import os
import platform
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from typing import Any, Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from webhook import __version__
from webhook.server.admission import Record

MULTIPROC_ENV: Final = "PROMETHEUS_MULTIPROC_DIR"
# The kinds the webhook configuration sends. Any other kind a client names is counted as
# "other": a label value per kind would let any client add series without bound.
KINDS: Final = frozenset({"Pod", "StatefulSet", "Job"})

ADMISSIONS = Counter(
    "trainhook_admissions",
    "AdmissionReviews answered, by object kind (Pod, StatefulSet, Job or other), operation and "
    "result (mutated, allowed without a patch, denied).",
    ["kind", "operation", "result"],
)
DURATION = Histogram(
    "trainhook_admission_duration_seconds",
    "Time from a complete request body to the response, by object kind.",
    ["kind"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5),
)
ERRORS = Counter(
    "trainhook_admission_errors",
    "Requests to /mutate that got no AdmissionReview back, by reason: not_json, content_type, "
    "too_large, not_review, version, missing_field, malformed_object, malformed_body, "
    "head_too_large, timeout (4xx), busy (503) and internal (500).",
    ["reason"],
)
LOOKUP_UNAVAILABLE = Counter(
    "trainhook_lookup_unavailable",
    "Admissions answered without reading sibling workloads because the API server was unreachable.",
)
CERTIFICATE_RELOADS = Counter(
    "trainhook_certificate_reloads",
    "Serving certificate loads after a change on disk, by result (loaded, failed).",
    ["result"],
)
CERTIFICATE_EXPIRY = Gauge(
    "trainhook_certificate_expiry_timestamp_seconds",
    "When the serving certificate in use expires (Unix time).",
    multiprocess_mode="mostrecent",
)


BUILD_INFO = Gauge(
    "trainhook_build_info",
    "Always 1; its labels say which Trainhook and Python answer.",
    ["version", "python"],
    multiprocess_mode="max",
)


def observe(record: Record, seconds: float) -> None:
    observe_all([(record, seconds)])


def observe_all(answered: Iterable[tuple[Record, float]]) -> None:
    """Count answered requests: each counter once per label set, and each kind's durations
    into its histogram at once, however many it counts."""
    counts: dict[tuple[str, ...], int] = {}
    durations: dict[str, list[float]] = {}
    for record, seconds in answered:
        if record.result == "rejected":
            key: tuple[str, ...] = ("error", record.error)
            counts[key] = counts.get(key, 0) + 1
            continue
        kind = record.kind if record.kind in KINDS else "other"
        key = (kind, record.operation, record.result)
        counts[key] = counts.get(key, 0) + 1
        durations.setdefault(kind, []).append(seconds)
        if record.lookup_unavailable:
            counts["lookup_unavailable",] = counts.get(("lookup_unavailable",), 0) + 1
    for kind, amounts in durations.items():
        observe_many(_child(DURATION, kind), amounts)
    for labels, count in counts.items():
        if labels[0] == "error":
            _child(ERRORS, labels[1]).inc(count)
        elif labels[0] == "lookup_unavailable":
            LOOKUP_UNAVAILABLE.inc(count)
        else:
            _child(ADMISSIONS, *labels).inc(count)


def observe_many(histogram: Any, amounts: Sequence[float]) -> None:
    """What `histogram.observe` gives for each amount, with its sum and each bucket written
    once: in multiprocess mode every write takes a lock and packs the value into the worker's
    file, two writes per observation. Uses the child's `_upper_bounds`, `_sum` and `_buckets`
    (prometheus_client's own, unchanged since 0.4); a client without them observes one by one."""
    try:
        bounds, total, buckets = histogram._upper_bounds, histogram._sum, histogram._buckets
    except AttributeError:
        for amount in amounts:
            histogram.observe(amount)
        return
    counts = [0] * len(bounds)
    for amount in amounts:
        position = bisect_left(bounds, amount)  # the first bound the amount is not above
        if position < len(bounds):
            counts[position] += 1
    total.inc(sum(amounts))
    for bucket, count in zip(buckets, counts, strict=True):
        if count:
            bucket.inc(count)


_children: dict[tuple[object, ...], Any] = {}


def _child(metric: Counter | Histogram, *labels: str) -> Any:
    """`metric.labels(*labels)`, without its checks after the first time (the child it returns
    stays the same; in a forked worker it writes to the worker's own file)."""
    key = (metric, *labels)
    child = _children.get(key)
    if child is None:
        child = _children[key] = metric.labels(*labels)
    return child


def exposition() -> tuple[bytes, str]:
    """The text a scrape of /metrics gets, and its content type."""
    # Set by the process that answers (a gunicorn worker writes its own samples file).
    BUILD_INFO.labels(__version__, platform.python_version()).set(1)
    if os.environ.get(MULTIPROC_ENV):
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
        return generate_latest(registry), CONTENT_TYPE_LATEST
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
