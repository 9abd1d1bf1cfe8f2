"""A Kueue job that ends marks its pod group finished, so Kueue frees the group's quota; one
preempted is requeued whole and restarts without counting."""

from __future__ import annotations

import json
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.actions import Delete, Emit, Patch

from .helpers import decision, of_type, terminated

KUEUE = {contract.SCHEDULER: "kueue", contract.QUEUE: "team-a"}
MARKER = {contract.KUEUE_RETRIABLE_IN_GROUP: "false"}


def job(**settings: str) -> list[dict[str, Any]]:
    annotations = {**KUEUE, **settings}
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    return stamped(master, worker)


def test_a_kueue_job_that_succeeds_marks_one_pod_before_it_scales_its_pods_away() -> None:
    workloads = job()
    master, workers = workloads
    pods = [terminated(pod(master, 0), 0, reason="Completed"), pod(workers, 0), pod(workers, 1)]
    patches = of_type(decision("pt", workloads, pods).actions, Patch)
    assert [(p.resource, p.name, p.patch) for p in patches[:1]] == [
        (PODS, "pt-master-0", {"metadata": {"annotations": MARKER}})
    ]
    assert [p.patch["spec"] for p in patches[1:] if p.resource == STATEFULSETS] == [
        {"replicas": 0},
        {"replicas": 0},
    ]


def test_a_kueue_job_that_fails_marks_its_group_too_and_only_once() -> None:
    workloads = job(**{contract.FAILURE_POLICY: "reason=OOMKilled -> fail"})
    master, workers = workloads
    oom = terminated(pod(workers, 1, restarts=1), 137, reason="OOMKilled", last=True)
    pods = [pod(master, 0), pod(workers, 0), oom]
    marked = [
        p.name
        for p in of_type(decision("pt", workloads, pods).actions, Patch)
        if p.resource == PODS
    ]
    assert marked == ["pt-master-0"]
    pods[0]["metadata"]["annotations"].update(MARKER)
    pods[0]["metadata"]["resourceVersion"] += "1"  # a changed pod is a new version
    marked = [
        p.name
        for p in of_type(decision("pt", workloads, pods).actions, Patch)
        if p.resource == PODS
    ]
    assert marked == []


def test_a_job_without_kueue_gets_no_marker() -> None:
    master = statefulset("pt-master", role="master", job="pt", rv="41")
    [master] = stamped(master)
    done = terminated(pod(master, 0), 0, reason="Completed")
    assert not [
        p for p in of_type(decision("pt", [master], [done]).actions, Patch) if p.resource == PODS
    ]


def test_a_preempted_kueue_job_restarts_free_and_leaves_its_group_retriable() -> None:
    workloads = job(**{contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "0"})
    master, workers = workloads
    stopped = pod(workers, 0, terminating=True, exit_code=137)
    stopped["status"]["conditions"].append(
        {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvicted"}
    )
    actions = decision(
        "pt", workloads, [pod(master, 0), stopped, pod(workers, 1)], records=True
    ).actions
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert event.message.startswith(
        "restarting all 2 pod(s) of the job together (not counted against the backoff limit: "
        "preemption): pod pt-worker-0 was preempted (TerminationTarget WorkloadEvicted)"
    )
    assert [d.name for d in of_type(actions, Delete)] == ["pt-master-0", "pt-worker-1"]
    assert not [p for p in of_type(actions, Patch) if p.resource == PODS]
    status = json.loads(
        next(p for p in of_type(actions, Patch) if p.name == "pt-master").patch["metadata"][
            "annotations"
        ][contract.STATUS]
    )
    assert (status["restarts"], status["disruptions"]) == (0, {"preemption": 1})


def test_the_sweeper_cache_keeps_what_says_kueue_stopped_a_pod() -> None:
    from webhook.sweeper.informers import slim_pod

    [master] = stamped(statefulset("pt-master", role="master", job="pt", annotations=KUEUE))
    stopped = pod(master, 0, exit_code=137)
    stopped["status"]["conditions"].append(
        {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvicted"}
    )
    stopped["metadata"]["annotations"].update(MARKER)
    held = slim_pod(stopped)
    assert {"type": "TerminationTarget", "status": "True", "reason": "WorkloadEvicted"} in held[
        "status"
    ]["conditions"]
    assert held["metadata"]["annotations"][contract.KUEUE_RETRIABLE_IN_GROUP] == "false"
