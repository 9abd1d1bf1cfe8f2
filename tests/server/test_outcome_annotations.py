"""Only the sweeper writes the outcome it acts on: phase, finished-at and reason."""

from __future__ import annotations

import copy
from typing import Any

from tests.support import builders
from tests.support.reviews import encoded, is_review, patched, review
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to
from webhook.server.reviews import AdmissionResponse

SWEEPER = "system:serviceaccount:trainhook:trainhook-sweeper"
TENANT = "system:serviceaccount:ml:default"
CONTEXT = Context(sweeper_username=SWEEPER)


def statefulset(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    made = builders.statefulset(
        "ddp", "pytorch", replicas=2, namespace="ml", image="t", selector=False
    )
    made["metadata"]["annotations"] = annotations or {}
    return made


def forged_pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "intruder",
            "namespace": "ml",
            "labels": {contract.FRAMEWORK: "pytorch", contract.JOB: "victim"},
            "annotations": {contract.PHASE: "Failed", contract.TTL_SECONDS_AFTER_FINISHED: "0"},
        },
        "spec": {"containers": [{"name": "pytorch", "image": "t"}]},
    }


def answer(
    document: dict[str, Any], username: str, context: Context = CONTEXT
) -> AdmissionResponse:
    document["request"]["userInfo"] = {"username": username}
    got = answer_to(encoded(document), "application/json", context)
    assert got.status == 200
    assert is_review(got.body), got.body
    return got.body["response"]


def test_a_pod_created_with_a_phase_is_refused_naming_the_key() -> None:
    response = answer(review(forged_pod(), namespace="ml"), TENANT)

    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "message": f"trainhook.io/phase: written only by the Trainhook sweeper, which acts on "
        f"them (it runs as {SWEEPER}); remove it from the Pod",
    }


def test_without_a_configured_sweeper_user_a_created_phase_is_still_refused() -> None:
    response = answer(review(forged_pod(), namespace="ml"), TENANT, Context())

    assert response["status"]["message"] == (
        "trainhook.io/phase: written only by the Trainhook sweeper, which acts on them (it never "
        "creates objects with them); remove it from the Pod"
    )


def test_an_update_that_changes_the_phase_is_refused_unless_the_sweeper_sends_it() -> None:
    old = statefulset()
    new = statefulset({contract.PHASE: "Failed", contract.REASON: "Forged"})

    by_tenant = answer(review(copy.deepcopy(new), operation="UPDATE", old=old), TENANT)
    by_sweeper = answer(review(copy.deepcopy(new), operation="UPDATE", old=old), SWEEPER)

    assert by_tenant["allowed"] is False
    assert by_tenant["status"]["message"] == (
        f"trainhook.io/phase, trainhook.io/reason: written only by the Trainhook sweeper, which "
        f"acts on them (it runs as {SWEEPER}); remove them from the StatefulSet"
    )
    assert by_sweeper["allowed"] is True


def test_an_update_that_keeps_the_recorded_phase_is_allowed_from_anyone() -> None:
    recorded = statefulset({contract.PHASE: "Succeeded"})
    scaled = copy.deepcopy(recorded)
    scaled["spec"]["replicas"] = 0

    response = answer(review(scaled, operation="UPDATE", old=recorded), TENANT)

    assert response["allowed"] is True


def indexed_job(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    job = statefulset(annotations)
    job["apiVersion"], job["kind"] = "batch/v1", "Job"
    job["spec"] = {
        "completionMode": "Indexed",
        "completions": 2,
        "parallelism": 2,
        "template": job["spec"]["template"],
    }
    return job


def test_a_tenant_who_marks_a_job_or_a_pod_failed_by_an_update_is_refused() -> None:
    job = indexed_job()
    pod = forged_pod()
    pod["metadata"]["annotations"] = {}
    marked_job = indexed_job({contract.PHASE: "Failed"})
    marked_pod = copy.deepcopy(pod)
    marked_pod["metadata"]["annotations"] = {contract.PHASE: "Failed"}

    for old, new in ((job, marked_job), (pod, marked_pod)):
        response = answer(review(copy.deepcopy(new), operation="UPDATE", old=old), TENANT)
        assert (response["allowed"], response["status"]["message"]) == (
            False,
            f"trainhook.io/phase: written only by the Trainhook sweeper, which acts on them "
            f"(it runs as {SWEEPER}); remove it from the {new['kind']}",
        )


def test_any_other_update_of_a_labelled_pod_is_allowed_unchanged() -> None:
    pod = forged_pod()
    pod["metadata"]["annotations"] = {}
    relabelled = copy.deepcopy(pod)
    relabelled["metadata"]["labels"]["team"] = "vision"

    response = answer(review(relabelled, operation="UPDATE", old=pod), TENANT)

    assert response["allowed"] is True
    assert "patch" not in response


def test_a_tenant_who_forges_a_recorded_success_or_failure_count_is_refused() -> None:
    old = statefulset({contract.FAILED_RUNS: '{"gone":5,"pods":{}}'})
    new = statefulset({contract.SUCCEEDED: "0-1", contract.FAILED_RUNS: '{"gone":0,"pods":{}}'})

    by_tenant = answer(review(copy.deepcopy(new), operation="UPDATE", old=old), TENANT)
    by_sweeper = answer(review(copy.deepcopy(new), operation="UPDATE", old=old), SWEEPER)

    assert by_tenant["status"]["message"] == (
        "trainhook.io/succeeded, trainhook.io/failed-runs: written only by the Trainhook sweeper, "
        f"which acts on them (it runs as {SWEEPER}); remove them from the StatefulSet"
    )
    assert by_sweeper["allowed"] is True


def test_the_phase_label_is_the_sweepers_too_and_its_update_rolls_no_pod() -> None:
    old = statefulset()
    labelled = statefulset()
    labelled["metadata"]["labels"][contract.PHASE] = "Succeeded"

    by_tenant = answer(review(copy.deepcopy(labelled), operation="UPDATE", old=old), TENANT)
    by_sweeper = answer(review(copy.deepcopy(labelled), operation="UPDATE", old=old), SWEEPER)
    created = answer(review(copy.deepcopy(labelled), namespace="ml"), TENANT)

    assert by_tenant["allowed"] is False
    assert by_tenant["status"]["message"] == (
        f"label trainhook.io/phase: written only by the Trainhook sweeper, which acts on them "
        f"(it runs as {SWEEPER}); remove it from the StatefulSet"
    )
    assert created["allowed"] is False
    assert by_sweeper["allowed"] is True
    stored = patched(labelled, {"response": by_sweeper})
    assert contract.PHASE not in stored["spec"]["template"]["metadata"]["labels"]
