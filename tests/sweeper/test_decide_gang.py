"""A gang-scheduled job's PodGroup: of its scheduler, the size of the job, gone when it is done."""

from tests.schemas import custom_resource_problems
from tests.support.stored import bare_pod, indexed_job, owned, pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import (
    COSCHEDULING_PODGROUPS,
    KAI_PODGROUPS,
    KUBERNETES_PODGROUPS,
    PODGROUPS,
    SERVICES,
)
from webhook.sweeper.actions import Create, Delete, Emit, Patch
from webhook.sweeper.decide.policy import judge

from .helpers import decision, of_type, state_of

COSCHEDULING = {contract.SCHEDULER: "coscheduling", contract.SCHEDULE_TIMEOUT_SECONDS: "300"}
KUEUE = {contract.SCHEDULER: "kueue", contract.QUEUE: "team-a"}


def with_resources(workload, resources, init=None):
    spec = workload["spec"]["template"]["spec"]
    spec["containers"][0]["resources"] = resources
    if init is not None:
        spec["initContainers"] = init
    return workload


def mpi_job(annotations, workers=2):
    launcher = indexed_job("hvd-launcher", role="launcher", job="hvd", annotations=annotations)
    worker = statefulset(
        "hvd-worker",
        framework="mpi",
        role="worker",
        job="hvd",
        replicas=workers,
        annotations=annotations,
    )
    with_resources(launcher, {"requests": {"cpu": "1", "memory": "1Gi"}})
    with_resources(
        worker,
        {"requests": {"cpu": "4", "memory": "8Gi"}, "limits": {"example.com/fpga": "1"}},
        init=[
            {
                "name": "log-shipper",
                "image": "busybox",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
            },
            {"name": "fetch", "image": "busybox", "resources": {"requests": {"cpu": "6"}}},
        ],
    )
    return stamped(launcher, worker)


def creates(actions, resource):
    return [a for a in of_type(actions, Create) if a.resource == resource]


def test_a_coscheduling_job_gets_a_scheduler_plugins_podgroup_of_every_role():
    launcher, worker = mpi_job(COSCHEDULING)
    [create] = creates(decision("hvd", [launcher, worker]).actions, COSCHEDULING_PODGROUPS)
    # Each worker: 6 CPUs for its init container beside the 250m sidecar started before it,
    # more than 4 + 0.25 once it runs; 8Gi + 64Mi; a limit-only FPGA counts as requested. The
    # launcher adds 1 CPU and 1Gi.
    assert create.body["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
    assert create.body["spec"] == {
        "minMember": 3,
        "minResources": {
            "cpu": "13500m",
            "example.com/fpga": "2",
            "memory": "17536Mi",
        },
        "scheduleTimeoutSeconds": 300,
    }
    assert custom_resource_problems(create.body) == []


def test_a_job_seen_before_all_its_roles_gets_its_podgroup_once_the_last_role_is_there():
    """Applied in order, the launcher Job can be listed before the workers' StatefulSet: a
    PodGroup of the launcher alone would tell the scheduler a gang of one."""
    launcher, worker = mpi_job(COSCHEDULING)
    early = decision("hvd", [launcher]).actions
    assert creates(early, COSCHEDULING_PODGROUPS) == []
    [create] = creates(decision("hvd", [launcher, worker]).actions, COSCHEDULING_PODGROUPS)
    assert create.body["spec"]["minMember"] == 3


def test_an_init_container_counts_alone_when_it_runs_before_the_sidecar():
    launcher, worker = mpi_job(COSCHEDULING, workers=1)
    init = worker["spec"]["template"]["spec"]["initContainers"]
    init.reverse()  # the init container now runs before the sidecar starts
    [create] = creates(decision("hvd", [launcher, worker]).actions, COSCHEDULING_PODGROUPS)
    # 1 (launcher) + max(4 + 0.25 running, 6 for the init container alone) = 7
    assert create.body["spec"]["minResources"]["cpu"] == "7"


def test_a_volcano_podgroup_of_a_mixed_job_passes_volcanos_own_schema():
    launcher, worker = mpi_job({contract.SCHEDULER: "volcano", contract.QUEUE: "research"})
    [create] = creates(decision("hvd", [launcher, worker]).actions, PODGROUPS)
    assert create.body["spec"]["minMember"] == 3
    assert create.body["spec"]["queue"] == "research"
    assert custom_resource_problems(create.body) == []


def test_a_kueue_job_gets_no_podgroup_its_pods_are_the_group():
    launcher, worker = mpi_job(KUEUE)
    actions = decision("hvd", [launcher, worker]).actions
    assert [a.resource for a in of_type(actions, Create)] == [SERVICES]


def test_a_scaled_coscheduling_job_gets_its_podgroup_resized():
    launcher, worker = mpi_job(COSCHEDULING, workers=4)
    group = owned(
        "PodGroup",
        "hvd",
        job="hvd",
        spec={"minMember": 3, "minResources": {"cpu": "13500m"}, "scheduleTimeoutSeconds": 300},
    )
    actions = decision("hvd", [launcher, worker], coscheduling_podgroups=[group]).actions
    [patch] = [a for a in of_type(actions, Patch) if a.resource == COSCHEDULING_PODGROUPS]
    assert patch.patch["spec"]["minMember"] == 5
    assert patch.patch["spec"]["minResources"]["cpu"] == "26"


def test_a_job_moved_to_another_scheduler_loses_its_old_podgroup():
    launcher, worker = mpi_job(COSCHEDULING)
    old = owned("PodGroup", "hvd", job="hvd", spec={"minMember": 3, "queue": "default"})
    actions = decision("hvd", [launcher, worker], podgroups=[old]).actions
    assert Delete(PODGROUPS, "ml", "hvd", old["metadata"]["uid"]) in actions
    assert len(creates(actions, COSCHEDULING_PODGROUPS)) == 1


def test_a_podgroup_someone_else_made_is_left_alone():
    launcher, worker = mpi_job(COSCHEDULING)
    theirs = owned("PodGroup", "hvd", job="hvd", managed=False, spec={"minMember": 1})
    actions = decision("hvd", [launcher, worker], coscheduling_podgroups=[theirs]).actions
    assert not [a for a in actions if getattr(a, "resource", None) == COSCHEDULING_PODGROUPS]


def finished(workloads):
    """The workloads with the sweeper's record of a success on them."""
    for workload in workloads:
        workload["metadata"]["annotations"].update(
            {
                contract.PHASE: "Succeeded",
                contract.FINISHED_AT: "2025-01-01T00:30:00Z",
                contract.REASON: "Completed",
            }
        )
    return workloads


def test_a_finished_job_keeps_its_podgroup_while_a_pod_still_runs():
    launcher, worker = finished(mpi_job(COSCHEDULING))
    group = owned("PodGroup", "hvd", job="hvd", spec={"minMember": 3})
    running = pod(worker, 0, phase="Running")
    actions = decision("hvd", [launcher, worker], [running], coscheduling_podgroups=[group])
    assert not [a for a in actions.actions if isinstance(a, Delete)]


def test_a_finished_job_whose_pods_are_done_or_gone_releases_its_podgroup():
    launcher, worker = finished(mpi_job(COSCHEDULING))
    group = owned("PodGroup", "hvd", job="hvd", spec={"minMember": 3})
    done = pod(launcher, 0, phase="Succeeded", exit_code=0)
    leaving = pod(worker, 0, phase="Running", terminating=True)
    actions = decision("hvd", [launcher, worker], [done, leaving], coscheduling_podgroups=[group])
    assert of_type(actions.actions, Delete) == [
        Delete(COSCHEDULING_PODGROUPS, "ml", "hvd", group["metadata"]["uid"])
    ]


def test_bare_pods_that_split_the_gang_are_reported_and_get_no_podgroup():
    first = bare_pod("b-0", annotations={contract.SCHEDULER: "volcano"}, topology='{"worker":2}')
    second = bare_pod("b-1", index=1, topology='{"worker":2}')
    actions = decision("bare", [], [first, second]).actions
    [event] = of_type(actions, Emit)
    assert event.reason == "InvalidJob"
    assert event.message == (
        "trainhook.io/scheduler: job 'bare' is one gang, so every role must say the same: "
        "'volcano' on Pod b-0 but not set on Pod b-1"
    )
    assert not of_type(actions, Create)


def stopped(pod_object, condition, reason):
    pod_object["status"]["conditions"].append(
        {"type": condition, "status": "True", "reason": reason}
    )
    pod_object["metadata"]["resourceVersion"] += "1"  # a changed pod is a new version
    return pod_object


def test_pods_kueue_preempted_or_the_cluster_evicted_are_no_failures_of_the_job():
    worker = statefulset(
        "w",
        job="pt",
        role="worker",
        replicas=2,
        annotations={**KUEUE, contract.BACKOFF_LIMIT: "0"},
    )
    [worker] = stamped(worker)
    preempted = stopped(
        pod(worker, 0, restarts=1, exit_code=137), "TerminationTarget", "WorkloadEvicted"
    )
    evicted = stopped(
        pod(worker, 1, restarts=2, exit_code=143), "DisruptionTarget", "EvictionByEvictionAPI"
    )
    assert judge(state_of("pt", [worker], [preempted, evicted])) is None
    crashed = pod(worker, 1, restarts=1, exit_code=1)
    verdict = judge(state_of("pt", [worker], [preempted, crashed]))
    assert verdict is not None
    assert verdict.reason == "BackoffLimitExceeded"


def test_a_bare_pod_evicted_is_not_a_failed_pod():
    evicted = bare_pod("b-0", phase="Failed", exit_code=143)
    assert judge(state_of("bare", [], [evicted])) is not None
    stopped(evicted, "DisruptionTarget", "PreemptionByScheduler")
    assert judge(state_of("bare", [], [evicted])) is None


KUBERNETES = {
    contract.SCHEDULER: "kubernetes",
    contract.PLACEMENT_TOPOLOGY: "cloud.example.com/rack",
}
BETA = "scheduling.k8s.io/v1beta1"
ALPHA2 = "scheduling.k8s.io/v1alpha2"


def kubernetes_group(api, min_count, owners=None, **extra):
    group = owned(
        "PodGroup",
        "hvd",
        job="hvd",
        owners=owners,
        spec={
            "schedulingPolicy": {"gang": {"minCount": min_count}},
            "schedulingConstraints": {"topology": [{"key": "cloud.example.com/rack"}]},
            "disruptionMode": {"single": {}},  # the API server's default
            **extra,
        },
    )
    group["apiVersion"] = api
    return group


def test_a_kubernetes_job_gets_a_podgroup_of_the_served_version_with_gang_priority_and_rack():
    launcher, worker = mpi_job(KUBERNETES)
    worker["spec"]["template"]["spec"]["priorityClassName"] = "training-high"
    for api in (BETA, "scheduling.k8s.io/v1alpha3", ALPHA2):
        actions = decision("hvd", [launcher, worker], kubernetes_podgroup_api=api).actions
        [create] = creates(actions, KUBERNETES_PODGROUPS[api])
        assert create.body["apiVersion"] == api
        assert create.body["spec"] == {
            "schedulingPolicy": {"gang": {"minCount": 3}},
            "schedulingConstraints": {"topology": [{"key": "cloud.example.com/rack"}]},
            "priorityClassName": "training-high",
        }
        assert custom_resource_problems(create.body) == []


def test_a_cluster_that_serves_no_kubernetes_podgroup_gets_none_created():
    launcher, worker = mpi_job(KUBERNETES)
    actions = decision("hvd", [launcher, worker], kubernetes_podgroup_api=None).actions
    assert [a.resource for a in of_type(actions, Create)] == [SERVICES]


def test_a_scaled_kubernetes_job_has_its_min_count_patched_where_it_is_mutable():
    launcher, worker = mpi_job(KUBERNETES, workers=4)
    group = kubernetes_group(BETA, 3, priorityClassName="cluster-default")
    actions = decision(
        "hvd", [launcher, worker], kubernetes_podgroups=[group], kubernetes_podgroup_api=BETA
    ).actions
    [patch] = [a for a in of_type(actions, Patch) if a.resource == KUBERNETES_PODGROUPS[BETA]]
    # Only the gang: the priority class the API server filled in is the job's to leave out.
    assert patch.patch["spec"] == {"schedulingPolicy": {"gang": {"minCount": 5}}}
    assert not of_type(actions, Delete)


def test_a_scaled_kubernetes_job_gets_a_new_podgroup_where_the_spec_is_immutable():
    launcher, worker = mpi_job(KUBERNETES, workers=4)
    group = kubernetes_group(ALPHA2, 3)
    actions = decision(
        "hvd", [launcher, worker], kubernetes_podgroups=[group], kubernetes_podgroup_api=ALPHA2
    ).actions
    assert of_type(actions, Delete) == [
        Delete(KUBERNETES_PODGROUPS[ALPHA2], "ml", "hvd", group["metadata"]["uid"])
    ]
    assert not [a for a in of_type(actions, Patch) if a.resource == KUBERNETES_PODGROUPS[ALPHA2]]


def test_an_unchanged_kubernetes_podgroup_is_left_as_it_is():
    launcher, worker = mpi_job(KUBERNETES)
    owners = [
        {"apiVersion": w["apiVersion"], "kind": w["kind"], "name": w["metadata"]["name"],
         "uid": w["metadata"]["uid"]}
        for w in (launcher, worker)
    ]  # fmt: skip
    group = kubernetes_group(BETA, 3, owners=owners)
    actions = decision(
        "hvd", [launcher, worker], kubernetes_podgroups=[group], kubernetes_podgroup_api=BETA
    ).actions
    assert not [a for a in actions if getattr(a, "resource", None) == KUBERNETES_PODGROUPS[BETA]]


def test_a_finished_kubernetes_job_releases_its_podgroup():
    launcher, worker = finished(mpi_job(KUBERNETES))
    group = kubernetes_group(BETA, 3)
    done = pod(launcher, 0, phase="Succeeded", exit_code=0)
    actions = decision(
        "hvd",
        [launcher, worker],
        [done],
        kubernetes_podgroups=[group],
        kubernetes_podgroup_api=BETA,
    )
    assert of_type(actions.actions, Delete) == [
        Delete(KUBERNETES_PODGROUPS[BETA], "ml", "hvd", group["metadata"]["uid"])
    ]


KAI = {
    contract.SCHEDULER: "kai",
    contract.QUEUE: "team-a",
    contract.PLACEMENT_TOPOLOGY: "cloud.example.com/rack",
    contract.KAI_TOPOLOGY: "cluster-topology",
}


def test_a_kai_job_gets_one_podgroup_in_its_queue_kept_current_and_released():
    launcher, worker = mpi_job(KAI)
    [create] = creates(decision("hvd", [launcher, worker]).actions, KAI_PODGROUPS)
    assert create.body["apiVersion"] == "scheduling.run.ai/v2alpha2"
    assert create.body["spec"] == {
        "minMember": 3,
        "queue": "team-a",
        "topologyConstraint": {
            "topology": "cluster-topology",
            "requiredTopologyLevel": "cloud.example.com/rack",
        },
    }
    assert custom_resource_problems(create.body) == []

    launcher, worker = mpi_job(KAI, workers=4)
    group = owned("PodGroup", "hvd", job="hvd", spec=create.body["spec"])
    actions = decision("hvd", [launcher, worker], kai_podgroups=[group]).actions
    [patch] = [a for a in of_type(actions, Patch) if a.resource == KAI_PODGROUPS]
    assert patch.patch["spec"]["minMember"] == 5

    launcher, worker = finished(mpi_job(KAI))
    done = pod(launcher, 0, phase="Succeeded", exit_code=0)
    released = decision("hvd", [launcher, worker], [done], kai_podgroups=[group])
    assert of_type(released.actions, Delete) == [
        Delete(KAI_PODGROUPS, "ml", "hvd", group["metadata"]["uid"])
    ]


def test_an_elastic_gang_is_its_minimum_of_nodes_the_first_roles_first():
    elastic = {contract.SCHEDULER: "volcano", contract.ELASTIC: "2:4"}
    master = statefulset("pt-master", role="master", job="pt", annotations=elastic)
    workers = statefulset("pt-worker", role="worker", job="pt", replicas=3, annotations=elastic)
    with_resources(master, {"requests": {"cpu": "1", "memory": "1Gi"}})
    with_resources(workers, {"requests": {"cpu": "4", "memory": "8Gi"}})
    [create] = creates(decision("pt", stamped(master, workers)).actions, PODGROUPS)
    # Two pods start the job: the master and one worker, not every replica.
    assert create.body["spec"]["minMember"] == 2
    assert create.body["spec"]["minResources"] == {"cpu": "5", "memory": "9Gi"}
