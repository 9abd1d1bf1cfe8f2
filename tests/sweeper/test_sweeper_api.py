"""The sweeper against a Kubernetes API emulator over HTTP: from created to cleaned up."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import time
from functools import partial
from typing import Any

from cryptography.hazmat.primitives import serialization

from tests.support.emulator import kubeconfig
from tests.support.stored import indexed_job, pod, stamped, statefulset
from tests.support.sweeping import (
    LEASE_NAMESPACE,
    Running,
    SweeperProcess,
    fast_config,
    sweeping,
)
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.objects import parse_time
from webhook.core.render import expand
from webhook.kube.resources import (
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    EVENTS,
    JOBS,
    KAI_PODGROUPS,
    KUBERNETES_PODGROUPS,
    LEASES,
    PODGROUPS,
    PODS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
)

from .conftest import kube_for


def names(emulator, resource):
    return [obj["metadata"]["name"] for obj in emulator.objects(resource, "ml")]


def annotations_on(emulator, resource, name):
    found = [o for o in emulator.objects(resource, "ml") if o["metadata"]["name"] == name]
    return found[0]["metadata"].get("annotations") or {} if found else {}


def create_mpi_job(kube, settings):
    launcher, workers = stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd", annotations=settings),
        statefulset(
            "hvd-worker",
            framework="mpi",
            role="worker",
            job="hvd",
            replicas=2,
            annotations=settings,
        ),
    )
    launcher = kube.create(JOBS, "ml", launcher)
    workers = kube.create(STATEFULSETS, "ml", workers)
    pods = [pod(launcher, 0), pod(workers, 0), pod(workers, 1)]
    pods = [kube.create(PODS, "ml", p) for p in pods]
    return launcher, workers, pods


def succeed(kube, obj, phase="Succeeded"):
    status = {
        "phase": phase,
        "containerStatuses": [
            {
                "name": "mpi",
                "restartCount": 0,
                "state": {"terminated": {"exitCode": 0}},
                "lastState": {},
            }
        ],
    }
    kube.patch(PODS, "ml", obj["metadata"]["name"], {"status": status})


def test_an_mpi_job_goes_from_created_to_served_to_succeeded_to_cleaned_up(emulator, kube):
    settings = {
        contract.SCHEDULER: "volcano",
        contract.QUEUE: "research",
        contract.CLEAN_POD_POLICY: "All",
        contract.TTL_SECONDS_AFTER_FINISHED: "1",
    }
    with sweeping(kube) as sweeper:
        launcher, workers, pods = create_mpi_job(kube, settings)
        eventually(
            lambda: (
                names(emulator, SERVICES) == ["hvd"]
                and names(emulator, PODGROUPS) == ["hvd"]
                and names(emulator, SECRETS) == ["hvd-ssh"]
            ),
            what="Service, PodGroup and Secret",
        )
        (service,) = emulator.objects(SERVICES, "ml")
        assert service["spec"]["clusterIP"] == "None"
        assert service["spec"]["selector"] == {contract.JOB: "hvd"}
        # a workload seen after the Service was created becomes an owner with the next look
        eventually(
            lambda: (
                {
                    ref["uid"]
                    for ref in emulator.objects(SERVICES, "ml")[0]["metadata"]["ownerReferences"]
                }
                == {launcher["metadata"]["uid"], workers["metadata"]["uid"]}
            ),
            what="every workload owns the Service",
        )
        (group,) = emulator.objects(PODGROUPS, "ml")
        assert group["spec"] == {"minMember": 3, "queue": "research"}
        (secret,) = emulator.objects(SECRETS, "ml")
        files = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
        key = serialization.load_ssh_private_key(files["id_ed25519"].encode(), None)
        public = (
            key.public_key()
            .public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
            .decode()
        )
        assert files["authorized_keys"].startswith(public + " ")
        # the names mpi-operator's images read (their sshd's HostKey is ~/.ssh/id_rsa)
        assert (files["id_rsa"], files["id_rsa.pub"]) == (
            files["id_ed25519"],
            files["id_ed25519.pub"],
        )
        assert "Host *.hvd.ml.svc *.hvd.ml.svc.*" in files["config"]

        succeed(kube, pods[0])
        eventually(
            lambda: all(
                annotations_on(emulator, r, n).get(contract.PHASE) == "Succeeded"
                for r, n in ((JOBS, "hvd-launcher"), (STATEFULSETS, "hvd-worker"))
            ),
            what="phase recorded",
        )
        events = [e for e in emulator.objects(EVENTS, "ml") if e["reason"] == "Completed"]
        assert sorted(e["involvedObject"]["name"] for e in events) == ["hvd-launcher", "hvd-worker"]
        assert {e["reportingInstance"] for e in events} == {"sweeper-a"}
        eventually(lambda: not names(emulator, PODS), what="pods cleaned (clean-pod-policy All)")
        eventually(
            lambda: (
                not any(
                    names(emulator, r) for r in (JOBS, STATEFULSETS, SERVICES, PODGROUPS, SECRETS)
                )
            ),
            what="job deleted after its TTL",
        )
    assert "create Service ml/hvd" in sweeper.actions


def test_a_coscheduling_job_gets_its_podgroup_and_loses_it_once_it_is_done(emulator, kube):
    settings = {contract.SCHEDULER: "coscheduling", contract.SCHEDULE_TIMEOUT_SECONDS: "120"}
    with sweeping(kube):
        _, _, pods = create_mpi_job(kube, settings)
        eventually(
            lambda: names(emulator, COSCHEDULING_PODGROUPS) == ["hvd"],
            what="scheduler-plugins PodGroup",
        )
        (group,) = emulator.objects(COSCHEDULING_PODGROUPS, "ml")
        assert group["apiVersion"] == "scheduling.x-k8s.io/v1alpha1"
        assert group["spec"] == {"minMember": 3, "scheduleTimeoutSeconds": 120}
        assert names(emulator, PODGROUPS) == []

        succeed(kube, pods[0])
        eventually(
            lambda: (
                annotations_on(emulator, JOBS, "hvd-launcher").get(contract.PHASE) == "Succeeded"
            ),
            what="phase recorded",
        )
        # The workers still run (until their StatefulSet, scaled to 0, removes them): the gang
        # keeps its PodGroup meanwhile.
        assert names(emulator, COSCHEDULING_PODGROUPS) == ["hvd"]
        for worker in pods[1:]:
            kube.delete(PODS, "ml", worker["metadata"]["name"], {})
        eventually(
            lambda: not names(emulator, COSCHEDULING_PODGROUPS),
            what="PodGroup released once no pod of the finished job runs",
        )
        assert names(emulator, JOBS) == ["hvd-launcher"]
        assert names(emulator, STATEFULSETS) == ["hvd-worker"]


def serve_kubernetes_podgroups(emulator, api_version):
    """The emulator serves Kubernetes' own PodGroup in this version, as a 1.37 cluster does."""
    emulator.serve(f"{api_version}/podgroups", "PodGroup")


def test_a_kubernetes_job_gets_the_podgroup_the_cluster_serves_resized_on_scale_and_released(
    emulator, kube, caplog
):
    api = "scheduling.k8s.io/v1alpha3"
    serve_kubernetes_podgroups(emulator, api)
    resource = KUBERNETES_PODGROUPS[api]
    caplog.set_level(logging.INFO, logger="trainhook.sweeper")
    with sweeping(kube):
        assert f"Kubernetes' own gang scheduling: PodGroups of {api}" in caplog.messages
        _, _, pods = create_mpi_job(kube, {contract.SCHEDULER: "kubernetes"})
        eventually(lambda: names(emulator, resource) == ["hvd"], what="Kubernetes PodGroup")
        (group,) = emulator.objects(resource, "ml")
        assert group["apiVersion"] == api
        assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 3}}}

        emulator.merge(STATEFULSETS.path("ml", "hvd-worker"), {"spec": {"replicas": 4}})
        eventually(
            lambda: (
                [g["spec"]["schedulingPolicy"] for g in emulator.objects(resource, "ml")]
                == [{"gang": {"minCount": 5}}]
            ),
            what="minCount follows the scale",
        )

        succeed(kube, pods[0])
        for worker in pods[1:]:
            kube.delete(PODS, "ml", worker["metadata"]["name"], {})
        eventually(lambda: not names(emulator, resource), what="PodGroup released when done")


def test_a_cluster_without_kubernetes_podgroups_is_said_once_at_start_up(emulator, kube, caplog):
    caplog.set_level(logging.INFO, logger="trainhook.sweeper")
    with sweeping(kube):
        create_mpi_job(kube, {contract.SCHEDULER: "kubernetes"})
        eventually(lambda: names(emulator, SERVICES) == ["hvd"], what="the job's Service")
    said = [m for m in caplog.messages if "serves no PodGroup of scheduling.k8s.io" in m]
    assert len(said) == 1
    assert said[0].endswith("jobs with trainhook.io/scheduler: kubernetes get no PodGroup")
    asked = [str(r.url) for r in emulator.requests()]
    assert any("/apis/batch/v1/jobs" in url for url in asked)
    for api in KUBERNETES_PODGROUPS:
        assert not any(f"/apis/{api}/namespaces" in url for url in asked)


def create_pytorch_job(kube, settings):
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=settings),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=settings),
    )
    master = kube.create(STATEFULSETS, "ml", master)
    workers = kube.create(STATEFULSETS, "ml", workers)
    pods = [kube.create(PODS, "ml", p) for p in (pod(master, 0), pod(workers, 0), pod(workers, 1))]
    return master, workers, pods


def exit_0(kube, obj):
    status = {
        "containerStatuses": [
            {
                "name": "pytorch",
                "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 0}},
            }
        ]
    }
    kube.patch(PODS, "ml", obj["metadata"]["name"], {"status": status})


def test_a_sweeper_killed_and_restarted_at_any_point_resumes_the_job(emulator, kube, tmp_path):
    config = kubeconfig(tmp_path / "kubeconfig", emulator.url)
    log = tmp_path / "sweeper.log"
    settings = {contract.SCHEDULER: "volcano", contract.TTL_SECONDS_AFTER_FINISHED: "3"}
    _, _, pods = create_mpi_job(kube, settings)

    first = SweeperProcess(config, "sweeper-0", log)
    eventually(lambda: names(emulator, SERVICES) == ["hvd"], what="Service", timeout=20)
    first.kill()  # possibly before the PodGroup and the Secret

    second = SweeperProcess(config, "sweeper-0", log)  # the same pod, restarted
    eventually(
        lambda: names(emulator, PODGROUPS) == ["hvd"] and names(emulator, SECRETS) == ["hvd-ssh"],
        what="PodGroup and Secret",
        timeout=20,
    )
    succeed(kube, pods[0])
    finished = eventually(
        lambda: annotations_on(emulator, STATEFULSETS, "hvd-worker").get(contract.FINISHED_AT),
        what="phase recorded",
        timeout=20,
    )
    second.kill()  # before the TTL expires
    assert annotations_on(emulator, JOBS, "hvd-launcher")[contract.FINISHED_AT] == finished
    assert [o["spec"]["replicas"] for o in emulator.objects(STATEFULSETS, "ml")] == [0]

    third = SweeperProcess(config, "sweeper-1", log)  # another replica, once the lease expires
    try:
        eventually(
            lambda: (
                not any(
                    names(emulator, r) for r in (JOBS, STATEFULSETS, SERVICES, PODGROUPS, SECRETS)
                )
            ),
            what="TTL cleanup",
            timeout=20,
        )
    finally:
        assert third.terminate() == 0
    completed = [e for e in emulator.objects(EVENTS, "ml") if e["reason"] == "Completed"]
    assert sorted(e["involvedObject"]["name"] for e in completed) == ["hvd-launcher", "hvd-worker"]
    assert {e["reportingInstance"] for e in completed} == {"sweeper-0"}
    deletes = [t for method, path, _, t in emulator.emulator.log if method == "DELETE"]
    finished_at = parse_time(finished)
    assert finished_at is not None
    assert min(deletes) >= finished_at.timestamp() + 3
    assert "sweeper-1 leads" in log.read_text()


def webhook_pod(workload, index, cluster_domain):
    """Pod `index` as the webhook admits it: the peers ConfigMap it mounts, if any."""
    raw = expand(workload, "ml")[index]
    return mutate_pod(raw, "ml", cluster_domain=cluster_domain).pod


def test_a_large_job_gets_its_peers_configmap_and_a_scale_replaces_it(emulator, kube):
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=70),
    )
    master = kube.create(STATEFULSETS, "ml", master)
    workers = kube.create(STATEFULSETS, "ml", workers)
    first = webhook_pod(workers, 0, "cluster.local")
    [old] = [v["configMap"]["name"] for v in first["spec"]["volumes"]]
    running = pod(workers, 0)
    running["spec"]["volumes"] = first["spec"]["volumes"]
    running = kube.create(PODS, "ml", running)
    stamped_at: list[float] = []  # when the sweeper patched a StatefulSet's topology stamp
    with sweeping(kube, cluster_domain="cluster.local") as sweeper:
        apply_one = sweeper.sweeper.executor._apply

        def noting_stamps(action: Any) -> bool:
            done = apply_one(action)
            template = (getattr(action, "patch", None) or {}).get("spec", {}).get("template")
            if template and action.resource == STATEFULSETS:
                stamped_at.append(time.time())
            return done

        sweeper.sweeper.executor._apply = noting_stamps  # type: ignore[method-assign]
        eventually(lambda: names(emulator, CONFIGMAPS) == [old], what="peers ConfigMap")
        (made,) = emulator.objects(CONFIGMAPS, "ml")
        assert made["immutable"] is True
        assert made["data"]["TRAINHOOK_WORKER_HOSTS"] == ",".join(
            f"pt-worker-{i}.pt.ml.svc.cluster.local" for i in range(70)
        )
        owners = {ref["uid"] for ref in made["metadata"]["ownerReferences"]}
        assert owners == {master["metadata"]["uid"], workers["metadata"]["uid"]}

        kube.patch(STATEFULSETS, "ml", "pt-worker", {"spec": {"replicas": 71}})
        eventually(lambda: len(names(emulator, CONFIGMAPS)) == 2, what="the new topology's lists")
        restamped = eventually(
            lambda: [
                w
                for w in emulator.objects(STATEFULSETS, "ml")
                if w["metadata"]["name"] == "pt-worker"
                and '"worker":71'
                in w["spec"]["template"]["metadata"]["annotations"][contract.TOPOLOGY]
            ],
            what="workers restamped",
        )
        new = webhook_pod(restamped[0], 70, "cluster.local")
        [name] = [v["configMap"]["name"] for v in new["spec"]["volumes"]]
        # The stale pod is restarted; once no pod mounts the old lists, they go.
        eventually(lambda: names(emulator, CONFIGMAPS) == [name], what="old lists deleted")
        assert not names(emulator, PODS)
    log = emulator.emulator.log
    posts = [t for m, p, _, t in log if m == "POST" and p.endswith("/configmaps")]
    # The scale (the test's own patch), then the sweeper's restamps of both StatefulSets (its
    # other patches record the job's state).
    scale = next(t for m, p, _, t in log if m == "PATCH" and "/statefulsets/" in p)
    assert len(posts) == 2 and len(stamped_at) == 2
    assert scale < posts[1] < min(stamped_at)  # the new lists exist before any stamp names them


def test_injected_server_errors_are_retried_with_growing_pauses(emulator, kube):
    emulator.emulator.fail(500, method="GET", path="/api/v1/pods", times=2)
    emulator.emulator.fail(500, method="POST", path="/namespaces/ml/services", times=3)
    # A running job whose state is recorded already: the Service is all the sweeper writes, so
    # no event of its own writes cuts a backoff short.
    known = '{"state":"Running","reason":"Running","message":"","restarts":0,' + (
        '"startTime":"2025-01-01T00:00:00Z"}'
    )
    create_pytorch_job(kube, {contract.STATUS: known})
    with sweeping(kube, backoff_base=0.1) as sweeper:
        eventually(lambda: names(emulator, SERVICES) == ["pt"], what="Service")
        assert sweeper.sweeper.watches[(PODS, None)].lists >= 1
    posts = [
        (code, t)
        for method, path, code, t in emulator.emulator.log
        if method == "POST" and path.endswith("/services")
    ]
    assert [code for code, _ in posts] == [500, 500, 500, 201]
    pauses = [b - a for (_, a), (_, b) in itertools.pairwise(posts)]
    assert pauses[0] >= 0.09 and pauses[1] >= 0.19 and pauses[2] >= 0.39
    pod_lists = [
        code
        for method, path, code, _ in emulator.emulator.log
        if method == "GET" and path == "/api/v1/pods"
    ]
    assert pod_lists[:3] == [500, 500, 200]


def test_a_watch_answered_410_gone_is_followed_by_a_list_and_one_that_ends_is_resumed(
    emulator, kube
):
    podgroups = (PODGROUPS, COSCHEDULING_PODGROUPS, KAI_PODGROUPS)
    for resource in (STATEFULSETS, JOBS, PODS, SERVICES, *podgroups, CONFIGMAPS):
        emulator.emulator.gone(resource.plural)  # its first watch (every kind of PodGroup)
    with sweeping(kube) as sweeper:
        informers = sweeper.sweeper.watches.values()
        eventually(lambda: all(i.lists == 2 for i in informers), what="relist after 410 Gone")
        create_pytorch_job(kube, {})
        eventually(lambda: names(emulator, SERVICES) == ["pt"], what="Service")
        watches = {id(i): i.watches for i in informers}
        emulator.emulator.end_watches()
        eventually(
            lambda: all(i.watches > watches[id(i)] for i in informers), what="watches resumed"
        )
        create_mpi_job(kube, {})
        eventually(lambda: names(emulator, SERVICES) == ["hvd", "pt"], what="second Service")
        assert [i.lists for i in informers] == [2] * len(informers)  # nothing listed again


def test_only_one_of_two_sweepers_acts_and_the_other_takes_over_when_it_stops(emulator, kube):
    create_pytorch_job(kube, {})
    first = Running(kube, fast_config("sweeper-a")).start()
    eventually(first.leads, what="first sweeper leads")
    second = Running(kube_for(emulator.url), fast_config("sweeper-b")).start()
    try:
        eventually(lambda: names(emulator, SERVICES) == ["pt"], what="Service")
        first.reconciled("ml", "pt")
        assert creations(first.actions) == ["create Service ml/pt"]
        assert second.actions == [] and not second.leads()
        first.stop()
        eventually(second.leads, timeout=1.5, what="takeover of a released lease")
        create_mpi_job(kube, {})
        eventually(  # an action is recorded once applied: wait for the record, not the Secret
            lambda: "create Secret ml/hvd-ssh with a new SSH key pair" in second.actions,
            what="Secret by the second",
        )
        assert names(emulator, SECRETS) == ["hvd-ssh"]
        assert creations(first.actions) == ["create Service ml/pt"]
        assert "create Secret ml/hvd-ssh with a new SSH key pair" in second.actions
    finally:
        second.stop()
        if first.thread.is_alive():
            first.stop()


def test_a_killed_leaders_lease_expires_and_the_standby_takes_over(emulator, kube, tmp_path):
    config = kubeconfig(tmp_path / "kubeconfig", emulator.url)
    leader = SweeperProcess(config, "sweeper-a", tmp_path / "a.log")
    eventually(lambda: lease_holder(emulator) == "sweeper-a", timeout=20, what="first leader")
    with sweeping(kube, "sweeper-b") as standby:
        for _ in range(2):  # the standby tries every 0.1 s while the leader renews
            renewed = lease(emulator).get("renewTime")
            eventually(
                partial(renewed_since, emulator, renewed),
                what="the leader renewing its lease while the standby watches",
            )
        assert not standby.leads()
        leader.kill()
        killed = time.monotonic()
        create_pytorch_job(kube, {})
        eventually(standby.leads, timeout=10, what="takeover after expiry")
        assert time.monotonic() - killed >= 1.0  # it waited for the lease to expire
        eventually(
            lambda: creations(standby.actions) == ["create Service ml/pt"], what="the standby acts"
        )
    assert lease_transitions(emulator) == 1


def creations(actions):
    return [action for action in actions if action.startswith("create")]


def lease(emulator):
    found = emulator.objects(LEASES, LEASE_NAMESPACE)
    return found[0]["spec"] if found else {}


def lease_holder(emulator):
    return lease(emulator).get("holderIdentity")


def renewed_since(emulator, renew_time):
    return lease(emulator).get("renewTime") != renew_time


def lease_transitions(emulator):
    return lease(emulator).get("leaseTransitions")


def test_a_write_that_conflicts_is_decided_again_on_state_read_afresh(emulator, kube, caplog):
    caplog.set_level(logging.INFO, logger="trainhook.sweeper")
    _, _, pods = create_mpi_job(kube, {})
    with sweeping(kube):
        eventually(lambda: names(emulator, SERVICES) == ["hvd"], what="Service")
        emulator.emulator.fail(409, method="PATCH", path="/statefulsets/hvd-worker")
        succeed(kube, pods[0])
        eventually(
            lambda: annotations_on(emulator, STATEFULSETS, "hvd-worker").get(contract.PHASE),
            what="phase recorded after the conflict",
        )
    assert "patch StatefulSet ml/hvd-worker: injected fault; deciding again on fresh state" in (
        caplog.text
    )
    fresh_reads = [
        path
        for method, path, _, _ in emulator.emulator.log
        if method == "GET" and path.startswith("/api/v1/namespaces/ml/pods")
    ]
    assert fresh_reads  # the job's pods were read straight from the API, not from the cache
    # decided again, not done twice: one Completed event on the worker, one finish time
    completed = [
        e
        for e in emulator.objects(EVENTS, "ml")
        if e["reason"] == "Completed" and e["involvedObject"]["name"] == "hvd-worker"
    ]
    assert len(completed) == 1


def create_single_worker_job(kube, namespace):
    (workers,) = stamped(statefulset("solo", role="worker", job="solo", replicas=1))
    workers["metadata"]["namespace"] = namespace
    workers = kube.create(STATEFULSETS, namespace, workers)
    single = pod(workers, 0)
    single["metadata"]["namespace"] = namespace
    kube.create(PODS, namespace, single)


def test_a_sweeper_given_two_namespaces_serves_both_and_reads_nothing_outside_them(emulator, kube):
    for namespace in ("ml", "vision", "research"):
        create_single_worker_job(kube, namespace)
    with sweeping(kube, namespaces=("ml", "vision")):
        eventually(
            lambda: (
                [o["metadata"]["name"] for o in emulator.objects(SERVICES, "vision")] == ["solo"]
            ),
            what="Service in vision",
        )
        eventually(lambda: names(emulator, SERVICES) == ["solo"], what="Service in ml")
    assert emulator.objects(SERVICES, "research") == []
    reads = {path for method, path, _, _ in emulator.emulator.log if method == "GET"}
    outside = {
        path
        for path in reads
        if "/namespaces/ml/" not in path
        and "/namespaces/vision/" not in path
        and f"/namespaces/{LEASE_NAMESPACE}/leases" not in path
    }
    assert outside == set()


def test_the_sweeper_process_serves_its_build_and_whether_it_leads_as_metrics(emulator, tmp_path):
    import platform
    import socket
    import urllib.request

    from webhook import __version__

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = kubeconfig(tmp_path / "kubeconfig", emulator.url)
    log = tmp_path / "sweeper.log"
    process = SweeperProcess(config, "sweeper-0", log, f"--metrics-bind=127.0.0.1:{port}")
    try:

        def leading() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as got:
                    text = got.read().decode()
            except OSError:
                return None  # not listening yet
            return text if "trainhook_sweeper_leader 1.0" in text.splitlines() else None

        text = eventually(leading, what="leader metric", timeout=20)
    finally:
        assert process.terminate() == 0
    build = (
        f'trainhook_build_info{{python="{platform.python_version()}",version="{__version__}"}} 1.0'
    )
    assert build in text.splitlines()


def test_a_resume_whose_second_write_fails_does_not_fail_the_job_past_its_old_deadline(
    emulator, kube
):
    # Suspended an hour after it started, with a deadline of ten minutes: only the time since
    # the resume counts.
    suspended = json.dumps(
        {
            "state": "Suspended",
            "reason": "Suspended",
            "message": "",
            "restarts": 0,
            "startTime": "2025-01-01T00:00:00Z",
        },
        separators=(",", ":"),
    )
    settings = {contract.ACTIVE_DEADLINE_SECONDS: "600", contract.STATUS: suspended}
    master, workers, _ = create_pytorch_job(kube, settings)
    for workload, replicas in ((master, 1), (workers, 2)):
        name = workload["metadata"]["name"]
        remembered = {contract.SUSPENDED_REPLICAS: str(replicas)}
        kube.patch(STATEFULSETS, "ml", name, {"metadata": {"annotations": remembered}})
    # The resume's patch of the workers fails once: only the master's lands at first.
    emulator.emulator.fail(500, method="PATCH", path="/statefulsets/pt-worker", times=1)
    with sweeping(kube) as sweeper:
        eventually(
            lambda: all(
                contract.SUSPENDED_REPLICAS not in annotations_on(emulator, STATEFULSETS, n)
                for n in ("pt-master", "pt-worker")
            ),
            what="both workloads resumed",
        )
        sweeper.reconciled("ml", "pt")  # looks after the resume
    failed = [(m, c) for m, p, c, _ in emulator.emulator.log if p.endswith("/pt-worker")]
    assert ("PATCH", 500) in failed
    for name in ("pt-master", "pt-worker"):
        annotations = annotations_on(emulator, STATEFULSETS, name)
        assert contract.PHASE not in annotations  # not Failed: DeadlineExceeded
        status = json.loads(annotations[contract.STATUS])
        assert status["state"] != "Suspended" and status["startTime"] > "2026"
