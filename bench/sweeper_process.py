"""The memory of a real `trainhook sweep` process holding a 10,000-pod job, and 1,000 jobs of 8.

    python -m bench.sweeper_process [--cases 10000x1,8x1000]

Each case starts the API emulator in this process with the job's StatefulSets and pods as the
API server stores them: made by the webhook's own mutation, with the API's defaults, the
kubelet's status and managedFields (about 6.6 KB a pod). Then one `trainhook sweep` process
(the chart's command line) lists and watches them, and its memory is read from /proc:

* listed: resident memory once its caches have listed everything and it has acted on the jobs;
* events: after every pod changed once more (a status change each, as watch events);
* relist: after the API server forgot the watch's version (410 Gone) and it listed again;
* peak: the most it was resident at any time (VmHWM), startup and relist included;
* per pod: (listed - a sweeper of no jobs) / pods.

The chart's memory limit (384Mi) is the goal for the peak.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import IO, Any

from bench.reviews import service_account_volume
from bench.sizes import controller_pods, workloads
from bench.tables import table
from tests.support.emulator import EmulatorThread, emulator, kubeconfig
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.kube.resources import PODS, STATEFULSETS

NAMESPACE = "research"
CASES = ((10_000, 1), (8, 1000))  # (pods per job, jobs)
LIMIT_MIB = 384  # the chart's sweeper.resources.limits.memory


@dataclass(frozen=True)
class ProcessMemory:
    case: str
    pods: int
    pod_bytes: int  # one pod as the API server stores it (JSON)
    listed_mib: float
    events_mib: float
    relist_mib: float
    peak_mib: float
    per_pod_kib: float


def stored_pod(pod: dict[str, Any], index: int) -> dict[str, Any]:
    """A pod as the API server returns it once scheduled and running: defaults, the kubelet's
    status and the managedFields of both writers."""
    pod = copy.deepcopy(pod)
    metadata = pod["metadata"]
    metadata["generateName"] = metadata["name"].rsplit("-", 1)[0] + "-"
    fields: dict[str, Any] = {f"f:{key}": {} for key in metadata.get("labels") or {}}
    metadata["managedFields"] = [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-03-02T09:14:58Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {
                "f:metadata": {"f:labels": fields, "f:ownerReferences": {}},
                "f:spec": {"f:containers": {}, "f:hostname": {}, "f:subdomain": {}},
            },
        },
        {
            "manager": "kubelet",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-03-02T09:15:01Z",
            "fieldsType": "FieldsV1",
            "subresource": "status",
            "fieldsV1": {
                "f:status": {
                    "f:conditions": {},
                    "f:containerStatuses": {},
                    "f:hostIP": {},
                    "f:phase": {},
                    "f:podIP": {},
                    "f:startTime": {},
                }
            },
        },
    ]
    spec = pod["spec"]
    token = "kube-api-access-" + f"{index:05d}"[-5:]
    for container in spec["containers"]:
        container.setdefault("imagePullPolicy", "IfNotPresent")
        container.setdefault("terminationMessagePath", "/dev/termination-log")
        container.setdefault("terminationMessagePolicy", "File")
        container.setdefault("volumeMounts", []).append(
            {
                "name": token,
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            }
        )
    spec.setdefault("volumes", []).append(service_account_volume(token))
    spec.update(
        dnsPolicy="ClusterFirst",
        enableServiceLinks=True,
        nodeName=f"gpu-node-{index // 8:04d}",
        preemptionPolicy="PreemptLowerPriority",
        priority=0,
        restartPolicy="Always",
        schedulerName="default-scheduler",
        securityContext={},
        serviceAccount="default",
        serviceAccountName="default",
        terminationGracePeriodSeconds=30,
        tolerations=[
            {
                "key": f"node.kubernetes.io/{taint}",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
            for taint in ("not-ready", "unreachable")
        ],
    )
    ip = f"10.{index // 65536 % 256}.{index // 256 % 256}.{index % 256}"
    pod["status"] = running_status(pod, ip, "2026-03-02T09:15:01Z")
    return pod


def running_status(pod: dict[str, Any], ip: str, since: str) -> dict[str, Any]:
    return {
        "phase": "Running",
        "conditions": [
            {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": since}
            for kind in (
                "PodReadyToStartContainers",
                "Initialized",
                "Ready",
                "ContainersReady",
                "PodScheduled",
            )
        ],
        "hostIP": "192.168.7.21",
        "hostIPs": [{"ip": "192.168.7.21"}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "qosClass": "Burstable",
        "startTime": "2026-03-02T09:14:59Z",
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container["image"],
                "imageID": "registry/train@sha256:" + "4f" * 32,
                "containerID": "containerd://" + f"{hash((pod['metadata']['name'], since)):x}",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": since}},
                "lastState": {},
            }
            for container in pod["spec"]["containers"]
        ],
    }


def load(running: EmulatorThread, pods: int, jobs: int) -> int:
    """Put the jobs in the emulator; the size of one stored pod."""
    size = 0
    for number in range(jobs):
        stored = workloads("pytorch", pods, f"llm-{number}")
        for workload in stored:
            workload["metadata"].pop("uid")  # the emulator gives each its own
        running.call(partial(running.emulator.load, STATEFULSETS, stored))
        made: list[dict[str, Any]] = []
        for workload in stored:
            for raw in controller_pods(workload):
                mutated = mutate_pod(raw, NAMESPACE).pod
                made.append(stored_pod(mutated, number * pods + len(made)))
        size = len(_compact(made[-1]))
        running.call(partial(running.emulator.load, PODS, made))
    return size


def _compact(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"))


def _count(running: EmulatorThread, plural: str) -> int:
    def count() -> int:
        return sum(
            1
            for (resource, _, _), obj in running.emulator.objects.items()
            if resource.plural == plural and not obj.deleted
        )

    found: int = running.call(count, timeout=60)
    return found


def _status(pid: int) -> dict[str, int]:
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        match = re.match(r"(VmRSS|VmHWM):\s+(\d+) kB", line)
        if match:
            found[match[1]] = int(match[2])
    return found


def _mib(pid: int, key: str = "VmRSS") -> float:
    return _status(pid)[key] / 1024


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def _until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the sweeper did not get there in {timeout:.0f} s: {what}")
        time.sleep(0.2)


def _settle(running: EmulatorThread, quiet: float = 3.0, timeout: float = 300.0) -> None:
    """Wait until the sweeper has sent no request for `quiet` seconds but its lease's."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        recent = [
            entry
            for entry in running.emulator.log[-200:]
            if "/leases/" not in entry[1] and entry[3] > time.time() - quiet
        ]
        if not recent:
            return
        time.sleep(0.5)


def start_sweep(
    running: EmulatorThread, workdir: Path, log: IO[str]
) -> tuple[subprocess.Popen[bytes], int]:
    """A real `trainhook sweep` process against the emulator, its output in `log`; its
    metrics port."""
    port = _free_port()
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig(workdir / "kubeconfig", running.url)),
        "POD_NAME": "bench",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    command = [sys.executable, "-m", "webhook.cli", "sweep", "--lease-namespace=trainhook"]
    process = subprocess.Popen(
        [*command, f"--metrics-bind=127.0.0.1:{port}"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return process, port


def measure(pods: int, jobs: int, workdir: Path) -> ProcessMemory:
    with emulator() as running:
        running.emulator.keep_requests = False
        unwatched = f"/api/v1/namespaces/{NAMESPACE}/configmaps"
        running.create(unwatched, {"metadata": {"name": "before"}})  # lists start past "0"
        pod_bytes = load(running, pods, jobs) if pods else 0
        log = (workdir / f"sweep-{pods}x{jobs}.log").open("w")
        process, port = start_sweep(running, workdir, log)
        try:
            _until(lambda: _ready(port), 300, "listed")
            if jobs and pods:
                _until(lambda: _count(running, "services") >= jobs, 600, "Services")
            _settle(running)
            listed = _mib(process.pid)
            if pods:
                _change_every_pod(running)
                _settle(running)
            events = _mib(process.pid)
            # A write the sweeper does not watch, then a compaction: every watch is now behind
            # what the API server keeps, and must list again.
            running.create(unwatched, {"metadata": {"name": "after"}})
            running.call(running.emulator.compact)
            _until(lambda: "410" in Path(log.name).read_text(), 60, "the watch expired")
            _settle(running)
            relist = _mib(process.pid)
            peak = _mib(process.pid, "VmHWM")
        finally:
            process.terminate()
            process.wait(timeout=30)
            log.close()
    return ProcessMemory(
        case=f"{jobs:,} job{'s' if jobs > 1 else ''} of {pods:,} pods" if pods else "no jobs",
        pods=pods * jobs,
        pod_bytes=pod_bytes,
        listed_mib=listed,
        events_mib=events,
        relist_mib=relist,
        peak_mib=peak,
        per_pod_kib=0.0,
    )


def _change_every_pod(running: EmulatorThread) -> None:
    """Every pod's status changes once (its containers restarted and running again), as watch
    events, a thousand at a time."""

    def pods() -> list[dict[str, Any]]:
        return [
            obj.raw
            for (resource, _, _), obj in running.emulator.objects.items()
            if resource.plural == "pods" and not obj.deleted
        ]

    def change(batch: list[dict[str, Any]]) -> None:
        for pod in batch:
            changed = copy.deepcopy(pod)
            for container in changed["status"]["containerStatuses"]:
                container["state"] = {"running": {"startedAt": "2026-03-02T10:00:00Z"}}
            running.emulator.change(PODS, "MODIFIED", changed)

    every: list[dict[str, Any]] = running.call(pods, timeout=120)
    for start in range(0, len(every), 1000):
        running.call(partial(change, every[start : start + 1000]), timeout=120)
        time.sleep(0.5)


def process_memory(cases: Sequence[tuple[int, int]] = CASES) -> list[ProcessMemory]:
    with tempfile.TemporaryDirectory(prefix="trainhook-sweep-") as folder:
        workdir = Path(folder)
        empty = measure(0, 0, workdir)
        results = [empty]
        for pods, jobs in cases:
            found = measure(pods, jobs, workdir)
            per_pod = (found.listed_mib - empty.listed_mib) * 1024 / found.pods
            results.append(dataclasses.replace(found, per_pod_kib=per_pod))
    return results


def process_table(results: Sequence[ProcessMemory]) -> str:

    header = ["sweep process", "pod B", "listed", "events", "relist", "peak", "per pod"]
    rows = [
        [
            r.case,
            f"{r.pod_bytes:,}" if r.pods else "",
            f"{r.listed_mib:.0f} MiB",
            f"{r.events_mib:.0f} MiB",
            f"{r.relist_mib:.0f} MiB",
            f"{r.peak_mib:.0f} MiB" + (" (over the limit)" if r.peak_mib > LIMIT_MIB else ""),
            f"{r.per_pod_kib:.1f} KiB" if r.pods else "",
        ]
        for r in results
    ]
    return table(header, rows)


def _case(text: str) -> tuple[int, int]:
    pods, _, jobs = text.partition("x")
    return int(pods), int(jobs or 1)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sweeper_process")
    parser.add_argument(
        "--cases",
        default="10000x1,8x1000",
        help="PODSxJOBS, comma separated (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    cases = [_case(text) for text in args.cases.split(",")]
    print(process_table(process_memory(cases)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
