"""Whole-job restarts (RestartJob), the active deadline, and a job being deleted."""

import json
from datetime import timedelta

from tests.support.stored import owned, pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import PODGROUPS, PODS, STATEFULSETS
from webhook.sweeper.actions import Delete, Emit, Patch
from webhook.sweeper.job.state import format_time

from .helpers import NOW, annotations_patched, decision, evicted, of_type, status_of, terminated

RESTART_JOB = {contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "2"}


def pytorch(annotations=None, workers=2):
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=workers, annotations=annotations, rv="42"
    )
    return stamped(master, worker)


def created(obj, at):
    obj["metadata"]["creationTimestamp"] = format_time(at)
    return obj


def record(workloads, **status):
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)


def crashed_job():
    master, workers = pytorch(RESTART_JOB)
    crashed = terminated(pod(workers, 1, restarts=1), 1, message="NCCL error", last=True)
    return master, workers, [pod(master, 0), pod(workers, 0), crashed]


# --- RestartJob ---------------------------------------------------------------------------


def test_restart_job_restarts_every_pod_when_one_training_container_fails_and_counts_it():
    master, workers, pods = crashed_job()
    actions = decision("pt", [master, workers], pods, records=True).actions
    (event,) = of_type(actions, Emit)
    cause = "pod pt-worker-1: container pytorch exited with code 1: NCCL error"
    assert (event.type, event.reason, event.message) == (
        "Warning",
        "Restarting",
        "restarting all 3 pod(s) of the job together "
        f"(restart 1 of trainhook.io/backoff-limit 2): {cause}; "
        "trainhook.io/restart-policy RestartJob rule 2 (* -> restart-job)",
    )
    status = status_of(actions)
    assert (status["state"], status["restarts"], status["message"]) == ("Restarting", 1, cause)
    assert status["restartedAt"] == "2025-01-01T01:00:00Z"
    deletes = of_type(actions, Delete)
    assert [(d.resource, d.name) for d in deletes] == [
        (PODS, "pt-master-0"),
        (PODS, "pt-worker-0"),
        (PODS, "pt-worker-1"),
    ]
    patches = of_type(actions, Patch)
    assert actions.index(patches[-1]) < actions.index(deletes[0])  # recorded before deleting


def test_a_restart_recorded_but_not_finished_deletes_the_old_pods_without_counting_again():
    master, workers, pods = crashed_job()
    first = decision("pt", [master, workers], pods, records=True).actions
    for workload in (master, workers):
        workload["metadata"]["annotations"].update(
            annotations_patched(first, workload["metadata"]["name"])
        )
    # the sweeper was killed after recording: the pods still run, none is terminating yet
    again = decision("pt", [master, workers], pods, now=NOW + timedelta(seconds=3), records=True)
    assert of_type(again.actions, Emit) == []
    assert of_type(again.actions, Patch) == []
    assert len(of_type(again.actions, Delete)) == 3


def test_the_pods_created_after_a_restart_run_on_and_the_job_is_running_again():
    master, workers, _ = crashed_job()
    record(
        (master, workers),
        state="Restarting",
        reason="Error",
        message="",
        restarts=1,
        startTime="2025-01-01T00:00:00Z",
        restartedAt="2025-01-01T00:59:00Z",
        cause="x/1",
    )
    fresh = [
        created(pod(w, i), NOW - timedelta(seconds=30))
        for w, i in ((master, 0), (workers, 0), (workers, 1))
    ]
    actions = decision("pt", [master, workers], fresh, records=True).actions
    assert of_type(actions, Delete) == []
    status = status_of(actions)
    assert (status["state"], status["restarts"]) == ("Running", 1)


def test_an_eviction_restarts_the_whole_job_without_counting():
    master, workers = pytorch(RESTART_JOB)
    pods = [pod(master, 0), evicted(pod(workers, 0, terminating=True)), pod(workers, 1)]
    actions = decision("pt", [master, workers], pods, records=True).actions
    (event,) = of_type(actions, Emit)
    assert (event.type, event.reason) == ("Normal", "Restarting")
    assert "not counted against the backoff limit" in event.message
    assert status_of(actions)["restarts"] == 0
    assert [d.name for d in of_type(actions, Delete)] == ["pt-master-0", "pt-worker-1"]


def test_a_failure_beyond_the_backoff_limit_fails_the_job_instead_of_restarting_it():
    master, workers, pods = crashed_job()
    record((master, workers), state="Running", restarts=2, startTime="2025-01-01T00:00:00Z")
    actions = decision("pt", [master, workers], pods).actions
    event = of_type(actions, Emit)[0]
    assert (event.reason, event.message) == (
        "BackoffLimitExceeded",
        "pod pt-worker-1: container pytorch exited with code 1: NCCL error; "
        "the job was restarted 2 time(s) and trainhook.io/backoff-limit is 2 "
        "(trainhook.io/restart-policy RestartJob rule 2 (* -> restart-job))",
    )
    assert of_type(actions, Patch)[0].patch["spec"] == {"replicas": 0}


def test_restart_job_waits_the_grace_period_so_a_finishing_master_is_not_restarted():
    master, workers = pytorch(RESTART_JOB)
    pods = [pod(master, 0), terminated(pod(workers, 0), 1, ago=3), pod(workers, 1)]
    made = decision("pt", [master, workers], pods)
    assert of_type(made.actions, Delete) == []
    assert made.recheck_at == NOW + timedelta(seconds=7)


# --- active deadline ----------------------------------------------------------------------


def test_a_job_not_finished_within_its_active_deadline_fails_and_its_pods_are_cleaned():
    annotations = {contract.ACTIVE_DEADLINE_SECONDS: "600", contract.CLEAN_POD_POLICY: "Running"}
    master, workers = pytorch(annotations)
    record((master, workers), state="Pending", restarts=0, startTime="2025-01-01T00:50:00Z")
    pending = [pod(master, 0, phase="Pending"), pod(workers, 0, phase="Pending")]
    actions = decision("pt", [master, workers], pending).actions
    event = of_type(actions, Emit)[0]
    assert (event.type, event.reason, event.message) == (
        "Warning",
        "DeadlineExceeded",
        "the job did not finish within trainhook.io/active-deadline-seconds 600 "
        "(started 2025-01-01T00:50:00Z)",
    )
    assert of_type(actions, Patch)[0].patch == {
        "metadata": {
            "annotations": {
                contract.PHASE: "Failed",
                contract.FINISHED_AT: "2025-01-01T01:00:00Z",
                contract.REASON: "DeadlineExceeded",
            },
            "labels": {contract.PHASE: "Failed"},
        },
        "spec": {"replicas": 0},
    }
    assert [d.name for d in of_type(actions, Delete)] == ["pt-master-0", "pt-worker-0"]


def test_a_new_job_records_its_start_and_is_looked_at_again_at_its_deadline():
    master, workers = pytorch({contract.ACTIVE_DEADLINE_SECONDS: "3600"})
    made = decision("pt", [master, workers], [pod(master, 0)], records=True)
    assert status_of(made.actions)["startTime"] == "2025-01-01T01:00:00Z"
    assert made.recheck_at == NOW + timedelta(hours=1)


# --- a job being deleted ------------------------------------------------------------------


def test_a_job_whose_roles_are_being_deleted_is_neither_restamped_nor_restarted():
    annotations = {contract.SCHEDULER: "volcano"}
    master, workers = pytorch(annotations)
    # `kubectl delete -f` removed the master StatefulSet; its pod is still there
    group = owned(
        "PodGroup",
        "pt",
        job="pt",
        owners=[],
        spec={"minMember": 3, "queue": "default", "priorityClassName": None},
    )
    pods = [pod(master, 0, terminating=True), pod(workers, 0), pod(workers, 1)]
    actions = decision("pt", [workers], pods, podgroups=[group]).actions
    changed = [a for a in actions if not isinstance(a, Emit)]
    assert [a for a in changed if a.resource in (STATEFULSETS, PODGROUPS, PODS)] == []


# --- suspend and resume -------------------------------------------------------------------


def test_a_suspended_job_scales_its_statefulsets_to_zero_remembering_their_replicas():
    master, workers = pytorch({contract.SUSPEND: "true", contract.ACTIVE_DEADLINE_SECONDS: "60"})
    record((master, workers), state="Running", restarts=2, startTime="2025-01-01T00:00:00Z")
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    made = decision("pt", [master, workers], pods, records=True)
    status = (
        '{"state":"Suspended","reason":"Suspended","message":"trainhook.io/suspend is true",'
        '"restarts":0,"startTime":"2025-01-01T00:00:00Z"}'
    )
    assert of_type(made.actions, Patch) == [
        Patch(
            STATEFULSETS,
            "ml",
            name,
            {
                "metadata": {
                    "annotations": {
                        contract.SUSPENDED_REPLICAS: replicas,
                        contract.STATUS: status,
                    }
                },
                "spec": {"replicas": 0},
            },
            rv,
        )
        for name, replicas, rv in (("pt-master", "1", "41"), ("pt-worker", "2", "42"))
    ]
    assert [(e.type, e.reason) for e in of_type(made.actions, Emit)] == [("Normal", "Suspended")]
    assert made.phase == "Suspended"  # not failed by its deadline while suspended


def test_a_suspended_indexed_job_is_suspended_and_resumed_by_the_sweeper():
    from tests.support.stored import indexed_job

    (launcher,) = stamped(indexed_job("hvd", annotations={contract.SUSPEND: "true"}))
    made = decision("hvd", [launcher], [], records=True)
    (patch,) = of_type(made.actions, Patch)
    assert patch.patch["spec"] == {"suspend": True}
    assert patch.patch["metadata"]["annotations"][contract.SUSPENDED_REPLICAS] == "1"
    launcher["spec"]["suspend"] = True
    launcher["metadata"]["annotations"].update(patch.patch["metadata"]["annotations"])
    del launcher["metadata"]["annotations"][contract.SUSPEND]
    resumed = decision("hvd", [launcher], [], records=True)
    patch = next(p for p in of_type(resumed.actions, Patch) if p.name == "hvd")
    assert patch.patch["spec"] == {"suspend": False}
    assert patch.patch["metadata"]["annotations"][contract.SUSPENDED_REPLICAS] is None


def test_a_resumed_job_gets_its_replicas_back_keeps_its_restarts_and_restarts_its_deadline():
    master, workers = pytorch({contract.ACTIVE_DEADLINE_SECONDS: "60"})
    record(
        (master, workers),
        state="Suspended",
        reason="Suspended",
        restarts=2,
        startTime="2025-01-01T00:00:00Z",
    )
    for workload, replicas in ((master, "1"), (workers, "2")):
        workload["metadata"]["annotations"][contract.SUSPENDED_REPLICAS] = replicas
        workload["spec"]["replicas"] = 0
    workers["metadata"]["annotations"][contract.FAILED_RUNS] = '{"gone":2,"pods":{}}'
    made = decision("pt", [master, workers], [], records=True)
    patches = {p.name: p.patch for p in of_type(made.actions, Patch)}
    assert patches["pt-worker"]["spec"] == {"replicas": 2}
    assert patches["pt-worker"]["metadata"]["annotations"][contract.SUSPENDED_REPLICAS] is None
    assert patches["pt-master"]["spec"] == {"replicas": 1}
    status = json.loads(patches["pt-master"]["metadata"]["annotations"][contract.STATUS])
    assert (status["startTime"], status["restarts"]) == ("2025-01-01T01:00:00Z", 2)
    assert made.recheck_at == NOW + timedelta(seconds=60)
    assert of_type(made.actions, Delete) == []  # not restamped, not restarted meanwhile


def test_a_finished_job_stays_finished_when_suspended():
    master, workers = pytorch({contract.SUSPEND: "true"})
    for workload in (master, workers):
        workload["metadata"]["annotations"].update(
            {
                contract.PHASE: "Succeeded",
                contract.FINISHED_AT: "2025-01-01T00:30:00Z",
                contract.REASON: "Completed",
            }
        )
        workload["metadata"]["labels"][contract.PHASE] = "Succeeded"
        workload["spec"]["replicas"] = 0
    made = decision("pt", [master, workers], [], records=True)
    assert made.actions == () and made.phase == "Succeeded"


# --- any prefix of the sweeper's writes leads to the same end -------------------------------


def apply_patch(obj, patch):
    """A merge patch as the API server applies it (None removes a key)."""
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(obj.get(key), dict):
            apply_patch(obj[key], value)
        elif value is None:
            obj.pop(key, None)
        else:
            obj[key] = value


def suspended_job():
    master, workers = pytorch({contract.ACTIVE_DEADLINE_SECONDS: "60"})
    record(
        (master, workers),
        state="Suspended",
        reason="Suspended",
        restarts=0,
        startTime="2025-01-01T00:00:00Z",
    )
    for workload, replicas in ((master, "1"), (workers, "2")):
        workload["metadata"]["annotations"][contract.SUSPENDED_REPLICAS] = replicas
        workload["spec"]["replicas"] = 0
    return master, workers


def test_a_resume_that_reached_only_some_workloads_keeps_the_deadline_from_the_resume():
    for landed in range(3):  # how many of the resume's writes reached the API server
        master, workers = suspended_job()
        made = decision("pt", [master, workers], [], records=True)
        patches = of_type(made.actions, Patch)
        assert [p.name for p in patches] == ["pt-master", "pt-worker"]
        by_name = {"pt-master": master, "pt-worker": workers}
        for patch in patches[:landed]:
            apply_patch(by_name[patch.name], patch.patch)
        # The sweeper dies; the next one looks 30 s later, then the writes all land.
        later = NOW + timedelta(seconds=30)
        again = decision("pt", [master, workers], [], now=later, records=True)
        missed = [p.name for p in of_type(again.actions, Patch)]
        assert missed == ["pt-master", "pt-worker"][landed:]  # what did not land, no more
        for patch in of_type(again.actions, Patch):
            apply_patch(by_name[patch.name], patch.patch)
        resumed = later if landed == 0 else NOW
        for workload in (master, workers):
            status = json.loads(workload["metadata"]["annotations"][contract.STATUS])
            assert (status["state"], status["startTime"]) == ("Pending", format_time(resumed))
            assert contract.SUSPENDED_REPLICAS not in workload["metadata"]["annotations"]
        assert (master["spec"]["replicas"], workers["spec"]["replicas"]) == (1, 2)
        # ... and the job runs its 60 s from the resume, not from its first start.
        settled = decision("pt", [master, workers], [], now=resumed + timedelta(seconds=59))
        assert of_type(settled.actions, Delete) == [] and settled.phase != "Failed"
        assert settled.recheck_at == resumed + timedelta(seconds=60)


def test_a_pod_created_in_the_second_of_a_restart_is_restarted_after_an_interrupted_one():
    master, workers, pods = crashed_job()
    for obj in pods:
        created(obj, NOW)  # the same second as the restart, before it
    moment = NOW + timedelta(milliseconds=500)
    first = decision("pt", [master, workers], pods, now=moment, records=True).actions
    recorded = status_of(first)
    assert recorded["restartedAt"] == "2025-01-01T01:00:00Z"
    assert recorded["sameSecond"] == sorted(p["metadata"]["uid"].replace("-", "")[:8] for p in pods)
    for workload in (master, workers):  # the records land; the sweeper dies before deleting
        workload["metadata"]["annotations"].update(
            annotations_patched(first, workload["metadata"]["name"])
        )
    again = decision("pt", [master, workers], pods, now=moment + timedelta(seconds=1))
    assert sorted(d.name for d in of_type(again.actions, Delete)) == [
        "pt-master-0",
        "pt-worker-0",
        "pt-worker-1",
    ]


def test_pods_recreated_in_the_second_of_a_restart_are_not_deleted_again():
    master, workers, pods = crashed_job()
    moment = NOW + timedelta(milliseconds=200)
    first = decision("pt", [master, workers], pods, now=moment, records=True).actions
    assert len(of_type(first, Delete)) == 3
    for workload in (master, workers):
        workload["metadata"]["annotations"].update(
            annotations_patched(first, workload["metadata"]["name"])
        )
    # The controllers recreate every pod within the restart's own second.
    recreated = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    for obj in recreated:
        created(obj, NOW)
        obj["status"]["phase"] = "Running"
    later = decision(
        "pt", [master, workers], recreated, now=NOW + timedelta(milliseconds=900), records=True
    )
    assert of_type(later.actions, Delete) == []
    assert status_of(later.actions)["state"] == "Running"  # the restart took


def test_a_deleted_role_whose_pods_the_garbage_collector_has_not_marked_yet_holds_the_job():
    annotations = {contract.SCHEDULER: "volcano"}
    master, workers = pytorch(annotations)
    group = owned(
        "PodGroup",
        "pt",
        job="pt",
        owners=[],
        spec={"minMember": 3, "queue": "default", "priorityClassName": None},
    )
    # The worker StatefulSet is gone; its pods carry no deletionTimestamp yet.
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    actions = decision("pt", [master], pods, podgroups=[group]).actions
    assert [a for a in actions if not isinstance(a, Emit)] == []  # no restamp, no shrink
    assert [e.reason for e in of_type(actions, Emit)] == []  # and they are no intruders


def test_a_success_recorded_in_an_attempt_before_a_restart_counts_for_nothing_after_it():
    master, workers = pytorch(RESTART_JOB)
    # The master succeeded in the first attempt; then a worker crashed and the job restarted.
    # The restart's record reached the worker StatefulSet only: the master still records its
    # success of the first attempt.
    first = {"reason": "Running", "message": "", "startTime": "2025-01-01T00:00:00Z"}
    record((master,), state="Running", restarts=0, **first)
    master["metadata"]["annotations"][contract.SUCCEEDED] = "0"
    restart = {"restartedAt": "2025-01-01T00:59:00Z", "cause": "x/1"}
    record((workers,), state="Restarting", restarts=1, **first, **restart)
    fresh = [
        created(pod(w, i), NOW - timedelta(seconds=30))
        for w, i in ((master, 0), (workers, 0), (workers, 1))
    ]
    made = decision("pt", [master, workers], fresh, records=True)
    assert made.phase == "Running"  # not Succeeded: the new master trains
    records = annotations_patched(made.actions, "pt-master")
    assert records[contract.SUCCEEDED] is None  # forgotten with the attempt it belonged to
    assert json.loads(records[contract.STATUS])["restartedAt"] == "2025-01-01T00:59:00Z"


def test_a_restart_recorded_without_its_attempt_keeps_its_successes_and_its_old_pods_go():
    # Written before restarts of one role or pod were told apart from the job's: no
    # attemptStartedAt, and the restart it records began the attempt.
    master, workers = pytorch(RESTART_JOB)
    restart = {"restartedAt": "2025-01-01T00:59:00Z", "cause": "x/1"}
    first = {"reason": "Error", "message": "", "startTime": "2025-01-01T00:00:00Z"}
    record((master, workers), state="Restarting", restarts=1, **first, **restart)
    workers["metadata"]["annotations"][contract.SUCCEEDED] = "1"  # seen in this attempt
    fresh = [
        created(pod(w, i), NOW - timedelta(seconds=30)) for w, i in ((master, 0), (workers, 1))
    ]
    made = decision("pt", [master, workers], [*fresh, pod(workers, 0)], records=True)
    assert [d.name for d in of_type(made.actions, Delete)] == ["pt-worker-0"]
    records = annotations_patched(made.actions, "pt-worker")
    assert contract.SUCCEEDED not in records
    status = json.loads(records[contract.STATUS])
    assert (status["restartedAt"], status["attemptStartedAt"]) == ("2025-01-01T00:59:00Z",) * 2
