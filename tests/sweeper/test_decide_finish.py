"""A finished job: phase recorded on its workloads, clean-pod-policy, TTL, and staying finished."""

from datetime import timedelta

from tests.support.stored import bare_pod, indexed_job, owned, pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import JOBS, PODGROUPS, PODS, SECRETS, SERVICES, STATEFULSETS
from webhook.sweeper.actions import Delete, Emit, Patch

from .helpers import NOW, decision, described, of_type

FINISHED = "2025-01-01T00:30:00Z"


def pytorch(annotations=None, finished=None):
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    workers = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    master, workers = stamped(master, workers)
    if finished:
        for w in (master, workers):
            w["metadata"]["annotations"].update(finished)
            w["metadata"]["labels"][contract.PHASE] = finished[contract.PHASE]
            w["spec"]["replicas"] = 0
    return master, workers


def succeeded_pods(master, workers):
    return [pod(master, 0, exit_code=0), pod(workers, 0, exit_code=1), pod(workers, 1)]


LABEL = {contract.PHASE: "Succeeded"}
RECORD = {
    contract.PHASE: "Succeeded",
    contract.FINISHED_AT: "2025-01-01T01:00:00Z",
    contract.REASON: "Completed",
}


def test_a_succeeded_job_is_recorded_on_every_workload_with_an_event_and_its_statefulsets_stop():
    master, workers = pytorch()
    actions = decision("pt", [master, workers], succeeded_pods(master, workers)).actions
    events, patches = of_type(actions, Emit), of_type(actions, Patch)
    assert [(e.involved.name, e.type, e.reason, e.message) for e in events] == [
        (
            "pt-master",
            "Normal",
            "Completed",
            "master 0 succeeded (success policy: the framework default)",
        ),
        (
            "pt-worker",
            "Normal",
            "Completed",
            "master 0 succeeded (success policy: the framework default)",
        ),
    ]
    patch = {"metadata": {"annotations": RECORD, "labels": LABEL}, "spec": {"replicas": 0}}
    assert patches == [
        Patch(STATEFULSETS, "ml", "pt-master", patch, "41"),
        Patch(STATEFULSETS, "ml", "pt-worker", patch, "42"),
    ]
    assert actions == (*events, *patches)  # events first: recorded again if a patch fails


def test_a_failed_job_is_recorded_as_failed_with_a_warning():
    master, workers = pytorch(annotations={contract.BACKOFF_LIMIT: "0"})
    pods = [pod(master, 0), pod(workers, 0, restarts=1, last_exit_code=2), pod(workers, 1)]
    actions = decision("pt", [master, workers], pods).actions
    event = of_type(actions, Emit)[0]
    assert (event.type, event.reason) == ("Warning", "BackoffLimitExceeded")
    assert of_type(actions, Patch)[0].patch["metadata"]["annotations"] == {
        contract.PHASE: "Failed",
        contract.FINISHED_AT: "2025-01-01T01:00:00Z",
        contract.REASON: "BackoffLimitExceeded",
    }


def finished_record(phase="Succeeded", at=FINISHED, reason="Completed"):
    return {contract.PHASE: phase, contract.FINISHED_AT: at, contract.REASON: reason}


def test_a_finished_job_stays_finished_whatever_its_pods_do_next():
    master, workers = pytorch(annotations={contract.BACKOFF_LIMIT: "0"}, finished=finished_record())
    pods = [pod(master, 0, restarts=9, last_exit_code=1), pod(workers, 0, exit_code=1)]
    assert decision("pt", [master, workers], pods).actions == ()


def test_a_workload_that_missed_the_record_gets_the_same_finish_time():
    master, workers = pytorch(finished=finished_record())
    del workers["metadata"]["annotations"][contract.PHASE]
    actions = decision("pt", [master, workers], []).actions
    assert isinstance(actions[0], Emit)
    assert actions[0].reason == "Completed" and actions[0].involved.name == "pt-worker"
    assert actions[1] == Patch(
        STATEFULSETS,
        "ml",
        "pt-worker",
        {"metadata": {"annotations": finished_record(), "labels": LABEL}},
        "42",
    )
    assert len(actions) == 2


def test_a_workload_finished_without_the_phase_label_gets_it_and_no_second_event():
    master, workers = pytorch(finished=finished_record())
    del workers["metadata"]["labels"][contract.PHASE]
    assert decision("pt", [master, workers], []).actions == (
        Patch(
            STATEFULSETS,
            "ml",
            "pt-worker",
            {"metadata": {"annotations": finished_record(), "labels": LABEL}},
            "42",
        ),
    )


def test_a_finished_statefulset_scaled_back_up_by_gitops_is_scaled_to_zero_again():
    master, workers = pytorch(finished=finished_record())
    workers["spec"]["replicas"] = 2
    assert decision("pt", [master, workers], []).actions == (
        Patch(STATEFULSETS, "ml", "pt-worker", {"spec": {"replicas": 0}}, "42"),
    )


def mixed_pods(master, workers):
    return [
        pod(master, 0, phase="Succeeded", exit_code=0),
        pod(workers, 0, phase="Running"),
        pod(workers, 1, phase="Pending"),
        pod(workers, 2, phase="Failed", exit_code=1),
    ]


def test_clean_pod_policy_none_is_the_default_and_deletes_no_pod():
    master, workers = pytorch(finished=finished_record())
    assert (
        of_type(decision("pt", [master, workers], mixed_pods(master, workers)).actions, Delete)
        == []
    )


def test_clean_pod_policy_all_deletes_every_pod_of_the_job():
    master, workers = pytorch(
        annotations={contract.CLEAN_POD_POLICY: "All"}, finished=finished_record()
    )
    deletes = of_type(
        decision("pt", [master, workers], mixed_pods(master, workers)).actions, Delete
    )
    assert [(d.resource, d.name) for d in deletes] == [
        (PODS, "pt-master-0"),
        (PODS, "pt-worker-0"),
        (PODS, "pt-worker-1"),
        (PODS, "pt-worker-2"),
    ]


def test_clean_pod_policy_running_deletes_only_pods_still_pending_or_running():
    master, workers = pytorch(
        annotations={contract.CLEAN_POD_POLICY: "Running"}, finished=finished_record()
    )
    deletes = of_type(
        decision("pt", [master, workers], mixed_pods(master, workers)).actions, Delete
    )
    assert [d.name for d in deletes] == ["pt-worker-0", "pt-worker-1"]


def mpi(annotations=None, launcher_status=None):
    launcher = indexed_job(
        "hvd-launcher",
        role="launcher",
        job="hvd",
        annotations=annotations,
        status=launcher_status,
        rv="51",
    )
    workers = indexed_job(
        "hvd-worker", role="worker", job="hvd", completions=2, annotations=annotations, rv="52"
    )
    return stamped(launcher, workers)


def test_clean_pod_policy_running_suspends_indexed_jobs_that_still_run():
    complete = {"conditions": [{"type": "Complete", "status": "True"}], "completedIndexes": "0"}
    launcher, workers = mpi({contract.CLEAN_POD_POLICY: "Running"}, launcher_status=complete)
    patches = of_type(
        decision("hvd", [launcher, workers], [pod(workers, 0), pod(workers, 1)]).actions, Patch
    )
    record = {"metadata": {"annotations": {**RECORD}, "labels": LABEL}}
    assert patches == [
        Patch(JOBS, "ml", "hvd-launcher", record, "51"),
        Patch(JOBS, "ml", "hvd-worker", {**record, "spec": {"suspend": True}}, "52"),
    ]


def test_clean_pod_policy_none_leaves_a_running_indexed_job_alone():
    complete = {"conditions": [{"type": "Complete", "status": "True"}], "completedIndexes": "0"}
    launcher, workers = mpi(launcher_status=complete)
    patches = of_type(decision("hvd", [launcher, workers], []).actions, Patch)
    assert all("spec" not in p.patch for p in patches)


def test_clean_pod_policy_all_deletes_finished_bare_pods():
    annotations = {contract.CLEAN_POD_POLICY: "All"}
    pods = [
        bare_pod(
            "bare-0",
            index=0,
            phase="Succeeded",
            exit_code=0,
            annotations={**annotations, **finished_record()},
        ),
    ]
    pods[0]["metadata"]["labels"].update(LABEL)
    assert described(decision("bare", [], pods).actions) == ["delete Pod ml/bare-0"]


def test_without_a_ttl_a_finished_job_is_kept():
    master, workers = pytorch(finished=finished_record())
    result = decision("pt", [master, workers], [], now=NOW + timedelta(days=30))
    assert result.actions == ()
    assert result.recheck_at is None


def test_before_its_ttl_a_finished_job_asks_to_be_looked_at_when_it_expires():
    master, workers = pytorch(
        annotations={contract.TTL_SECONDS_AFTER_FINISHED: "3600"}, finished=finished_record()
    )
    result = decision("pt", [master, workers], [])
    assert result.actions == ()
    assert result.recheck_at is not None
    assert result.recheck_at.isoformat() == "2025-01-01T01:30:00+00:00"


def test_after_its_ttl_the_job_and_everything_trainhook_made_for_it_are_deleted():
    master, workers = pytorch(
        annotations={contract.TTL_SECONDS_AFTER_FINISHED: "600"}, finished=finished_record()
    )
    service = owned("Service", "pt", job="pt")
    group = owned("PodGroup", "pt", job="pt")
    secret = owned("Secret", "pt-ssh", job="pt")
    actions = decision(
        "pt",
        [master, workers],
        [pod(master, 0)],
        services=[service],
        podgroups=[group],
        secrets=[secret],
    ).actions
    assert actions == (
        Delete(SERVICES, "ml", "pt", service["metadata"]["uid"]),
        Delete(PODGROUPS, "ml", "pt", group["metadata"]["uid"]),
        Delete(SECRETS, "ml", "pt-ssh", secret["metadata"]["uid"]),
        Delete(STATEFULSETS, "ml", "pt-master", master["metadata"]["uid"]),
        Delete(STATEFULSETS, "ml", "pt-worker", workers["metadata"]["uid"]),
    )


def test_a_service_trainhook_did_not_create_survives_the_ttl():
    master, workers = pytorch(
        annotations={contract.TTL_SECONDS_AFTER_FINISHED: "0"}, finished=finished_record()
    )
    foreign = owned("Service", "pt", job="pt", managed=False)
    actions = decision("pt", [master, workers], [], services=[foreign]).actions
    assert described(actions) == [
        "delete StatefulSet ml/pt-master",
        "delete StatefulSet ml/pt-worker",
    ]


def test_with_ttl_zero_a_job_is_recorded_first_and_deleted_right_after():
    master, workers = pytorch(annotations={contract.TTL_SECONDS_AFTER_FINISHED: "0"})
    result = decision("pt", [master, workers], succeeded_pods(master, workers))
    assert of_type(result.actions, Delete) == []
    assert result.recheck_at == NOW
