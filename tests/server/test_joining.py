"""Every route into a job is vetted: an object that becomes labelled, or moves to another job,
is judged as if it were created then, whatever it carried while the webhook could not see it.

The attacker may create and update Jobs and Pods in namespace ml and has no rights on the
victim's objects. An object without `trainhook.io/framework` never reaches the webhook (the
chart's objectSelector), so whatever it carries was never checked until it is labelled."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.reviews import StoredWorkloads, encoded, is_review, patched, review
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to
from webhook.server.reviews import AdmissionResponse

VICTIM = "alice"
ATTACKER = "mallory"
SWEEPER = "system:serviceaccount:trainhook:trainhook-sweeper"
FORGED_OUTCOME = {
    contract.PHASE: "Failed",
    contract.REASON: "BackoffLimitExceeded",
    contract.FINISHED_AT: "2026-01-01T00:00:00Z",
    contract.TTL_SECONDS_AFTER_FINISHED: "0",
    contract.CLEAN_POD_POLICY: "All",
}


def job(name: str, *, labelled_into: str | None, annotations: dict[str, str]) -> dict[str, Any]:
    labels = {"app": name}
    if labelled_into is not None:
        labels |= {contract.FRAMEWORK: "pytorch", contract.JOB: labelled_into}
        labels[contract.ROLE] = "worker"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": labels,
            "annotations": dict(annotations),
            "creationTimestamp": "2025-06-01T00:00:00Z",
        },
        "spec": {
            "completionMode": "Indexed",
            "completions": 2,
            "parallelism": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "pytorch", "image": "trainer:1"}],
                }
            },
        },
    }


def victim_store() -> StoredWorkloads:
    """The victim's job: its master StatefulSet, created by the victim through the webhook."""
    store = StoredWorkloads()
    store.store(
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {
                "name": "victim-master",
                "namespace": "ml",
                "labels": {
                    contract.FRAMEWORK: "pytorch",
                    contract.JOB: "victim",
                    contract.ROLE: "master",
                },
                "annotations": {contract.CREATED_BY: VICTIM},
                "creationTimestamp": "2026-01-01T00:00:00Z",
            },
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "victim-master"}},
                "template": {
                    "metadata": {"labels": {"app": "victim-master"}},
                    "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
                },
            },
        }
    )
    return store


def update(new: dict[str, Any], old: dict[str, Any], username: str = ATTACKER) -> AdmissionResponse:
    document = review(new, namespace="ml", operation="UPDATE", old=old)
    document["request"]["userInfo"] = {"username": username}
    context = Context(lookup=victim_store(), sweeper_username=SWEEPER)
    got = answer_to(encoded(document), "application/json", context)
    assert got.status == 200
    assert is_review(got.body), got.body
    return got.body["response"]


def test_an_unlabelled_job_labelled_into_anothers_job_with_a_forged_outcome_is_refused() -> None:
    forged = FORGED_OUTCOME | {contract.CREATED_BY: VICTIM}
    old = job("sneak", labelled_into=None, annotations=forged)
    new = job("sneak", labelled_into="victim", annotations=forged)

    response = update(new, old)

    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "message": (
            f"{contract.PHASE}, {contract.FINISHED_AT}, {contract.REASON}: written only by the "
            f"Trainhook sweeper, which acts on them (it runs as {SWEEPER}); remove them from the "
            "Job"
        ),
    }


def test_an_unlabelled_job_labelled_into_anothers_job_is_refused_as_a_create_would_be() -> None:
    # No outcome this time, and the victim's name forged as its creator.
    old = job("sneak", labelled_into=None, annotations={contract.CREATED_BY: VICTIM})
    new = job("sneak", labelled_into="victim", annotations={contract.CREATED_BY: VICTIM})

    response = update(new, old)

    assert response["status"]["message"] == (
        f"{contract.JOB}: job 'victim' in namespace ml belongs to {VICTIM} (StatefulSet "
        f"victim-master); Job sneak was created by {ATTACKER}: give it its own {contract.JOB}"
    )


def test_an_older_job_relabelled_into_anothers_job_cannot_take_it_over() -> None:
    # The attacker's own Job, labelled and recorded long before the victim's job existed.
    own = {contract.CREATED_BY: ATTACKER}
    old = job("older", labelled_into="mine", annotations=own)
    new = job("older", labelled_into="victim", annotations=own)

    response = update(new, old)

    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        f"{contract.JOB}: job 'victim' in namespace ml belongs to {VICTIM} (StatefulSet "
        "victim-master); Job older was created by mallory"
    )


def test_a_job_labelled_into_a_job_of_ones_own_records_the_labelling_user_over_a_forged_one() -> (
    None
):
    old = job("mine", labelled_into=None, annotations={contract.CREATED_BY: VICTIM})
    new = job("mine", labelled_into="mine", annotations={contract.CREATED_BY: VICTIM})

    response = update(new, old)

    assert response["allowed"] is True
    assert patched(new, {"response": response})["metadata"]["annotations"] == {
        contract.CREATED_BY: ATTACKER
    }


def test_dropping_the_framework_label_to_set_a_phase_is_refused() -> None:
    own = {contract.CREATED_BY: ATTACKER}
    old = job("mine", labelled_into="mine", annotations=own)
    new = job("mine", labelled_into=None, annotations=own | {contract.PHASE: "Succeeded"})

    response = update(new, old)

    assert response["allowed"] is False
    assert response["status"]["message"].startswith(
        f"{contract.PHASE}: written only by the Trainhook sweeper"
    )


def test_relabelling_an_object_that_carries_a_phase_is_refused_whatever_it_carried_before() -> None:
    # The phase was set while the Job was unlabelled: unchanged by this update, never vetted.
    carried = {contract.CREATED_BY: ATTACKER, contract.PHASE: "Succeeded"}
    old = job("mine", labelled_into=None, annotations=carried)
    new = job("mine", labelled_into="mine", annotations=carried)

    response = update(new, old)

    assert response["status"]["message"].startswith(
        f"{contract.PHASE}: written only by the Trainhook sweeper"
    )


def test_the_sweeper_still_records_an_outcome_on_a_labelled_job() -> None:
    own = {contract.CREATED_BY: VICTIM}
    old = job("victim-worker", labelled_into="victim", annotations=own)
    new = job("victim-worker", labelled_into="victim", annotations=own | {contract.PHASE: "Failed"})

    response = update(new, old, username=SWEEPER)

    assert (response["allowed"], "patch" in response) == (True, False)


def test_a_pod_labelled_into_a_job_after_its_creation_is_refused() -> None:
    old: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "loose", "namespace": "ml", "labels": {"app": "x"}},
        "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
    }
    new = copy.deepcopy(old)
    new["metadata"]["labels"] |= {contract.FRAMEWORK: "pytorch", contract.JOB: "victim"}

    response = update(new, old)

    assert response["status"] == {
        "code": 403,
        "message": (
            f"{contract.JOB}: a pod joins a job only when it is created (its rank and peers are "
            "set then, and a pod's containers cannot change); this update labels it for job "
            "'victim': create a new pod instead"
        ),
    }
