"""`trainhook status`: a table a person reads at a glance, from the objects of the cluster."""

from __future__ import annotations

import dataclasses
import re
from datetime import UTC, datetime

from kubernetes.config import kube_config

from tests.support.emulator import kubeconfig
from tests.support.stored import bare_pod, indexed_job, pod, stamped, statefulset
from webhook.cli import main
from webhook.core import contract
from webhook.core.job.progress import human_duration
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.report.status import JobRow, format_table, job_rows

NOW = datetime(2025, 1, 1, 2, 0, 0, tzinfo=UTC)


def running_pytorch():
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=3),
    )
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1), pod(workers, 2, ready=False)]
    return [master, workers], pods


def test_a_running_job_shows_ready_pods_per_role_and_its_age():
    workloads, pods = running_pytorch()
    assert job_rows(workloads, pods, NOW) == [
        JobRow("ml", "pt", "pytorch", "master 1/1, worker 2/3", "Running", "2h", "-")
    ]


def test_a_finished_job_shows_its_statefulsets_at_zero_and_when_it_finished():
    workloads, _ = running_pytorch()
    for workload in workloads:
        workload["spec"]["replicas"] = 0
        workload["metadata"]["annotations"].update(
            {
                contract.PHASE: "Succeeded",
                contract.FINISHED_AT: "2025-01-01T01:55:00Z",
                contract.REASON: "Completed",
            }
        )
    assert job_rows(workloads, [], NOW) == [
        JobRow(
            "ml",
            "pt",
            "pytorch",
            "master 0/0, worker 0/0",
            "Succeeded",
            "2h",
            "5m ago",
            reason="Completed",
        )
    ]


def test_a_job_shows_the_state_the_sweeper_recorded_with_its_reason_restarts_and_start():
    workloads, pods = running_pytorch()
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = (
            '{"state":"Restarting","reason":"OOMKilled","message":"pod pt-worker-2: container '
            'pytorch exited with code 137 (OOMKilled)","restarts":3,'
            '"startTime":"2025-01-01T01:48:00Z"}'
        )
    row = job_rows(workloads, pods, NOW)[0]
    assert (row.phase, row.reason, row.restarts, row.start) == (
        "Restarting",
        "OOMKilled",
        "3",
        "12m ago",
    )


def test_a_job_whose_pods_do_not_run_yet_is_pending():
    (workers,) = stamped(indexed_job("jx", framework="jax", completions=2))
    assert job_rows([workers], [pod(workers, 0, phase="Pending", ready=False)], NOW)[0].phase == (
        "Pending"
    )


def test_a_job_with_an_invalid_annotation_is_shown_as_invalid():
    workloads, pods = running_pytorch()
    workloads[1]["metadata"]["annotations"][contract.CLEAN_POD_POLICY] = "Sometimes"
    assert job_rows(workloads, pods, NOW)[0].phase == "Invalid"


def test_bare_pods_form_a_job_of_their_own():
    pods = [bare_pod(f"bare-{i}", index=i, topology='{"worker":2}') for i in range(2)]
    assert job_rows([], pods, NOW) == [
        JobRow("ml", "bare", "generic", "worker 2/2", "Running", "119m", "-")
    ]


def test_the_table_lines_up_its_columns_and_names_namespaces_when_it_shows_several():
    rows = [
        JobRow(
            "ml",
            "pt",
            "pytorch",
            "master 1/1, worker 2/3",
            "Running",
            "2h",
            "-",
            "Running",
            "0",
            "2h ago",
        ),
        JobRow(
            "research",
            "hvd",
            "mpi",
            "launcher 0/1",
            "Failed",
            "3d",
            "40m ago",
            "DeadlineExceeded",
            "2",
            "3d ago",
        ),
    ]
    rows[0] = dataclasses.replace(rows[0], progress="45%", eta="13m", checkpoint="step 400, 5m ago")
    assert format_table(rows, with_namespace=True) == (
        "NAMESPACE   JOB   FRAMEWORK   ROLES                    PHASE     "
        "REASON             RESTARTS   PROGRESS   ETA   CHECKPOINT         "
        "START    AGE   FINISHED\n"
        "ml          pt    pytorch     master 1/1, worker 2/3   Running   "
        "Running            0          45%        13m   step 400, 5m ago   "
        "2h ago   2h    -\n"
        "research    hvd   mpi         launcher 0/1             Failed    "
        "DeadlineExceeded   2          -          -     -                  "
        "3d ago   3d    40m ago"
    )
    assert format_table(rows[:1], with_namespace=False).splitlines()[0] == (
        "JOB   FRAMEWORK   ROLES                    PHASE     "
        "REASON    RESTARTS   PROGRESS   ETA   CHECKPOINT         START    AGE   FINISHED"
    )


def test_a_reporting_job_shows_its_progress_eta_and_last_checkpoint():
    workloads, pods = running_pytorch()
    summary = (
        '{"checkpoint":{"step":400,"time":"2025-01-01T01:55:00Z"},"etaSeconds":795,'
        '"progress":45,"step":450,"totalSteps":1000,"updated":"2025-01-01T01:59:30Z"}'
    )
    workloads[1]["metadata"]["annotations"][contract.PROGRESS] = summary
    [row] = job_rows(workloads, pods, NOW)
    assert (row.progress, row.eta, row.checkpoint) == ("45%", "13m", "step 400, 5m ago")
    # Steps without a percentage, and a job that has finished has no ETA left.
    workloads[1]["metadata"]["annotations"][contract.PROGRESS] = '{"step":450,"etaSeconds":9}'
    for workload in workloads:
        workload["metadata"]["annotations"][contract.PHASE] = "Succeeded"
    [row] = job_rows(workloads, pods, NOW)
    assert (row.progress, row.eta, row.checkpoint) == ("step 450", "-", "-")


def test_durations_read_like_kubectl():
    assert [human_duration(s) for s in (5, 119, 120, 7199, 7200, 172799, 172800)] == [
        "5s",
        "119s",
        "2m",
        "119m",
        "2h",
        "47h",
        "2d",
    ]


def use_kubeconfig(monkeypatch, path):
    # The client reads $KUBECONFIG once, when it is imported.
    monkeypatch.setattr(kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(path))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


def test_trainhook_status_reads_the_cluster(emulator, kube, tmp_path, monkeypatch, capsys):
    use_kubeconfig(monkeypatch, kubeconfig(tmp_path / "config", emulator.url))
    workloads, pods = running_pytorch()
    uids = {}
    for workload in workloads:
        created = kube.create(STATEFULSETS, "ml", workload)
        uids[created["metadata"]["name"]] = created["metadata"]["uid"]
    for obj in pods:  # owned by the StatefulSets the API server stored, by their uids
        for ref in obj["metadata"]["ownerReferences"]:
            ref["uid"] = uids[ref["name"]]
        kube.create(PODS, "ml", obj)
    assert main(["status", "-n", "ml"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "JOB   FRAMEWORK   ROLES                    PHASE     "
        "REASON   RESTARTS   PROGRESS   ETA   CHECKPOINT   START   AGE   FINISHED"
    )
    assert re.fullmatch(
        r"pt    pytorch     master 1/1, worker 2/3   Running   -        0          "
        r"-          -     -            -       \d+s +-",
        out[1],
    )
    assert main(["status", "-n", "ml", "resnet"]) == 1
    assert capsys.readouterr().err == "No training job resnet found in namespace ml.\n"
    assert main(["status", "-n", "empty"]) == 0
    assert capsys.readouterr().err == "No training jobs found in namespace empty.\n"


def test_trainhook_status_without_a_cluster_says_so_in_one_line(tmp_path, monkeypatch, capsys):
    use_kubeconfig(monkeypatch, tmp_path / "missing")
    assert main(["status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("trainhook status: cannot find a cluster to talk to: ")
    assert err.count("\n") == 1
