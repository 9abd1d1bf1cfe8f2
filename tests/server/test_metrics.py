"""Admission metrics as a scrape shows them, with the process's own registry."""

from __future__ import annotations

from prometheus_client import REGISTRY

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
