"""A job's pods kept pod event by pod event decide exactly what reading every pod decides."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.stored import NAMESPACE, pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import PODS
from webhook.sweeper.decide import decide
from webhook.sweeper.informers import PodTables, slim_pod, watch_of
from webhook.sweeper.job.pods import PodFacts, stopped_from_outside
from webhook.sweeper.job.podtable import PodTable
from webhook.sweeper.job.recorded import FailedRuns
from webhook.sweeper.job.state import JobState, format_time, read_job_state

from .helpers import NOW, evicted, terminated

WORKERS = 5
# What can happen to a pod, as the kubelet, the scheduler and the API server report it.
CHANGES = (
    "running",
    "not-ready",
    "pending",
    "unschedulable",
    "gated",
    "gated-owned",
    "exit-0",
    "exit-1",
    "exit-1-young",
    "restarted",
    "crash-loop",
    "image-pull",
    "evicted",
    "failed-admission",
    "phase-succeeded",
    "phase-failed",
    "terminating",
    "stale-stamp",
    "deleted",
    "recreated",
    "in-place-asked",
    "in-place-released",
)
POLICIES: tuple[dict[str, str], ...] = (
    {},
    {contract.BACKOFF_LIMIT: "2"},
    {contract.RESTART_POLICY: "ExitCode"},
    {contract.SUCCESS_POLICY: "all"},
    {contract.BACKOFF_LIMIT: "4", contract.RESTART_POLICY: "Never"},
    {  # restarted in place, released: a pod the release missed is released again
        contract.RESTART_POLICY: "RestartJobInPlace",
        contract.STATUS: json.dumps(
            {
                "state": "Running",
                "reason": "Running",
                "message": "",
                "restarts": 1,
                "startTime": "2025-01-01T00:00:00Z",
                "restartedAt": "2025-01-01T00:30:00Z",
                "cause": "exit",
                "attempt": 1,
                "inPlace": WORKERS + 1,
                "releasedAt": "2025-01-01T00:31:00Z",
            }
        ),
    },
)


def job(annotations: dict[str, str], ledger: bool) -> list[dict[str, Any]]:
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41"),
        statefulset(
            "pt-worker", role="worker", job="pt", replicas=WORKERS, annotations=annotations
        ),
    )
    if ledger:  # failed runs recorded for a live worker and for pods that are gone
        live = pod(workers, 2)["metadata"]["uid"].replace("-", "")[:8]
        runs = FailedRuns(1, {live: 2, "0badc0de": 1}).format()
        workers["metadata"]["annotations"][contract.FAILED_RUNS] = runs
    return [master, workers]


def changed(workloads: list[dict[str, Any]], index: int, change: str, generation: int) -> Any:
    """Pod `index` of the job (0: the master) after `change`; None once it is deleted."""
    owner, ordinal = (workloads[0], 0) if index == 0 else (workloads[1], index - 1)
    if change == "deleted":
        return None
    made = pod(owner, ordinal, ready=change != "not-ready")
    if change == "recreated":
        made["metadata"]["uid"] = f"recreated-{generation}-{index}"
    status = made["status"]
    if change in ("pending", "unschedulable", "gated", "gated-owned"):
        status["phase"] = "Pending"
        status.pop("containerStatuses")
    if change == "unschedulable":
        status["conditions"].append(
            {"type": "PodScheduled", "status": "False", "message": "0/3 nodes are available"}
        )
    if change == "gated":
        made["spec"]["schedulingGates"] = [{"name": contract.WAITING_FOR_ROLES}]
    if change == "gated-owned":
        made["spec"]["schedulingGates"] = [{"name": contract.WAITING_FOR_OWNED_OBJECTS}]
    if change == "exit-0":
        terminated(made, 0, reason="Completed")
    if change in ("exit-1", "exit-1-young"):
        terminated(made, 1, ago=3 if change == "exit-1-young" else 60)
    if change == "restarted":
        terminated(made, 137, reason="OOMKilled", last=True)
        status["containerStatuses"][0]["restartCount"] = 1 + generation % 3
    if change == "crash-loop":
        terminated(made, 2, last=True)
        status["containerStatuses"][0]["restartCount"] = 2
        status["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    if change == "image-pull":
        status["phase"] = "Pending"
        status["containerStatuses"][0]["state"] = {
            "waiting": {"reason": "ImagePullBackOff", "message": "no such image"}
        }
    if change == "evicted":
        evicted(made)
    if change == "failed-admission":
        status.update(phase="Failed", reason="UnexpectedAdmissionError")
        status.pop("containerStatuses")
    if change in ("phase-succeeded", "phase-failed"):
        status["phase"] = change.removeprefix("phase-").title()
        status["conditions"] = [{"type": "Ready", "status": "False"}]
    if change == "terminating":
        made["metadata"]["deletionTimestamp"] = format_time(NOW - timedelta(seconds=5))
    if change.startswith("in-place-"):
        made["metadata"]["annotations"][contract.ATTEMPT] = "1"
    if change == "in-place-released":
        made["metadata"]["annotations"][contract.RELEASED_ATTEMPT] = "1"
    if change == "stale-stamp":
        made["metadata"]["annotations"][contract.TOPOLOGY] = '{"master":1,"worker":2}'
    made["metadata"]["resourceVersion"] = str(10_000 + generation)
    return made


def every_pod_read(state: JobState) -> JobState:
    """The same state with no pod taken as plain: every pod is read one by one, as the whole-job
    pass did before the decision read PodFacts."""
    facts = replace(PodFacts.of(state.pods), gone=state.pod_facts.gone)
    return replace(
        state,
        facts=replace(facts, notable=tuple(state.pods), plain=0, running=0, plain_running={}),
    )


events = st.lists(
    st.tuples(st.integers(0, WORKERS), st.sampled_from(CHANGES), st.booleans()),
    min_size=1,
    max_size=40,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(policy=st.sampled_from(POLICIES), ledger=st.booleans(), events=events)
def test_pods_kept_event_by_event_decide_as_every_pod_read_afresh(policy, ledger, events):
    workloads = job(policy, ledger)
    tables = PodTables()
    informer = watch_of(None, PODS, contract.JOB, pod_tables=tables)  # type: ignore[arg-type]
    held: dict[str, dict[str, Any]] = {}
    for index in range(WORKERS + 1):
        made = changed(workloads, index, "running", 0)
        informer._put(copy.deepcopy(made))
        held[made["metadata"]["name"]] = made
    key = (NAMESPACE, "pt")
    stopped: dict[str, dict[str, Any]] = {}  # by uid: pods evicted, then deleted or replaced
    for generation, (index, change, look) in enumerate(events, start=1):
        made = changed(workloads, index, change, generation)
        name = changed(workloads, index, "running", 0)["metadata"]["name"]
        was = held.get(name)
        if was is not None and stopped_from_outside(was) and uid_of(made) != uid_of(was):
            stopped[str(uid_of(was))] = was
        if made is None:
            informer._remove(copy.deepcopy(held.pop(name, changed(workloads, index, "running", 0))))
        elif generation % 11 == 0:  # a relist: the cache is replaced whole
            held[name] = made
            informer._replace(
                {(NAMESPACE, n): slim_pod(copy.deepcopy(p)) for n, p in held.items()},
                {key: {(NAMESPACE, n) for n in held}},
            )
        else:
            informer._put(copy.deepcopy(made))
            held[name] = made
        if not look and generation != len(events):
            continue  # events that pile up before the job is looked at again
        kept = read_job_state(NAMESPACE, "pt", workloads=workloads, pod_table=tables.of(key))
        afresh = read_job_state(
            NAMESPACE, "pt", workloads=workloads, pods=[slim_pod(p) for p in held.values()]
        )
        # and the pods stopped from outside that are gone since, as they were
        gone = [p for uid, p in stopped.items() if uid_of(held.get(p["metadata"]["name"])) != uid]
        assert [(p.name, p.uid) for p in kept.pod_facts.gone] == sorted(
            (p["metadata"]["name"], uid_of(p)) for p in gone
        )
        afresh = replace(afresh, facts=replace(afresh.pod_facts, gone=kept.pod_facts.gone))
        assert kept.pods == afresh.pods
        assert kept.pod_facts == afresh.pod_facts
        assert decide(kept, NOW) == decide(every_pod_read(afresh), NOW)
        later = NOW + timedelta(seconds=30)  # young failures settled
        assert decide(kept, later) == decide(every_pod_read(afresh), later)


def uid_of(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str(obj["metadata"]["uid"])


def test_a_pod_that_changes_job_leaves_the_first_jobs_table():
    (one,) = stamped(statefulset("a-worker", role="worker", job="a", replicas=2))
    (two,) = stamped(statefulset("b-worker", role="worker", job="b", replicas=2))
    tables = PodTables()
    moved = pod(one, 1)
    tables.changed((NAMESPACE, "a-worker-1"), (NAMESPACE, "a"), moved)
    tables.changed((NAMESPACE, "a-worker-0"), (NAMESPACE, "a"), pod(one, 0))
    assert len(tables.of((NAMESPACE, "a"))) == 2
    relabelled = copy.deepcopy(moved)
    relabelled["metadata"]["labels"][contract.JOB] = "b"
    tables.changed((NAMESPACE, "a-worker-1"), (NAMESPACE, "b"), relabelled)
    first = read_job_state(NAMESPACE, "a", workloads=[one], pod_table=tables.of((NAMESPACE, "a")))
    assert [p.name for p in first.pods] == ["a-worker-0"]
    second = read_job_state(NAMESPACE, "b", workloads=[two], pod_table=tables.of((NAMESPACE, "b")))
    assert [p.name for p in second.intruders] == ["a-worker-1"]
    tables.changed((NAMESPACE, "a-worker-0"), None, None)
    tables.forget_if_empty((NAMESPACE, "a"))
    assert len(tables.of((NAMESPACE, "a"))) == 0


def test_a_waiting_pods_new_word_from_the_scheduler_is_the_one_the_job_reads():
    workloads = job({}, ledger=False)
    waiting = [changed(workloads, i, "unschedulable", 0) for i in range(WORKERS + 1)]
    for number, made in enumerate(waiting):  # versions no other test's pods have
        made["metadata"]["resourceVersion"] = f"waiting-{number}"
    table = PodTable(waiting)
    read_job_state(NAMESPACE, "pt", workloads=workloads, pod_table=table)
    again = changed(workloads, 1, "unschedulable", 1)
    again["metadata"]["resourceVersion"] = "waiting-again"
    again["status"]["conditions"][-1]["message"] = "0/4 nodes are available"
    table.changed(again["metadata"]["name"], again)
    state = read_job_state(NAMESPACE, "pt", workloads=workloads, pod_table=table)
    said = {view.name: view.scheduling for view in state.pod_facts.unschedulable}
    assert len(said) == WORKERS + 1
    assert said[again["metadata"]["name"]] == "0/4 nodes are available"
    assert list(state.pod_facts.unschedulable) == [p for p in state.pods if p.scheduling]
