"""Any apply order gives the pods `render` shows: the workloads of a job created one by one, in
every order, against the emulator, with the webhook's admission, the StatefulSet and Job
controllers, a kubelet that starts only ungated pods, and the sweeper.

What must hold for every order: no pod ever starts with a world other than the whole job's, the
job says it waits for its roles while one is missing, and in the end every pod has what render
shows for the complete folder.
"""

from __future__ import annotations

import itertools
from typing import Any

from tests.support import builders
from tests.support.apply_order import Cluster, apply_one_by_one
from tests.support.emulator import EmulatorThread
from tests.support.sweeping import sweeping
from webhook.core import contract
from webhook.kube.client import Kube

NAMESPACE = "ml"

# Per framework, its roles as (role, kind, replicas), and whether the job names its roles: where
# each role could run alone (a PyTorch master), only trainhook.io/roles says another is coming.
JOBS_UNDER_TEST: dict[str, tuple[tuple[tuple[str, str, int], ...], bool]] = {
    "mpi": ((("launcher", "Job", 1), ("worker", "StatefulSet", 2)), False),
    "pytorch": ((("master", "StatefulSet", 1), ("worker", "StatefulSet", 2)), True),
    "tensorflow": (
        (("chief", "Job", 1), ("ps", "StatefulSet", 1), ("worker", "StatefulSet", 2)),
        True,
    ),
    "paddle": ((("ps", "StatefulSet", 1), ("worker", "Job", 2)), True),
    "mindspore": ((("scheduler", "Job", 1), ("worker", "StatefulSet", 2)), False),
    "xgboost": ((("master", "StatefulSet", 1), ("worker", "StatefulSet", 2)), True),
    "jax": ((("worker", "Job", 2),), False),
}


def workload(
    framework: str, job: str, role: str, kind: str, replicas: int, named: bool
) -> dict[str, Any]:
    """One role of the job as a user writes it."""
    name = f"{job}-{role}"
    annotations = {contract.ROLES: ",".join(r for r, _, _ in JOBS_UNDER_TEST[framework][0])}
    containers = [{"name": framework, "image": "trainer:1"}]
    if kind == "Job":
        obj = builders.indexed_job(name, framework, role=role, job=job, completions=replicas)
        obj["spec"]["template"]["spec"]["containers"] = containers
    else:
        obj = builders.statefulset(
            name, framework, role=role, job=job, replicas=replicas, containers=containers
        )
    obj["metadata"]["namespace"] = NAMESPACE
    if named:
        obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


def test_every_apply_order_of_every_framework_starts_pods_only_with_the_whole_job(
    emulator: EmulatorThread, kube: Kube
) -> None:
    jobs: dict[str, list[dict[str, Any]]] = {}  # job name -> its workloads in apply order
    for framework, (roles, named) in JOBS_UNDER_TEST.items():
        for number, order in enumerate(itertools.permutations(roles)):
            job = f"{framework[:3]}{number}"
            jobs[job] = [workload(framework, job, *spec, named) for spec in order]
    with sweeping(kube):
        apply_one_by_one(Cluster(kube, emulator), jobs)
