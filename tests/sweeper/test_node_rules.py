"""Failure rules on the node a rank runs on: a condition or taint node-problem-detector (or a
GPU health agent) sets on a node restarts the job, and `exclude-node` keeps the recreated pods
off that node: bounded, recorded with the restart, left to Kueue for the jobs it admits, gone
when the job ends, and under an in-place restart only the pods on the node are recreated."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.actions import Decision, Delete, Emit
from webhook.sweeper.decide import decide
from webhook.sweeper.job.nodes import node_views
from webhook.sweeper.job.state import format_time
from webhook.sweeper.report.describe import JobObjects, describe

from .helpers import NOW, of_type, state_of, status_of
from .test_in_place import pod_patches, ranked

GPU_RULES = "node-condition=GpuHealthy:False -> restart-job max=3 exclude-node"


def pytorch(policy: str = GPU_RULES, **settings: str) -> list[dict[str, Any]]:
    annotations = {contract.FAILURE_POLICY: policy, **settings}
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    return stamped(master, worker)


def node(
    name: str, *, conditions: dict[str, str] | None = None, taints: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A node as node-problem-detector leaves it: its conditions and taints."""
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": [{"key": key, "effect": "NoSchedule"} for key in taints]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                *({"type": t, "status": s} for t, s in (conditions or {}).items()),
            ]
        },
    }


def on(obj: dict[str, Any], node_name: str) -> dict[str, Any]:
    obj["spec"]["nodeName"] = node_name
    return obj


def running(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    master, workers = workloads
    return [on(pod(master, 0), "gpu-1"), on(pod(workers, 0), "gpu-2"), on(pod(workers, 1), "gpu-3")]


def deciding(
    workloads: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    nodes: list[dict[str, Any]],
    now: datetime = NOW,
) -> Decision:
    return decide(replace(state_of("pt", workloads, pods), nodes=node_views(nodes)), now)


def healthy() -> list[dict[str, Any]]:
    return [node("gpu-1"), node("gpu-2"), node("gpu-3")]


def sick(name: str = "gpu-3") -> list[dict[str, Any]]:
    return [
        n if n["metadata"]["name"] != name else node(name, conditions={"GpuHealthy": "False"})
        for n in healthy()
    ]


def restart_event(actions: Any) -> Emit:
    (event,) = [e for e in of_type(actions, Emit) if e.reason == "Restarting"]
    assert isinstance(event, Emit)
    return event


def recording(workloads: list[dict[str, Any]], **status: Any) -> None:
    value = {"state": "Running", "restarts": 1, "startTime": "2025-01-01T00:00:00Z", **status}
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(value)


def test_a_rank_on_a_node_that_turns_sick_restarts_the_job_off_that_node() -> None:
    workloads = pytorch()
    actions = deciding(workloads, running(workloads), sick("gpu-3")).actions
    assert restart_event(actions).message == (
        "restarting all 3 pod(s) of the job together (restart 1): pod pt-worker-1: its node "
        "gpu-3 has condition GpuHealthy=False; failure-policy rule 1 "
        f"({GPU_RULES}); node gpu-3 excluded: the pods keep off it (1 of at most 8)"
    )
    assert [d.name for d in of_type(actions, Delete)] == [
        "pt-master-0",
        "pt-worker-0",
        "pt-worker-1",
    ]
    status = status_of(actions)
    assert (status["reason"], status["excludedNodes"], status["fired"]) == (
        "NodeCondition",
        ["gpu-3"],
        {"policy/1": 1},
    )
    assert status_of(actions, "pt-worker")["excludedNodes"] == ["gpu-3"]


def test_healthy_nodes_or_a_condition_with_another_status_fire_nothing() -> None:
    workloads = pytorch()
    assert not of_type(deciding(workloads, running(workloads), healthy()).actions, Delete)
    fine = [*healthy()[:2], node("gpu-3", conditions={"GpuHealthy": "True"})]
    assert not of_type(deciding(workloads, running(workloads), fine).actions, Delete)
    # a rank not bound to a node yet, or a node the sweeper cannot read, is no fact
    master, workers = workloads
    pending = [pod(master, 0, phase="Pending"), pod(workers, 0), pod(workers, 1)]
    assert not of_type(deciding(workloads, pending, sick("gpu-3")).actions, Delete)
    assert not of_type(deciding(workloads, running(workloads), []).actions, Delete)


def test_a_taint_fires_its_rule_and_the_recreated_pods_are_not_refired() -> None:
    workloads = pytorch("node-taint=nvidia.com/gpu-unhealthy -> restart-job max=3 exclude-node")
    nodes = [*healthy()[:2], node("gpu-3", taints=("nvidia.com/gpu-unhealthy",))]
    actions = deciding(workloads, running(workloads), nodes).actions
    assert "its node gpu-3 is tainted nvidia.com/gpu-unhealthy" in restart_event(actions).message
    assert status_of(actions)["reason"] == "NodeTainted"


def test_exclusions_are_bounded_the_oldest_node_going_first_and_said_so() -> None:
    workloads = pytorch()
    earlier = [f"bad-{i}" for i in range(8)]
    recording(
        workloads,
        restartedAt=format_time(NOW - timedelta(hours=1)),
        cause="old/node",
        attemptStartedAt=format_time(NOW - timedelta(hours=1)),
        excludedNodes=earlier,
    )
    actions = deciding(workloads, running(workloads), sick("gpu-3")).actions
    assert status_of(actions)["excludedNodes"] == [*earlier[1:], "gpu-3"]
    assert restart_event(actions).message.endswith(
        "; node gpu-3 excluded: the pods keep off it (8 of at most 8); node bad-0 is no "
        "longer excluded"
    )


def test_the_exclusion_stays_recorded_while_the_job_runs_and_ends_with_it() -> None:
    workloads = pytorch()
    recording(
        workloads,
        restartedAt=format_time(NOW - timedelta(minutes=10)),
        cause="abcd/node",
        attemptStartedAt=format_time(NOW - timedelta(minutes=10)),
        excludedNodes=["gpu-3"],
    )
    master, workers = workloads
    fresh = [
        on(pod(master, 0), "gpu-1"),
        on(pod(workers, 0), "gpu-2"),
        on(pod(workers, 1), "gpu-4"),
    ]
    for obj in fresh:
        obj["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(minutes=5))
    actions = deciding(workloads, fresh, sick("gpu-3")).actions
    assert not of_type(actions, Delete)
    assert status_of(actions)["excludedNodes"] == ["gpu-3"]
    done = [
        on(pod(master, 0, phase="Succeeded", exit_code=0), "gpu-1"),
        on(pod(workers, 0, phase="Succeeded", exit_code=0), "gpu-2"),
        on(pod(workers, 1, phase="Succeeded", exit_code=0), "gpu-4"),
    ]
    for obj in done:
        obj["metadata"]["creationTimestamp"] = format_time(NOW - timedelta(minutes=5))
    finished = deciding(workloads, done, sick("gpu-3")).actions
    status = status_of(finished)
    assert status["state"] == "Succeeded" and "excludedNodes" not in status


def test_a_job_kueue_admits_restarts_and_leaves_the_node_to_kueue() -> None:
    workloads = pytorch(**{contract.SCHEDULER: "kueue", contract.QUEUE: "team-a"})
    actions = deciding(workloads, running(workloads), sick("gpu-3")).actions
    assert restart_event(actions).message.endswith(
        "; node gpu-3 is left to Kueue, which replaces the nodes of the jobs it admits"
    )
    assert "excludedNodes" not in status_of(actions)


IN_PLACE_RULES = "node-condition=GpuHealthy:False -> restart-in-place max=3 exclude-node"


def test_in_place_only_the_pod_on_the_excluded_node_is_recreated() -> None:
    workloads = pytorch(IN_PLACE_RULES, **{contract.RESTART_POLICY: "RestartJobInPlace"})
    master, workers = workloads
    pods = [
        on(ranked(pod(master, 0)), "gpu-1"),
        on(ranked(pod(workers, 0)), "gpu-2"),
        on(ranked(pod(workers, 1)), "gpu-3"),
    ]
    actions = deciding(workloads, pods, sick("gpu-3")).actions
    assert [d.name for d in of_type(actions, Delete)] == ["pt-worker-1"]
    assert restart_event(actions).message.startswith(
        "restarting all 3 pod(s) of the job in place (attempt 1)"
    )
    assert restart_event(actions).message.endswith(
        "; node gpu-3 excluded: its pods are recreated elsewhere (1 of at most 8)"
    )
    status = status_of(actions)
    assert (status["inPlace"], status["excludedNodes"]) == (3, ["gpu-3"])
    # The pod is gone and its replacement not created yet: the others wait at their barrier,
    # nothing falls back to recreating them all.
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    started = datetime.fromisoformat(status["restartedAt"].replace("Z", "+00:00"))
    later = NOW + timedelta(seconds=90)
    waiting = [
        on(ranked(pod(master, 0), attempt=1, waiting_since=started), "gpu-1"),
        on(ranked(pod(workers, 0), attempt=1, waiting_since=started), "gpu-2"),
    ]
    actions = deciding(workloads, waiting, sick("gpu-3"), later).actions
    assert not of_type(actions, Delete)
    assert not pod_patches(actions)  # not released: the job lacks a pod
    # The replacement, on another node, is asked for the attempt, then released with the rest.
    replacement = on(ranked(pod(workers, 1)), "gpu-4")
    replacement["metadata"]["creationTimestamp"] = format_time(later)
    replacement["metadata"]["uid"] = "replaced-pt-worker-1"
    actions = deciding(workloads, [*waiting, replacement], sick("gpu-3"), later).actions
    assert pod_patches(actions) == {"pt-worker-1": {contract.ATTEMPT: "1"}}
    back = on(ranked(pod(workers, 1), attempt=1, waiting_since=later), "gpu-4")
    back["metadata"]["creationTimestamp"] = format_time(later)
    back["metadata"]["uid"] = "replaced-pt-worker-1"
    actions = deciding(workloads, [*waiting, back], sick("gpu-3"), later).actions
    assert pod_patches(actions) == {
        name: {contract.RELEASED_ATTEMPT: "1"}
        for name in ("pt-master-0", "pt-worker-0", "pt-worker-1")
    }


def test_describe_lists_the_excluded_nodes_until_the_job_ends() -> None:
    workloads = pytorch()
    recording(
        workloads,
        restartedAt=format_time(NOW - timedelta(minutes=10)),
        cause="abcd/node",
        rule=f"failure-policy rule 1 ({GPU_RULES})",
        excludedNodes=["gpu-3", "gpu-7"],
    )
    pods = running(workloads)
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, ()), NOW)
    lines = text.splitlines()
    start = lines.index("Failure rules (first match wins):")
    assert lines[start + 1] == f"  1. {GPU_RULES}"
    assert (
        "Excluded:     nodes gpu-3, gpu-7 (exclude-node: the pods its restarts recreate keep off "
        "them; at most 8, until the job ends)"
    ) in lines
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(
            {"state": "Succeeded", "restarts": 1}
        )
        workload["metadata"]["annotations"][contract.PHASE] = "Succeeded"
    ended = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, ()), NOW)
    assert "Excluded:" not in ended
