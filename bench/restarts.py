"""A whole-job restart, in place and by recreating its pods: API writes and the time until
training resumes.

    python -m bench.restarts [--pods N] [--emulated-pods M]

The StatefulSet controller, the scheduler and the kubelet are played
(tests/support/played_cluster.py), each doing at once what it would do, so the time measured is
the control plane's share of a restart. What a cluster adds on top is left out and named under
the table: for a recreated pod its scheduling, image pull, volume attach and a new IP; in place
the pod keeps them all, its kubelet only restarts containers.

* N pods (1,000): the sweeper's own decision (`decide`, as a reconcile runs it) against the
  objects in memory, the played components answering each round. Every write either side makes
  is counted; the time is the sweeper's, summed over its rounds.
* M pods (32): a real sweeper against the API emulator, writes counted from the emulator's own
  request log and the wall time measured. The emulator slows with every object it holds (a write
  takes half a second at 1,000 pods), so it runs a smaller job.
"""

from __future__ import annotations

import argparse
import copy
import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bench import tables
from bench.sweeper import new_version
from tests.support.emulator import EmulatorThread
from tests.support.played_cluster import NAMESPACE, PlayedCluster, in_place_pod
from tests.support.stored import merge_patch, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.actions import Create, Delete, Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.job.state import format_time, read_job_state

DEFAULT_PODS = 1000
DEFAULT_EMULATED_PODS = 32
WRITES = ("POST", "PUT", "PATCH", "DELETE")


@dataclass(frozen=True)
class RestartCost:
    mode: str
    where: str  # in memory, or against the emulator
    pods: int
    sweeper_writes: Counter[str]  # by what the sweeper did
    cluster_writes: Counter[str]  # by the played controller, scheduler and kubelet
    api_writes: int  # every write the emulator answered during the restart
    resume_seconds: float  # from the failure reported to every rank training again
    kept_pods: int  # pods that kept their uid and node
    rounds: int = 0  # sweeper decisions until training resumed (in memory)


def emulated(pods: int, policy: str) -> RestartCost:
    settings = {contract.RESTART_POLICY: policy}
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=settings),
        statefulset("pt-worker", role="worker", job="pt", replicas=pods - 1, annotations=settings),
    )
    served = EmulatorThread()
    # The played cluster polls every 0.1 s; kmock would scan every kept request on each new one.
    served.emulator.keep_requests = False
    served.start()
    try:
        kube = served.api()
        master = kube.create(STATEFULSETS, NAMESPACE, master)
        workers = kube.create(STATEFULSETS, NAMESPACE, workers)
        for owner, count in ((master, 1), (workers, pods - 1)):
            for index in range(count):
                node = f"gpu-{owner['metadata']['name']}-{index}"
                kube.create(PODS, NAMESPACE, in_place_pod(owner, index, node))
        before = _placement(served)
        # A lease long enough that a loaded machine does not cost the sweeper its leadership.
        played = PlayedCluster(served, kube, [master, workers], interval=0.1)
        lease: dict[str, Any] = {
            "lease_duration_seconds": 30,
            "renew_deadline": 20,
            "resync_seconds": 60.0,
        }
        with played as cluster, sweeping(kube, **lease) as sweeper:
            eventually(lambda: _state(served) == "Running", timeout=600, what="running")
            cluster.writes.clear()
            written = _writes(served)
            done = len(sweeper.actions)
            started = time.monotonic()
            _crash(kube, "pt-worker-1")
            resumed = _resumed_in_place if policy == "RestartJobInPlace" else _resumed_recreated
            eventually(
                lambda: resumed(served.objects(PODS, NAMESPACE), before),
                timeout=900,
                what="resumed",
            )
            seconds = time.monotonic() - started
            actions = Counter(
                a.split(" ")[0] + " " + a.split(" ")[1] for a in sweeper.actions[done:]
            )
            total = _writes(served) - written
            after = _placement(served)
            cluster_writes = Counter(cluster.writes)
        kept = sum(1 for name, placed in before.items() if after.get(name) == placed)
        return RestartCost(policy, "emulator", pods, actions, cluster_writes, total, seconds, kept)
    finally:
        served.stop()


def in_memory(pods: int, policy: str) -> RestartCost:
    """The sweeper's decisions on a job held in memory, the played cluster answering each."""
    settings = {contract.RESTART_POLICY: policy}
    workloads = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=settings),
        statefulset("pt-worker", role="worker", job="pt", replicas=pods - 1, annotations=settings),
    )
    store = {
        obj["metadata"]["name"]: _started_before(obj)
        for owner, count in zip(workloads, (1, pods - 1), strict=True)
        for obj in (
            in_place_pod(owner, index, f"gpu-{owner['metadata']['name']}-{index}")
            for index in range(count)
        )
    }
    cluster = PlayedCluster(None, None, workloads)
    before = {name: (p["metadata"]["uid"], p["spec"]["nodeName"]) for name, p in store.items()}
    sweeper: Counter[str] = Counter()

    created: dict[str, list[dict[str, Any]]] = {"services": [], "configmaps": []}

    def reconcile() -> float:
        state = read_job_state(
            NAMESPACE,
            "pt",
            workloads=workloads,
            pods=list(store.values()),
            services=created["services"],
            configmaps=created["configmaps"],
        )
        started = time.perf_counter()
        decision = decide(state, datetime.now(UTC))
        spent = time.perf_counter() - started
        for action in decision.actions:
            sweeper[" ".join(action.describe().split(" ")[:2])] += 1
            if isinstance(action, Create) and action.resource.plural in created:
                body = copy.deepcopy(dict(action.body))
                body["metadata"].update(uid=str(uuid.uuid4()), resourceVersion="1")
                created[action.resource.plural].append(body)
            _apply(action, workloads, store)
        for verb, name, body in cluster.step(store):
            if verb == "create":
                body["metadata"]["uid"] = str(uuid.uuid4())
                store[name] = body
            else:
                merge_patch(store[name], body)
                new_version(store[name])
        return spent

    for _ in range(5):  # the job's Service and first status, before the failure
        reconcile()
    sweeper.clear()
    cluster.writes.clear()
    merge_patch(store["pt-worker-1"], {"status": _crashed()})
    new_version(store["pt-worker-1"])
    spent, rounds = 0.0, 0
    resumed = _resumed_in_place if policy == "RestartJobInPlace" else _resumed_recreated
    while not resumed(list(store.values()), before):
        spent += reconcile()
        rounds += 1
        assert rounds < 50, "the restart does not converge"
    after = {name: (p["metadata"]["uid"], p["spec"].get("nodeName")) for name, p in store.items()}
    kept = sum(1 for name, placed in before.items() if after.get(name) == placed)
    writes = sum(sweeper.values()) + sum(cluster.writes.values())
    return RestartCost(
        policy, "in memory", pods, sweeper, Counter(cluster.writes), writes, spent, kept, rounds
    )


def _started_before(obj: dict[str, Any]) -> dict[str, Any]:
    """A pod of a job that has trained for a while when one of its ranks fails: created well
    before the restart's second, as a real job's pods are."""
    obj["metadata"]["creationTimestamp"] = format_time(datetime.now(UTC) - timedelta(hours=1))
    return obj


def _apply(action: Any, workloads: list[dict[str, Any]], store: dict[str, Any]) -> None:
    if isinstance(action, Patch):
        if action.resource == PODS:
            target = store.get(action.name)
        else:
            target = next((w for w in workloads if w["metadata"]["name"] == action.name), None)
        if target is not None:
            merge_patch(target, action.patch)
            new_version(target)
    elif isinstance(action, Delete) and action.resource == PODS:
        store.pop(action.name, None)


def _crashed() -> dict[str, Any]:
    crashed = {"exitCode": 1, "reason": "Error", "finishedAt": "2025-01-01T00:00:00Z"}
    training = {"name": "pytorch", "restartCount": 1, "state": {"running": {}}}
    return {"containerStatuses": [{**training, "lastState": {"terminated": crashed}}]}


def _writes(served: EmulatorThread) -> int:
    """How many writes the emulator answered so far, from its own log of (method, path, status)."""
    return served.run(lambda: sum(method in WRITES for method, *_ in served.emulator.log))


def _placement(served: EmulatorThread) -> dict[str, tuple[str, str]]:
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
        for p in served.objects(PODS, NAMESPACE)
    }


def _state(served: EmulatorThread) -> str:
    found = [
        o for o in served.objects(STATEFULSETS, NAMESPACE) if o["metadata"]["name"] == "pt-master"
    ]
    raw = (found[0]["metadata"].get("annotations") or {}).get(contract.STATUS) if found else None
    return str(json.loads(raw).get("state")) if raw else ""


def _crash(kube: Any, name: str) -> None:
    kube.patch(PODS, NAMESPACE, name, {"status": _crashed()})


def _training(obj: dict[str, Any]) -> bool:
    statuses = obj["status"].get("containerStatuses") or [{}]
    return obj["status"].get("phase") == "Running" and "running" in (statuses[0].get("state") or {})


def _resumed_in_place(pods: list[dict[str, Any]], before: dict[str, tuple[str, str]]) -> bool:
    return len(pods) == len(before) and all(
        (p["metadata"].get("annotations") or {}).get(contract.RELEASED_ATTEMPT) == "1"
        and _training(p)
        for p in pods
    )


def _resumed_recreated(pods: list[dict[str, Any]], before: dict[str, tuple[str, str]]) -> bool:
    olds = {uid for uid, _ in before.values()}
    return len(pods) == len(before) and all(
        p["metadata"]["uid"] not in olds and _training(p) for p in pods
    )


def table(costs: list[RestartCost]) -> str:
    header = [
        "restart",
        "run",
        "pods",
        "sweeper writes",
        "cluster writes",
        "API writes",
        "resume s",
        "rounds",
        "pods kept",
    ]
    rows = [
        [
            c.mode,
            c.where,
            f"{c.pods:,}",
            ", ".join(f"{n:,} {what}" for what, n in sorted(c.sweeper_writes.items())),
            ", ".join(f"{n:,} {what}" for what, n in sorted(c.cluster_writes.items())),
            f"{c.api_writes:,}",
            f"{c.resume_seconds:.2f}",
            str(c.rounds) if c.rounds else "-",
            f"{c.kept_pods:,} of {c.pods:,}",
        ]
        for c in costs
    ]
    notes = (
        "resume s: in memory, the sweeper's decision time summed over its rounds; against the "
        "emulator, the wall time with the played kubelet acting at once. A cluster adds, for "
        "every recreated pod, scheduling, image pull, volume attach and a new IP; in place, only "
        "the containers' restart."
    )
    return "\n".join([tables.table(header, rows), "", notes])


POLICIES = ("RestartJobInPlace", "RestartJob")


def restart_costs(
    pods: int = DEFAULT_PODS, emulated_pods: int = DEFAULT_EMULATED_PODS
) -> list[RestartCost]:
    costs = [in_memory(pods, policy) for policy in POLICIES]
    if emulated_pods:
        costs += [emulated(emulated_pods, policy) for policy in POLICIES]
    return costs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=DEFAULT_PODS)
    parser.add_argument("--emulated-pods", type=int, default=DEFAULT_EMULATED_PODS)
    args = parser.parse_args()
    print(table(restart_costs(args.pods, args.emulated_pods)))


if __name__ == "__main__":
    main()
