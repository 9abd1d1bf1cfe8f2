"""A job that lacks a role holds its pods: a gate on StatefulSet pods, a suspended Job."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from tests.support.builders import indexed_job, statefulset
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.render import expand

GATE = [{"name": contract.WAITING_FOR_ROLES}]
# An MPI pod mounts the job's SSH Secret: held until the sweeper proves it its own, whatever roles.
OWNED = [{"name": contract.WAITING_FOR_OWNED_OBJECTS}]


def created(
    obj: dict[str, Any], siblings: tuple[dict[str, Any], ...] | list[dict[str, Any]] = ()
) -> tuple[dict[str, Any], list[str]]:
    outcome = admit(Request(obj["kind"], "CREATE", obj, "default"), Found(siblings=siblings))
    assert outcome is not None
    return jsonpatch.apply_patch(obj, outcome.patch), outcome.warnings


def first_pod(workload: dict[str, Any]) -> dict[str, Any]:
    pod = expand(workload, "default")[0]
    pod["metadata"]["ownerReferences"] = [
        {"kind": workload["kind"], "name": workload["metadata"]["name"], "controller": True}
    ]
    return created(pod)[0]


def launcher() -> dict[str, Any]:
    return indexed_job("hv-launcher", "mpi", role="launcher", job="hv", completions=1)


def workers() -> dict[str, Any]:
    return statefulset("hv-worker", "mpi", role="worker", job="hv", replicas=2)


def test_an_mpi_launcher_job_created_before_its_workers_is_created_suspended_and_says_why():
    job, warnings = created(launcher())
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["annotations"][contract.WAITING_FOR_ROLES] == "worker"
    assert warnings == [
        "trainhook.io/waiting-for-roles: Job hv-launcher is created suspended until job hv has "
        "its worker"
    ]


def test_the_launcher_created_after_its_workers_runs_at_once_with_the_whole_job():
    stored, _ = created(workers())
    job, warnings = created(launcher(), [stored])
    assert "suspend" not in job["spec"] and warnings == []
    assert contract.WAITING_FOR_ROLES not in (job["metadata"].get("annotations") or {})
    assert first_pod(job)["spec"]["schedulingGates"] == OWNED


def test_a_job_the_user_suspended_stays_the_users_to_resume():
    mine = launcher()
    mine["spec"]["suspend"] = True
    job, warnings = created(mine)
    assert contract.WAITING_FOR_ROLES not in (job["metadata"].get("annotations") or {})
    assert warnings == []


def test_mpi_workers_created_before_their_launcher_are_gated_then_not_once_it_exists():
    stored, _ = created(workers())
    assert first_pod(stored)["spec"]["schedulingGates"] == GATE + OWNED
    job, _ = created(launcher(), [stored])
    restamped, _ = created(workers(), [job])  # as the sweeper's new stamp leaves the template
    assert first_pod(restamped)["spec"]["schedulingGates"] == OWNED


def test_a_pytorch_master_waits_for_workers_only_when_the_job_names_its_roles():
    alone = statefulset("pt-master", "pytorch", role="master", job="pt")
    assert "schedulingGates" not in first_pod(created(alone)[0])["spec"]
    named = statefulset(
        "pt-master",
        "pytorch",
        role="master",
        job="pt",
        annotations={contract.ROLES: "worker,master"},
    )
    stored, _ = created(named)
    assert first_pod(stored)["spec"]["schedulingGates"] == GATE
    assert stored["spec"]["template"]["metadata"]["annotations"][contract.ROLES] == "worker,master"


def test_a_kueue_gate_already_there_is_kept_beside_the_roles_gate():
    stored, _ = created(workers())
    pod = expand(stored, "default")[0]
    pod["metadata"]["ownerReferences"] = [
        {"kind": "StatefulSet", "name": "hv-worker", "controller": True}
    ]
    pod["spec"]["schedulingGates"] = [{"name": contract.KUEUE_ADMISSION_GATE}]
    gated, _ = created(pod)
    kueue = [{"name": contract.KUEUE_ADMISSION_GATE}]
    assert gated["spec"]["schedulingGates"] == kueue + GATE + OWNED


@pytest.mark.parametrize(
    ("framework", "role", "value", "line"),
    [
        (
            "pytorch",
            "master",
            "master,chief",
            "trainhook.io/roles: invalid value 'master,chief': chief is not a pytorch role: a "
            "comma-separated list of the job's roles (master, worker)",
        ),
        (
            "pytorch",
            "master",
            "master,,worker",
            "trainhook.io/roles: invalid value 'master,,worker': a comma-separated list of the "
            "job's roles (master, worker), each once",
        ),
        (
            "pytorch",
            "master",
            "worker",
            "trainhook.io/roles: invalid value 'worker': the job's roles must include master, the "
            "role of StatefulSet pt-master",
        ),
    ],
)
def test_a_bad_roles_annotation_is_refused_in_one_line(framework, role, value, line):
    obj = statefulset(
        "pt-master", framework, role=role, job="pt", annotations={contract.ROLES: value}
    )
    with pytest.raises(TrainhookError) as refused:
        created(obj)
    assert str(refused.value) == line


def test_roles_that_disagree_between_workloads_are_refused_like_any_job_wide_setting():
    master = statefulset(
        "pt-master", "pytorch", role="master", job="pt", annotations={contract.ROLES: "master"}
    )
    stored, _ = created(master)
    worker = statefulset(
        "pt-worker",
        "pytorch",
        role="worker",
        job="pt",
        annotations={contract.ROLES: "master,worker"},
    )
    with pytest.raises(TrainhookError) as refused:
        created(worker, [stored])
    assert str(refused.value) == (
        "trainhook.io/roles differs between the roles of job pt: master (StatefulSet pt-master) "
        "'master', worker (StatefulSet pt-worker) 'master,worker'; set one value on every "
        "workload of the job (every pod waits for the same roles)"
    )
