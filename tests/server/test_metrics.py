"""Admission metrics as a scrape shows them, with the process's own registry."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Histogram

from webhook.server import metrics
from webhook.server.admission import Record


def admissions(kind: str) -> float:
    labels = {"kind": kind, "operation": "CREATE", "result": "allowed"}
    return REGISTRY.get_sample_value("trainhook_admissions_total", labels) or 0.0


def test_kinds_the_webhook_is_sent_are_counted_by_name() -> None:
    before = admissions("StatefulSet")

    metrics.observe(Record("allowed", kind="StatefulSet", operation="CREATE"), 0.001)

    assert admissions("StatefulSet") == before + 1


def test_any_other_kind_a_client_names_is_counted_as_other() -> None:
    def timed() -> float:
        count = "trainhook_admission_duration_seconds_count"
        return REGISTRY.get_sample_value(count, {"kind": "other"}) or 0.0

    before, timed_before = admissions("other"), timed()

    for kind in ("Deployment", "x" * 200, "Pod-1"):
        metrics.observe(Record("allowed", kind=kind, operation="CREATE"), 0.001)

    assert (admissions("other"), timed()) == (before + 3, timed_before + 3)
    assert admissions("Deployment") == 0.0


def exposition_of(observed: Callable[[Histogram], None]) -> dict[str, float]:
    registry = CollectorRegistry()
    histogram = Histogram("seconds", "", registry=registry, buckets=(0.001, 0.01, 0.1))
    observed(histogram)
    return {
        f"{sample.name}{sample.labels}": sample.value
        for family in registry.collect()
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


AMOUNTS = [0.0005, 0.001, 0.0010001, 0.02, 0.1, 0.3, 7.0, 0.001, 0.0]


def test_durations_observed_together_give_the_scrape_of_each_observed_alone() -> None:
    def one_by_one(histogram: Histogram) -> None:
        for amount in AMOUNTS:
            histogram.observe(amount)

    together = exposition_of(lambda histogram: metrics.observe_many(histogram, AMOUNTS))
    alone = exposition_of(one_by_one)

    assert together.pop("seconds_sum{}") == pytest.approx(alone.pop("seconds_sum{}"))
    assert together == alone
    assert together["seconds_bucket{'le': '0.001'}"] == 4.0
    assert together["seconds_bucket{'le': '+Inf'}"] == 9.0


def test_a_histogram_without_prometheus_clients_own_buckets_is_observed_one_by_one() -> None:
    class Plain:
        def __init__(self) -> None:
            self.observed: list[float] = []

        def observe(self, amount: float) -> None:
            self.observed.append(amount)

    plain = Plain()

    metrics.observe_many(plain, AMOUNTS)

    assert plain.observed == AMOUNTS


def test_a_batch_of_records_counts_each_kinds_durations_in_its_histogram() -> None:
    def bucket(kind: str, bound: str) -> float:
        name = "trainhook_admission_duration_seconds_bucket"
        return REGISTRY.get_sample_value(name, {"kind": kind, "le": bound}) or 0.0

    before = [bucket("Job", "0.001"), bucket("Job", "0.005"), bucket("Pod", "0.001")]
    answered = [
        (Record("mutated", kind="Job", operation="CREATE"), 0.0008),
        (Record("mutated", kind="Job", operation="CREATE"), 0.004),
        (Record("rejected", error="not_json"), 0.0001),
        (Record("allowed", kind="Pod", operation="CREATE"), 0.0002),
    ]

    metrics.observe_all(answered)

    after = [bucket("Job", "0.001"), bucket("Job", "0.005"), bucket("Pod", "0.001")]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1.0, 2.0, 1.0]
