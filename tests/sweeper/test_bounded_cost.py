"""What the sweeper holds of a pod: only what it decides on, a few hundred bytes per pod."""

import json

from tests.support.stored import bare_pod, pod, stamped, statefulset
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
