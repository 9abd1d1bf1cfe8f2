"""A disruption is seen however fast its pod goes: a pod marked DisruptionTarget and deleted
before the sweeper looked at its job, or already replaced by its controller, still counts as the
disruption it was (a free restart, reported), and a static job does not run on with the
replacement rank it cannot take back."""

from __future__ import annotations

import copy
import json
from datetime import timedelta
from typing import Any

from tests.support.stored import NAMESPACE, pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import STATEFULSETS
from webhook.sweeper.actions import Decision, Delete, Emit, Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.informers import PodTables
from webhook.sweeper.job.podtable import PodTable
from webhook.sweeper.job.state import format_time, read_job_state

from .helpers import NOW

RESTART_JOB = {contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "0"}
KEY = (NAMESPACE, "pt")


def job(settings: dict[str, str] = RESTART_JOB) -> list[dict[str, Any]]:
    return stamped(
        statefulset("pt-master", role="master", job="pt", annotations=settings, rv="41"),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=settings),
    )


def pods_of(workloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    master, workers = workloads
    return [pod(master, 0), pod(workers, 0), pod(workers, 1)]


def preempted(obj: dict[str, Any]) -> dict[str, Any]:
    """The pod as the scheduler leaves it when it preempts it, before deleting it."""
    marked = copy.deepcopy(obj)
    marked["status"]["conditions"].append(
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": "preempted by a higher-priority pod",
        }
    )
    marked["metadata"]["resourceVersion"] = str(int(marked["metadata"]["resourceVersion"]) + 500)
    return marked


def replacement(obj: dict[str, Any], seconds: int = -5) -> dict[str, Any]:
    """The pod its StatefulSet controller creates under the same name once the old one is gone."""
    made = copy.deepcopy(obj)
    made["metadata"]["uid"] = obj["metadata"]["uid"][:-4] + "beef"
    made["metadata"]["creationTimestamp"] = format_time(NOW + timedelta(seconds=seconds))
    made["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 900)
    made["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    return made


def look(workloads: list[dict[str, Any]], table: PodTable, now=NOW) -> Decision:
    return decide(read_job_state(NAMESPACE, "pt", workloads=workloads, pod_table=table), now)


def restarting(made: Decision) -> Emit:
    (event,) = [a for a in made.actions if isinstance(a, Emit) and a.reason == "Restarting"]
    return event


def status_written(made: Decision) -> dict[str, Any]:
    patch = next(a for a in made.actions if isinstance(a, Patch) and a.resource == STATEFULSETS)
    value: dict[str, Any] = json.loads(patch.patch["metadata"]["annotations"][contract.STATUS])
    return value


FREE = (
    "(not counted against the backoff limit: preemption): pod pt-worker-0 was preempted "
    "(DisruptionTarget PreemptionByScheduler); trainhook.io/restart-policy RestartJob rule 1 "
    "(disrupted=any -> restart-job-free)"
)


def test_a_preempted_pod_deleted_before_any_look_restarts_the_job_free_and_is_reported():
    workloads = job()
    pods = pods_of(workloads)
    table = PodTable(pods)
    look(workloads, table)
    table.changed("pt-worker-0", preempted(pods[1]))
    table.changed("pt-worker-0", None)  # deleted with no grace, before the sweeper looked
    made = look(workloads, table)
    event = restarting(made)
    assert event.type == "Normal"
    assert event.message == f"restarting all 2 pod(s) of the job together {FREE}"
    assert [a.name for a in made.actions if isinstance(a, Delete)] == ["pt-master-0", "pt-worker-1"]
    status = status_written(made)
    assert (status["state"], status["reason"], status["restarts"], status["disruptions"]) == (
        "Restarting",
        "Preempted",
        0,
        {"preemption": 1},
    )
    assert made.phase == "Restarting"


def test_a_preempted_pod_already_replaced_by_its_controller_restarts_the_job_with_the_new_rank():
    workloads = job()
    pods = pods_of(workloads)
    table = PodTable(pods)
    look(workloads, table)
    table.changed("pt-worker-0", preempted(pods[1]))
    table.changed("pt-worker-0", None)
    table.changed("pt-worker-0", replacement(pods[1]))
    made = look(workloads, table)
    assert restarting(made).message == f"restarting all 3 pod(s) of the job together {FREE}"
    deleted = [a.name for a in made.actions if isinstance(a, Delete)]
    assert deleted == ["pt-master-0", "pt-worker-0", "pt-worker-1"]  # the new rank too


def test_a_preempted_pod_whose_deletion_the_watch_never_told_still_counts_once_replaced():
    # After a relist, the replacement is all the watch says: a new uid under the old name.
    workloads = job()
    pods = pods_of(workloads)
    table = PodTable(pods)
    table.changed("pt-worker-0", preempted(pods[1]))
    look(workloads, table, NOW - timedelta(seconds=30))
    table.changed("pt-worker-0", replacement(pods[1]))
    made = look(workloads, table)
    assert restarting(made).message == f"restarting all 3 pod(s) of the job together {FREE}"


def test_a_disruption_handed_over_by_the_watches_before_a_look_is_kept():
    workloads = job()
    pods = pods_of(workloads)
    tables = PodTables()
    for obj in pods:
        tables.changed((NAMESPACE, obj["metadata"]["name"]), KEY, obj)
    look(workloads, tables.of(KEY))
    # three events of one pod between two looks: only the last one reaches the table at once
    tables.changed((NAMESPACE, "pt-worker-0"), KEY, preempted(pods[1]))
    tables.changed((NAMESPACE, "pt-worker-0"), None, None)
    tables.changed((NAMESPACE, "pt-worker-0"), KEY, replacement(pods[1]))
    made = look(workloads, tables.of(KEY))
    assert restarting(made).message == f"restarting all 3 pod(s) of the job together {FREE}"


def test_a_disruption_restarts_the_job_once():
    workloads = job()
    pods = pods_of(workloads)
    table = PodTable(pods)
    table.changed("pt-worker-0", preempted(pods[1]))
    table.changed("pt-worker-0", None)
    made = look(workloads, table)
    for action in made.actions:  # the restart's records land, its pods go and come back
        if isinstance(action, Patch):
            (workload,) = [w for w in workloads if w["metadata"]["name"] == action.name]
            workload["metadata"]["annotations"].update(action.patch["metadata"]["annotations"])
            workload["metadata"]["resourceVersion"] += "1"
    for obj in pods:
        table.changed(obj["metadata"]["name"], None)
        table.changed(obj["metadata"]["name"], replacement(obj, seconds=2))
    later = look(workloads, table, NOW + timedelta(seconds=20))
    assert not [a for a in later.actions if isinstance(a, Delete)]
    assert not [a for a in later.actions if isinstance(a, Emit) and a.reason == "Restarting"]
    assert status_written(later)["restarts"] == 0


def test_a_job_that_retries_its_pods_lets_a_preempted_pods_replacement_run():
    workloads = job({})  # OnFailure: Kubernetes replaces the pod, nothing more
    pods = pods_of(workloads)
    table = PodTable(pods)
    table.changed("pt-worker-0", preempted(pods[1]))
    table.changed("pt-worker-0", None)
    table.changed("pt-worker-0", replacement(pods[1]))
    made = look(workloads, table)
    assert not [a for a in made.actions if isinstance(a, Delete)]
    assert made.phase == "Running"


def test_pods_the_sweeper_deletes_itself_are_no_disruption():
    workloads = job()
    pods = pods_of(workloads)
    table = PodTable(pods)
    for obj in pods:
        gone = copy.deepcopy(obj)
        gone["metadata"]["deletionTimestamp"] = format_time(NOW)
        table.changed(obj["metadata"]["name"], gone)
        table.changed(obj["metadata"]["name"], None)
    made = look(workloads, table)
    assert not [a for a in made.actions if isinstance(a, Emit) and a.reason == "Restarting"]
