"""A restart attempt or release on a pod that the sweeper's own record does not account for was
written by someone else: the sweeper acts on none of it, sets the pod back to its record, and
says so once."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from tests.support.stored import pod
from tests.sweeper.test_in_place import STARTED, pytorch, ranked, restarting
from webhook.core import contract
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Delete, Emit, Patch
from webhook.sweeper.job.state import format_time

from .helpers import decision, of_type

RELEASED_AT = {"releasedAt": format_time(STARTED + timedelta(seconds=5))}


def pods_of(master: Any, workers: Any, **marks: Any) -> list[dict[str, Any]]:
    return [ranked(pod(master, 0), **marks), *(ranked(pod(workers, i), **marks) for i in (0, 1))]


def forged(actions: Any) -> list[tuple[str, str]]:
    return [
        (e.involved.name, e.message) for e in of_type(actions, Emit) if e.reason == "ForgedMark"
    ]


def pod_writes(actions: Any) -> dict[str, dict[str, Any]]:
    return {
        p.name: p.patch["metadata"]["annotations"]
        for p in of_type(actions, Patch)
        if p.resource == PODS
    }


def test_a_forged_attempt_on_a_pod_is_set_back_to_the_record_and_said_once() -> None:
    master, workers = pytorch()
    restarting([master, workers], **RELEASED_AT)
    pods = pods_of(master, workers, attempt=1, released=1)
    pods[2]["metadata"]["annotations"][contract.ATTEMPT] = "7"  # the pod restarts, then waits

    actions = decision("pt", [master, workers], pods).actions

    assert forged(actions) == [
        (
            "pt-worker-1",
            "pod pt-worker-1 carries trainhook.io/attempt=7, which the sweeper did not write "
            "(its record: attempt 1, released): ignored, and set back to 1",
        )
    ]
    assert pod_writes(actions) == {"pt-worker-1": {contract.ATTEMPT: "1"}}
    assert of_type(actions, Delete) == []


def test_a_forged_release_before_every_rank_is_back_is_taken_away() -> None:
    master, workers = pytorch()
    restarting([master, workers])  # attempt 1 under way, not released
    pods = pods_of(master, workers, attempt=1, waiting_since=STARTED)
    pods[0] = ranked(pod(master, 0), attempt=1)  # not back at its barrier yet
    pods[1]["metadata"]["annotations"][contract.RELEASED_ATTEMPT] = "1"  # its barrier opens

    actions = decision("pt", [master, workers], pods).actions

    assert forged(actions) == [
        (
            "pt-worker-0",
            "pod pt-worker-0 carries trainhook.io/released-attempt=1, which the sweeper did not "
            "write (its record: attempt 1, not released): ignored, and removed",
        )
    ]
    assert pod_writes(actions) == {"pt-worker-0": {contract.RELEASED_ATTEMPT: None}}


def test_an_attempt_on_a_job_never_restarted_in_place_is_removed() -> None:
    master, workers = pytorch()
    pods = pods_of(master, workers)
    pods[0]["metadata"]["annotations"][contract.ATTEMPT] = "1"
    pods[1]["metadata"]["annotations"][contract.RELEASED_ATTEMPT] = "3"

    actions = decision("pt", [master, workers], pods).actions

    assert [name for name, _ in forged(actions)] == ["pt-master-0", "pt-worker-0"]
    assert forged(actions)[0][1] == (
        "pod pt-master-0 carries trainhook.io/attempt=1, which the sweeper did not write "
        "(its record: no in-place restart): ignored, and removed"
    )
    assert pod_writes(actions) == {
        "pt-master-0": {contract.ATTEMPT: None},
        "pt-worker-0": {contract.RELEASED_ATTEMPT: None},
    }
    assert of_type(actions, Delete) == []


def test_the_sweepers_own_marks_raise_nothing() -> None:
    master, workers = pytorch()
    restarting([master, workers], **RELEASED_AT)
    pods = pods_of(master, workers, attempt=1, released=1)

    actions = decision("pt", [master, workers], pods).actions

    assert forged(actions) == []
    assert pod_writes(actions) == {}


# --- a topology stamp written on a pod after its creation ----------------------------------

REVISION = "controller-revision-hash"
FORGED_STAMP = '{"master":1,"worker":9}'


def rolled_out(workloads: list[dict[str, Any]]) -> None:
    """Each StatefulSet's controller has seen its spec: its pods of `<name>-new` are of the
    current template."""
    for workload in workloads:
        workload["metadata"]["generation"] = 2
        workload["status"] = {
            "observedGeneration": 2,
            "updateRevision": f"{workload['metadata']['name']}-new",
        }


def of_revision(obj: dict[str, Any], revision: str) -> dict[str, Any]:
    obj["metadata"]["labels"][REVISION] = revision
    return obj


def test_a_topology_written_on_a_pod_of_the_current_template_is_set_back_not_restarted() -> None:
    master, workers = pytorch()
    rolled_out([master, workers])
    pods = [of_revision(pod(master, 0), "pt-master-new")]
    pods += [of_revision(pod(workers, i), "pt-worker-new") for i in (0, 1)]
    stamp = pods[2]["metadata"]["annotations"][contract.TOPOLOGY]
    pods[2]["metadata"]["annotations"][contract.TOPOLOGY] = FORGED_STAMP

    actions = decision("pt", [master, workers], pods).actions

    assert of_type(actions, Delete) == []
    assert forged(actions) == [
        (
            "pt-worker-1",
            f"pod pt-worker-1 carries trainhook.io/topology={FORGED_STAMP}, but was created from "
            "StatefulSet pt-worker's current template, whose stamp is "
            f"{stamp}: ignored, and set back",
        )
    ]
    assert pod_writes(actions) == {"pt-worker-1": {contract.TOPOLOGY: stamp}}


def test_a_pod_of_an_older_template_with_another_topology_still_restarts_with_the_job() -> None:
    master, workers = pytorch()
    rolled_out([master, workers])
    pods = [of_revision(pod(master, 0), "pt-master-new")]
    pods += [of_revision(pod(workers, i), "pt-worker-new") for i in (0, 1)]
    old = of_revision(pod(workers, 1, topology=FORGED_STAMP), "pt-worker-old")
    pods[2] = old

    actions = decision("pt", [master, workers], pods).actions

    assert forged(actions) == []
    assert [d.name for d in of_type(actions, Delete)] == ["pt-worker-1"]
