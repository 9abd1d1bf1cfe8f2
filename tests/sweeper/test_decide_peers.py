"""Large jobs' peer lists: the sweeper creates the ConfigMap the webhook's pods mount."""

from __future__ import annotations

from typing import Any

from tests.support.stored import NAMESPACE, bare_pod, owned, pod, prove, stamped, statefulset
from webhook.core import contract
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.render import expand
from webhook.core.shape.peers import PeerFiles, configmap_prefix, digest_of
from webhook.kube.resources import CONFIGMAPS, MANAGED_BY, MANAGER, PODS, STATEFULSETS
from webhook.sweeper.actions import Create, Delete, Emit, Patch

from .helpers import decision, of_type


def service() -> dict[str, Any]:
    return owned("Service", "pt", job="pt", managed=False, spec={"clusterIP": "None"})


def large_job(workers: int = 100) -> list[dict[str, Any]]:
    return stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=workers),
    )


def mounted_files(workload: dict[str, Any], index: int, cluster_domain: str = "") -> PeerFiles:
    """The ConfigMap the webhook mounts in pod `index` of a workload, and what it holds."""
    raw = expand(workload, NAMESPACE)[index]
    result = mutate_pod(raw, NAMESPACE, cluster_domain=cluster_domain)
    assert result.peers is not None
    return result.peers


def mounted(workload: dict[str, Any], index: int, cluster_domain: str = "") -> str:
    return mounted_files(workload, index, cluster_domain).name


def stale() -> PeerFiles:
    """The lists of an older topology of job pt."""
    data = {"TRAINHOOK_WORKER_HOSTS": "pt-worker-0.pt.ml.svc"}
    return PeerFiles(configmap_prefix("pt") + digest_of(data), data)


def hosts(prefix: str, count: int, domain: str = "") -> str:
    return ",".join(f"{prefix}-{i}.pt.ml.svc{domain}" for i in range(count))


def peers_configmap(files: PeerFiles, managed: bool = True) -> dict[str, Any]:
    """The ConfigMap as the sweeper creates it (or as someone plants it, unmanaged)."""
    found = owned("ConfigMap", files.name, job="pt", managed=managed)
    del found["spec"]
    return {**found, "immutable": True, "data": dict(files.data)}


def with_peers(obj: dict[str, Any], name: str) -> dict[str, Any]:
    obj["spec"]["volumes"] = [{"name": "trainhook-peers", "configMap": {"name": name}}]
    return obj


def test_the_sweeper_creates_exactly_the_configmap_a_large_jobs_pods_mount() -> None:
    master, workers = large_job()
    name = mounted(workers, 7)
    assert mounted(master, 0) == name
    actions = decision("pt", [master, workers], services=[service()]).actions
    [create] = of_type(actions, Create)
    assert create.on_conflict is not None and create.on_conflict.reason == "ForeignConfigMap"
    owners = [
        {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": w["metadata"]["name"], "uid": uid}
        for w in (master, workers)
        for uid in [w["metadata"]["uid"]]
    ]
    assert (create.resource, create.namespace, create.body) == (
        CONFIGMAPS,
        NAMESPACE,
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "namespace": NAMESPACE,
                "labels": {contract.JOB: "pt", MANAGED_BY: MANAGER},
                "ownerReferences": owners,
            },
            "immutable": True,
            "data": {
                "TRAINHOOK_MASTER_HOSTS": "pt-master-0.pt.ml.svc",
                "TRAINHOOK_WORKER_HOSTS": hosts("pt-worker", 100),
            },
        },
    )


def test_the_sweepers_cluster_domain_names_the_same_configmap_as_the_webhooks() -> None:
    master, workers = large_job()
    name = mounted(workers, 0, cluster_domain="cluster.local")
    actions = decision(
        "pt", [master, workers], services=[service()], cluster_domain="cluster.local"
    ).actions
    [create] = of_type(actions, Create)
    assert create.body["metadata"]["name"] == name
    assert create.body["data"]["TRAINHOOK_WORKER_HOSTS"] == hosts(
        "pt-worker", 100, ".cluster.local"
    )


def test_a_job_of_100_bare_pods_gets_the_one_configmap_its_pods_mount() -> None:
    pods = [bare_pod(f"bare-worker-{i}", index=i, topology='{"worker":100}') for i in range(100)]
    name = mutate_pod(pods[42], NAMESPACE).peers
    assert name is not None
    creates = of_type(decision("bare", [], pods).actions, Create)
    [create] = [c for c in creates if c.resource == CONFIGMAPS]
    assert create.body["metadata"]["name"] == name.name
    assert create.body["data"] == {
        "TRAINHOOK_WORKER_HOSTS": ",".join(f"bare-worker-{i}.bare.ml.svc" for i in range(100))
    }


def test_a_small_job_gets_no_configmap() -> None:
    actions = decision("pt", large_job(workers=63), services=[service()]).actions
    assert of_type(actions, Create) == []


def test_an_existing_configmap_is_not_created_again() -> None:
    master, workers = large_job()
    files = mounted_files(workers, 0)
    prove([master, workers], f"ConfigMap/{files.name}")
    existing = peers_configmap(files)
    actions = decision("pt", [master, workers], services=[service()], configmaps=[existing])
    assert actions.actions == ()


def test_the_look_that_finds_the_configmap_proven_records_it_on_every_workload() -> None:
    master, workers = large_job()
    files = mounted_files(workers, 0)
    existing = peers_configmap(files)
    actions = decision("pt", [master, workers], services=[service()], configmaps=[existing])
    record = {"metadata": {"annotations": {contract.PROVEN_OBJECTS: f"ConfigMap/{files.name}"}}}
    assert len(of_type(actions.actions, Patch)) == len(actions.actions)
    patches = of_type(actions.actions, Patch)
    assert [(p.resource, p.name, p.patch, p.resource_version) for p in patches] == [
        (STATEFULSETS, "pt-master", record, master["metadata"]["resourceVersion"]),
        (STATEFULSETS, "pt-worker", record, workers["metadata"]["resourceVersion"]),
    ]


def test_a_record_that_no_longer_holds_is_taken_back_in_the_look_that_finds_it() -> None:
    master, workers = large_job()
    files = mounted_files(workers, 0)
    prove([master, workers], f"ConfigMap/{files.name}")
    # Deleted by someone, then planted under the name with other lists.
    planted = peers_configmap(PeerFiles(files.name, {"TRAINHOOK_WORKER_HOSTS": "evil.ml.svc"}))
    actions = decision("pt", [master, workers], services=[service()], configmaps=[planted])
    taken_back = {"metadata": {"annotations": {contract.PROVEN_OBJECTS: None}}}
    assert [(p.name, p.patch) for p in of_type(actions.actions, Patch)] == [
        ("pt-master", taken_back),
        ("pt-worker", taken_back),
    ]


def test_a_scale_creates_the_new_lists_before_it_restamps_any_workload() -> None:
    master, workers = large_job()
    old = mounted_files(workers, 0)
    prove([master, workers], f"ConfigMap/{old.name}")
    workers["spec"]["replicas"] = 101
    running = [with_peers(pod(workers, i), old.name) for i in range(3)]
    actions = decision(
        "pt",
        [master, workers],
        running,
        services=[service()],
        configmaps=[peers_configmap(old)],
    ).actions
    creates = of_type(actions, Create)
    patches = of_type(actions, Patch)
    assert [p.resource for p in patches] == [STATEFULSETS, STATEFULSETS]
    [create] = creates
    assert create.body["data"]["TRAINHOOK_WORKER_HOSTS"] == hosts("pt-worker", 101)
    assert actions.index(create) < actions.index(patches[0])
    # The old lists stay while pods still mount them.
    assert of_type(actions, Delete) == []
    restamped = stamped(master, workers)
    assert mounted(restamped[1], 100) == create.body["metadata"]["name"]


def test_lists_no_pod_mounts_and_no_stamp_names_are_deleted() -> None:
    master, workers = large_job()
    current = mounted_files(workers, 0)
    prove([master, workers], f"ConfigMap/{current.name}")
    gone = peers_configmap(stale())
    actions = decision(
        "pt",
        [master, workers],
        [with_peers(pod(workers, 0), current.name)],
        services=[service()],
        configmaps=[peers_configmap(current), gone],
    ).actions
    assert actions == (Delete(CONFIGMAPS, NAMESPACE, stale().name, gone["metadata"]["uid"]),)


def test_the_lists_of_a_deleted_job_go_with_its_other_objects() -> None:
    lists = peers_configmap(stale())
    actions = decision("pt", [], [], configmaps=[lists]).actions
    assert actions == (Delete(CONFIGMAPS, NAMESPACE, stale().name, lists["metadata"]["uid"]),)


def test_a_planted_configmap_labelled_as_the_sweepers_is_deleted_with_one_warning() -> None:
    master, workers = large_job()
    name = mounted(workers, 0)
    planted = peers_configmap(PeerFiles(name, {"TRAINHOOK_WORKER_HOSTS": "evil-0.evil.ml.svc"}))

    actions = decision("pt", [master, workers], services=[service()], configmaps=[planted]).actions

    [warning] = [a for a in of_type(actions, Emit) if a.reason == "ForeignConfigMap"]
    assert (warning.type, warning.involved.name, warning.message) == (
        "Warning",
        "pt-master",
        f"ConfigMap {name} was not made by Trainhook for the job (its content is not the job's "
        "lists, though it is labelled as Trainhook's): the job's pods wait "
        "(trainhook.io/waiting-for-owned-objects) and never mount it as their peer lists; the "
        "sweeper deletes it and makes the job's own",
    )
    assert of_type(actions, Delete) == [
        Delete(CONFIGMAPS, NAMESPACE, name, planted["metadata"]["uid"])
    ]
    assert of_type(actions, Create) == []


def test_a_configmap_planted_with_the_jobs_own_lists_is_harmless_and_kept() -> None:
    master, workers = large_job()
    files = mounted_files(workers, 0)
    prove([master, workers], f"ConfigMap/{files.name}")
    same = peers_configmap(files)
    same["metadata"]["uid"] = "uid-of-someone-elses"

    actions = decision("pt", [master, workers], services=[service()], configmaps=[same]).actions

    assert actions == ()


def test_a_large_volcano_compat_jobs_configmap_holds_its_host_files_as_its_pods_mount() -> None:
    compat = {contract.COMPAT: "volcano"}
    workloads = large_job()
    for workload in workloads:
        # As the webhook leaves them: the setting on the workload and copied onto its template.
        workload["metadata"]["annotations"].update(compat)
        workload["spec"]["template"]["metadata"]["annotations"].update(compat)
    master, workers = workloads
    name = mounted(workers, 3)
    assert mounted(master, 0) == name
    [create] = of_type(decision("pt", workloads, services=[service()]).actions, Create)
    assert create.body["metadata"]["name"] == name
    assert create.body["data"]["worker.host"] == hosts("pt-worker", 100).replace(",", "\n")
    assert create.body["data"]["master.host"] == "pt-master-0.pt.ml.svc"


OWNED_GATE = {"name": contract.WAITING_FOR_OWNED_OBJECTS}


def waiting(obj: dict[str, Any], name: str) -> dict[str, Any]:
    """A pod of the job as the webhook admits it: mounting `name`, held by the owned-objects
    gate (after Kueue's)."""
    obj = with_peers(obj, name)
    obj["spec"]["schedulingGates"] = [{"name": contract.KUEUE_ADMISSION_GATE}, OWNED_GATE]
    obj["status"] = {"phase": "Pending", "conditions": []}
    return obj


def test_pods_start_only_once_their_configmap_holds_exactly_the_jobs_lists() -> None:
    master, workers = large_job()
    files = mounted_files(workers, 0)
    pods = [waiting(pod(workers, 0), files.name), waiting(pod(workers, 1), files.name)]
    lifted = {"spec": {"schedulingGates": [{"name": contract.KUEUE_ADMISSION_GATE}]}}

    made = decision("pt", [master, workers], pods, services=[service()])
    assert of_type(made.actions, Patch) == []  # no ConfigMap yet: created, the pods wait
    assert [c.body["metadata"]["name"] for c in of_type(made.actions, Create)] == [files.name]
    ours = peers_configmap(files)
    made = decision("pt", [master, workers], pods, services=[service()], configmaps=[ours])
    record = {"metadata": {"annotations": {contract.PROVEN_OBJECTS: f"ConfigMap/{files.name}"}}}
    assert [(p.name, p.patch) for p in of_type(made.actions, Patch)] == [
        ("pt-master", record),  # pods created from now on mount it without the gate
        ("pt-worker", record),
        ("pt-worker-0", lifted),
        ("pt-worker-1", lifted),
    ]


def test_a_planted_configmap_whose_name_digest_matches_but_lists_differ_is_never_mounted() -> None:
    # The ten characters of the name are a digest anyone may match by brute force: the content
    # itself is compared with the job's lists.
    master, workers = large_job()
    files = mounted_files(workers, 0)
    forged = peers_configmap(PeerFiles(files.name, {"TRAINHOOK_WORKER_HOSTS": "evil.ml.svc"}))
    forged["metadata"]["name"] = files.name
    pods = [waiting(pod(workers, 0), files.name)]

    for managed in (True, False):
        if not managed:
            forged["metadata"]["labels"] = {}
        actions = decision(
            "pt", [master, workers], pods, services=[service()], configmaps=[forged]
        ).actions
        assert of_type(actions, Patch) == []
        [warning] = [a for a in of_type(actions, Emit) if a.reason == "ForeignConfigMap"]
        assert warning.message.startswith(f"ConfigMap {files.name} was not made by Trainhook")
        deleted = [d.name for d in of_type(actions, Delete)]
        assert deleted == ([files.name] if managed else [])  # the policy forbids the other
        assert of_type(actions, Create) == []


def test_a_pod_held_for_its_roles_too_is_let_go_one_gate_at_a_time() -> None:
    master, workers = large_job()
    files = mounted_files(workers, 0)
    both = waiting(pod(workers, 0), files.name)
    both["spec"]["schedulingGates"].append({"name": contract.WAITING_FOR_ROLES})
    ours = peers_configmap(files)
    made = decision("pt", [master, workers], [both], services=[service()], configmaps=[ours])
    # One patch: the roles gate lifted, the owned-objects one kept for the next pass.
    gates = [
        p.patch["spec"]["schedulingGates"]
        for p in of_type(made.actions, Patch)
        if p.resource == PODS
    ]
    assert gates == [[{"name": contract.KUEUE_ADMISSION_GATE}, OWNED_GATE]]


def test_a_job_too_large_for_one_configmap_is_invalid_whatever_someone_planted() -> None:
    job = "j" * 60
    master, workers = stamped(
        statefulset("c" * 55, framework="tensorflow", role="chief", job=job),
        statefulset("w" * 55, framework="tensorflow", role="worker", job=job, replicas=5_999),
    )
    planted = owned("ConfigMap", f"{job}-peers-0123456789", job=job)  # labelled, not its lists
    planted.update(immutable=True, data={"TRAINHOOK_WORKER_HOSTS": "evil"})

    made = decision(
        job, [master, workers], services=[service()], configmaps=[planted], records=True
    )

    assert made.phase == "Invalid"
    [invalid] = of_type(made.actions, Emit)
    assert invalid.reason == "InvalidJob"
    assert invalid.message.startswith(f"job {job} has 6000 pods whose peer lists take ")
