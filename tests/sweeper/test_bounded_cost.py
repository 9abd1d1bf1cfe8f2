"""What the sweeper holds of a pod: only what it decides on, a few hundred bytes per pod."""

import json
from typing import Any

from tests.support.stored import NAMESPACE, bare_pod, pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.decide import decide
from webhook.sweeper.informers import slim_pod

from .helpers import NOW, evicted, state_of, terminated


def big_pod(owner, index, hosts=3000):
    """A pod as the webhook leaves it in a large job: its env and annotations list every peer."""
    made = pod(owner, index)
    peers = ",".join(f"pt-worker-{i}.pt.ml.svc:23456" for i in range(hosts))
    made["spec"]["containers"][0]["env"] = [
        {"name": "TF_CONFIG", "value": json.dumps({"cluster": {"worker": peers.split(",")}})},
        {"name": "TRAINHOOK_WORKER_HOSTS", "value": peers},
    ]
    made["spec"]["volumes"] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory"}},
        {"name": "trainhook-peers", "configMap": {"name": "pt-peers-0123456789"}},
    ]
    made["metadata"]["annotations"][contract.HOSTFILE] = peers.replace(",", " slots=1\n")
    made["metadata"]["annotations"]["trainhook.io/env.TF_CONFIG"] = peers  # an older pod's
    made["metadata"]["managedFields"] = [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}]
    return made


def test_a_pod_of_a_3000_pod_job_is_held_in_under_a_kilobyte():
    (workers,) = stamped(statefulset("pt-worker", role="worker", job="pt", replicas=3000))
    whole = big_pod(workers, 7)
    held = slim_pod(whole)
    assert len(json.dumps(whole)) > 200_000
    assert len(json.dumps(held)) < 1024


def test_the_sweeper_decides_the_same_on_what_it_holds_as_on_whole_pods():
    annotations = {contract.BACKOFF_LIMIT: "5"}
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41"),
        statefulset("pt-worker", role="worker", job="pt", replicas=4, annotations=annotations),
    )
    looping = terminated(
        pod(workers, 1, restarts=2), 137, reason="OOMKilled", message="out of memory", last=True
    )
    looping["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}
    }
    init = pod(workers, 3, phase="Pending", ready=False)
    init["spec"]["initContainers"] = [{"name": "fetch", "image": "f:1", "restartPolicy": "Never"}]
    init["status"]["initContainerStatuses"] = [
        {
            "name": "fetch",
            "restartCount": 1,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 3, "reason": "Error"}},
        }
    ]
    cases = [
        [big_pod(master, 0), looping, evicted(pod(workers, 2)), init],
        [terminated(pod(master, 0), 0, reason="Completed"), pod(workers, 0, terminating=True)],
    ]
    for pods in cases:
        whole = decide(state_of("pt", [master, workers], pods), NOW)
        held = decide(state_of("pt", [master, workers], [slim_pod(p) for p in pods]), NOW)
        assert held == whole
        whole_pods = state_of("pt", [master, workers], pods).pods
        held_pods = state_of("pt", [master, workers], [slim_pod(p) for p in pods]).pods
        assert held_pods == whole_pods  # the peers ConfigMap each mounts included
    bare = [bare_pod("bare-0", topology='{"worker":1}', annotations={contract.BACKOFF_LIMIT: "1"})]
    whole = decide(state_of("bare", [], bare), NOW)
    assert decide(state_of("bare", [], [slim_pod(p) for p in bare]), NOW) == whole


def test_a_pod_event_reads_only_the_pod_that_changed(monkeypatch):
    from webhook.sweeper.job import pods as state_module

    (workers,) = stamped(statefulset("big", role="worker", job="big", replicas=300))
    pods = [slim_pod(pod(workers, i)) for i in range(300)]
    reads = []
    real = state_module._read_pod

    def counted(p, *rest):
        reads.append(p)
        return real(p, *rest)

    monkeypatch.setattr(state_module, "_read_pod", counted)
    decide(state_of("big", [workers], pods), NOW)
    assert len(reads) == 300
    pods[42] = slim_pod(terminated(pod(workers, 42, restarts=1), 1, last=True))  # a new version
    reads.clear()
    decide(state_of("big", [workers], pods), NOW)
    assert [p["metadata"]["name"] for p in reads] == ["big-42"]


def test_a_busy_large_job_is_looked_at_once_for_a_burst_of_pod_events(kube):
    from tests.support.sweeping import fast_config
    from webhook.sweeper.runner import COALESCE_FACTOR, Sweeper

    sweeper = Sweeper(kube, fast_config("sweeper-a"))
    key = ("ml", "big")
    sweeper._costs[key] = 0.05  # its last reconcile took 50 ms
    for _ in range(100):
        sweeper._changed(key)
    assert len(sweeper.queue) == 1
    assert sweeper.queue.pop(timeout=0) is None  # not due yet: the burst waits to coalesce
    assert sweeper.queue.pop(timeout=COALESCE_FACTOR * 0.05 + 0.5) == key


def test_a_trickle_of_pod_events_within_the_batch_period_shares_one_look(kube):
    from tests.support.sweeping import fast_config
    from webhook.sweeper.queue import WorkQueue
    from webhook.sweeper.runner import Sweeper

    clock = [100.0]
    sweeper = Sweeper(kube, fast_config("sweeper-a", batch_seconds=1.0))
    sweeper.queue = WorkQueue(clock=lambda: clock[0])
    key = ("ml", "big")
    sweeper._costs[key] = 0.002  # a cheap look: the batch period, not its cost, decides
    for _ in range(5):  # Ready flips, ten a second
        sweeper._changed(key)
        clock[0] += 0.1
    assert len(sweeper.queue) == 1
    clock[0] = 100.99
    assert sweeper.queue.pop(timeout=0) is None  # within the first event's second
    clock[0] = 101.0  # a second after the first event, not after the last
    assert sweeper.queue.pop(timeout=0) == key
    assert len(sweeper.queue) == 0


def test_with_no_batch_period_a_cheap_jobs_event_is_looked_at_at_once(kube):
    from tests.support.sweeping import fast_config
    from webhook.sweeper.runner import Sweeper

    sweeper = Sweeper(kube, fast_config("sweeper-a", batch_seconds=0.0))
    key = ("ml", "small")
    sweeper._costs[key] = 0.001
    sweeper._changed(key)
    assert sweeper.queue.pop(timeout=0.05) == key


def test_the_sweeper_benchmark_measures_what_it_says_on_small_jobs():
    from bench.sweeper import sweeper_costs, sweeper_table

    small, many = sweeper_costs(1, (("one job of 40 pods", 1, 40), ("5 jobs of 8 pods", 5, 8)))
    assert (small.jobs, small.pods, many.jobs, many.pods) == (1, 40, 5, 40)
    assert small.held_pod_bytes < small.whole_pod_bytes
    assert small.decide_ms > 0 and many.all_jobs_ms > 0
    # Each case's pods are its own: none is read as a pod of an earlier case's job and deleted.
    assert small.deletes == many.deletes == 0
    assert sweeper_table([small]).splitlines()[0].startswith("| sweeper ")


def test_the_pod_event_benchmark_reconciles_as_the_sweeper_would():
    from bench.pod_events import event_costs, events_table

    ignored, trickle, ready, burst, restarted = event_costs(pods=40, trickled=3, burst=10)
    assert (ignored.reconciles, trickle.reconciles, ready.reconciles, burst.reconciles) == (
        0,
        3,
        3,
        1,
    )
    assert (restarted.pattern, restarted.reconciles) == ("ready after restarts", 3)
    assert (ignored.events, trickle.events, ready.events, burst.events) == (3, 3, 3, 10)
    assert events_table([burst]).splitlines()[2].split("|")[1:3] == [" burst      ", " 40   "]


def unschedulable(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["phase"] = "Pending"
    obj["status"].pop("containerStatuses", None)
    obj["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/40 nodes are available: 40 Insufficient nvidia.com/gpu.",
        }
    ]
    return obj


def test_a_gang_waiting_for_nodes_costs_the_decision_none_of_its_waiting_pods():
    from webhook.sweeper.decide.records import live_state

    (workers,) = stamped(statefulset("big", role="worker", job="big", replicas=300))
    pods = [slim_pod(pod(workers, 0))]
    pods += [slim_pod(unschedulable(pod(workers, i))) for i in range(1, 300)]
    state = state_of("big", [workers], pods)

    assert state.pod_facts.notable == ()  # each event reads its pod, not the 299 waiting
    assert [p.name for p in state.pod_facts.unschedulable[:2]] == ["big-1", "big-10"]
    assert live_state(state, set()) == (
        "Pending",
        "Unschedulable",
        "pod big-1: 0/40 nodes are available: 40 Insufficient nvidia.com/gpu.",
    )


def test_a_pod_that_recovered_and_then_went_before_a_look_is_no_disruption_gone():
    from webhook.sweeper.informers import PodTables
    from webhook.sweeper.job.state import read_job_state

    (workers,) = stamped(statefulset("big", role="worker", job="big", replicas=2))
    tables = PodTables()
    key = (NAMESPACE, "big")
    name = (NAMESPACE, "big-0")

    def look() -> Any:
        return read_job_state(NAMESPACE, "big", workloads=[workers], pod_table=tables.of(key))

    tables.changed(name, key, slim_pod(evicted(pod(workers, 0))))
    assert [p.name for p in look().pod_facts.notable] == ["big-0"]  # seen evicted
    tables.changed(name, key, slim_pod(pod(workers, 0)))  # running again, the same pod
    tables.changed(name, None, None)  # then deleted, before the next look

    assert look().pod_facts.gone == ()
