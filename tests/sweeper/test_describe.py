"""`trainhook describe JOB` (and `kubectl trainhook describe JOB`): one job in detail."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.support.emulator import kubeconfig
from tests.support.stored import indexed_job, pod, stamped, statefulset
from webhook.cli import main
from webhook.core import contract
from webhook.kube.resources import EVENTS, NODES, PODS, SERVICES, STATEFULSETS
from webhook.sweeper.report.describe import JobObjects, describe

from .test_status import use_kubeconfig

NOW = datetime(2025, 1, 1, 2, 0, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]


def failing_pytorch() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=2),
    )
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1, restarts=3, ready=False)]
    for rank, member in enumerate(pods):
        member["metadata"]["labels"][contract.RANK] = str(rank)
    pods[2]["status"]["containerStatuses"][0]["lastState"] = {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "message": "RuntimeError: NCCL error\nunhandled system error",
            "finishedAt": "2025-01-01T01:58:00Z",
        }
    }
    return [master, workers], pods


def event(name: str, kind: str, reason: str, message: str, when: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{reason}", "namespace": "ml"},
        "involvedObject": {"kind": kind, "name": name, "namespace": "ml"},
        "type": "Warning" if reason == "BackOff" else "Normal",
        "reason": reason,
        "message": message,
        "lastTimestamp": when,
    }


SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "pt", "namespace": "ml"},
    "spec": {"clusterIP": "None", "ports": [{"port": 23456}]},
}


def test_describe_shows_roles_pods_service_podgroup_events_and_the_last_failure() -> None:
    workloads, pods = failing_pytorch()
    created = "create Pod pt-worker-1"
    backoff = "Back-off restarting failed container"
    events = (
        event("pt-worker", "StatefulSet", "SuccessfulCreate", created, "2025-01-01T00:00:30Z"),
        event("pt-worker-1", "Pod", "BackOff", backoff, "2025-01-01T01:59:00Z"),
    )
    text = describe(
        JobObjects("ml", "pt", tuple(workloads), tuple(pods), SERVICE, None, events), NOW
    )
    assert text.splitlines() == [
        "Name:         pt",
        "Namespace:    ml",
        "Framework:    pytorch",
        "Phase:        Running",
        "Roles:        master 1/1, worker 1/2",
        "Age:          2h",
        "Workloads:",
        "  KIND         NAME       ROLE    REPLICAS",
        "  StatefulSet  pt-master  master  1",
        "  StatefulSet  pt-worker  worker  2",
        "Pods:",
        "  NAME         ROLE    RANK  PHASE    RESTARTS  AGE",
        "  pt-master-0  master  0     Running  0         119m",
        "  pt-worker-0  worker  1     Running  0         119m",
        "  pt-worker-1  worker  2     Running  3         119m",
        "Service:      pt (headless, ports 23456)",
        "PodGroup:     none (no gang scheduling, or not created yet)",
        "Last failure: pod pt-worker-1, container pytorch: exit code 1 (Error): RuntimeError: "
        "NCCL error unhandled system error",
        "Events:",
        "  LAST SEEN  TYPE     REASON            OBJECT                 MESSAGE",
        "  119m ago   Normal   SuccessfulCreate  StatefulSet/pt-worker  create Pod pt-worker-1",
        "  60s ago    Warning  BackOff           Pod/pt-worker-1        Back-off restarting failed"
        " container",
    ]


def test_a_failed_job_names_the_recorded_reason_before_the_containers_exit() -> None:
    workloads, pods = failing_pytorch()
    for workload in workloads:
        workload["metadata"]["annotations"].update(
            {contract.PHASE: "Failed", contract.REASON: "BackoffLimitExceeded"}
        )
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, ()), NOW)
    assert "Phase:        Failed" in text.splitlines()
    (line,) = [line for line in text.splitlines() if line.startswith("Last failure:")]
    assert line.startswith("Last failure: job failed: BackoffLimitExceeded; pod pt-worker-1, ")
    assert "Service:      none yet (the sweeper creates the job's headless Service)" in text


def test_trainhook_describe_reads_the_cluster_and_says_when_a_job_is_missing(
    emulator, kube, tmp_path, monkeypatch, capsys
) -> None:
    use_kubeconfig(monkeypatch, kubeconfig(tmp_path / "config", emulator.url))
    workloads, pods = failing_pytorch()
    for workload in workloads:
        created = kube.create(STATEFULSETS, "ml", workload)
        workload["metadata"]["uid"] = created["metadata"]["uid"]
    for member in pods:
        kube.create(PODS, "ml", member)
    kube.create(SERVICES, "ml", SERVICE)
    when = "2025-01-01T01:59:00Z"
    kube.create(EVENTS, "ml", event("pt-worker-1", "Pod", "BackOff", "Back-off", when))
    kube.create(EVENTS, "ml", event("other-0", "Pod", "BackOff", "not this job", when))
    assert main(["describe", "-n", "ml", "pt"]) == 0
    out = capsys.readouterr().out
    assert "  pt-worker-1  worker  2     Running  3" in out
    assert "Service:      pt (headless, ports 23456)" in out
    assert "Pod/pt-worker-1" in out and "not this job" not in out
    assert main(["describe", "-n", "ml", "resnet"]) == 1
    assert capsys.readouterr().err == "No training job resnet found in namespace ml.\n"


RACK = "cloud.example.com/rack"


def test_describe_shows_the_racks_the_pods_of_a_placed_job_landed_in(
    emulator, kube, tmp_path, monkeypatch, capsys
) -> None:
    use_kubeconfig(monkeypatch, kubeconfig(tmp_path / "config", emulator.url))
    workloads, pods = failing_pytorch()
    for workload in workloads:
        workload["metadata"]["annotations"][contract.PLACEMENT_TOPOLOGY] = RACK
        kube.create(STATEFULSETS, "ml", workload)
    nodes = {"gpu-a": {RACK: "r1"}, "gpu-b": {RACK: "r1"}, "cpu-c": {}}
    for name, labels in nodes.items():
        kube.create(
            NODES,
            None,
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}},
        )
    for member, node in zip(pods, ["gpu-a", "gpu-b", None], strict=True):
        if node:
            member["spec"]["nodeName"] = node
        kube.create(PODS, "ml", member)
    assert main(["describe", "-n", "ml", "pt"]) == 0
    out = capsys.readouterr().out
    assert f"Placement:    {RACK}: not scheduled yet (1 pod), r1 (2 pods)" in out.splitlines()

    emulator.merge(PODS.path("ml", "pt-worker-1"), {"spec": {"nodeName": "cpu-c"}})
    assert main(["describe", "-n", "ml", "pt"]) == 0
    out = capsys.readouterr().out
    assert f"Placement:    {RACK}: node without {RACK} (1 pod), r1 (2 pods)" in out.splitlines()


def test_describe_says_when_nodes_cannot_be_read() -> None:
    workloads, pods = failing_pytorch()
    workloads[0]["metadata"]["annotations"][contract.PLACEMENT_TOPOLOGY] = RACK
    objects = JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, (), None)
    assert (
        f"Placement:    {RACK}: unknown (you may not get nodes)"
        in describe(objects, NOW).splitlines()
    )


def test_kubectl_finds_the_installed_plugin_and_runs_its_commands() -> None:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    help_text = subprocess.run(
        [str(bin_dir / "kubectl-trainhook"), "--help"],
        capture_output=True, text=True, check=True, env=env,
    ).stdout  # fmt: skip
    assert help_text.startswith("usage: kubectl trainhook [-h] [--version] COMMAND ...")
    assert {"status", "render", "describe"} <= set(help_text.split())
    assert "serve" not in help_text.split()
    kubectl = subprocess.run(["which", "kubectl"], capture_output=True, text=True, check=False)
    runner = (
        [kubectl.stdout.strip(), "trainhook"]
        if kubectl.returncode == 0
        else [str(bin_dir / "kubectl-trainhook")]
    )
    rendered = subprocess.run(
        [*runner, "render", str(REPO / "examples" / "jax.yaml")],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert rendered.returncode == 0, rendered.stderr
    assert rendered.stdout.startswith("job jax-simple (jax, namespace default, 2 pods)\n")


def test_describe_shows_the_last_report_its_metrics_checkpoint_and_the_work_a_restart_lost() -> (
    None
):
    workloads, pods = failing_pytorch()
    workloads[0]["metadata"].setdefault("annotations", {})[contract.PROGRESS] = json.dumps(
        {
            "progress": 40,
            "etaSeconds": 900,
            "step": 401,
            "totalSteps": 1000,
            "epoch": 2,
            "totalEpochs": 5,
            "metrics": {"loss": "0.2347", "eval_loss": "0.2451"},
            "checkpoint": {"step": 400, "time": "2025-01-01T01:55:00Z"},
            "restart": {
                "at": "2025-01-01T01:58:00Z",
                "reachedStep": 450,
                "checkpointStep": 400,
                "lostSteps": 50,
            },
            "updated": "2025-01-01T01:59:30Z",
        }
    )
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), SERVICE, None, ()), NOW)
    lines = text.splitlines()
    start = lines.index("Age:          2h") + 1
    assert lines[start : start + 4] == [
        "Progress:     40% (step 401/1000, epoch 2/5), 15m left, reported 30s ago",
        "Metrics:      loss=0.2347, eval_loss=0.2451",
        "Checkpoint:   step 400, saved 5m ago",
        "Lost work:    the restart 2m ago lost 50 steps (step 450 reached, last checkpoint "
        "step 400)",
    ]


def test_a_job_whose_pods_wait_for_a_planted_secret_says_which_one() -> None:
    launcher, workers = stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd"),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2),
    )
    waiting = {
        "state": "Pending",
        "reason": "WaitingForOwnedObjects",
        "message": "the job's pods wait for Secret hvd-ssh, which Trainhook did not make for the "
        "job and never lets them mount: delete it so the sweeper makes the job's own",
        "restarts": 0,
        "startTime": "2025-01-01T01:00:00Z",
    }
    for workload in (launcher, workers):
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(waiting)
    text = describe(JobObjects("ml", "hvd", (launcher, workers), (), None, None, ()), NOW)
    assert text.splitlines()[3:5] == [
        "Phase:        Pending",
        "Waiting:      the job's pods wait for Secret hvd-ssh, which Trainhook did not make for "
        "the job and never lets them mount: delete it so the sweeper makes the job's own",
    ]
