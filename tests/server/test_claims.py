"""A workload may not join a job that someone else created: the webhook records every workload's
creator and refuses a workload created in another user's job."""

from __future__ import annotations

import copy
from typing import Any

from tests.support import builders
from tests.support.reviews import StoredWorkloads, encoded, is_review, patched, review
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to
from webhook.server.reviews import AdmissionResponse

ARGOCD = "system:serviceaccount:argocd:argocd-application-controller"
ALICE = "alice"


def statefulset(
    name: str,
    role: str,
    *,
    job: str = "victim",
    annotations: dict[str, str] | None = None,
    created: str | None = None,
) -> dict[str, Any]:
    made = builders.statefulset(
        name,
        "pytorch",
        role=role,
        job=job,
        namespace="ml",
        created=created,
        labelled_template=True,
    )
    if annotations is not None:
        made["metadata"]["annotations"] = annotations
    return made


def answer(
    obj: dict[str, Any],
    username: str,
    *,
    store: StoredWorkloads | None = None,
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> AdmissionResponse:
    document = review(obj, namespace="ml", operation=operation, old=old)
    document["request"]["userInfo"] = {"username": username}
    got = answer_to(encoded(document), "application/json", Context(lookup=store))
    assert got.status == 200
    assert is_review(got.body), got.body
    return got.body["response"]


def victim_store() -> StoredWorkloads:
    """The job `victim`: its master, created by Argo CD."""
    store = StoredWorkloads()
    creator = {contract.CREATED_BY: ARGOCD}
    master = statefulset(
        "victim-master", "master", annotations=creator, created="2026-01-01T00:00:00Z"
    )
    store.store(master)
    return store


def test_a_created_workload_records_the_requesting_user_as_its_creator() -> None:
    obj = statefulset("ddp", "worker", job="ddp")

    response = answer(obj, ALICE)

    assert response["allowed"] is True
    assert patched(obj, {"response": response})["metadata"]["annotations"] == {
        contract.CREATED_BY: ALICE
    }


def test_the_webhook_called_again_on_its_own_answer_changes_nothing() -> None:
    obj = statefulset("ddp", "worker", job="ddp")
    once = patched(obj, {"response": answer(obj, ALICE)})

    again = answer(copy.deepcopy(once), ALICE)

    assert again["allowed"] is True
    assert patched(once, {"response": again}) == once


def test_a_workload_created_with_someone_elses_name_as_its_creator_is_refused() -> None:
    obj = statefulset("evil", "worker", job="evil", annotations={contract.CREATED_BY: ARGOCD})

    response = answer(obj, ALICE)

    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "message": f"trainhook.io/created-by: '{ARGOCD}' is not the user creating this "
        "StatefulSet (alice); the Trainhook webhook records it, so leave it out",
    }


def test_an_update_that_changes_or_removes_the_creator_is_refused_one_keeping_it_is_not() -> None:
    old = statefulset("ddp", "worker", job="ddp", annotations={contract.CREATED_BY: ALICE})
    changed = statefulset("ddp", "worker", job="ddp", annotations={contract.CREATED_BY: ARGOCD})
    removed = statefulset("ddp", "worker", job="ddp", annotations={})
    kept = copy.deepcopy(old)
    kept["spec"]["replicas"] = 3

    assert answer(changed, ARGOCD, operation="UPDATE", old=old)["status"]["message"] == (
        "trainhook.io/created-by: recorded by the Trainhook webhook when the StatefulSet was "
        f"created ('alice') and never changed; this update sets '{ARGOCD}'"
    )
    assert answer(removed, ALICE, operation="UPDATE", old=old)["status"]["message"] == (
        "trainhook.io/created-by: recorded by the Trainhook webhook when the StatefulSet was "
        "created ('alice') and never changed; this update removes it"
    )
    assert answer(kept, ARGOCD, operation="UPDATE", old=old)["allowed"] is True


def test_a_job_set_to_a_creator_on_update_is_refused_even_on_a_job_that_had_none() -> None:
    old = statefulset("legacy", "worker", job="legacy")
    new = statefulset("legacy", "worker", job="legacy", annotations={contract.CREATED_BY: ALICE})

    response = answer(new, ALICE, operation="UPDATE", old=old)

    assert response["status"]["message"] == (
        "trainhook.io/created-by: recorded by the Trainhook webhook when the StatefulSet was "
        "created (none recorded) and never changed; this update sets 'alice'"
    )


def test_a_workload_created_in_a_job_another_user_created_is_refused_naming_the_owner() -> None:
    response = answer(statefulset("evil", "worker"), ALICE, store=victim_store())

    assert response["allowed"] is False
    assert response["status"] == {
        "code": 403,
        "message": f"trainhook.io/job: job 'victim' in namespace ml belongs to {ARGOCD} "
        "(StatefulSet victim-master); StatefulSet evil was created by alice: give it its own "
        "trainhook.io/job",
    }


def test_the_jobs_creator_adds_a_role_and_an_unrecorded_sibling_claims_nothing() -> None:
    store = victim_store()
    assert answer(statefulset("victim-worker", "worker"), ARGOCD, store=store)["allowed"] is True

    legacy = StoredWorkloads()
    legacy.store(statefulset("old-master", "master", job="old", created="2025-01-01T00:00:00Z"))
    joined = answer(statefulset("old-worker", "worker", job="old"), ALICE, store=legacy)
    assert joined["allowed"] is True
    assert patched(statefulset("old-worker", "worker", job="old"), {"response": joined})[
        "metadata"
    ]["annotations"] == {contract.CREATED_BY: ALICE}


def test_the_oldest_recorded_creator_owns_the_job_whatever_joined_after_it() -> None:
    store = victim_store()
    # A workload of another user that reached the job anyway (the lookup was unreachable then);
    # its name sorts first, its creation comes later.
    stray = {contract.CREATED_BY: ALICE}
    store.store(
        statefulset("aaa-stray", "worker", annotations=stray, created="2026-01-01T00:02:00Z")
    )

    refused = answer(statefulset("evil", "worker"), "bob", store=store)

    assert refused["status"]["message"] == (
        f"trainhook.io/job: job 'victim' in namespace ml belongs to {ARGOCD} (StatefulSet "
        "victim-master); StatefulSet evil was created by bob: give it its own trainhook.io/job"
    )


def test_a_workload_relabelled_into_another_users_job_is_refused_as_a_create_would_be() -> None:
    # Even with the owner's name in the record (rewritten while the workload was unlabelled,
    # out of the webhook's sight), the relabel is judged by who sends it.
    old = statefulset("evil", "worker", job="mine", annotations={contract.CREATED_BY: ARGOCD})
    new = statefulset("evil", "worker", annotations={contract.CREATED_BY: ARGOCD})

    response = answer(new, ALICE, store=victim_store(), operation="UPDATE", old=old)

    assert response["status"]["message"] == (
        f"trainhook.io/job: job 'victim' in namespace ml belongs to {ARGOCD} (StatefulSet "
        "victim-master); StatefulSet evil was created by alice: give it its own trainhook.io/job"
    )


def test_an_update_of_the_job_leaves_a_workload_another_user_slipped_in_out_of_its_topology() -> (
    None
):
    store = victim_store()
    stray = {contract.CREATED_BY: ALICE}
    store.store(statefulset("evil", "worker", annotations=stray, created="2026-01-01T00:02:00Z"))
    old = statefulset(
        "victim-master",
        "master",
        annotations={contract.CREATED_BY: ARGOCD},
        created="2026-01-01T00:00:00Z",
    )
    new = copy.deepcopy(old)
    new["spec"]["template"]["spec"]["containers"][0]["image"] = "trainer:2"

    response = answer(new, ARGOCD, store=store, operation="UPDATE", old=old)

    template = patched(new, {"response": response})["spec"]["template"]["metadata"]
    assert template["annotations"][contract.TOPOLOGY] == '{"master":1}'
