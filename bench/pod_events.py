"""What one pod event costs the sweeper at 10,000 and 1,000 pods: trickled, or in a burst.

    python -m bench.pod_events [--pods 10000,1000]

One PyTorch job's pods (what the webhook makes, as the informer holds them) are in an
informer's cache, which keeps the job's PodTable as the sweeper's does; then pod events are
handed to it as a watch delivers them, and every job they hand over is reconciled (reading the
job's cached objects and its PodTable into its state and deciding), as the sweeper's work queue
does. What a decision writes on the job's StatefulSets (a restart's failed runs, the job's
status) is written into the held ones with a new resourceVersion, as the watch brings it back,
so a StatefulSet is read again after it changed and its reading kept otherwise, as the sweeper
keeps it. Thread CPU time per event, not counting those writes, so the machine's other work
does not count:

* ignored: a trickle of status changes the sweeper does not keep (pod IP, probe times): each
  event costs its pod's slimming and nothing else;
* trickle: events far enough apart that each is reconciled alone (a container restarted: its
  failed runs are recorded on the workload);
* ready: a trickle of pods turning Ready one by one, each reconciled alone;
* burst: 1,000 container restarts at once, coalesced into one reconcile;
* ready after restarts: the same trickle once every pod's container has restarted once (what
  the job looks like after one NCCL blip).

The job's peers ConfigMap (a 10,000-pod job is past the inline bound) is in the cache, as the
sweeper's watch holds it.

The goal is 1 ms per event.
"""

from __future__ import annotations

import argparse
import copy
import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.sweeper import NOW, new_version, pytorch_pods
from bench.tables import table
from tests.support.stored import merge_patch
from webhook.core import contract
from webhook.core.shape.peers import configmap
from webhook.kube.resources import JOBS, PODS, STATEFULSETS
from webhook.sweeper.actions import Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.decide.owned import labels, peer_files_of
from webhook.sweeper.informers import PodTables, watch_of
from webhook.sweeper.job.state import JobKey, WorkloadViews, job_key, read_job_state

GOAL_MS = 1.0
LONG_AGO = "2026-03-02T09:00:00Z"


@dataclass(frozen=True)
class EventCost:
    pattern: str
    pods: int
    events: int
    reconciles: int
    per_event_ms: float


PATTERNS = ("ignored", "trickle", "ready", "burst", "ready after restarts")


def event_costs(
    pods: int = 10_000, trickled: int = 20, burst: int = 1000, patterns: Sequence[str] = PATTERNS
) -> list[EventCost]:
    stored, held, _ = pytorch_pods(pods, 0)
    burst = min(burst, pods)
    queued: set[JobKey] = set()
    tables = PodTables()
    views = WorkloadViews()
    # Never lists: the pods are handed to it.
    cache = watch_of(
        None,  # type: ignore[arg-type]
        PODS,
        contract.JOB,
        on_change=queued.add,
        pod_tables=tables,
    )
    for ordinal, pod in enumerate(held):
        if ordinal % 2:  # half the pods not Ready yet, to turn Ready one by one
            pod["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
        cache._put(pod, notify=False)
    version = 10_000_000
    configmaps = peers_held(stored, held)

    def event(index: int, change: str) -> dict[str, Any]:
        nonlocal version
        version += 1
        pod = copy.deepcopy(held[index])
        pod["metadata"]["resourceVersion"] = str(version)
        status = pod["status"]
        if change == "ignored":
            status["podIP"] = f"10.1.{version % 256}.{version // 256 % 256}"
        elif change in ("ready", "ready after restarts"):
            status["conditions"] = held[index]["status"]["conditions"] = [
                {"type": "Ready", "status": "True"}
            ]
        elif change == "restarted long ago":  # its failed run recorded and settled long since
            container = status["containerStatuses"][0]
            container["restartCount"] = 1
            container["lastState"] = {
                "terminated": {"exitCode": 1, "reason": "Error", "finishedAt": LONG_AGO}
            }
            held[index]["status"]["containerStatuses"] = status["containerStatuses"]
        else:
            container = status["containerStatuses"][0]
            container["restartCount"] = held[index]["status"]["containerStatuses"][0][
                "restartCount"
            ] = container["restartCount"] + 1
        return pod

    writing = 0.0  # thread CPU time of writing decisions into the held StatefulSets

    def reconcile() -> int:
        nonlocal writing
        done = 0
        while queued:
            key = queued.pop()
            state = read_job_state(
                key[0],
                key[1],
                workloads=stored,
                pod_table=tables.of(key),
                workload_views=views,
                configmaps=configmaps,
            )
            decision = decide(state, NOW)
            began = time.thread_time()
            for action in decision.actions:
                if isinstance(action, Patch) and action.resource in (STATEFULSETS, JOBS):
                    _write(stored, action)
            writing += time.thread_time() - began
            done += 1
        return done

    queued.add(job_key(PODS, held[0]) or ("", ""))
    reconcile()  # every pod read once, as after the first list
    results = []
    for pattern in patterns:
        count = burst if pattern == "burst" else trickled
        if pattern == "ready after restarts":  # every pod's container restarted once, long ago
            for index in range(pods):
                cache._put(event(index, "restarted long ago"))
            reconcile()
            # The failed runs it recorded come back through the StatefulSets' watch, which
            # hands the job over again.
            queued.add(job_key(PODS, held[0]) or ("", ""))
            reconcile()
        picked = (i * 37 % pods for i in range(pods * 2))
        if pattern == "ready":  # pods not Ready yet, of the first half
            picked = (i for i in picked if i % 2 and i < pods // 2)
        elif pattern == "ready after restarts":  # and of the second half
            picked = (i for i in picked if i % 2 and i >= pods // 2)
        events = [event(next(picked), pattern) for _ in range(count)]
        reconciles = 0
        # The collector's pass over what building the job left behind is not a pod event's.
        gc.collect()
        began, written = time.thread_time(), writing
        for obj in events:
            cache._put(obj)
            if pattern != "burst":
                reconciles += reconcile()
        reconciles += reconcile()
        spent = time.thread_time() - began - (writing - written)
        results.append(EventCost(pattern, pods, count, reconciles, spent * 1e3 / count))
    return results


def peers_held(stored: list[dict[str, Any]], held: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's peers ConfigMap as the sweeper made it and its watch holds it."""
    state = read_job_state(held[0]["metadata"]["namespace"], "", workloads=stored, pods=held[:1])
    state = read_job_state(state.namespace, state.workloads[0].workload.job, workloads=stored)
    made = []
    for files in peer_files_of(state).values():
        body = configmap(files, state.namespace)
        body["metadata"]["labels"] = labels(state)
        body["metadata"].update(uid=f"uid-{files.name}", resourceVersion="77")
        made.append(body)
    return made


def _write(workloads: list[dict[str, Any]], patch: Patch) -> None:
    """A decision's patch of a workload, as the watch brings the written object back: a new
    object with a new resourceVersion in place of the held one."""
    for position, held in enumerate(workloads):
        if held["metadata"]["name"] == patch.name:
            written = copy.deepcopy(held)
            merge_patch(written, patch.patch)
            new_version(written)
            workloads[position] = written


def events_table(costs: Sequence[EventCost]) -> str:
    header = ["pod events", "pods", "events", "reconciles", "CPU per event"]
    rows = [
        [
            c.pattern,
            f"{c.pods:,}",
            f"{c.events:,}",
            f"{c.reconciles:,}",
            f"{c.per_event_ms:.2f} ms" + ("" if c.per_event_ms <= GOAL_MS else " (over 1 ms)"),
        ]
        for c in costs
    ]
    return table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_events")
    parser.add_argument("--pods", default="10000,1000", help="job sizes, comma-separated")
    parser.add_argument(
        "--patterns", default=",".join(PATTERNS), help="which of them, comma-separated"
    )
    args = parser.parse_args(argv)
    sizes = [int(size) for size in args.pods.split(",")]
    patterns = [p for p in args.patterns.split(",") if p]
    print(events_table([c for size in sizes for c in event_costs(size, patterns=patterns)]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
