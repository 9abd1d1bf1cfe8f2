"""What a pipeline (CI, Kubeflow Pipelines) waits on and reads: the phase label the sweeper
writes, `kubectl wait` and `kubectl get -l` on it with the real kubectl, and the failing rank's
last log line in the job's status, Event and description."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kmock
import pytest

from tests.support.emulator import EmulatorThread, kubeconfig
from tests.support.stored import indexed_job, pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.client import Kube
from webhook.kube.resources import EVENTS, JOBS, PODS, STATEFULSETS
from webhook.sweeper.job.state import format_time
from webhook.sweeper.report.describe import describe, read_job

GUIDE = Path(__file__).parents[2] / "docs" / "sweeper.md"
KUBECTL = shutil.which("kubectl")
TRACEBACK = "\n".join(
    [
        "epoch 3 step 120 loss 0.41",
        "Traceback (most recent call last):",
        '  File "/train.py", line 88, in <module>',
        "    step(batch)",
        '  File "/train.py", line 61, in step',
        "    raise ValueError(f'loss is {loss}')",
        "ValueError: loss is nan",
    ]
    * 8  # a log tail is up to 80 lines; its start is cut, never its end
)


def serve_discovery(emulator: EmulatorThread) -> None:
    """kubectl maps `sts` and `job` through discovery, which kmock serves for declared kinds."""
    for path, kind, short in (
        ("apps/v1/statefulsets", "StatefulSet", "sts"),
        ("batch/v1/jobs", "Job", "job"),
    ):
        info = kmock.ResourceInfo(
            kind=kind,
            singular=kind.lower(),
            shortnames={short},
            verbs={"get", "list", "watch"},
            namespaced=True,
        )
        declare(emulator, path, info)


def declare(emulator: EmulatorThread, path: str, info: kmock.ResourceInfo) -> None:
    def run() -> None:
        emulator.handler.resources[path] = info

    emulator.run(run)


def guide_lines(word: str) -> list[str]:
    """docs/sweeper.md's `kubectl wait` and `kubectl get` lines for pipelines."""
    text = GUIDE.read_text()
    return [
        line.split("  #")[0].strip()
        for line in re.findall(r"^kubectl (?:wait|get) .*trainhook\\?\.io/phase.*$", text, re.M)
        if word in line
    ]


def kubectl(config: Path, line: str, job: str) -> subprocess.CompletedProcess[str]:
    words = shlex.split(line.replace("NAME", job))
    assert words[0] == "kubectl"
    return subprocess.run(
        [KUBECTL or "kubectl", "--kubeconfig", str(config), "-n", "ml", *words[1:]],
        capture_output=True,
        text=True,
        timeout=60,
    )


def failed_with_log(obj: dict[str, Any]) -> dict[str, Any]:
    """The training container failed a minute ago, leaving the end of its log as its message."""
    status = obj["status"]["containerStatuses"][0]
    status["state"] = {
        "terminated": {
            "exitCode": 1,
            "reason": "Error",
            "message": TRACEBACK[-2048:],
            "finishedAt": format_time(datetime.now(UTC) - timedelta(minutes=1)),
        }
    }
    obj["status"]["phase"] = "Running"
    return obj


def succeeded(obj: dict[str, Any]) -> dict[str, Any]:
    status = obj["status"]["containerStatuses"][0]
    status["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    obj["status"]["phase"] = "Succeeded"
    return obj


def labels_of(emulator: EmulatorThread, resource: Any, name: str) -> dict[str, str]:
    for obj in emulator.objects(resource, "ml"):
        if obj["metadata"]["name"] == name:
            return dict(obj["metadata"].get("labels") or {})
    return {}


@pytest.mark.skipif(KUBECTL is None, reason="needs the kubectl client")
def test_kubectl_waits_on_the_phase_label_the_sweeper_writes_and_selects_by_it(
    emulator: EmulatorThread, kube: Kube, tmp_path: Path
) -> None:
    serve_discovery(emulator)
    config = kubeconfig(tmp_path / "kubeconfig", emulator.url)
    good_launcher, good_workers = stamped(
        indexed_job("good-launcher", role="launcher", job="good"),
        statefulset("good-worker", framework="mpi", role="worker", job="good", replicas=1),
    )
    never = {contract.RESTART_POLICY: "Never"}
    bad_master, bad_workers = stamped(
        statefulset("bad-master", role="master", job="bad", annotations=never),
        statefulset("bad-worker", role="worker", job="bad", replicas=1, annotations=never),
    )
    with sweeping(kube):
        for resource, obj in (
            (JOBS, good_launcher),
            (STATEFULSETS, good_workers),
            (STATEFULSETS, bad_master),
            (STATEFULSETS, bad_workers),
        ):
            obj = kube.create(resource, "ml", obj)
            created = pod(obj, 0)
            if obj["metadata"]["name"] == "good-launcher":
                created = succeeded(created)
            elif obj["metadata"]["name"] == "bad-worker":
                created = failed_with_log(created)
            kube.create(PODS, "ml", created)
        eventually(
            lambda: (
                labels_of(emulator, STATEFULSETS, "good-worker").get(contract.PHASE) == "Succeeded"
                and labels_of(emulator, STATEFULSETS, "bad-master").get(contract.PHASE) == "Failed"
            ),
            timeout=20,
            what="phase labels written",
        )
        events = [e for e in emulator.objects(EVENTS, "ml") if e["reason"] == "PodFailed"]
        description = describe(read_job(kube, "ml", "bad"), datetime.now(UTC))

    assert labels_of(emulator, JOBS, "good-launcher")[contract.PHASE] == "Succeeded"
    # the label stays off the pod templates: recording it restarts no pod
    for resource in (STATEFULSETS, JOBS):
        for obj in emulator.objects(resource, "ml"):
            assert contract.PHASE not in obj["spec"]["template"]["metadata"]["labels"]

    (succeeded_line,) = guide_lines("=Succeeded")
    done = kubectl(config, succeeded_line, "good")
    assert (done.returncode, sorted(done.stdout.splitlines())) == (
        0,
        ["job.batch/good-launcher condition met", "statefulset.apps/good-worker condition met"],
    ), done.stderr
    (failed_line,) = guide_lines("=Failed")
    failed = kubectl(config, failed_line, "bad")
    assert (failed.returncode, sorted(failed.stdout.splitlines())) == (
        0,
        ["statefulset.apps/bad-master condition met", "statefulset.apps/bad-worker condition met"],
    ), failed.stderr
    not_yet = kubectl(config, failed_line.replace("--timeout=24h", "--timeout=1s"), "good")
    assert not_yet.returncode != 0, "a succeeded job never meets the Failed wait"

    (listing,) = guide_lines("-L trainhook.io/phase")
    table = kubectl(config, listing, "bad").stdout.splitlines()
    assert table[0].split()[-1] == "PHASE" and {row.split()[-1] for row in table[1:]} == {"Failed"}
    selected = kubectl(config, "kubectl get sts -l trainhook.io/phase=Failed -o name", "bad")
    assert sorted(selected.stdout.split()) == [
        "statefulset.apps/bad-master",
        "statefulset.apps/bad-worker",
    ]

    # the failing rank's last words, kept once its pods are gone (its StatefulSets are at 0)
    said = "pod bad-worker-0: container pytorch exited with code 1: …"
    reason = "ValueError: loss is nan; trainhook.io/restart-policy Never rule 2 (* -> fail)"
    assert len(events) == 2  # one on each workload of the job
    for event in events:
        assert event["message"].startswith(said) and event["message"].endswith(reason)
    (line,) = [line for line in description.splitlines() if line.startswith("Last failure:")]
    assert line.startswith(f"Last failure: job failed: PodFailed: {said}")
    assert reason in line
