"""The objects every job needs: headless Service, Volcano PodGroup, MPI SSH Secret."""

from typing import Any

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
from webhook.core.shape.peers import content_digest
from webhook.kube.resources import JOBS, PODGROUPS, SECRETS, SERVICES, STATEFULSETS
from webhook.sweeper.actions import Create, CreateSshSecret, Delete, Emit, Patch, Recorded

from .helpers import decision, of_type

PT_LABELS = {contract.JOB: "pt", "app.kubernetes.io/managed-by": "trainhook"}


def pytorch_job(**worker):
    master = statefulset("pt-master", role="master", job="pt")
    workers = statefulset("pt-worker", role="worker", job="pt", replicas=2, **worker)
    return stamped(master, workers)


def owner(obj):
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
    }


def test_a_new_job_gets_a_headless_service_owned_by_every_workload():
    master, workers = pytorch_job()
    actions = decision("pt", [master, workers]).actions
    assert actions == (
        Create(
            SERVICES,
            "ml",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "pt",
                    "namespace": "ml",
                    "labels": PT_LABELS,
                    "ownerReferences": [owner(master), owner(workers)],
                },
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": {contract.JOB: "pt"},
                    "ports": [
                        {"name": "pytorch", "port": 23456, "targetPort": 23456, "protocol": "TCP"}
                    ],
                },
            },
        ),
    )


def test_the_port_annotation_is_the_service_port():
    (workers,) = stamped(
        statefulset("tf", framework="tensorflow", annotations={contract.PORT: "3000"})
    )
    (create,) = decision("tf", [workers]).actions
    assert isinstance(create, Create)
    assert create.body["spec"]["ports"] == [
        {"name": "tensorflow", "port": 3000, "targetPort": 3000, "protocol": "TCP"}
    ]


def test_a_generic_job_gets_a_headless_service_without_ports():
    (workers,) = stamped(statefulset("gen", framework="generic", replicas=2))
    (create,) = decision("gen", [workers]).actions
    assert isinstance(create, Create)
    assert "ports" not in create.body["spec"]
    assert create.body["spec"]["clusterIP"] == "None"


def test_a_job_made_of_bare_pods_gets_a_service_owned_by_the_pods():
    pods = [bare_pod(f"bare-{i}", index=i, topology='{"worker":2}') for i in range(2)]
    (create,) = decision("bare", [], pods).actions
    assert isinstance(create, Create)
    assert create.body["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "bare-0", "uid": pods[0]["metadata"]["uid"]},
        {"apiVersion": "v1", "kind": "Pod", "name": "bare-1", "uid": pods[1]["metadata"]["uid"]},
    ]


def service_of(*workloads, managed=True, spec=None):
    spec = spec or {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {contract.JOB: "pt"},
        "ports": [{"name": "pytorch", "port": 23456, "targetPort": 23456, "protocol": "TCP"}],
    }
    return owned(
        "Service", "pt", job="pt", managed=managed, owners=[owner(w) for w in workloads], spec=spec
    )


def test_a_current_service_is_left_as_it_is():
    master, workers = pytorch_job()
    assert decision("pt", [master, workers], services=[service_of(master, workers)]).actions == ()


def test_a_workload_added_to_the_job_becomes_an_owner_of_its_service():
    master, workers = pytorch_job()
    service = service_of(master)
    (patch,) = decision("pt", [master, workers], services=[service]).actions
    assert patch == Patch(
        SERVICES,
        "ml",
        "pt",
        {
            "metadata": {"ownerReferences": [owner(master), owner(workers)]},
            "spec": {
                "ports": service["spec"]["ports"],
                "selector": {contract.JOB: "pt"},
                "publishNotReadyAddresses": True,
            },
        },
        "30",
    )


def test_a_service_trainhook_did_not_create_is_left_alone():
    master, workers = pytorch_job()
    foreign = service_of(master, managed=False, spec={"clusterIP": "None", "ports": []})
    assert decision("pt", [master, workers], services=[foreign]).actions == ()


def test_a_foreign_service_that_is_not_headless_is_reported():
    master, workers = pytorch_job()
    foreign = service_of(managed=False, spec={"clusterIP": "10.0.0.7"})
    (event,) = decision("pt", [master, workers], services=[foreign]).actions
    assert isinstance(event, Emit)
    assert (event.type, event.reason, event.involved.name) == (
        "Warning",
        "ServiceNotHeadless",
        "pt-master",
    )
    assert event.message == (
        "Service pt was not created by Trainhook and is not headless (clusterIP: None): "
        "the job's pods cannot reach each other by hostname"
    )


VOLCANO = {contract.SCHEDULER: "volcano", contract.QUEUE: "research"}


def requesting(workload, **requests):
    workload["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": requests}
    return workload


def test_a_volcano_job_gets_a_podgroup_for_all_its_replicas_in_its_queue_and_priority_class():
    master = statefulset(
        "pt-master", role="master", job="pt", annotations=VOLCANO, priority_class="high"
    )
    workers = statefulset(
        "pt-worker",
        role="worker",
        job="pt",
        replicas=3,
        annotations={**VOLCANO, contract.GPUS: "2"},
    )
    requesting(master, cpu="4", memory="16Gi")
    requesting(workers, cpu="8", memory="32Gi")
    master, workers = stamped(master, workers)
    actions = decision("pt", [master, workers], services=[service_of(master, workers)]).actions
    assert actions == (
        Create(
            PODGROUPS,
            "ml",
            {
                "apiVersion": "scheduling.volcano.sh/v1beta1",
                "kind": "PodGroup",
                "metadata": {
                    "name": "pt",
                    "namespace": "ml",
                    "labels": PT_LABELS,
                    "ownerReferences": [owner(master), owner(workers)],
                },
                "spec": {
                    "minMember": 4,
                    "minResources": {"cpu": "28", "memory": "112Gi", "nvidia.com/gpu": "6"},
                    "queue": "research",
                    "priorityClassName": "high",
                },
            },
        ),
    )


def test_a_podgroup_follows_the_job_when_it_is_scaled():
    master = statefulset("pt-master", role="master", job="pt", annotations=VOLCANO)
    workers = statefulset("pt-worker", role="worker", job="pt", replicas=5, annotations=VOLCANO)
    requesting(master, cpu="2")
    requesting(workers, cpu="500m")
    master, workers = stamped(master, workers)
    group = owned(
        "PodGroup",
        "pt",
        job="pt",
        owners=[owner(master), owner(workers)],
        spec={"minMember": 4, "minResources": {"cpu": "3500m"}, "queue": "research"},
    )
    actions = decision(
        "pt", [master, workers], services=[service_of(master, workers)], podgroups=[group]
    ).actions
    assert actions == (
        Patch(
            PODGROUPS,
            "ml",
            "pt",
            {
                "metadata": {"ownerReferences": [owner(master), owner(workers)]},
                "spec": {
                    "minMember": 6,
                    "minResources": {"cpu": "4500m"},
                    "queue": "research",
                    "priorityClassName": None,
                    "networkTopology": None,
                },
            },
            "30",
        ),
    )


def test_a_job_without_volcano_gets_no_podgroup():
    master, workers = pytorch_job()
    assert of_type(decision("pt", [master, workers]).actions, Create)[0].resource == SERVICES
    assert len(decision("pt", [master, workers]).actions) == 1


def mpi_job():
    launcher = indexed_job("hvd-launcher", role="launcher", job="hvd")
    workers = statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2)
    return stamped(launcher, workers)


def test_an_mpi_job_gets_an_ssh_secret_whose_config_trusts_the_jobs_hosts_only():
    launcher, workers = mpi_job()
    actions = decision("hvd", [launcher, workers]).actions
    (secret,) = of_type(actions, CreateSshSecret)
    assert secret == CreateSshSecret(
        namespace="ml",
        name="hvd-ssh",
        labels={contract.JOB: "hvd", "app.kubernetes.io/managed-by": "trainhook"},
        owners=(owner(launcher), owner(workers)),
        ssh_config=(
            "Host *.hvd.ml.svc *.hvd.ml.svc.*\n"
            "    Port 22\n"
            "    IdentityFile ~/.ssh/id_ed25519\n"
            "    StrictHostKeyChecking no\n"
            "    UserKnownHostsFile /dev/null\n"
            "    LogLevel ERROR\n"
        ),
        # the Secret's digest, recorded first on the workloads as they were decided on
        record_on=(
            Recorded(JOBS, "hvd-launcher", launcher["metadata"]["resourceVersion"]),
            Recorded(STATEFULSETS, "hvd-worker", workers["metadata"]["resourceVersion"]),
        ),
    )


def test_the_sweepers_own_ssh_secret_is_never_replaced():
    launcher, workers = mpi_job()
    secret = sweepers_ssh_secret("hvd", launcher, workers)
    actions = decision("hvd", [launcher, workers], secrets=[secret]).actions
    assert of_type(actions, CreateSshSecret) == []
    assert of_type(actions, Delete) == []


def test_an_ssh_secret_planted_with_the_sweepers_label_before_the_job_is_deleted_with_a_warning():
    launcher, workers = mpi_job()
    planted = owned("Secret", "hvd-ssh", job="hvd")  # the job's workloads did not exist yet

    actions = decision("hvd", [launcher, workers], secrets=[planted]).actions

    [warning] = [a for a in of_type(actions, Emit) if a.reason == "ForeignSecret"]
    assert warning.message == (
        "Secret hvd-ssh was not made by Trainhook for the job (its keys are not those the "
        "sweeper made for the job, though it is labelled as Trainhook's): the job's pods wait "
        "(trainhook.io/waiting-for-owned-objects) and never mount it as their SSH keys; the "
        "sweeper deletes it and makes the job's own"
    )
    assert of_type(actions, Delete) == [
        Delete(SECRETS, "ml", "hvd-ssh", planted["metadata"]["uid"])
    ]
    assert of_type(actions, CreateSshSecret) == []


def test_only_mpi_jobs_get_an_ssh_secret():
    master, workers = pytorch_job()
    assert of_type(decision("pt", [master, workers]).actions, CreateSshSecret) == []


def test_the_objects_of_a_job_whose_workloads_are_gone_are_deleted_if_trainhook_made_them():
    service = owned("Service", "pt", job="pt")
    group = owned("PodGroup", "pt", job="pt")
    assert decision("pt", [], [], services=[service], podgroups=[group]).actions == (
        Delete(SERVICES, "ml", "pt", service["metadata"]["uid"]),
        Delete(PODGROUPS, "ml", "pt", group["metadata"]["uid"]),
    )


def test_a_foreign_service_of_a_gone_job_is_kept():
    assert (
        decision("pt", [], [], services=[owned("Service", "pt", job="pt", managed=False)]).actions
        == ()
    )


def test_nothing_is_deleted_while_pods_of_the_job_still_run():
    master, _ = pytorch_job()
    service = owned("Service", "pt", job="pt")
    assert decision("pt", [], [pod(master, 0)], services=[service]).actions == ()


def test_an_invalid_annotation_is_reported_on_its_workload_and_nothing_is_done():
    master, workers = pytorch_job()
    workers["metadata"]["annotations"][contract.BACKOFF_LIMIT] = "three"
    (event,) = decision("pt", [master, workers]).actions
    assert isinstance(event, Emit)
    assert (event.type, event.reason, event.involved.kind, event.involved.name) == (
        "Warning",
        "InvalidJob",
        "StatefulSet",
        "pt-worker",
    )
    assert event.message == "trainhook.io/backoff-limit: invalid value 'three': a whole number >= 0"


def test_the_same_problem_is_recorded_under_the_same_event_name():
    master, workers = pytorch_job()
    workers["metadata"]["annotations"][contract.SUCCESS_POLICY] = "most"
    first = decision("pt", [master, workers]).actions
    again = decision("pt", [master, workers]).actions
    assert first == again
    assert isinstance(first[0], Emit)
    assert first[0].message == (
        "trainhook.io/success-policy: invalid value 'most': one of all, rank0, any-worker, "
        "role=<role>"
    )


def mindspore_job():
    scheduler = statefulset("ms-sched", framework="mindspore", role="scheduler", job="ms")
    workers = statefulset("ms-worker", framework="mindspore", role="worker", job="ms", replicas=2)
    return stamped(scheduler, workers)


MS_SCHEDULER_SPEC = {
    "type": "ClusterIP",
    "selector": {contract.JOB: "ms", contract.ROLE: "scheduler", contract.ROLE_INDEX: "0"},
    "ports": [{"name": "mindspore", "port": 2222, "targetPort": 2222, "protocol": "TCP"}],
}


def test_a_mindspore_job_with_a_scheduler_gets_a_cluster_ip_service_for_scheduler_0():
    scheduler, workers = mindspore_job()
    headless = owned("Service", "ms", job="ms", owners=[owner(scheduler), owner(workers)])
    headless["spec"] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,
        "selector": {contract.JOB: "ms"},
        "ports": [{"name": "mindspore", "port": 2222, "targetPort": 2222, "protocol": "TCP"}],
    }
    actions = decision("ms", [scheduler, workers], services=[headless]).actions
    assert actions == (
        Create(
            SERVICES,
            "ml",
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {
                    "name": "ms-ms-scheduler",
                    "namespace": "ml",
                    "labels": {contract.JOB: "ms", "app.kubernetes.io/managed-by": "trainhook"},
                    "ownerReferences": [owner(scheduler), owner(workers)],
                },
                "spec": MS_SCHEDULER_SPEC,
            },
        ),
    )


def test_a_current_scheduler_service_is_left_as_it_is_and_removed_with_the_job():
    scheduler, workers = mindspore_job()
    owners = [owner(scheduler), owner(workers)]
    service = owned(
        "Service", "ms-ms-scheduler", job="ms", owners=owners, spec=dict(MS_SCHEDULER_SPEC)
    )
    running = decision("ms", [scheduler, workers], services=[service]).actions
    assert [a for a in running if getattr(a, "name", None) == "ms-ms-scheduler"] == []
    gone = decision("ms", [], services=[service]).actions
    assert gone == (Delete(SERVICES, "ml", "ms-ms-scheduler", service["metadata"]["uid"]),)


def test_a_mindspore_job_without_a_scheduler_gets_no_cluster_ip_service():
    (workers,) = stamped(statefulset("ms", framework="mindspore", role="worker", replicas=2))
    created = of_type(decision("ms", [workers]).actions, Create)
    assert [action.body["metadata"]["name"] for action in created] == ["ms"]


def gated_for_keys(obj: dict[str, Any], phase: str = "Pending") -> dict[str, Any]:
    obj["spec"]["schedulingGates"] = [{"name": contract.WAITING_FOR_OWNED_OBJECTS}]
    obj["status"] = {"phase": phase, "conditions": []}
    return obj


def test_mpi_pods_start_only_with_the_ssh_secret_whose_digest_the_sweeper_recorded():
    launcher, workers = mpi_job()
    pods = [gated_for_keys(pod(workers, 0)), gated_for_keys(pod(workers, 1))]
    ours = sweepers_ssh_secret("hvd", launcher, workers, proven=False)
    lifted = of_type(decision("hvd", [launcher, workers], pods, secrets=[ours]).actions, Patch)
    record = {"metadata": {"annotations": {contract.PROVEN_OBJECTS: "Secret/hvd-ssh"}}}
    assert [(p.name, p.patch) for p in lifted] == [
        ("hvd-launcher", record),  # pods created from now on mount it without the gate
        ("hvd-worker", record),
        ("hvd-worker-0", {"spec": {"schedulingGates": None}}),
        ("hvd-worker-1", {"spec": {"schedulingGates": None}}),
    ]
    # The same name with other keys (changed, or made by someone who copied the labels and owners):
    changed = {**ours, "data": {**ours["data"], "authorized_keys": "YXR0YWNrZXI="}}
    actions = decision("hvd", [launcher, workers], pods, secrets=[changed]).actions
    assert of_type(actions, Patch) == []
    assert [a.reason for a in of_type(actions, Emit)] == ["ForeignSecret"]
    assert of_type(actions, Delete) == [Delete(SECRETS, "ml", "hvd-ssh", ours["metadata"]["uid"])]


def test_an_ssh_secret_made_before_digests_were_recorded_is_adopted_by_a_running_job():
    launcher, workers = mpi_job()
    ours = sweepers_ssh_secret("hvd", launcher, workers, proven=False)
    for workload in (launcher, workers):
        del workload["metadata"]["annotations"][contract.SSH_KEYS_DIGEST]
    running = [pod(workers, 0), pod(workers, 1)]  # admitted before pods were gated
    actions = decision("hvd", [launcher, workers], running, secrets=[ours]).actions
    record = {"metadata": {"annotations": {contract.SSH_KEYS_DIGEST: content_digest(ours["data"])}}}
    assert [(p.name, p.patch) for p in of_type(actions, Patch)] == [
        ("hvd-launcher", record),
        ("hvd-worker", record),
    ]
    assert of_type(actions, Emit) == [] and of_type(actions, Delete) == []
    # A new job's pods all wait: the same Secret is then someone else's, however labelled.
    waiting = [gated_for_keys(pod(workers, 0)), gated_for_keys(pod(workers, 1))]
    actions = decision("hvd", [launcher, workers], waiting, secrets=[ours]).actions
    assert [a.reason for a in of_type(actions, Emit)] == ["ForeignSecret"]
    assert of_type(actions, Patch) == []
