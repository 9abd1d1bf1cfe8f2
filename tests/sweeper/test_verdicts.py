"""Verdicts in the situations that fooled the sweeper: pods being deleted or evicted, restarts
after a success, peers crashing just before the decisive exit 0, replaced pods, init containers."""

import json
from datetime import timedelta

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import STATEFULSETS
from webhook.sweeper.actions import Emit, Patch
from webhook.sweeper.decide.policy import Verdict, judge

from .helpers import (
    NOW,
    annotations_patched,
    decision,
    evicted,
    of_type,
    state_of,
    status_of,
    terminated,
)


def pytorch(master=True, workers=2, annotations=None):
    found = []
    if master:
        found.append(
            statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
        )
    found.append(
        statefulset(
            "pt-worker", role="worker", job="pt", replicas=workers, annotations=annotations, rv="42"
        )
    )
    return stamped(*found)


def verdict(workloads, pods, now=NOW):
    return judge(state_of("pt", workloads, pods), now)


# --- successes that are not ---------------------------------------------------------------


def test_a_master_that_exits_0_on_sigterm_while_being_deleted_does_not_finish_the_job():
    master, workers = pytorch()
    drained = pod(master, 0, exit_code=0, terminating=True)
    assert verdict([master, workers], [drained, pod(workers, 0), pod(workers, 1)]) is None


def test_an_evicted_master_that_exits_0_does_not_finish_the_job():
    master, workers = pytorch()
    drained = evicted(pod(master, 0, exit_code=0))
    assert verdict([master, workers], [drained, pod(workers, 0), pod(workers, 1)]) is None


# --- successes remembered -----------------------------------------------------------------


def test_a_worker_seen_succeeding_is_recorded_on_its_statefulset_at_once():
    (workers,) = pytorch(master=False, workers=4)
    pods = [pod(workers, 0, exit_code=0), pod(workers, 1), pod(workers, 2, exit_code=0)]
    actions = decision("pt", [workers], pods, records=True).actions
    assert annotations_patched(actions, "pt-worker")[contract.SUCCEEDED] == "0,2"


def test_a_worker_that_succeeded_then_trained_again_and_failed_still_counts_as_succeeded():
    (workers,) = pytorch(master=False, workers=2, annotations={contract.BACKOFF_LIMIT: "0"})
    workers["metadata"]["annotations"][contract.SUCCEEDED] = "0"
    again = terminated(pod(workers, 0, restarts=2), 1, last=True)  # its exit 0 is gone
    assert verdict([workers], [again, pod(workers, 1)]) is None  # neither failed nor done
    done = [again, pod(workers, 1, exit_code=0)]
    assert verdict([workers], done) == Verdict(
        "Succeeded", "Completed", "every worker succeeded (success policy: the framework default)"
    )


# --- the failure race ---------------------------------------------------------------------


def test_a_peer_crash_seen_before_the_masters_exit_0_waits_the_grace_period():
    master, workers = pytorch(annotations={contract.RESTART_POLICY: "ExitCode"})
    crashed = terminated(pod(workers, 0), 1, ago=2)
    pods = [pod(master, 0), crashed, pod(workers, 1)]
    made = decision("pt", [master, workers], pods, records=True)
    assert contract.PHASE not in annotations_patched(made.actions, "pt-master")
    assert made.recheck_at == NOW + timedelta(seconds=8)
    pods[0] = terminated(pod(master, 0), 0, reason="Completed", ago=1)
    assert verdict([master, workers], pods).reason == "Completed"


def test_a_crash_older_than_the_grace_period_fails_the_job():
    master, workers = pytorch(annotations={contract.RESTART_POLICY: "ExitCode"})
    pods = [pod(master, 0), terminated(pod(workers, 0), 1, ago=10), pod(workers, 1)]
    assert verdict([master, workers], pods).reason == "ExitCode"


# --- failed runs counted across pod replacements -------------------------------------------


def test_failed_runs_are_recorded_per_pod_on_the_workload():
    master, workers = pytorch(annotations={contract.BACKOFF_LIMIT: "5"})
    crashing = terminated(pod(workers, 1, restarts=2), 1, last=True)
    actions = decision("pt", [master, workers], [pod(master, 0), crashing], records=True).actions
    uid8 = crashing["metadata"]["uid"].replace("-", "")[:8]
    recorded = annotations_patched(actions, "pt-worker")[contract.FAILED_RUNS]
    assert json.loads(recorded) == {"gone": 0, "pods": {uid8: 2}}
    assert contract.FAILED_RUNS not in annotations_patched(actions, "pt-master")


def test_failed_runs_of_a_replaced_pod_still_count_against_the_backoff_limit():
    master, workers = pytorch(annotations={contract.BACKOFF_LIMIT: "2"})
    # pt-worker-1 failed twice, then was evicted and replaced by a pod with a new uid
    workers["metadata"]["annotations"][contract.FAILED_RUNS] = '{"gone":0,"pods":{"0ld0ld00":2}}'
    replaced = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    actions = decision("pt", [master, workers], replaced, records=True).actions
    ledger = json.loads(annotations_patched(actions, "pt-worker")[contract.FAILED_RUNS])
    assert ledger == {"gone": 2, "pods": {}}
    workers["metadata"]["annotations"][contract.FAILED_RUNS] = json.dumps(ledger)
    assert verdict([master, workers], replaced) is None
    replaced[2] = terminated(pod(workers, 1, restarts=1), 137, reason="OOMKilled", last=True)
    assert verdict([master, workers], replaced) == Verdict(
        "Failed",
        "BackoffLimitExceeded",
        "3 failed runs of the training containers exceed trainhook.io/backoff-limit 2; "
        "last: pod pt-worker-1: container pytorch exited with code 137 (OOMKilled)",
    )


def test_a_pod_killed_by_its_deletion_adds_no_failed_run_but_keeps_those_recorded():
    master, workers = pytorch(annotations={contract.BACKOFF_LIMIT: "5"})
    going = terminated(pod(workers, 0, restarts=1, terminating=True), 143)
    uid8 = going["metadata"]["uid"].replace("-", "")[:8]
    workers["metadata"]["annotations"][contract.FAILED_RUNS] = json.dumps(
        {"gone": 0, "pods": {uid8: 1}}
    )
    actions = decision("pt", [master, workers], [pod(master, 0), going], records=True).actions
    assert contract.FAILED_RUNS not in annotations_patched(actions, "pt-worker")


def test_a_crash_looping_init_container_counts_against_the_backoff_limit():
    master, workers = pytorch(annotations={contract.BACKOFF_LIMIT: "2"})
    stuck = pod(workers, 0, phase="Pending", ready=False)
    stuck["spec"]["initContainers"] = [{"name": "fetch-data", "image": "fetch:1"}]
    stuck["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}
    stuck["status"]["initContainerStatuses"] = [
        {
            "name": "fetch-data",
            "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}},
        }
    ]
    assert verdict([master, workers], [pod(master, 0), stuck, pod(workers, 1)]) == Verdict(
        "Failed",
        "BackoffLimitExceeded",
        "3 failed runs of the training containers exceed trainhook.io/backoff-limit 2; "
        "last: pod pt-worker-0: container pytorch (an init container) exited with code 2",
    )


# --- what the job's state says ------------------------------------------------------------


def test_a_crash_looping_rank_shows_restarting_with_oomkilled_and_its_termination_message():
    master, workers = pytorch()
    looping = terminated(
        pod(workers, 1, restarts=3),
        137,
        reason="OOMKilled",
        message="CUDA out of memory.\nTried to allocate 2 GiB",
        last=True,
    )
    looping["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}
    }
    pods = [pod(master, 0), pod(workers, 0), looping]
    actions = decision("pt", [master, workers], pods, records=True).actions
    message = (
        "pod pt-worker-1: container pytorch exited with code 137 (OOMKilled): "
        "CUDA out of memory. Tried to allocate 2 GiB"
    )
    assert status_of(actions) == {
        "state": "Restarting",
        "reason": "OOMKilled",
        "message": message,
        "restarts": 3,
        "startTime": "2025-01-01T01:00:00Z",
    }
    (event,) = of_type(actions, Emit)
    assert (event.type, event.reason, event.message) == (
        "Warning",
        "Restarting",
        f"job pt is restarting: OOMKilled: {message}",
    )


def test_an_image_that_cannot_be_pulled_shows_pending_with_the_kubelets_reason():
    master, workers = pytorch()
    waiting = pod(workers, 0, phase="Pending", ready=False)
    waiting["status"]["containerStatuses"][0]["state"] = {
        "waiting": {
            "reason": "ImagePullBackOff",
            "message": 'Back-off pulling image "trainer:1"',
        }
    }
    pods = [pod(master, 0), waiting, pod(workers, 1)]
    actions = decision("pt", [master, workers], pods, records=True).actions
    state = status_of(actions)
    assert (state["state"], state["reason"], state["message"]) == (
        "Pending",
        "ImagePullBackOff",
        'pod pt-worker-0: container pytorch: Back-off pulling image "trainer:1"',
    )
    (event,) = of_type(actions, Emit)
    assert (event.type, event.reason) == ("Warning", "Pending")


def test_a_running_job_records_its_state_once_on_every_workload():
    master, workers = pytorch()
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    actions = decision("pt", [master, workers], pods, records=True).actions
    recorded = '{"state":"Running","reason":"Running","message":"","restarts":0,' + (
        '"startTime":"2025-01-01T01:00:00Z"}'
    )
    assert of_type(actions, Patch) == [
        Patch(STATEFULSETS, "ml", w, {"metadata": {"annotations": {contract.STATUS: recorded}}}, rv)
        for w, rv in (("pt-master", "41"), ("pt-worker", "42"))
    ]
    for workload in (master, workers):
        workload["metadata"]["annotations"][contract.STATUS] = recorded
    later = decision("pt", [master, workers], pods, now=NOW + timedelta(hours=1), records=True)
    assert of_type(later.actions, Patch) == [] and of_type(later.actions, Emit) == []


def test_the_recorded_state_goes_with_the_verdict():
    master, workers = pytorch()
    pods = [terminated(pod(master, 0), 0, reason="Completed"), pod(workers, 0), pod(workers, 1)]
    for workload in (master, workers):
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(
            {"state": "Running", "restarts": 0, "startTime": "2025-01-01T00:10:00Z"}
        )
    actions = decision("pt", [master, workers], pods, records=True).actions
    assert status_of(actions) == {
        "state": "Succeeded",
        "reason": "Completed",
        "message": "master 0 succeeded (success policy: the framework default)",
        "restarts": 0,
        "startTime": "2025-01-01T00:10:00Z",
    }
