"""Who may write a job's outcome and its creator, and whose job a workload may join: the
authority rules of admission, decided in the core without a server around them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support.builders import bare_pod, indexed_job, statefulset
from webhook.core import contract
from webhook.core.errors import Refused
from webhook.core.mutation.admit import Found, Outcome, Policy, Request, admit

SWEEPER = "system:serviceaccount:trainhook:trainhook-sweeper"
ALICE = "alice"
MALLORY = "mallory"
POLICY = Policy(sweeper_username=SWEEPER)


def annotated(obj: dict[str, Any], **annotations: str) -> dict[str, Any]:
    changed = copy.deepcopy(obj)
    changed["metadata"].setdefault("annotations", {}).update(annotations)
    return changed


def created_by(obj: dict[str, Any], user: str) -> dict[str, Any]:
    return annotated(obj, **{contract.CREATED_BY: user})


def refusal(request: Request, found: Found | None = None) -> str:
    with pytest.raises(Refused) as caught:
        admit(request, found, POLICY)
    return str(caught.value)


def admitted(request: Request, found: Found | None = None) -> Outcome:
    outcome = admit(request, found, POLICY)
    assert outcome is not None
    return outcome


def test_a_tenant_cannot_create_a_pod_carrying_a_phase() -> None:
    pod = annotated(bare_pod("p", "pytorch"), **{contract.PHASE: "Failed"})
    assert refusal(Request("Pod", "CREATE", pod, "ml", username=MALLORY)) == (
        f"{contract.PHASE}: written only by the Trainhook sweeper, which acts on them "
        f"(it runs as {SWEEPER}); remove it from the Pod"
    )


def test_a_tenant_cannot_forge_a_checkpoint_or_progress_the_sweeper_did_not_verify() -> None:
    pod = bare_pod("p", "pytorch")
    forged = annotated(pod, **{contract.LAST_CHECKPOINT: '{"step":900}'})
    assert refusal(Request("Pod", "UPDATE", forged, "ml", old=pod, username=MALLORY)) == (
        f"{contract.LAST_CHECKPOINT}: written only by the Trainhook sweeper, which acts on them "
        f"(it runs as {SWEEPER}); remove it from the Pod"
    )
    workload = statefulset("ddp", "pytorch")
    summary = annotated(workload, **{contract.PROGRESS: "{}", contract.PROGRESS_TEXT: "99%"})
    message = refusal(
        Request("StatefulSet", "UPDATE", summary, "ml", old=workload, username=MALLORY)
    )
    assert message.startswith(f"{contract.PROGRESS}, {contract.PROGRESS_TEXT}: written only by")
    # The sweeper's own write is let through unchanged: admitted, with nothing to patch.
    assert (
        admit(Request("Pod", "UPDATE", forged, "ml", old=pod, username=SWEEPER), None, POLICY)
        is None
    )


def test_a_tenant_cannot_change_the_outcome_the_sweeper_recorded() -> None:
    old = annotated(statefulset("ddp", "pytorch"), **{contract.PHASE: "Running"})
    new = annotated(old, **{contract.PHASE: "Succeeded", contract.FINISHED_AT: "2025-01-01"})
    message = refusal(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=MALLORY))
    assert message.startswith(f"{contract.PHASE}, {contract.FINISHED_AT}: written only by")


def test_nobody_but_the_sweeper_records_the_digest_that_proves_an_mpi_jobs_ssh_keys() -> None:
    # Whoever wrote it could have the job's pods mount keys of their own under <job>-ssh.
    old = created_by(statefulset("hvd-worker", "mpi", role="worker", job="hvd"), ALICE)
    new = annotated(old, **{contract.SSH_KEYS_DIGEST: "0" * 64})
    for user in (MALLORY, ALICE):
        assert refusal(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=user)) == (
            f"{contract.SSH_KEYS_DIGEST}: written only by the Trainhook sweeper, which acts on "
            f"them (it runs as {SWEEPER}); remove it from the StatefulSet"
        )
    launcher = annotated(
        indexed_job("hvd-launcher", "mpi", completions=1, role="launcher", job="hvd"),
        **{contract.SSH_KEYS_DIGEST: "0" * 64},
    )
    message = refusal(Request("Job", "CREATE", launcher, "ml", username=MALLORY))
    assert message.startswith(f"{contract.SSH_KEYS_DIGEST}: written only by the Trainhook sweeper")
    assert admitted(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=SWEEPER))


def test_nobody_but_the_sweeper_records_which_objects_a_jobs_pods_may_mount_ungated() -> None:
    # Whoever wrote it could have the job's next pods mount a ConfigMap or Secret of their own.
    old = created_by(statefulset("pt-worker", "pytorch", role="worker", job="pt"), ALICE)
    new = annotated(old, **{contract.PROVEN_OBJECTS: "ConfigMap/pt-peers-0123456789"})
    for user in (MALLORY, ALICE):
        assert refusal(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=user)) == (
            f"{contract.PROVEN_OBJECTS}: written only by the Trainhook sweeper, which acts on "
            f"them (it runs as {SWEEPER}); remove it from the StatefulSet"
        )
    created = annotated(
        statefulset("pt-master", "pytorch", role="master", job="pt"),
        **{contract.PROVEN_OBJECTS: "Secret/pt-ssh"},
    )
    message = refusal(Request("StatefulSet", "CREATE", created, "ml", username=MALLORY))
    assert message.startswith(f"{contract.PROVEN_OBJECTS}: written only by the Trainhook sweeper")
    assert admitted(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=SWEEPER))


def test_nobody_but_the_sweeper_names_a_jobs_stragglers() -> None:
    # A forged list would have the job's next restart keep its pods off any node named in it.
    old = created_by(statefulset("ddp", "pytorch"), ALICE)
    new = annotated(old, **{contract.STRAGGLERS: '{"flagged":[{"pod":"ddp-0","node":"gpu-1"}]}'})
    for user in (MALLORY, ALICE):
        assert refusal(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=user)) == (
            f"{contract.STRAGGLERS}: written only by the Trainhook sweeper, which acts on "
            f"them (it runs as {SWEEPER}); remove it from the StatefulSet"
        )
    gone = annotated(new, **{contract.CREATED_BY: ALICE})
    del gone["metadata"]["annotations"][contract.STRAGGLERS]
    assert refusal(Request("StatefulSet", "UPDATE", gone, "ml", old=new, username=MALLORY))
    assert admitted(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=SWEEPER))


def test_the_sweeper_may_change_the_outcome_it_records() -> None:
    old = created_by(statefulset("ddp", "pytorch"), ALICE)
    new = annotated(old, **{contract.PHASE: "Succeeded"})
    assert admitted(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=SWEEPER))


def test_an_update_that_leaves_the_outcome_alone_is_anyones() -> None:
    old = created_by(annotated(statefulset("ddp", "pytorch"), **{contract.PHASE: "Running"}), ALICE)
    new = copy.deepcopy(old)
    new["spec"]["replicas"] = 2
    assert admitted(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=ALICE))


def test_a_workload_created_records_its_creator() -> None:
    outcome = admitted(
        Request("StatefulSet", "CREATE", statefulset("ddp", "pytorch"), "ml", username=ALICE)
    )
    assert {
        "op": "add",
        "path": "/metadata/annotations",
        "value": {contract.CREATED_BY: ALICE},
    } in outcome.patch


def test_a_create_naming_another_creator_is_refused() -> None:
    job = created_by(indexed_job("ernie", "paddle", completions=2), ALICE)
    assert refusal(Request("Job", "CREATE", job, "ml", username=MALLORY)) == (
        f"{contract.CREATED_BY}: 'alice' is not the user creating this Job (mallory); "
        "the Trainhook webhook records it, so leave it out"
    )


def test_an_update_may_not_change_the_recorded_creator() -> None:
    old = created_by(statefulset("ddp", "pytorch"), ALICE)
    new = created_by(old, MALLORY)
    assert refusal(Request("StatefulSet", "UPDATE", new, "ml", old=old, username=MALLORY)) == (
        f"{contract.CREATED_BY}: recorded by the Trainhook webhook when the StatefulSet was "
        "created ('alice') and never changed; this update sets 'mallory'"
    )


def test_a_workload_may_not_join_a_job_someone_else_created() -> None:
    victim = created_by(statefulset("victim-master", "pytorch", role="master", job="victim"), ALICE)
    intruder = statefulset("intruder", "pytorch", role="worker", job="victim")
    message = refusal(
        Request("StatefulSet", "CREATE", intruder, "ml", username=MALLORY), Found([victim])
    )
    assert message == (
        f"{contract.JOB}: job 'victim' in namespace ml belongs to alice (StatefulSet "
        "victim-master); StatefulSet intruder was created by mallory: give it its own "
        f"{contract.JOB}"
    )


def test_the_jobs_creator_may_add_workloads_to_it() -> None:
    master = created_by(statefulset("pt-master", "pytorch", role="master", job="pt"), ALICE)
    worker = statefulset("pt-worker", "pytorch", role="worker", job="pt")
    assert admitted(Request("StatefulSet", "CREATE", worker, "ml", username=ALICE), Found([master]))


def unlabelled(obj: dict[str, Any]) -> dict[str, Any]:
    plain = copy.deepcopy(obj)
    del plain["metadata"]["labels"][contract.FRAMEWORK]
    return plain


def test_labelling_an_object_is_judged_as_creating_it_whatever_it_carried_unlabelled() -> None:
    labelled = annotated(
        indexed_job("sneak", "pytorch", completions=2), **{contract.PHASE: "Failed"}
    )
    message = refusal(
        Request("Job", "UPDATE", labelled, "ml", old=unlabelled(labelled), username=MALLORY)
    )
    assert message.startswith(f"{contract.PHASE}: written only by the Trainhook sweeper")


def test_unlabelling_an_object_does_not_let_its_outcome_change() -> None:
    old = created_by(indexed_job("mine", "pytorch", completions=2), MALLORY)
    new = unlabelled(annotated(old, **{contract.PHASE: "Succeeded"}))
    message = refusal(Request("Job", "UPDATE", new, "ml", old=old, username=MALLORY))
    assert message.startswith(f"{contract.PHASE}: written only by the Trainhook sweeper")


def test_a_job_relabelled_into_another_users_job_is_refused() -> None:
    victim = created_by(statefulset("victim-master", "pytorch", role="master", job="victim"), ALICE)
    old = created_by(indexed_job("older", "pytorch", completions=2, job="mine"), MALLORY)
    new = created_by(indexed_job("older", "pytorch", completions=2, job="victim"), MALLORY)
    message = refusal(
        Request("Job", "UPDATE", new, "ml", old=old, username=MALLORY), Found([victim])
    )
    assert message.startswith(f"{contract.JOB}: job 'victim' in namespace ml belongs to alice")


def test_a_labelling_update_records_its_requester_as_the_creator_over_what_it_carried() -> None:
    new = created_by(indexed_job("mine", "pytorch", completions=2), ALICE)
    outcome = admitted(Request("Job", "UPDATE", new, "ml", old=unlabelled(new), username=MALLORY))
    assert outcome.patch == [
        {
            "op": "replace",
            "path": "/metadata/annotations/trainhook.io~1created-by",
            "value": MALLORY,
        }
    ]


def test_a_pod_cannot_be_labelled_into_a_job_after_it_was_created() -> None:
    pod = bare_pod("p", "pytorch")
    message = refusal(Request("Pod", "UPDATE", pod, "ml", old=unlabelled(pod), username=MALLORY))
    assert message.startswith(f"{contract.JOB}: a pod joins a job only when it is created")
