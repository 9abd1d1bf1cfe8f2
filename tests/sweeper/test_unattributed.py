"""A job whose workloads the webhook did not admit (no recorded creator) is managed and said so,
but no outcome recorded only on such workloads makes the sweeper clean, scale down or delete."""

from __future__ import annotations

from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.actions import Create, Delete, Emit, Patch
from webhook.sweeper.report.describe import JobObjects, describe
from webhook.sweeper.report.status import format_table, job_rows

from .helpers import NOW, decision, described

FORGED = {
    contract.PHASE: "Failed",
    contract.REASON: "BackoffLimitExceeded",
    contract.FINISHED_AT: "2024-12-31T00:00:00Z",
    contract.TTL_SECONDS_AFTER_FINISHED: "0",
    contract.CLEAN_POD_POLICY: "All",
}


def job(creator: str | None, outcome_on_workers: dict[str, str] | None = None) -> list[Any]:
    """A PyTorch job of a master and two workers, stamped; `creator` None: neither workload
    records one (made before the webhook recorded creators, or without it)."""
    master = statefulset("pt-master", role="master", job="pt", creator=creator)
    workers = statefulset(
        "pt-worker",
        role="worker",
        job="pt",
        replicas=2,
        annotations=outcome_on_workers,
        creator=creator,
    )
    return stamped(master, workers)


def running(master: dict[str, Any], workers: dict[str, Any]) -> list[Any]:
    return [pod(master, 0), pod(workers, 0), pod(workers, 1)]


NOT_ADMITTED = (
    "StatefulSet {name} is labelled trainhook.io/job=pt but records no creator "
    "(trainhook.io/created-by): the webhook did not admit it into the job (it was made before "
    "creators were recorded, or while the webhook was not asked); the sweeper manages it with "
    "the job but acts on no outcome recorded on it (no pod cleanup, scale-down or deletion): "
    "recreate it to have it attributed"
)


def test_a_job_no_workload_of_which_records_a_creator_is_managed_and_each_workload_said_so():
    master, workers = job(creator=None)

    actions = decision("pt", [master, workers], running(master, workers)).actions

    notices = [a for a in actions if isinstance(a, Emit) and a.reason == "NotAttributed"]
    assert [(a.type, a.involved.name, a.message) for a in notices] == [
        ("Warning", name, NOT_ADMITTED.format(name=name)) for name in ("pt-master", "pt-worker")
    ]
    # Named after what they say: the next reconcile's Events are the same ones, found to exist.
    again = decision("pt", [master, workers], running(master, workers)).actions
    assert [a.name for a in again if isinstance(a, Emit) and a.reason == "NotAttributed"] == [
        a.name for a in notices
    ]
    assert "create Service ml/pt" in described([a for a in actions if isinstance(a, Create)])


def test_an_outcome_recorded_only_on_unattributed_workloads_cleans_scales_and_deletes_nothing():
    master, workers = job(creator=None, outcome_on_workers=FORGED)

    actions = decision("pt", [master, workers], running(master, workers)).actions

    assert [a for a in actions if isinstance(a, Delete | Patch | Create)] == []
    (unverified,) = [a for a in actions if isinstance(a, Emit) and a.reason == "UnverifiedOutcome"]
    assert (unverified.type, unverified.involved.name) == ("Warning", "pt-worker")
    assert unverified.message == (
        "StatefulSet pt-worker records trainhook.io/phase=Failed but no creator "
        "(trainhook.io/created-by): the webhook did not admit it into job pt, so the sweeper does "
        "not clean pods, scale down or delete the job on that outcome; delete the job yourself, "
        "or recreate the workload without it"
    )


def test_the_same_outcome_on_workloads_the_webhook_admitted_ends_the_job():
    master, workers = job(creator="alice", outcome_on_workers=FORGED)

    actions = decision("pt", [master, workers], running(master, workers)).actions

    assert {"delete Pod ml/pt-master-0", "delete Pod ml/pt-worker-1"} <= set(described(actions))
    patched = {a.name: a.patch for a in actions if isinstance(a, Patch)}
    assert patched["pt-master"]["spec"] == {"replicas": 0}


def test_an_outcome_a_workload_the_webhook_admitted_records_wins_over_an_unattributed_one():
    master, workers = job(creator="alice", outcome_on_workers=FORGED)
    del workers["metadata"]["annotations"][contract.CREATED_BY]
    master["metadata"]["annotations"].update(
        {
            contract.PHASE: "Succeeded",
            contract.REASON: "Completed",
            contract.FINISHED_AT: "2025-01-01T00:59:00Z",
        }
    )

    actions = decision("pt", [master, workers], running(master, workers)).actions

    patched = {a.name: a.patch for a in actions if isinstance(a, Patch)}
    assert patched["pt-worker"]["metadata"]["labels"] == {contract.PHASE: "Succeeded"}
    assert not [a for a in actions if isinstance(a, Emit) and a.reason == "UnverifiedOutcome"]


def test_status_and_describe_show_the_unattributed_workloads_and_the_unverified_outcome():
    master, workers = job(creator=None, outcome_on_workers=FORGED)
    pods = running(master, workers)

    (row,) = job_rows([master, workers], pods, NOW)
    assert (row.phase, row.reason) == ("Failed", "BackoffLimitExceeded (unverified)")
    assert row.unattributed == ("StatefulSet pt-master", "StatefulSet pt-worker")
    header, line = format_table([row], with_namespace=False).splitlines()
    assert header.split()[-1] == "UNATTRIBUTED" and line.split()[-1] == "2"
    text = describe(JobObjects("ml", "pt", (master, workers), tuple(pods), None, None, ()), NOW)
    assert (
        "Unattributed: StatefulSet pt-master, StatefulSet pt-worker: no trainhook.io/created-by, "
        "not admitted by the webhook; the sweeper acts on no outcome recorded only on them"
    ) in text.splitlines()


def test_a_job_whose_workloads_record_their_creator_shows_no_unattributed_column():
    master, workers = job(creator="alice")

    (row,) = job_rows([master, workers], running(master, workers), NOW)

    assert row.unattributed == ()
    assert "UNATTRIBUTED" not in format_table([row], with_namespace=False)
