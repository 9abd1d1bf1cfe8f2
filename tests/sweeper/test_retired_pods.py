"""A pod whose old restarts its workload's ledger counts is read like a plain pod: a Ready flip
of it costs the decision that pod alone, and decides what reading every pod one by one does."""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import Any

from tests.support.stored import NAMESPACE, pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.actions import Emit
from webhook.sweeper.decide import decide
from webhook.sweeper.decide.policy import tally
from webhook.sweeper.job.pods import PodFacts
from webhook.sweeper.job.podtable import PodTable
from webhook.sweeper.job.recorded import FailedRuns
from webhook.sweeper.job.state import JobState, WorkloadViews, read_job_state

from .helpers import NOW, terminated

WORKERS = 6


def restarted_job(
    ledger: bool, ago: int = 600
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A PyTorch job whose every pod restarted once, `ago` seconds before NOW; with `ledger`,
    the failed runs recorded on each workload as the sweeper writes them."""
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations={}, rv="41"),
        statefulset("pt-worker", role="worker", job="pt", replicas=WORKERS, annotations={}),
    )
    pods = []
    for owner, count in ((master, 1), (workers, WORKERS)):
        uids = {}
        for index in range(count):
            made = pod(owner, index, restarts=1)
            terminated(made, 1, ago=ago, last=True)
            made["metadata"]["resourceVersion"] = f"{ago}0{index}"  # a version per status
            pods.append(made)
            uids[made["metadata"]["uid"].replace("-", "")[:8]] = 1
        if ledger:
            owner["metadata"]["annotations"][contract.FAILED_RUNS] = FailedRuns(0, uids).format()
    return [master, workers], pods


def read(workloads: list[dict[str, Any]], table: PodTable) -> JobState:
    return read_job_state(NAMESPACE, "pt", workloads=workloads, pod_table=table)


def every_pod_read(state: JobState) -> JobState:
    """The same state with every pod read one by one (none plain, none retired)."""
    facts = replace(PodFacts.of(state.pods), gone=state.pod_facts.gone)
    return replace(
        state,
        facts=replace(facts, notable=tuple(state.pods), plain=0, running=0, plain_running={}),
    )


def not_ready(obj: dict[str, Any], version: str) -> dict[str, Any]:
    flipped = copy.deepcopy(obj)
    flipped["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    flipped["metadata"]["resourceVersion"] = version
    return flipped


def test_pods_whose_old_restarts_the_ledger_counts_are_not_read_one_by_one():
    workloads, pods = restarted_job(ledger=True)
    table = PodTable(pods)
    state = read(workloads, table)
    assert state.pod_facts.notable == ()
    assert state.pod_facts.plain == state.pod_facts.running == WORKERS + 1
    assert sum(len(group.pods) for group in state.pod_facts.retired.values()) == WORKERS + 1
    assert tally(state, NOW, set()).settled == WORKERS + 1
    assert decide(state, NOW) == decide(every_pod_read(state), NOW)


def test_a_ready_flip_of_a_counted_pod_looks_at_that_pod_alone():
    workloads, pods = restarted_job(ledger=True)
    table = PodTable(pods)
    read(workloads, table)
    before = table.retirements
    flipped = not_ready(pods[3], "99")
    table.changed(flipped["metadata"]["name"], flipped)
    state = read(workloads, table)
    # its old reading given back and its new one retired: not one other pod looked at
    assert table.retirements - before == 2
    assert state.pod_facts.notable == ()
    assert state.pod_facts.running == WORKERS + 1
    assert decide(state, NOW) == decide(every_pod_read(state), NOW)


def test_a_workload_written_again_with_the_same_ledger_keeps_the_ledger_it_was_read_with(
    monkeypatch,
):
    workloads, pods = restarted_job(ledger=True)
    table, views = PodTable(pods), WorkloadViews()

    def look(objects: list[dict[str, Any]]) -> JobState:
        return read_job_state(
            NAMESPACE, "pt", workloads=objects, pod_table=table, workload_views=views
        )

    look(workloads)
    parsed: list[str | None] = []
    parse = FailedRuns.parse

    def counted(raw: str | None) -> FailedRuns:
        parsed.append(raw)
        return parse(raw)

    monkeypatch.setattr(FailedRuns, "parse", counted)
    written = copy.deepcopy(workloads)
    for obj in written:  # the job's status written on each: a new version, the same ledger
        obj["metadata"]["resourceVersion"] += "1"
        obj["metadata"]["annotations"][contract.STATUS] = '{"state":"Running"}'
    before = table.retirements
    state = look(written)
    # not one record read again, not one pod looked at again
    assert parsed == []
    assert table.retirements == before
    assert decide(state, NOW) == decide(every_pod_read(state), NOW)
    recorded = written[1]["metadata"]["annotations"]
    changed = FailedRuns(1, FailedRuns.parse(recorded[contract.FAILED_RUNS]).pods).format()
    parsed.clear()
    recorded[contract.FAILED_RUNS] = changed
    written[1]["metadata"]["resourceVersion"] += "2"
    state = look(written)
    assert parsed == [changed]
    assert decide(state, NOW) == decide(every_pod_read(state), NOW)


def test_restarts_not_yet_recorded_keep_their_pods_notable_until_the_ledger_counts_them():
    workloads, pods = restarted_job(ledger=False)
    table = PodTable(pods)
    state = read(workloads, table)
    assert len(state.pod_facts.notable) == WORKERS + 1
    assert table.retirements == 0
    decision = decide(state, NOW)
    assert decision == decide(every_pod_read(state), NOW)
    recorded, _ = restarted_job(ledger=True)
    state = read(recorded, table)
    assert state.pod_facts.notable == ()
    assert table.retirements == WORKERS + 1


def test_a_counted_run_still_in_its_grace_period_is_not_yet_counted_against_the_backoff():
    workloads, pods = restarted_job(ledger=True, ago=3)
    state = read(workloads, PodTable(pods))
    assert state.pod_facts.notable == ()
    counts = tally(state, NOW, set())
    assert counts.settled == 0
    assert counts.pending == NOW + timedelta(seconds=7)
    assert counts == tally(every_pod_read(state), NOW, set())
    assert decide(state, NOW) == decide(every_pod_read(state), NOW)
    later = NOW + timedelta(seconds=30)
    assert tally(state, later, set()).settled == WORKERS + 1
    assert decide(state, later) == decide(every_pod_read(state), later)


def test_a_ledger_that_no_longer_counts_a_pods_runs_brings_it_back():
    workloads, pods = restarted_job(ledger=True)
    table = PodTable(pods)
    read(workloads, table)
    shrunk = copy.deepcopy(workloads)
    annotations = shrunk[1]["metadata"]["annotations"]
    ledger = FailedRuns.parse(annotations[contract.FAILED_RUNS])
    dropped = sorted(ledger.pods)[0]
    kept = {uid: n for uid, n in ledger.pods.items() if uid != dropped}
    annotations[contract.FAILED_RUNS] = FailedRuns(0, kept).format()
    shrunk[1]["metadata"]["resourceVersion"] = "77"
    state = read(shrunk, table)
    assert [p.uid8 for p in state.pod_facts.notable] == [dropped]
    assert decide(state, NOW) == decide(every_pod_read(state), NOW)


def test_a_backoff_limit_exceeded_by_counted_runs_names_the_latest_of_them():
    workloads, pods = restarted_job(ledger=True)
    for workload in workloads:
        workload["spec"]["template"]["metadata"]["annotations"][contract.BACKOFF_LIMIT] = "2"
    workloads = stamped(*workloads)
    terminated(pods[4], 1, ago=300, last=True)  # pt-worker-3's run, the latest
    pods[4]["metadata"]["resourceVersion"] = "later"
    state = read(workloads, PodTable(pods))
    assert state.pod_facts.notable == ()
    decision = decide(state, NOW)
    assert decision.phase == "Failed"
    said = [
        a.message
        for a in decision.actions
        if isinstance(a, Emit) and a.reason == "BackoffLimitExceeded"
    ]
    assert said and all("last: pod pt-worker-3: container pytorch exited" in m for m in said)
    assert decision == decide(every_pod_read(state), NOW)


def test_pods_a_ledger_counts_at_once_or_a_few_later_keep_their_runs_oldest_first():
    many = 40
    (workers,) = stamped(
        statefulset("pt-worker", role="worker", job="pt", replicas=many, annotations={})
    )
    pods, uids = [], []
    for index in range(many):
        made = pod(workers, index, restarts=1)
        terminated(made, 1, ago=600 + index * 37 % many, last=True)  # finished in no order
        pods.append(made)
        uids.append(made["metadata"]["uid"].replace("-", "")[:8])
    table = PodTable(pods)

    def counting(first: int) -> list[dict[str, Any]]:
        ledger = FailedRuns(0, dict.fromkeys(uids[:first], 1)).format()
        counted = copy.deepcopy(workers)
        counted["metadata"]["annotations"][contract.FAILED_RUNS] = ledger
        counted["metadata"]["resourceVersion"] = str(first)
        return [counted]

    def oldest_first(state: JobState) -> list[str]:
        return [uid for _, _, _, uid in state.pod_facts.retired_runs]

    def by_time(counted: int) -> list[str]:
        return sorted(uids[:counted], key=lambda uid: (-(uids.index(uid) * 37 % many), uid))

    for counted in (30, 34, many):  # thirty at once, then four and six more
        state = read_job_state(NAMESPACE, "pt", workloads=counting(counted), pod_table=table)
        assert oldest_first(state) == by_time(counted)
        assert len(state.pod_facts.notable) == many - counted
    assert table.retirements == many
