"""Topology consistency: a changed job re-stamps every workload and restarts stale pods together."""

import copy
from datetime import timedelta

from tests.support.stored import (
    bare_pod,
    indexed_job,
    owned,
    pod,
    stamped,
    statefulset,
    sweepers_ssh_secret,
)
from webhook.core import contract
from webhook.kube.resources import JOBS, PODS, STATEFULSETS
from webhook.sweeper.actions import Create, Delete, Emit, Patch

from .helpers import NOW, decision, of_type

OLD = '{"master":1,"worker":2}'
NEW = '{"master":1,"worker":3}'
NEW_HOSTS = (
    '{"master":{"pod":"pt-master","start":0,"service":"pt"},'
    '"worker":{"pod":"pt-worker","start":0,"service":"pt"}}'
)


def service():
    return owned("Service", "pt", job="pt", managed=False, spec={"clusterIP": "None"})


def scaled_job():
    """A job created with 2 workers whose worker StatefulSet was `kubectl scale`d to 3."""
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=2),
    )
    workers["spec"]["replicas"] = 3
    return master, workers


def test_a_scaled_statefulset_has_every_sibling_restamped_on_the_state_it_was_seen_in():
    master, workers = scaled_job()
    master["metadata"]["resourceVersion"] = "41"
    workers["metadata"]["resourceVersion"] = "42"
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    actions = decision("pt", [master, workers], pods, services=[service()]).actions
    wanted = {
        "spec": {
            "template": {
                "metadata": {
                    "annotations": {
                        contract.TOPOLOGY: NEW,
                        contract.HOSTS: NEW_HOSTS,
                    }
                }
            }
        }
    }
    assert actions == (
        Patch(STATEFULSETS, "ml", "pt-master", wanted, "41"),
        Patch(STATEFULSETS, "ml", "pt-worker", wanted, "42"),
    )


def restamped(*workloads):
    result = []
    for workload in workloads:
        copied = copy.deepcopy(workload)
        copied["spec"]["template"]["metadata"]["annotations"].update(
            {contract.TOPOLOGY: NEW, contract.HOSTS: NEW_HOSTS}
        )
        result.append(copied)
    return result


def test_once_every_stamp_is_current_all_stale_pods_are_restarted_in_one_go():
    master, workers = scaled_job()
    stale = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    master, workers = restamped(master, workers)
    fresh = pod(workers, 2)
    actions = decision("pt", [master, workers], [*stale, fresh], services=[service()]).actions
    event, *deletes = actions
    assert deletes == [
        Delete(PODS, "ml", p["metadata"]["name"], p["metadata"]["uid"]) for p in stale
    ]
    assert isinstance(event, Emit)
    assert (event.type, event.reason, event.involved.name) == (
        "Normal",
        "TopologyChanged",
        "pt-master",
    )
    assert event.message == (
        f"restarting 3 pod(s) together for topology {NEW}: pt-master-0, pt-worker-0, pt-worker-1"
    )


def test_pods_are_not_restarted_before_their_statefulset_carries_the_new_stamp():
    master, workers = scaled_job()
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    actions = decision("pt", [master, workers], pods, services=[service()]).actions
    assert of_type(actions, Delete) == []


def test_pods_that_already_run_the_current_topology_keep_running():
    master, workers = restamped(*scaled_job())
    pods = [pod(master, 0), *(pod(workers, i) for i in range(3))]
    assert decision("pt", [master, workers], pods, services=[service()]).actions == ()


def test_a_stale_pod_already_terminating_is_not_deleted_again():
    master, workers = scaled_job()
    stale = pod(workers, 1, terminating=True)
    master, workers = restamped(master, workers)
    pods = [pod(master, 0), pod(workers, 0), stale, pod(workers, 2)]
    assert decision("pt", [master, workers], pods, services=[service()]).actions == ()


def test_a_pod_without_any_topology_stamp_counts_as_stale():
    master, workers = restamped(*scaled_job())
    pods = [pod(master, 0, topology=None), *(pod(workers, i) for i in range(3))]
    deletes = of_type(decision("pt", [master, workers], pods, services=[service()]).actions, Delete)
    assert [d.name for d in deletes] == ["pt-master-0"]


def test_json_spacing_does_not_make_a_pod_stale():
    master, workers = restamped(*scaled_job())
    spaced = '{"master": 1, "worker": 3}'
    pods = [pod(master, 0, topology=spaced), *(pod(workers, i) for i in range(3))]
    assert decision("pt", [master, workers], pods, services=[service()]).actions == ()


def test_a_started_job_whose_template_cannot_change_is_reported_not_patched():
    launcher, workers = stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd"),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2),
    )
    workers["spec"]["replicas"] = 4
    secret = sweepers_ssh_secret("hvd", launcher, workers)
    svc = owned("Service", "hvd", job="hvd", managed=False, spec={"clusterIP": "None"})
    actions = decision("hvd", [launcher, workers], services=[svc], secrets=[secret]).actions
    warning = of_type(actions, Emit)[0]
    assert (warning.type, warning.reason, warning.involved.kind) == (
        "Warning",
        "TopologyStale",
        "Job",
    )
    assert warning.message == (
        'Job hvd-launcher runs with topology {"launcher":1,"worker":2} but the job is now '
        '{"launcher":1,"worker":4}; a started Job\'s pod template cannot change: '
        "delete and recreate it"
    )
    assert [p.resource for p in of_type(actions, Patch)] == [STATEFULSETS]


def test_a_suspended_job_that_never_started_is_restamped():
    launcher, workers = stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd", suspend=True, status={}),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2),
    )
    workers["spec"]["replicas"] = 4
    secret = sweepers_ssh_secret("hvd", launcher, workers)
    svc = owned("Service", "hvd", job="hvd", managed=False, spec={"clusterIP": "None"})
    actions = decision("hvd", [launcher, workers], services=[svc], secrets=[secret]).actions
    assert [(p.resource, p.name) for p in of_type(actions, Patch)] == [
        (JOBS, "hvd-launcher"),
        (STATEFULSETS, "hvd-worker"),
    ]
    assert of_type(actions, Emit) == []


def test_two_workloads_claiming_one_role_are_reported():
    first, second = stamped(
        statefulset("a", job="pt", role="worker"), statefulset("b", job="pt", role="master")
    )
    second["metadata"]["labels"][contract.ROLE] = "worker"
    (event,) = decision("pt", [first, second], services=[service()]).actions
    assert isinstance(event, Emit)
    assert (event.type, event.reason) == ("Warning", "InvalidJob")
    assert event.message == (
        "trainhook.io/role: role 'worker' of job 'pt' is played by both StatefulSet a and "
        "StatefulSet b; give each its own role"
    )


def test_a_job_still_being_created_is_left_to_settle_before_its_topology_is_enforced():
    master, workers = scaled_job()
    for workload in (master, workers):
        workload["metadata"]["creationTimestamp"] = "2025-01-01T00:59:58Z"
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1)]
    early = decision("pt", [master, workers], pods, services=[service()])
    assert early.actions == ()
    assert early.recheck_at == NOW + timedelta(seconds=3)
    settled = decision("pt", [master, workers], pods, services=[service()], now=early.recheck_at)
    assert [a.name for a in of_type(settled.actions, Patch)] == ["pt-master", "pt-worker"]


def test_roles_that_disagree_on_elastic_get_a_warning_naming_both_and_the_job_goes_on():
    """Admitted while the webhook could not read the siblings: only the sweeper sees both."""
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations={contract.ELASTIC: "1:3"}),
        statefulset("pt-worker", role="worker", job="pt", replicas=2),
    )
    actions = decision("pt", [master, workers]).actions

    (event,) = of_type(actions, Emit)
    assert (event.type, event.reason, event.involved.name) == (
        "Warning",
        "SettingsDisagree",
        "pt-master",
    )
    assert event.message == (
        "trainhook.io/elastic differs between the roles of job pt: master (StatefulSet "
        "pt-master) 1:3, worker (StatefulSet pt-worker) unset; set one value on every "
        "workload of the job (every pod joins one rendezvous)"
    )
    assert [a.resource.kind for a in of_type(actions, Create)] == ["Service"]


def test_roles_that_disagree_on_the_scheduler_get_a_warning_naming_both():
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset(
            "pt-worker",
            role="worker",
            job="pt",
            replicas=2,
            annotations={contract.SCHEDULER: "volcano"},
        ),
    )
    (event,) = decision("pt", [master, workers], services=[service()]).actions

    assert isinstance(event, Emit)
    assert (event.type, event.reason) == ("Warning", "InvalidJob")
    assert event.message == (
        "trainhook.io/scheduler: job 'pt' is one gang, so every role must say the same: not set "
        "on StatefulSet pt-master but 'volcano' on StatefulSet pt-worker"
    )


def test_bare_pods_of_one_job_on_different_ports_get_a_warning_naming_each():
    pods = [
        bare_pod(
            f"pt-{i}",
            framework="pytorch",
            job="pt",
            index=i,
            topology='{"worker":2}',
            annotations={contract.PORT: port},
        )
        for i, port in enumerate(("29500", "29501"))
    ]
    actions = decision("pt", [], pods, services=[service()]).actions

    (event,) = of_type(actions, Emit)
    assert (event.type, event.reason) == ("Warning", "SettingsDisagree")
    assert event.message == (
        "trainhook.io/port differs between the bare pods of job pt: worker (Pod pt-0) 29500, "
        "worker (Pod pt-1) 29501; set one, or record each role's port in trainhook.io/hosts"
    )
