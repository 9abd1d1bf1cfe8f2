"""`trainhook status` and `trainhook describe` name a StatefulSet that starts its pods one after
the other although its job did not ask for it, and say how to get out of it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.report.describe import JobObjects, describe
from webhook.sweeper.report.status import format_table, job_rows

NOW = datetime(2025, 1, 1, 2, 0, 0, tzinfo=UTC)
TRAP = (
    "StatefulSet pt-worker has podManagementPolicy OrderedReady: later pods wait for rank 0 to be "
    "Ready, rank 0 for them; recreate it: kubectl delete statefulset pt-worker -n ml "
    "--cascade=orphan, then apply it again"
)


def labelled_after_creation(
    worker_annotations: dict[str, str] | None = None,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A job whose worker StatefulSet was created before it was labelled: OrderedReady, so only
    its first pod exists."""
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset(
            "pt-worker", role="worker", job="pt", replicas=3, annotations=worker_annotations
        ),
    )
    workers["spec"]["podManagementPolicy"] = "OrderedReady"
    return [master, workers], [pod(master, 0), pod(workers, 0, ready=False)]


def test_status_names_the_ordered_ready_statefulset_under_the_table_with_the_way_out() -> None:
    workloads, pods = labelled_after_creation()
    rows = job_rows(workloads, pods, NOW)
    assert rows[0].ordered_ready == ("pt-worker",)
    lines = format_table(rows, with_namespace=False).splitlines()
    assert lines[2:] == ["", f"pt: {TRAP}"]


def test_describe_names_the_ordered_ready_statefulset_with_the_way_out() -> None:
    workloads, pods = labelled_after_creation()
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, ()), NOW)
    assert f"Start order:  {TRAP}" in text.splitlines()


def test_a_job_that_asks_for_ordered_start_or_has_finished_is_not_named() -> None:
    workloads, pods = labelled_after_creation({contract.ORDERED_START: "true"})
    assert job_rows(workloads, pods, NOW)[0].ordered_ready == ()
    workloads, pods = labelled_after_creation()
    for workload in workloads:
        workload["metadata"]["annotations"].update(
            {contract.PHASE: "Succeeded", contract.REASON: "Completed"}
        )
    (row,) = job_rows(workloads, pods, NOW)
    assert row.ordered_ready == ()
    assert len(format_table([row], with_namespace=False).splitlines()) == 2
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, ()), NOW)
    assert "Start order:" not in text
