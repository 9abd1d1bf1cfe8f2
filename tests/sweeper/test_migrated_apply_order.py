"""The operators' own example jobs (tests/corpus), migrated, give the same pods whatever order
their workloads are created in: what `trainhook migrate` writes needs no apply order, even for a
job whose first role could run alone (a PyTorch or XGBoost master).

Every job of the corpus with more than one role is created one workload at a time against the
emulator, with the webhook's admission and the sweeper (tests/support/apply_order.py), each
order in its own namespace so that all run at once.

Which orders: both for a job of two roles. For a job of three roles, the three rotations rather
than the six permutations: what a pod may start with depends only on which roles are already
there, and the rotations of three roles pass through every set a job can be missing roles in
(each role alone, each pair), so the other three orders add pods (a MindSpore job has seven)
and no new state. Jobs of one role have no order and are left out.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Sequence
from typing import Any

from tests.support.apply_order import Cluster, apply_one_by_one
from tests.support.emulator import EmulatorThread
from tests.support.sweeping import sweeping
from tests.test_corpus import CASES, migrated
from webhook.core import contract
from webhook.kube.client import Kube

MULTI_ROLE = [name for name in CASES if len(migrated(name)[0]) > 1]


def orders(workloads: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    if len(workloads) <= 2:
        return [list(order) for order in itertools.permutations(workloads)]
    return [[*workloads[start:], *workloads[:start]] for start in range(len(workloads))]


def in_namespace(workload: dict[str, Any], namespace: str) -> dict[str, Any]:
    moved = copy.deepcopy(workload)
    moved["metadata"]["namespace"] = namespace
    return moved


def test_the_corpus_has_multi_role_jobs_of_every_framework_that_has_them() -> None:
    frameworks = {
        migrated(name)[0][0]["metadata"]["labels"][contract.FRAMEWORK] for name in MULTI_ROLE
    }
    assert frameworks == {
        "pytorch",
        "tensorflow",
        "paddle",
        "mindspore",
        "mpi",
        "xgboost",
        "generic",
    }


def test_every_migrated_multi_role_job_runs_as_rendered_in_every_apply_order(
    emulator: EmulatorThread, kube: Kube
) -> None:
    jobs: dict[str, list[dict[str, Any]]] = {}  # "<file> order <n>" -> its workloads, in order
    for number, name in enumerate(MULTI_ROLE):
        workloads = list(migrated(name)[0])
        assert {contract.ROLES in w["metadata"]["annotations"] for w in workloads} == {True}
        for position, order in enumerate(orders(workloads)):
            namespace = f"corpus{number}-order{position}"
            jobs[f"{name} order {position}"] = [in_namespace(w, namespace) for w in order]
    with sweeping(kube):
        apply_one_by_one(Cluster(kube, emulator), jobs)
