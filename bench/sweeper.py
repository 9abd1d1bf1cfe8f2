"""The sweeper's cost: its decision time and what its pod cache holds, for large jobs and many.

    python -m bench.sweeper [--rounds N]

Times the pure part of a reconcile (reading a job's cached objects into its state and deciding)
on PyTorch jobs whose pods are what the webhook makes (every pod lists its peers), and
measures the resident memory the sweeper's pod cache adds when it holds them. The API emulator
is left out on purpose: it slows quadratically with the objects it holds.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.fresh import in_fresh_process
from bench.inprocess import answer, patch_of
from bench.reviews import Case, admitted, apply, container, controller_pod, review, statefulset
from bench.tables import table
from webhook.core import contract
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Decision, Delete
from webhook.sweeper.decide import decide
from webhook.sweeper.informers import slim_pod, watch_of
from webhook.sweeper.job.state import job_key, read_job_state

NOW = datetime(2026, 3, 2, 10, 0, 0, tzinfo=UTC)
CASES = (
    ("1 job of 1,000 pods", 1, 1000),
    ("1 job of 5,000 pods", 1, 5000),
    ("1,000 jobs of 8 pods", 1000, 8),
)


@dataclass(frozen=True)
class SweeperCost:
    case: str
    jobs: int
    pods: int  # in all
    whole_pod_bytes: int  # one pod as the API sends it
    held_pod_bytes: int  # what the sweeper keeps of it
    decide_ms: float  # reading one job's state and deciding, median, in CPU time of the thread
    deletes: int  # pods the timed decision deletes: none, for a job that runs as it should
    per_pod_us: float  # decide_ms / pods of one job
    all_jobs_ms: float  # every job once, as after a relist
    cache_mib: float  # resident memory the pod cache adds
    total_mib: float  # and with every job decided (each pod's reading kept, one per version)
    whole_cache_mib: float  # what whole pods would have taken (bytes as JSON)


def _rss() -> int:
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def pytorch_pods(
    pods: int, job_index: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int]:
    """The stored StatefulSets of a PyTorch job of one master and N - 1 workers, what the
    sweeper holds of every pod, and the size of one whole worker pod as the webhook made it."""
    name = f"pt-{job_index}"
    job = [
        statefulset("pytorch", name, "master", 1, [_container()]),
        statefulset("pytorch", name, "worker", pods - 1, [_container()]),
    ]
    stored = [admitted(w, job) for w in job]
    whole = controller_pod(stored[1], 0)
    whole = apply(whole, patch_of(answer(Case("pod", review(whole)))))
    whole_bytes = len(json.dumps(whole))
    template = slim_pod(whole)
    held: list[dict[str, Any]] = []
    for workload in stored:
        meta = workload["metadata"]
        role = meta["labels"][contract.ROLE]
        for ordinal in range(workload["spec"]["replicas"]):
            pod = copy.deepcopy(template)
            metadata = pod["metadata"]
            metadata["name"] = f"{meta['name']}-{ordinal}"
            # Distinct in every case and job, as the API server's are: a reused uid would hand
            # the decision a reading of another case's pod.
            metadata["uid"] = str(uuid.uuid5(uuid.NAMESPACE_OID, f"{pods}/{name}/{role}/{ordinal}"))
            metadata["resourceVersion"] = str(1000 + ordinal)
            metadata["labels"] |= {
                contract.ROLE: role,
                contract.ROLE_INDEX: str(ordinal),
                contract.STATEFULSET_POD_INDEX: str(ordinal),
            }
            metadata["ownerReferences"][0] |= {"name": meta["name"], "uid": meta["uid"]}
            # Running: the gates the webhook set (the job's peers ConfigMap proven) are lifted.
            pod["spec"].pop("schedulingGates", None)
            pod["status"] = {
                "phase": "Running",
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [
                    {
                        "name": "pytorch",
                        "restartCount": 0,
                        "state": {"running": {"startedAt": "2026-03-02T09:15:00Z"}},
                        "lastState": {},
                    }
                ],
            }
            held.append(pod)
    return stored, held, whole_bytes


def new_version(obj: dict[str, Any]) -> None:
    """Every write is a new resourceVersion, as the API server makes it."""
    metadata = obj["metadata"]
    metadata["resourceVersion"] = str(int(metadata.get("resourceVersion") or 0) + 1)


def _container() -> dict[str, Any]:
    return container("pytorch", "registry.example.com/ml/trainer:2.4", 4, "8", "32Gi")


def _median_ms(function: Callable[[], object], rounds: int) -> float:
    """CPU time of this thread: other processes on the shared machine do not count."""
    times = []
    for _ in range(rounds):
        began = time.thread_time()
        function()
        times.append(time.thread_time() - began)
    return statistics.median(times) * 1e3


def measure(case: str, jobs: int, pods: int, rounds: int) -> SweeperCost:
    gc.collect()
    before = _rss()
    cache = watch_of(None, PODS, contract.JOB)  # type: ignore[arg-type]  # never lists
    workloads: dict[tuple[str, str], list[dict[str, Any]]] = {}
    whole_bytes = held_bytes = 0
    for index in range(jobs):
        stored, held, whole_bytes = pytorch_pods(pods, index)
        held_bytes = len(json.dumps(held[-1]))
        for pod in held:
            cache._put(pod, notify=False)
        key = job_key(PODS, held[0])
        assert key is not None
        workloads[key] = stored
        del held
    gc.collect()
    cache_mib = (_rss() - before) / 2**20

    def one(key: tuple[str, str]) -> Decision:
        state = read_job_state(key[0], key[1], workloads=workloads[key], pods=cache.objects_of(key))
        return decide(state, NOW)

    first = next(iter(workloads))
    decide_ms = _median_ms(lambda: one(first), rounds)
    deletes = sum(isinstance(action, Delete) for action in one(first).actions)

    def every() -> None:
        for key in workloads:
            one(key)

    all_ms = _median_ms(every, max(1, rounds // 2))
    gc.collect()
    total_mib = (_rss() - before) / 2**20
    return SweeperCost(
        case=case,
        jobs=jobs,
        pods=jobs * pods,
        whole_pod_bytes=whole_bytes,
        held_pod_bytes=held_bytes,
        decide_ms=decide_ms,
        deletes=deletes,
        per_pod_us=decide_ms * 1e3 / pods,
        all_jobs_ms=all_ms,
        cache_mib=cache_mib,
        total_mib=total_mib,
        whole_cache_mib=whole_bytes * jobs * pods / 2**20,
    )


def sweeper_costs(rounds: int, cases: Sequence[tuple[str, int, int]] = CASES) -> list[SweeperCost]:
    """Each case in a fresh process, so its resident memory is its own."""
    return [in_fresh_process(measure, case, jobs, pods, rounds) for case, jobs, pods in cases]


def sweeper_table(costs: Sequence[SweeperCost]) -> str:
    header = [
        "sweeper",
        "whole pod",
        "held pod",
        "decide one job",
        "per pod",
        "every job",
        "pod cache RSS",
        "with decisions",
        "whole pods would take",
    ]
    rows = [
        [
            c.case,
            f"{c.whole_pod_bytes:,} B",
            f"{c.held_pod_bytes:,} B",
            f"{c.decide_ms:.1f} ms",
            f"{c.per_pod_us:.0f} µs",
            f"{c.all_jobs_ms:.0f} ms",
            f"{c.cache_mib:.1f} MiB",
            f"{c.total_mib:.1f} MiB",
            f"{c.whole_cache_mib:,.0f} MiB",
        ]
        for c in costs
    ]
    return table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sweeper")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    print(sweeper_table(sweeper_costs(args.rounds)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
