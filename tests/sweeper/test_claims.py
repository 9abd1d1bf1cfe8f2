"""A workload another user labelled with a job is not part of it: the job is its first creator's."""

from __future__ import annotations

from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.actions import Emit, ObjectRef

from .helpers import decision

ALICE = "system:serviceaccount:argocd:argocd-application-controller"
BOB = "bob"
HOSTILE = {
    contract.TTL_SECONDS_AFTER_FINISHED: "0",
    contract.CLEAN_POD_POLICY: "All",
    contract.RESTART_POLICY: "ExitCode",
}


def created(obj: dict[str, Any], by: str | None, at: str) -> dict[str, Any]:
    obj["metadata"]["annotations"].pop(contract.CREATED_BY, None)
    if by is not None:
        obj["metadata"]["annotations"][contract.CREATED_BY] = by
    obj["metadata"]["creationTimestamp"] = at
    return obj


def victim(chief_by: str | None = ALICE) -> list[dict[str, Any]]:
    """A TensorFlow job of a chief and two workers, stamped as the webhook left them."""
    chief, workers = stamped(
        statefulset("victim-chief", framework="tensorflow", role="chief", job="victim"),
        statefulset(
            "victim-worker", framework="tensorflow", role="worker", job="victim", replicas=2
        ),
    )
    return [
        created(chief, chief_by, "2025-01-01T00:00:00Z"),
        created(workers, ALICE, "2025-01-01T00:00:01Z"),
    ]


def attacker(name: str = "evil", at: str = "2025-01-01T00:00:30Z") -> dict[str, Any]:
    """A parameter server Bob labelled with the victim's job: stamped with a topology that
    includes itself, and lifecycle settings the victim's workloads do not set."""
    _chief, _workers, evil = stamped(
        *victim(),
        statefulset(name, framework="tensorflow", role="ps", job="victim", annotations=HOSTILE),
    )
    return created(evil, BOB, at)


def pods(chief: dict[str, Any], workers: dict[str, Any], chief_exit: int | None) -> list[Any]:
    phase = "Succeeded" if chief_exit == 0 else "Running"
    return [
        pod(chief, 0, phase=phase, exit_code=chief_exit),
        pod(workers, 0),
        pod(workers, 1),
    ]


def warning(evil: dict[str, Any], owner: str = "StatefulSet victim-chief") -> Emit:
    name = evil["metadata"]["name"]
    message = (
        f"StatefulSet {name} is labelled trainhook.io/job=victim but was created by bob, and "
        f"the job belongs to {ALICE} ({owner}); the sweeper ignores it"
    )
    (emit,) = [
        a
        for a in decision("victim", [*victim(), evil], []).actions
        if isinstance(a, Emit) and a.reason == "NotInJob"
    ]
    assert emit.involved == ObjectRef("apps/v1", "StatefulSet", name, evil["metadata"]["uid"])
    assert (emit.type, emit.message) == ("Warning", message)
    return emit


def test_a_running_job_joined_by_another_users_workload_is_decided_as_if_it_were_not_there() -> (
    None
):
    chief, workers = victim()
    evil = attacker()
    running = [*pods(chief, workers, None), pod(evil, 0)]

    joined = decision("victim", [chief, workers, evil], running).actions
    alone = decision("victim", [chief, workers], running[:3]).actions

    assert joined == (warning(evil), *alone)


def test_a_finished_job_takes_no_ttl_or_clean_pod_policy_from_another_users_workload() -> None:
    chief, workers = victim()
    evil = attacker()
    finished = [*pods(chief, workers, 0), pod(evil, 0)]

    joined = decision("victim", [chief, workers, evil], finished).actions
    alone = decision("victim", [chief, workers], finished[:3]).actions

    assert joined == (warning(evil), *alone)
    touched = {getattr(action, "name", "") for action in joined if not isinstance(action, Emit)}
    assert touched and not touched & {"evil", "evil-0"}


def test_a_workload_created_before_creators_were_recorded_stays_in_the_job() -> None:
    chief, workers = victim(chief_by=None)
    evil = attacker()

    joined = decision("victim", [chief, workers, evil], pods(chief, workers, None)).actions
    alone = decision("victim", [chief, workers], pods(chief, workers, None)).actions

    assert joined[1:] == alone
    assert isinstance(joined[0], Emit)
    assert joined[0].message.endswith(
        f"the job belongs to {ALICE} (StatefulSet victim-worker); the sweeper ignores it"
    )


def test_workloads_created_in_the_same_second_belong_to_the_first_by_name() -> None:
    chief, workers = victim()
    early = attacker("aaa-evil", at="2025-01-01T00:00:00Z")

    actions = decision("victim", [chief, workers, early], []).actions

    # creationTimestamp has whole seconds: in a tie, the name decides.
    notices = [a for a in actions if isinstance(a, Emit) and a.reason == "NotInJob"]
    assert [a.involved.name for a in notices] == ["victim-chief", "victim-worker"]
    assert notices[0].message == (
        f"StatefulSet victim-chief is labelled trainhook.io/job=victim but was created by {ALICE}, "
        "and the job belongs to bob (StatefulSet aaa-evil); the sweeper ignores it"
    )


def test_a_workload_without_a_recorded_creator_in_a_claimed_job_is_kept_and_said_so() -> None:
    chief, workers = victim(chief_by=None)

    actions = decision("victim", [chief, workers], pods(chief, workers, None)).actions

    notices = [a for a in actions if isinstance(a, Emit) and a.reason == "NotAttributed"]
    assert [(a.type, a.involved.name) for a in notices] == [("Warning", "victim-chief")]
    assert notices[0].message == (
        "StatefulSet victim-chief is labelled trainhook.io/job=victim but records no creator "
        "(trainhook.io/created-by): the webhook did not admit it into the job, which belongs to "
        f"{ALICE} (it was made before creators were recorded, or while the webhook was not "
        "asked); the sweeper manages it with the job but acts on no outcome recorded on it (no "
        "pod cleanup, scale-down or deletion): recreate it to have it attributed"
    )
    recorded_chief, recorded_workers = victim()
    every = decision(
        "victim", [recorded_chief, recorded_workers], pods(recorded_chief, recorded_workers, None)
    ).actions
    assert not [a for a in every if isinstance(a, Emit) and a.reason == "NotAttributed"]
