"""trainhook.io/checkpoint-on-stop: before a planned stop (a suspend, a pod preempted or
evicted, a node drained) the sweeper asks every running pod of the job for a checkpoint, once,
and holds what it can of the stop until a newer checkpoint is reported or the duration is up.
The clock is played; each decision's writes are applied to the objects the next one reads, as
the API server would, so what the sweeper remembers is only what it wrote."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from tests.support.stored import POD_VERSIONS, merge_patch, pod, stamped, statefulset
from webhook.core import contract
from webhook.core.job.progress import Report, summary
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.actions import Decision, Delete, Emit, Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.job.goodput import goodput_record
from webhook.sweeper.job.nodes import node_views
from webhook.sweeper.job.state import format_time

from .helpers import NOW, evicted, of_type, state_of

ASKED = format_time(NOW)
SETTINGS = {
    contract.REPORT_PROGRESS: "true",
    contract.CHECKPOINT_ON_STOP: "5m",
    contract.RESTART_POLICY: "RestartJob",
}


def job(**extra: str) -> list[dict[str, Any]]:
    annotations = {**SETTINGS, **extra}
    workloads = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41"),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=annotations),
    )
    reported(workloads, step=450, checkpoint=400, at=NOW - timedelta(minutes=3))
    return workloads


def reported(workloads: list[dict[str, Any]], step: int, checkpoint: int, at: datetime) -> None:
    """The job's last report, as the progress endpoint writes it on every workload."""
    for workload in workloads:
        workload["metadata"]["resourceVersion"] = str(next(POD_VERSIONS))
    value = {
        "step": step,
        "updated": format_time(at),
        "stepSince": format_time(at),
        "checkpoint": {"step": checkpoint, "time": format_time(at)},
    }
    for workload in workloads:
        workload["metadata"]["annotations"][contract.PROGRESS] = json.dumps(value)


def pods_of(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    master, workers = workloads
    return [pod(master, 0), pod(workers, 0), pod(workers, 1)]


def suspended(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    workloads[0]["metadata"]["annotations"][contract.SUSPEND] = "true"
    workloads[0]["metadata"]["resourceVersion"] = str(next(POD_VERSIONS))
    return workloads


def applied(made: Decision, *objects: list[dict[str, Any]]) -> None:
    """Each patch and delete of the decision, on the objects of that name, each write a new
    version."""
    by_name = {(o["kind"], o["metadata"]["name"]): o for group in objects for o in group}
    for action in made.actions:
        if isinstance(action, Patch):
            target = by_name[(action.resource.kind, action.name)]
            merge_patch(target, dict(action.patch))
            target["metadata"]["resourceVersion"] = str(next(POD_VERSIONS))
        if isinstance(action, Delete):
            for group in objects:
                group[:] = [o for o in group if o["metadata"]["name"] != action.name]


def requests_written(made: Decision) -> dict[str, str | None]:
    """pod name -> the checkpoint request each pod patch of the decision writes."""
    return {
        a.name: a.patch["metadata"]["annotations"][contract.CHECKPOINT_REQUESTED]
        for a in of_type(made.actions, Patch)
        if a.resource == PODS
        and contract.CHECKPOINT_REQUESTED in (a.patch.get("metadata") or {}).get("annotations", {})
    }


def events(made: Decision, reason: str) -> list[Emit]:
    return [e for e in of_type(made.actions, Emit) if e.reason == reason]


def scaled_down(made: Decision) -> list[str]:
    return [
        a.name
        for a in of_type(made.actions, Patch)
        if a.resource == STATEFULSETS and (a.patch.get("spec") or {}).get("replicas") == 0
    ]


def at(workloads: list[dict[str, Any]], pods: list[dict[str, Any]], now: datetime) -> Decision:
    return decide(state_of("pt", workloads, pods), now)


def test_a_suspend_asks_every_running_pod_for_a_checkpoint_and_keeps_the_pods() -> None:
    workloads = suspended(job())
    pods = pods_of(workloads)
    made = at(workloads, pods, NOW)
    assert requests_written(made) == {
        "pt-master-0": ASKED,
        "pt-worker-0": ASKED,
        "pt-worker-1": ASKED,
    }
    assert scaled_down(made) == []
    (asked,) = events(made, "CheckpointRequested")
    assert asked.type == "Normal"
    assert asked.message == (
        "asked the job's 3 running pod(s) to save a checkpoint (trainhook.io/checkpoint-requested: "
        f"{ASKED}) before the job is suspended; the suspend waits for it until "
        f"{format_time(NOW + timedelta(minutes=5))} (trainhook.io/checkpoint-on-stop 5m)"
    )
    assert made.recheck_at == NOW + timedelta(minutes=5)


def test_the_request_is_written_once_per_stop_not_on_every_look() -> None:
    workloads = suspended(job())
    pods = pods_of(workloads)
    applied(at(workloads, pods, NOW), workloads, pods)
    for later in (timedelta(seconds=1), timedelta(minutes=2), timedelta(minutes=4, seconds=59)):
        again = at(workloads, pods, NOW + later)
        assert requests_written(again) == {}
        assert events(again, "CheckpointRequested") == []
        assert scaled_down(again) == []
        assert again.recheck_at == NOW + timedelta(minutes=5)


def test_a_newer_checkpoint_lets_the_suspend_go_ahead_at_once() -> None:
    workloads = suspended(job())
    pods = pods_of(workloads)
    applied(at(workloads, pods, NOW), workloads, pods)
    reported(workloads, step=452, checkpoint=452, at=NOW + timedelta(seconds=40))
    made = at(workloads, pods, NOW + timedelta(seconds=45))
    assert scaled_down(made) == ["pt-master", "pt-worker"]
    (saved,) = events(made, "CheckpointSaved")
    assert saved.type == "Normal"
    assert saved.message == (
        f"checkpoint saved at step 452, 45s after the request at {ASKED}; the suspend goes ahead"
    )
    applied(made, workloads, pods)
    assert requests_written(at(workloads, pods, NOW + timedelta(minutes=1))) == {}


def test_without_a_newer_checkpoint_the_suspend_goes_ahead_at_the_deadline() -> None:
    workloads = suspended(job())
    pods = pods_of(workloads)
    applied(at(workloads, pods, NOW), workloads, pods)
    # a report that names the checkpoint known at the request is no newer one
    reported(workloads, step=451, checkpoint=400, at=NOW - timedelta(minutes=3))
    assert scaled_down(at(workloads, pods, NOW + timedelta(minutes=4, seconds=59))) == []
    made = at(workloads, pods, NOW + timedelta(minutes=5))
    assert scaled_down(made) == ["pt-master", "pt-worker"]
    (late,) = events(made, "CheckpointNotSaved")
    assert late.type == "Warning"
    assert late.message == (
        f"no checkpoint saved within 5m of the request at {ASKED} (the last is step 400); "
        "the suspend goes ahead"
    )


def test_a_job_without_the_annotation_is_asked_nothing_and_suspends_at_once() -> None:
    workloads = job()
    for workload in workloads:
        del workload["metadata"]["annotations"][contract.CHECKPOINT_ON_STOP]
    suspended(workloads)
    made = at(workloads, pods_of(workloads), NOW)
    assert requests_written(made) == {}
    assert events(made, "CheckpointRequested") == []
    assert scaled_down(made) == ["pt-master", "pt-worker"]


def test_a_resume_during_a_held_suspend_takes_the_request_back() -> None:
    workloads = suspended(job())
    pods = pods_of(workloads)
    applied(at(workloads, pods, NOW), workloads, pods)
    del workloads[0]["metadata"]["annotations"][contract.SUSPEND]
    workloads[0]["metadata"]["resourceVersion"] = str(next(POD_VERSIONS))
    made = at(workloads, pods, NOW + timedelta(minutes=1))
    assert requests_written(made) == {"pt-master-0": None, "pt-worker-0": None, "pt-worker-1": None}
    assert scaled_down(made) == []
    applied(made, workloads, pods)
    assert all(contract.CHECKPOINT_REQUESTED not in p["metadata"]["annotations"] for p in pods)
    # the record goes once no pod carries the request any more
    after = at(workloads, pods, NOW + timedelta(minutes=1, seconds=5))
    assert requests_written(after) == {}
    applied(after, workloads, pods)
    status = json.loads(workloads[0]["metadata"]["annotations"][contract.STATUS])
    assert "checkpoint" not in status
    # a later suspend is a new stop: asked again
    suspended(workloads)
    again = at(workloads, pods, NOW + timedelta(minutes=2))
    later = format_time(NOW + timedelta(minutes=2))
    assert set(requests_written(again).values()) == {later}


def test_a_resume_after_the_suspend_went_ahead_clears_the_record() -> None:
    workloads = suspended(job())
    pods = pods_of(workloads)
    applied(at(workloads, pods, NOW), workloads, pods)
    applied(at(workloads, pods, NOW + timedelta(minutes=5)), workloads, pods)
    pods.clear()  # the StatefulSets at 0
    assert json.loads(workloads[0]["metadata"]["annotations"][contract.STATUS])["checkpoint"]
    del workloads[0]["metadata"]["annotations"][contract.SUSPEND]
    workloads[0]["metadata"]["resourceVersion"] = str(next(POD_VERSIONS))
    made = at(workloads, pods, NOW + timedelta(minutes=9))
    applied(made, workloads, pods)
    status = json.loads(workloads[0]["metadata"]["annotations"][contract.STATUS])
    assert "checkpoint" not in status


def preempted(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    )
    obj["metadata"]["deletionTimestamp"] = format_time(NOW)
    return obj


def test_a_preempted_pod_asks_at_once_and_holds_the_jobs_restart_until_the_checkpoint() -> None:
    workloads = job()
    pods = pods_of(workloads)
    preempted(pods[2])
    made = at(workloads, pods, NOW)
    assert requests_written(made) == {
        "pt-master-0": ASKED,
        "pt-worker-0": ASKED,
        "pt-worker-1": ASKED,
    }
    assert of_type(made.actions, Delete) == []  # the job's restart waits
    (asked,) = events(made, "CheckpointRequested")
    assert asked.message == (
        "asked the job's 3 running pod(s) to save a checkpoint (trainhook.io/checkpoint-requested: "
        f"{ASKED}) before pod pt-worker-1 is stopped: it was preempted (DisruptionTarget "
        "PreemptionByScheduler); Kubernetes stops it within its terminationGracePeriodSeconds, "
        "whatever Trainhook waits for; the job's restart waits for it until "
        f"{format_time(NOW + timedelta(minutes=5))} (trainhook.io/checkpoint-on-stop 5m)"
    )
    applied(made, workloads, pods)
    assert of_type(at(workloads, pods, NOW + timedelta(seconds=20)).actions, Delete) == []
    reported(workloads, step=450, checkpoint=450, at=NOW + timedelta(seconds=25))
    go = at(workloads, pods, NOW + timedelta(seconds=30))
    assert sorted(a.name for a in of_type(go.actions, Delete)) == ["pt-master-0", "pt-worker-0"]
    assert [e.message for e in events(go, "CheckpointSaved")] == [
        f"checkpoint saved at step 450, 30s after the request at {ASKED}; the job's restart "
        "goes ahead"
    ]


def test_an_evicted_pod_of_a_job_that_does_not_restart_is_still_asked() -> None:
    workloads = job()
    for workload in workloads:
        del workload["metadata"]["annotations"][contract.RESTART_POLICY]
    pods = pods_of(workloads)
    evicted(pods[1])
    made = at(workloads, pods, NOW)
    assert set(requests_written(made)) == {"pt-master-0", "pt-worker-0", "pt-worker-1"}


def cordoned(name: str) -> dict[str, Any]:
    """What `kubectl drain` (or `kubectl cordon`) leaves on a node before it evicts."""
    return {
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {
            "unschedulable": True,
            "taints": [{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}],
        },
    }


def test_a_node_being_drained_under_a_pod_asks_for_a_checkpoint_once() -> None:
    workloads = job()
    pods = pods_of(workloads)
    for obj, node in zip(pods, ("gpu-1", "gpu-2", "gpu-3"), strict=True):
        obj["spec"]["nodeName"] = node
    nodes = node_views(
        [cordoned("gpu-3"), {"kind": "Node", "metadata": {"name": "gpu-1"}, "spec": {}}]
    )
    state = replace(state_of("pt", workloads, pods), nodes=nodes)
    made = decide(state, NOW)
    assert set(requests_written(made).values()) == {ASKED}
    (asked,) = events(made, "CheckpointRequested")
    assert "before node gpu-3 is drained: it is unschedulable (cordoned)" in asked.message
    applied(made, workloads, pods)
    again = decide(
        replace(state_of("pt", workloads, pods), nodes=nodes), NOW + timedelta(minutes=1)
    )
    assert requests_written(again) == {}


def test_a_node_tainted_noexecute_is_a_planned_stop_too() -> None:
    workloads = job()
    pods = pods_of(workloads)
    pods[0]["spec"]["nodeName"] = "gpu-1"
    node = {
        "kind": "Node",
        "metadata": {"name": "gpu-1"},
        "spec": {"taints": [{"key": "example.com/maintenance", "effect": "NoExecute"}]},
    }
    made = decide(replace(state_of("pt", workloads, pods), nodes=node_views([node])), NOW)
    (asked,) = events(made, "CheckpointRequested")
    assert "before node gpu-1 is drained: it is tainted example.com/maintenance:NoExecute" in (
        asked.message
    )


# --- lost steps: what the saving is worth ---------------------------------------------------


def lost_steps(checkpoint_on_stop: bool) -> int:
    """A job at step 450 whose last checkpoint is step 400 is stopped and resumes from its
    latest checkpoint: the steps its goodput counts as lost to that stop."""
    workloads = job()
    received = NOW - timedelta(minutes=3)
    progress = summary(
        Report(metrics=(("currentStep", "450"), ("lastCheckpointStep", "400"))), received
    )
    if checkpoint_on_stop:  # asked, the script saves at its current step and reports it
        saved = Report(metrics=(("currentStep", "450"), ("lastCheckpointStep", "450")))
        progress = summary(saved, NOW, progress)
    resumed_at = int(progress["checkpoint"]["step"])
    resumed = Report(metrics=(("currentStep", str(resumed_at)),))
    progress = summary(resumed, NOW + timedelta(minutes=10), progress)
    for workload in workloads:
        workload["metadata"]["annotations"][contract.PROGRESS] = json.dumps(progress)
    state = state_of("pt", workloads, pods_of(workloads))
    ledger = goodput_record(state, {}, "Running", "Running", NOW + timedelta(minutes=10))
    return int(ledger["goodput"].get("lostSteps", 0))


def test_a_stop_with_checkpoint_on_stop_loses_fewer_steps_than_without() -> None:
    assert lost_steps(checkpoint_on_stop=False) == 50
    assert lost_steps(checkpoint_on_stop=True) == 0
