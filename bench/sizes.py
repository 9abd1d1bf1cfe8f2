"""What a job costs the API server and the sweeper, per framework, from 64 to 8,192 pods.

    python -m bench.sizes [--sizes 64,512,2048,8192] [--frameworks pytorch,...]

For each framework a job of N pods (its usual roles, the rest workers) is expanded into its
pods the way the controllers create them; every pod goes through the webhook's pure admission
(`webhook.core.mutation.admit`, what a request costs without HTTP), and the sweeper's pure
decision runs on the job's objects as its caches hold them. Printed per job:

* pod B: the largest pod object (compact JSON) as stored after admission, and what Trainhook
  added to it;
* job B: every object of the job the API server stores: the workloads, every pod, and the peers
  ConfigMap of a job past the inline bound; and that divided by the pods;
* admission us per pod: the mean over every pod of the job (the first pod, which makes the
  job's lists, included), in CPU time of the thread, so the machine's other load counts less;
* sweeper: the memory its caches and its view of the job take (tracemalloc, the objects parsed
  from their JSON as a watch delivers them) and its decision's CPU time (best of three).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bench import tables
from bench.fresh import in_fresh_process
from webhook.core.mutation.admit import Request, admit
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import expand
from webhook.core.shape.peers import configmap
from webhook.sweeper.decide import decide
from webhook.sweeper.job.state import read_job_state

LATER = datetime(2027, 1, 1, tzinfo=UTC)  # every workload settled
SIZES = (64, 512, 2048, 8192)
NAMESPACE = "research"
JOB = "llm"
# The roles of each framework's job; 0 is "the rest of the pods".
ROLES: dict[str, dict[str, int]] = {
    "pytorch": {"master": 1, "worker": 0},
    "jax": {"worker": 0},
    "xgboost": {"master": 1, "worker": 0},
    "mindspore": {"scheduler": 1, "worker": 0},
    "mpi": {"launcher": 1, "worker": 0},
    "tensorflow": {"chief": 1, "ps": 4, "worker": 0},
    "paddle": {"worker": 0},
}


@dataclass(frozen=True)
class JobSize:
    framework: str
    pods: int
    lists: str  # "env" or the peers ConfigMap's size
    pod_bytes: int
    added_bytes: int
    job_bytes: int
    admission_us: float
    sweeper_bytes: int
    decide_ms: float


def compact(obj: Any) -> int:
    return len(json.dumps(obj, separators=(",", ":")))


def workloads(framework: str, pods: int, job: str = JOB) -> list[dict[str, Any]]:
    roles = ROLES[framework]
    fixed = sum(roles.values())
    documents = []
    for role, count in roles.items():
        name = f"{job}-{role}"
        labels = {
            "trainhook.io/framework": framework,
            "trainhook.io/job": job,
            "trainhook.io/role": role,
        }
        documents.append(
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                "spec": {
                    "replicas": count or pods - fixed,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": framework, "image": "registry/train:1"}]},
                    },
                },
            }
        )
    stored = []
    for number, document in enumerate(documents):
        mutated = mutate_workload(document, "CREATE", NAMESPACE, documents).workload
        mutated["metadata"]["uid"] = f"00000000-0000-0000-0000-{number:012d}"
        mutated["metadata"]["creationTimestamp"] = "2026-01-01T00:00:00Z"
        stored.append(mutated)
    return stored


def controller_pods(workload: dict[str, Any]) -> list[dict[str, Any]]:
    """The pods of a StatefulSet as its controller creates them, owned by it."""
    owner = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": workload["metadata"]["name"],
        "uid": workload["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    pods = expand(workload, NAMESPACE)
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [owner]
    return pods


def measure(framework: str, pods: int) -> JobSize:
    stored = workloads(framework, pods)
    raw = [pod for workload in stored for pod in controller_pods(workload)]
    gc.collect()
    started = time.thread_time()
    for pod in raw:
        admit(Request("Pod", "CREATE", pod, NAMESPACE))
    admission_us = (time.thread_time() - started) / len(raw) * 1e6
    results = [mutate_pod(pod, NAMESPACE) for pod in raw]
    added = [compact(r.pod) - compact(pod) for r, pod in zip(results, raw, strict=True)]
    largest = max(range(len(raw)), key=lambda i: added[i])
    peers = results[0].peers
    objects: list[dict[str, Any]] = [*stored, *(r.pod for r in results)]
    if peers is not None:
        objects.append(configmap(peers, NAMESPACE))
    job_bytes = sum(compact(obj) for obj in objects)
    wire = [json.dumps(obj) for obj in objects]
    pod_bytes = compact(results[largest].pod)
    del results, raw, objects
    gc.collect()
    tracemalloc.start()
    cached = [json.loads(text) for text in wire]
    state = read_job_state(
        NAMESPACE,
        JOB,
        workloads=[o for o in cached if o["kind"] == "StatefulSet"],
        pods=[o for o in cached if o["kind"] == "Pod"],
        configmaps=[o for o in cached if o["kind"] == "ConfigMap"],
    )
    sweeper_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    decide_ms = min(_timed(lambda: decide(state, LATER)) for _ in range(3)) * 1e3
    return JobSize(
        framework=framework,
        pods=pods,
        lists="env" if peers is None else f"ConfigMap, {peers.size:,} B",
        pod_bytes=pod_bytes,
        added_bytes=added[largest],
        job_bytes=job_bytes,
        admission_us=admission_us,
        sweeper_bytes=sweeper_bytes,
        decide_ms=decide_ms,
    )


def _timed(function: Callable[[], object]) -> float:
    """CPU seconds of this thread: other processes on the machine do not count."""
    started = time.thread_time()
    function()
    return time.thread_time() - started


def table(rows: Sequence[JobSize]) -> str:
    header = [
        "framework",
        "pods",
        "lists in",
        "pod B (added)",
        "job B",
        "job B per pod",
        "admission us per pod",
        "sweeper KiB",
        "sweeper B per pod",
        "decision ms",
    ]
    lines = [
        [
            r.framework,
            f"{r.pods:,}",
            r.lists,
            f"{r.pod_bytes:,} ({r.added_bytes:,})",
            f"{r.job_bytes:,}",
            f"{r.job_bytes / r.pods:,.0f}",
            f"{r.admission_us:,.0f}",
            f"{r.sweeper_bytes / 1024:,.0f}",
            f"{r.sweeper_bytes / r.pods:,.0f}",
            f"{r.decide_ms:,.1f}",
        ]
        for r in rows
    ]
    return tables.table(header, lines)


def job_sizes(
    frameworks: Sequence[str] = tuple(ROLES), sizes: Sequence[int] = SIZES
) -> list[JobSize]:
    """Each job in a fresh process, so the sweeper's memory for it is its own."""
    return [
        in_fresh_process(measure, framework, pods) for framework in frameworks for pods in sizes
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench.sizes", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--frameworks", default=",".join(ROLES))
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.sizes.split(",")]
    print(table(job_sizes(args.frameworks.split(","), sizes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
