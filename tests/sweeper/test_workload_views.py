"""A job's StatefulSets are read once per version: what the sweeper decides on kept readings is
what it decides on readings made afresh, and an unchanged StatefulSet is not read again."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.stored import NAMESPACE, pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.decide import chain, decide
from webhook.sweeper.job import state as state_module
from webhook.sweeper.job.recorded import FailedRuns
from webhook.sweeper.job.state import WorkloadViews, read_job_state

from .helpers import NOW

# What happens to a StatefulSet of a running job: the sweeper's own records, a user's edit,
# the webhook's restamp, the same version delivered again, a new object of the same name.
CHANGES = (
    "status",
    "succeeded",
    "failed-runs",
    "replicas",
    "stamp",
    "requests",
    "phase-label",
    "redelivered",
    "recreated",
)


def job() -> list[dict[str, Any]]:
    return stamped(
        statefulset("pt-master", role="master", job="pt", rv="41"),
        statefulset("pt-worker", role="worker", job="pt", replicas=3, rv="42"),
    )


def changed(workload: dict[str, Any], change: str, generation: int) -> dict[str, Any]:
    """A new object for the StatefulSet after `change`, as the watch delivers it."""
    made = copy.deepcopy(workload)
    metadata, template = made["metadata"], made["spec"]["template"]
    annotations = metadata["annotations"]
    if change == "status":
        annotations[contract.STATUS] = json.dumps(
            {"state": "Running", "reason": "Running", "restarts": generation % 3}
        )
    elif change == "succeeded":
        annotations[contract.SUCCEEDED] = "0"
    elif change == "failed-runs":
        annotations[contract.FAILED_RUNS] = FailedRuns(generation % 4, {}).format()
    elif change == "replicas":
        made["spec"]["replicas"] = 1 + generation % 4
    elif change == "stamp":
        template["metadata"]["annotations"][contract.TOPOLOGY] = json.dumps(
            {"master": 1, "worker": 1 + generation % 4}, separators=(",", ":")
        )
    elif change == "requests":
        container = template["spec"]["containers"][0]
        container["resources"] = {"requests": {"cpu": f"{1 + generation % 5}"}}
    elif change == "phase-label":
        metadata["labels"][contract.PHASE] = "Running" if generation % 2 else "Restarting"
    elif change == "recreated":
        metadata["uid"] = f"recreated-{generation}-{metadata['name']}"
        metadata["resourceVersion"] = "1"  # a new object's versions are its own
        return made
    if change != "redelivered":
        metadata["resourceVersion"] = str(1000 + generation)
    return made


def pods_of(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [pod(w, index) for w in workloads for index in range(w["spec"]["replicas"])]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    events=st.lists(st.tuples(st.integers(0, 1), st.sampled_from(CHANGES)), min_size=1, max_size=30)
)
def test_a_job_decided_on_kept_readings_is_decided_as_on_readings_made_afresh(events):
    workloads = job()
    views = WorkloadViews()
    for generation, (which, change) in enumerate(events, start=1):
        workloads[which] = changed(workloads[which], change, generation)
        pods = pods_of(workloads)
        kept = read_job_state(NAMESPACE, "pt", workloads=workloads, pods=pods, workload_views=views)
        afresh = read_job_state(NAMESPACE, "pt", workloads=workloads, pods=pods)
        assert kept == afresh
        assert decide(kept, NOW) == decide(afresh, NOW)


@pytest.fixture
def readings(monkeypatch):
    """The names of the StatefulSets read, in order."""
    read: list[str] = []
    reader = state_module._read_workload

    def counted(obj, namespace, before=None):
        read.append(obj["metadata"]["name"])
        return reader(obj, namespace, before)

    monkeypatch.setattr(state_module, "_read_workload", counted)
    return read


def test_a_pod_event_reads_no_statefulset_again_and_a_changed_one_alone(readings):
    workloads = job()
    views = WorkloadViews()
    pods = pods_of(workloads)
    read_job_state(NAMESPACE, "pt", workloads=workloads, pods=pods, workload_views=views)
    assert readings == ["pt-master", "pt-worker"]

    pods[1]["status"]["containerStatuses"][0]["restartCount"] = 1  # a pod event
    again = read_job_state(NAMESPACE, "pt", workloads=workloads, pods=pods, workload_views=views)
    assert readings == ["pt-master", "pt-worker"]

    workloads[1] = changed(workloads[1], "replicas", 7)  # 4 workers
    changed_state = read_job_state(
        NAMESPACE, "pt", workloads=workloads, pods=pods, workload_views=views
    )
    assert readings == ["pt-master", "pt-worker", "pt-worker"]
    assert [v.workload.replicas for v in again.workloads] == [1, 3]
    assert [v.workload.replicas for v in changed_state.workloads] == [1, 4]


def test_a_workload_gone_from_its_job_is_dropped_and_a_job_gone_keeps_nothing(readings):
    workloads = job()
    views = WorkloadViews()
    read_job_state(NAMESPACE, "pt", workloads=workloads, workload_views=views)
    assert len(views) == 2
    read_job_state(NAMESPACE, "pt", workloads=workloads[1:], workload_views=views)
    assert len(views) == 1
    read_job_state(NAMESPACE, "pt", workloads=workloads, workload_views=views)
    assert readings == ["pt-master", "pt-worker", "pt-master"]  # the master read again
    read_job_state(NAMESPACE, "pt", workloads=[], workload_views=views)  # the job is gone
    assert len(views) == 0


def test_a_workload_without_a_resource_version_is_read_every_time(readings):
    (workload,) = stamped(statefulset("pt-worker", role="worker", job="pt", replicas=2))
    del workload["metadata"]["resourceVersion"]
    views = WorkloadViews()
    first = read_job_state(NAMESPACE, "pt", workloads=[workload], workload_views=views)
    workload["spec"]["replicas"] = 5
    second = read_job_state(NAMESPACE, "pt", workloads=[workload], workload_views=views)
    assert readings == ["pt-worker", "pt-worker"]
    assert (first.workloads[0].workload.replicas, second.workloads[0].workload.replicas) == (2, 5)
    assert len(views) == 0


def test_a_refused_workload_is_reported_at_every_reconcile_and_never_kept(readings):
    (workload,) = stamped(statefulset("pt-worker", role="worker", job="pt", replicas=2))
    workload["metadata"]["annotations"][contract.NPROC_PER_NODE] = "many"
    views = WorkloadViews()
    for _ in range(2):
        state = read_job_state(NAMESPACE, "pt", workloads=[workload], workload_views=views)
        assert [p.name for p in state.problems] == ["pt-worker"]
    assert readings == ["pt-worker", "pt-worker"]
    assert len(views) == 0


def test_a_running_sweeper_restamps_a_scaled_statefulset_and_keeps_nothing_of_a_deleted_job(
    emulator, kube, monkeypatch
):
    monkeypatch.setattr(chain, "SETTLE", timedelta(0))  # a changed topology is acted on at once
    (workers,) = stamped(statefulset("pt-worker", role="worker", job="pt", replicas=2))
    (scaled,) = stamped(statefulset("pt-worker", role="worker", job="pt", replicas=3))
    with sweeping(kube) as running:
        created = kube.create(STATEFULSETS, NAMESPACE, workers)
        for index in range(2):
            kube.create(PODS, NAMESPACE, pod(created, index))
        running.reconciled(NAMESPACE, "pt")
        kept = len(running.sweeper.workload_views)

        kube.patch(STATEFULSETS, NAMESPACE, "pt-worker", {"spec": {"replicas": 3}})
        eventually(
            lambda: topology_of(emulator) == topology_of_object(scaled),
            what="the scaled StatefulSet restamped for 3 workers",
        )

        kube.delete(STATEFULSETS, NAMESPACE, "pt-worker", {"propagationPolicy": "Background"})
        running.reconciled(NAMESPACE, "pt")
        left = len(running.sweeper.workload_views)
    assert kept == 1
    assert left == 0


def topology_of_object(workload: dict[str, Any]) -> str:
    return str(workload["spec"]["template"]["metadata"]["annotations"][contract.TOPOLOGY])


def topology_of(emulator) -> str | None:
    (found,) = emulator.objects(STATEFULSETS, NAMESPACE)
    return (found["spec"]["template"]["metadata"].get("annotations") or {}).get(contract.TOPOLOGY)
