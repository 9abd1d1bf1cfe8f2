"""A pod is in a job only when its controller is one of the job's workloads by uid: a pod that
names the job's StatefulSet by name alone, or under another API, fails, restarts and finishes
nothing of the job, and is said to be outside it once."""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import pytest

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import EVENTS, PODS, STATEFULSETS
from webhook.sweeper.actions import Delete, Emit, Patch

from .helpers import decision, of_type, terminated

RESTART_JOB = {contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "2"}
NEVER = {contract.RESTART_POLICY: "Never"}


def victim(settings: dict[str, str]) -> dict[str, Any]:
    (workers,) = stamped(
        statefulset("victim", framework="pytorch", job="victim", replicas=2, annotations=settings)
    )
    return workers


def forged(owner: dict[str, Any], *, uid: str | None, api_version: str = "apps/v1") -> Any:
    """A pod nobody admitted: the victim's labels copied, claiming the victim's StatefulSet as
    its controller under `uid` (None: no uid at all), its training container exited 1."""
    made = terminated(pod(owner, 1), 1, message="forged")
    made["metadata"]["name"] = "intruder"
    made["metadata"]["uid"] = "00000000-0000-0000-0000-00000000dead"
    (ref,) = made["metadata"]["ownerReferences"]
    ref["apiVersion"] = api_version
    if uid is None:
        del ref["uid"]
    else:
        ref["uid"] = uid
    return made


CLAIMS: dict[str, dict[str, Any]] = {
    "a wrong uid": {"uid": "11111111-2222-3333-4444-555555555555"},
    "no uid": {"uid": None},
    "another API's StatefulSet": {"uid": "same", "api_version": "example.com/v1"},
}


@pytest.mark.parametrize("claim", list(CLAIMS), ids=list(CLAIMS))
@pytest.mark.parametrize("settings", [RESTART_JOB, NEVER], ids=["RestartJob", "Never"])
def test_a_pod_claiming_the_jobs_statefulset_without_its_uid_neither_fails_nor_restarts_it(
    claim: str, settings: dict[str, str]
) -> None:
    workers = victim(settings)
    how: dict[str, Any] = dict(CLAIMS[claim])
    if how["uid"] == "same":
        how["uid"] = workers["metadata"]["uid"]
    pods = [pod(workers, 0), pod(workers, 1), forged(workers, **how)]

    actions = decision("victim", [workers], pods, records=True).actions

    assert of_type(actions, Delete) == []
    assert [p for p in of_type(actions, Patch) if p.patch.get("spec")] == []
    status = [p for p in of_type(actions, Patch) if contract.STATUS in str(p.patch)]
    assert all('"Failed"' not in str(p.patch) and "Restarting" not in str(p.patch) for p in status)
    (warning,) = [a for a in of_type(actions, Emit) if a.reason == "NotInJob"]
    assert (warning.type, warning.involved.name) == ("Warning", "intruder")
    why = "" if "API" in claim else ": its controller is not one of them by uid"
    assert warning.message == (
        "pod intruder is labelled trainhook.io/job=victim but is not a pod of the job's "
        f"workloads (StatefulSet victim){why}; the sweeper ignores it"
    )


def test_the_jobs_own_failed_pod_still_restarts_it() -> None:
    workers = victim(RESTART_JOB)
    pods = [pod(workers, 0), terminated(pod(workers, 1), 1, message="NCCL error")]

    actions = decision("victim", [workers], pods, records=True).actions

    (restart,) = [a for a in of_type(actions, Emit) if a.reason == "Restarting"]
    assert "pod victim-1: container pytorch exited with code 1" in restart.message


def test_a_pod_of_the_job_without_the_webhooks_job_label_is_not_in_it() -> None:
    workers = victim(NEVER)
    unstamped = terminated(pod(workers, 1), 1)
    del unstamped["metadata"]["labels"][contract.JOB]
    unstamped["metadata"]["labels"][contract.FRAMEWORK] = "pytorch"
    unstamped["metadata"]["name"] = "victim"  # the name the job is found by without the label

    actions = decision("victim", [workers], [pod(workers, 0), unstamped], records=True).actions

    (warning,) = [a for a in of_type(actions, Emit) if a.reason == "NotInJob"]
    assert warning.message == (
        "pod victim names job victim but is not a pod of the job's workloads (StatefulSet "
        "victim): it lacks the trainhook.io/job label the webhook gives the pods it admits into "
        "the job; the sweeper ignores it"
    )
    assert of_type(actions, Delete) == []


def name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def warned(emulator: Any, pod_name: str) -> list[Any]:
    return [
        e
        for e in emulator.objects(EVENTS, "ml")
        if e["reason"] == "NotInJob" and e["involvedObject"]["name"] == pod_name
    ]


def test_a_forged_pod_exiting_1_against_the_live_sweeper_restarts_and_fails_nothing(
    emulator: Any, kube: Any
) -> None:
    with sweeping(kube) as sweeper:
        for job, settings in (("victim", RESTART_JOB), ("other", NEVER)):
            (workers,) = stamped(
                statefulset(job, framework="pytorch", job=job, replicas=2, annotations=settings)
            )
            workers = kube.create(STATEFULSETS, "ml", workers)
            for index in range(2):
                kube.create(PODS, "ml", pod(workers, index))
            attacker = forged(workers, uid="11111111-2222-3333-4444-555555555555")
            attacker["metadata"]["name"] = f"{job}-intruder"
            del attacker["metadata"]["uid"]
            kube.create(PODS, "ml", copy.deepcopy(attacker))
        for job in ("victim", "other"):
            eventually(partial(warned, emulator, f"{job}-intruder"), what=f"a Warning in {job}")
            sweeper.reconciled("ml", job)

    for job in ("victim", "other"):
        (workload,) = [
            s for s in emulator.objects(STATEFULSETS, "ml") if s["metadata"]["name"] == job
        ]
        annotations = workload["metadata"].get("annotations") or {}
        assert annotations.get(contract.PHASE) is None, job
        assert "Restarting" not in (annotations.get(contract.STATUS) or ""), job
        assert workload["spec"]["replicas"] == 2
        pods = sorted(p["metadata"]["name"] for p in emulator.objects(PODS, "ml"))
        assert f"{job}-0" in pods and f"{job}-1" in pods  # none deleted for a restart
    reasons = [e["reason"] for e in emulator.objects(EVENTS, "ml")]
    assert "Restarting" not in reasons and "BackoffLimitExceeded" not in reasons
    assert reasons.count("NotInJob") == 2
