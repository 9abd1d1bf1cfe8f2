"""A tenant who may only create pods tries to make the sweeper act on someone else's job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.stored import _pod, bare_pod, indexed_job, pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import EVENTS, JOBS, PODS, SECRETS, SERVICES, STATEFULSETS
from webhook.sweeper.decide import chain as decide


def names(emulator, resource):
    return [obj["metadata"]["name"] for obj in emulator.objects(resource, "ml")]


def owners(obj):
    return sorted(o["name"] for o in obj["metadata"].get("ownerReferences", []))


def the(emulator, resource, name):
    (found,) = [o for o in emulator.objects(resource, "ml") if o["metadata"]["name"] == name]
    return found


def create_victim(kube):
    (workers,) = stamped(statefulset("victim", framework="pytorch", job="victim", replicas=2))
    workers = kube.create(STATEFULSETS, "ml", workers)
    for index in range(2):
        kube.create(PODS, "ml", pod(workers, index))
    return workers


FORGED = {
    contract.PHASE: "Failed",
    contract.REASON: "Forged",
    contract.FINISHED_AT: "2026-01-01T00:00:00Z",
    contract.TTL_SECONDS_AFTER_FINISHED: "0",
    contract.CLEAN_POD_POLICY: "All",
}


def test_a_forged_bare_pod_claiming_a_job_is_ignored_with_a_warning_and_deletes_nothing(
    emulator, kube
):
    with sweeping(kube) as sweeper:
        create_victim(kube)
        eventually(lambda: names(emulator, SERVICES) == ["victim"], what="the victim's Service")
        forged = bare_pod("intruder", framework="pytorch", job="victim", annotations=dict(FORGED))
        kube.create(PODS, "ml", forged)
        # A stranger's pod, run by a ReplicaSet, labelled with the victim's job.
        stranger = _pod(
            "web-abcde",
            labels={contract.JOB: "victim"},
            annotations={},
            owner=("ReplicaSet", "web", "uid-web"),
            containers=["web"],
            phase="Running",
            exit_code=None,
            last_exit_code=None,
            restarts=0,
            ready=True,
            terminating=False,
        )
        kube.create(PODS, "ml", stranger)
        warnings = eventually(
            lambda: [
                e
                for e in emulator.objects(EVENTS, "ml")
                if e["reason"] == "NotInJob" and e["involvedObject"]["name"] == "intruder"
            ],
            what="a Warning Event on the forged pod",
        )
        sweeper.reconciled("ml", "victim")  # a sweeper that trusted the pod would act on it

    assert warnings[0]["type"] == "Warning"
    assert warnings[0]["message"] == (
        "pod intruder is labelled trainhook.io/job=victim but is not a pod of the job's "
        "workloads (StatefulSet victim); the sweeper ignores it"
    )
    victim = the(emulator, STATEFULSETS, "victim")
    assert contract.PHASE not in (victim["metadata"].get("annotations") or {})
    assert victim["spec"]["replicas"] == 2
    assert names(emulator, SERVICES) == ["victim"]
    assert names(emulator, PODS) == ["intruder", "victim-0", "victim-1", "web-abcde"]


def test_a_foreign_ssh_secret_gets_one_warning_no_create_and_no_secret_is_ever_listed(
    emulator, kube
):
    kube.create(
        SECRETS,
        "ml",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "hvd-ssh", "namespace": "ml"},
            "data": {"config": "SG9zdCAq"},
        },
    )
    launcher, workers = stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd"),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2),
    )
    with sweeping(kube) as sweeper:
        kube.create(JOBS, "ml", launcher)
        kube.create(STATEFULSETS, "ml", workers)
        warnings = eventually(
            lambda: [e for e in emulator.objects(EVENTS, "ml") if e["reason"] == "ForeignSecret"],
            what="a ForeignSecret Warning",
        )
        eventually(lambda: names(emulator, SERVICES) == ["hvd"], what="the job's Service")
        sweeper.reconciled("ml", "hvd")  # reconciles keep coming; none may try to create the Secret

    assert [(e["type"], e["involvedObject"]["name"]) for e in warnings] == [
        ("Warning", "hvd-launcher")
    ]
    assert warnings[0]["message"] == (
        "Secret hvd-ssh was not made by Trainhook for the job (it has no "
        "app.kubernetes.io/managed-by=trainhook label): the job's pods wait "
        "(trainhook.io/waiting-for-owned-objects) and never mount it as their SSH keys; delete "
        "it so the sweeper makes the job's own SSH keys, or rename the job"
    )
    secret_calls = [
        (method, path)
        for method, path, _, _ in emulator.emulator.log
        if "/secrets" in path.split("?")[0]
    ]
    assert ("POST", "/api/v1/namespaces/ml/secrets") not in secret_calls[1:]  # ours was first
    assert {path.split("?")[0] for method, path in secret_calls if method == "GET"} == {
        "/api/v1/namespaces/ml/secrets/hvd-ssh"
    }


def test_a_failing_podgroup_create_neither_holds_back_the_service_nor_deafens_the_job(
    emulator, kube
):
    emulator.emulator.fail(500, method="POST", path="/podgroups", times=1000)
    (workers,) = stamped(
        statefulset(
            "gang",
            framework="pytorch",
            job="gang",
            replicas=2,
            annotations={contract.SCHEDULER: "volcano"},
        )
    )
    with sweeping(kube, backoff_base=5.0):  # a job backing off waits 5 s, then 10 s...
        kube.create(STATEFULSETS, "ml", workers)
        eventually(lambda: names(emulator, SERVICES) == ["gang"], timeout=3, what="Service")
        eventually(  # the job now backs off after its PodGroup failed
            lambda: any(
                method == "POST" and path.endswith("/podgroups")
                for method, path, _, _ in emulator.emulator.log
            ),
            what="a failed PodGroup create",
        )
        before = len(emulator.emulator.log)  # taken first: the sweeper may answer at once
        kube.create(PODS, "ml", pod(the(emulator, STATEFULSETS, "gang"), 0, phase="Failed"))
        # The new pod is news: the job is decided on again at once, not after its backoff.
        eventually(
            lambda: any(
                method == "POST" and path.endswith("/podgroups")
                for method, path, _, _ in emulator.emulator.log[before:]
            ),
            timeout=3,
            what="a fresh attempt after the watch event",
        )


def test_another_users_statefulset_labelled_with_a_job_neither_restamps_nor_deletes_it(
    emulator, kube, monkeypatch
):
    monkeypatch.setattr(decide, "SETTLE", timedelta(0))  # a changed topology is acted on at once
    alice = {contract.CREATED_BY: "alice"}
    chief, workers = stamped(
        statefulset("victim-chief", framework="tensorflow", role="chief", job="victim"),
        statefulset(
            "victim-worker", framework="tensorflow", role="worker", job="victim", replicas=2
        ),
    )
    with sweeping(kube) as sweeper:
        for workload in (chief, workers):
            workload["metadata"]["annotations"].update(alice)
            created = kube.create(STATEFULSETS, "ml", workload)
            for index in range(workload["spec"]["replicas"]):
                kube.create(PODS, "ml", pod(created, index))
        # With no settling time a reconcile that saw only the chief restamps it with the chief
        # alone; the stamp is read once the sweeper has seen both roles and decided again.
        eventually(
            lambda: (
                [owners(s) for s in emulator.objects(SERVICES, "ml")]
                == [["victim-chief", "victim-worker"]]
            ),
            what="the victim's Service owned by both roles",
        )
        sweeper.reconciled("ml", "victim")
        stamp = the(emulator, STATEFULSETS, "victim-chief")["spec"]["template"]["metadata"]
        # Bob's parameter server, created a second later (creationTimestamp counts seconds),
        # labelled with the victim's job and stamped with the topology that includes it.
        newest = the(emulator, STATEFULSETS, "victim-worker")["metadata"]["creationTimestamp"]
        eventually(
            lambda: datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > newest, what="a second"
        )
        hostile = {
            contract.CREATED_BY: "bob",
            contract.TTL_SECONDS_AFTER_FINISHED: "0",
            contract.CLEAN_POD_POLICY: "All",
        }
        *_, evil = stamped(
            chief,
            workers,
            statefulset(
                "evil", framework="tensorflow", role="ps", job="victim", annotations=hostile
            ),
        )
        evil = kube.create(STATEFULSETS, "ml", evil)
        kube.create(PODS, "ml", pod(evil, 0))
        warnings = eventually(
            lambda: [
                e
                for e in emulator.objects(EVENTS, "ml")
                if e["reason"] == "NotInJob" and e["involvedObject"]["name"] == "evil"
            ],
            what="a Warning Event on Bob's StatefulSet",
        )
        sweeper.reconciled("ml", "victim")  # a sweeper that took it in would restamp the victim
        restamped = the(emulator, STATEFULSETS, "victim-chief")["spec"]["template"]["metadata"]
        # The victim's chief succeeds: the job is finished, with no TTL of its own.
        done = pod(the(emulator, STATEFULSETS, "victim-chief"), 0, phase="Succeeded", exit_code=0)
        emulator.merge("/api/v1/namespaces/ml/pods/victim-chief-0", {"status": done["status"]})
        eventually(
            lambda: all(
                (w["metadata"].get("annotations") or {}).get(contract.PHASE) == "Succeeded"
                for w in emulator.objects(STATEFULSETS, "ml")
                if w["metadata"]["name"] != "evil"
            ),
            what="the victim recorded as Succeeded",
        )
        sweeper.reconciled("ml", "victim")  # a TTL of 0 would delete it now

    assert (warnings[0]["type"], warnings[0]["involvedObject"]["kind"]) == (
        "Warning",
        "StatefulSet",
    )
    assert warnings[0]["message"] == (
        "StatefulSet evil is labelled trainhook.io/job=victim but was created by bob, and the job "
        "belongs to alice (StatefulSet victim-chief); the sweeper ignores it"
    )
    assert restamped["annotations"][contract.TOPOLOGY] == stamp["annotations"][contract.TOPOLOGY]
    assert restamped["annotations"][contract.TOPOLOGY] == '{"chief":1,"worker":2}'
    assert names(emulator, STATEFULSETS) == ["evil", "victim-chief", "victim-worker"]
    service = the(emulator, SERVICES, "victim")
    assert owners(service) == ["victim-chief", "victim-worker"]
    left = the(emulator, STATEFULSETS, "evil")
    assert contract.PHASE not in left["metadata"]["annotations"]
    assert left["spec"]["replicas"] == 1
    assert "evil-0" in names(emulator, PODS)


def test_a_legacy_job_with_an_outcome_nobody_judged_is_warned_about_once_and_never_deleted(
    emulator, kube
):
    # Made without the webhook (no creator recorded), carrying an outcome and a TTL of 0.
    (workers,) = stamped(
        statefulset(
            "legacy",
            framework="pytorch",
            job="legacy",
            replicas=2,
            annotations=dict(FORGED),
            creator=None,
        )
    )
    with sweeping(kube) as sweeper:
        workers = kube.create(STATEFULSETS, "ml", workers)
        for index in range(2):
            kube.create(PODS, "ml", pod(workers, index))
        eventually(
            lambda: (
                {e["reason"] for e in emulator.objects(EVENTS, "ml")}
                >= {"NotAttributed", "UnverifiedOutcome"}
            ),
            what="the NotAttributed and UnverifiedOutcome Warnings",
        )
        sweeper.reconciled("ml", "legacy")
        sweeper.reconciled("ml", "legacy")  # a second pass finds its Events posted already
        posts = [
            path
            for method, path, _, _ in emulator.emulator.log
            if method == "POST" and "/events" in path
        ]

    events = sorted((e["reason"], e["type"]) for e in emulator.objects(EVENTS, "ml"))
    assert events == [("NotAttributed", "Warning"), ("UnverifiedOutcome", "Warning")]
    assert len(posts) == 2
    assert names(emulator, STATEFULSETS) == ["legacy"]
    assert the(emulator, STATEFULSETS, "legacy")["spec"]["replicas"] == 2
    assert names(emulator, PODS) == ["legacy-0", "legacy-1"]
