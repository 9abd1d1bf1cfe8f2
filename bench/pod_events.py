"""What one pod event costs the sweeper at 10,000 pods: trickled one by one, or in a burst.

    python -m bench.pod_events [--pods 10000]

One PyTorch job's pods (what the webhook makes, as the informer holds them) are in an
informer's cache; then pod events are handed to it as a watch delivers them, and every job
they hand over is reconciled (reading the job's cached objects into its state and deciding),
as the sweeper's work queue does. Thread CPU time per event, so the machine's other work does
not count:

* ignored: a trickle of status changes the sweeper does not keep (pod IP, probe times): each
  event costs its pod's slimming and nothing else;
* trickle: events far enough apart that each is reconciled alone (a container restarted);
* burst: 1,000 such events at once, coalesced into one reconcile.

The goal is 1 ms per event.
"""

from __future__ import annotations

import argparse
import copy
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bench.sweeper import NOW, pytorch_pods
from bench.tables import table
from webhook.core import contract
from webhook.kube.informer import Informer
from webhook.kube.resources import PODS
from webhook.sweeper.decide import decide
from webhook.sweeper.informers import same_pod, slim_pod
from webhook.sweeper.state import JobKey, job_key, read_job_state

GOAL_MS = 1.0


@dataclass(frozen=True)
class EventCost:
    pattern: str
    events: int
    reconciles: int
    per_event_ms: float


def event_costs(pods: int = 10_000, trickled: int = 20, burst: int = 1000) -> list[EventCost]:
    stored, held, _ = pytorch_pods(pods, 0)
    queued: set[JobKey] = set()
    cache: Informer[JobKey] = Informer(
        None,  # type: ignore[arg-type]  # never lists: the pods are handed to it
        PODS,
        namespace=None,
        selector=contract.JOB,
        index=lambda obj: job_key(PODS, obj),
        on_change=queued.add,
        resync_seconds=60,
        keep=slim_pod,
        unchanged=same_pod,
    )
    for pod in held:
        cache._put(pod, notify=False)
    version = 10_000_000

    def event(index: int, change: str) -> dict[str, Any]:
        nonlocal version
        version += 1
        pod = copy.deepcopy(held[index])
        pod["metadata"]["resourceVersion"] = str(version)
        status = pod["status"]
        if change == "ignored":
            status["podIP"] = f"10.1.{version % 256}.{version // 256 % 256}"
        else:
            container = status["containerStatuses"][0]
            container["restartCount"] = held[index]["status"]["containerStatuses"][0][
                "restartCount"
            ] = container["restartCount"] + 1
        return pod

    def reconcile() -> int:
        done = 0
        while queued:
            key = queued.pop()
            state = read_job_state(key[0], key[1], workloads=stored, pods=cache.objects_of(key))
            decide(state, NOW)
            done += 1
        return done

    reconcile()  # every pod read once, as after the first list
    results = []
    for pattern, count in (("ignored", trickled), ("trickle", trickled), ("burst", burst)):
        events = [event(i * 37 % pods, pattern) for i in range(count)]
        reconciles = 0
        began = time.thread_time()
        for obj in events:
            cache._put(obj)
            if pattern != "burst":
                reconciles += reconcile()
        reconciles += reconcile()
        spent = time.thread_time() - began
        results.append(EventCost(pattern, count, reconciles, spent * 1e3 / count))
    return results


def events_table(costs: Sequence[EventCost], pods: int) -> str:
    header = [f"pod events at {pods:,} pods", "events", "reconciles", "CPU per event"]
    rows = [
        [
            c.pattern,
            f"{c.events:,}",
            f"{c.reconciles:,}",
            f"{c.per_event_ms:.2f} ms" + ("" if c.per_event_ms <= GOAL_MS else " (over 1 ms)"),
        ]
        for c in costs
    ]
    return table(header, rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.pod_events")
    parser.add_argument("--pods", type=int, default=10_000)
    args = parser.parse_args(argv)
    print(events_table(event_costs(args.pods), args.pods))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
