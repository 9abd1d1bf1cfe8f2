"""A stored sibling is read once per resourceVersion: a changed one (a new version) is read anew,
and one the lookup has never stored (no version) is read every time."""

from __future__ import annotations

import copy
from typing import Any

from tests.support.builders import statefulset
from webhook.core import contract
from webhook.core.mutation.workload_mutation import mutate_workload


def stored(workload: dict[str, Any], version: str) -> dict[str, Any]:
    workload = copy.deepcopy(workload)
    workload["metadata"] |= {
        "uid": f"uid-{workload['metadata']['name']}",
        "resourceVersion": version,
    }
    return workload


def stamped_counts(worker: dict[str, Any], siblings: list[dict[str, Any]]) -> str:
    mutated = mutate_workload(worker, "CREATE", "default", siblings).workload
    return str(mutated["spec"]["template"]["metadata"]["annotations"][contract.TOPOLOGY])


MASTER = statefulset("pt-master", "pytorch", role="master", job="pt")
WORKER = statefulset("pt-worker", "pytorch", role="worker", job="pt", replicas=3)


def test_a_sibling_changed_under_a_new_resource_version_is_read_anew() -> None:
    master = stored(MASTER, "100")
    assert stamped_counts(WORKER, [master]) == '{"master":1,"worker":3}'

    suspended = stored(MASTER, "101")
    suspended["spec"]["replicas"] = 0

    assert stamped_counts(WORKER, [suspended]) == '{"worker":3}'
    assert stamped_counts(WORKER, [master]) == '{"master":1,"worker":3}'


def test_a_sibling_without_a_resource_version_is_read_every_time() -> None:
    master = copy.deepcopy(MASTER)
    assert stamped_counts(WORKER, [master]) == '{"master":1,"worker":3}'

    master["spec"]["replicas"] = 0

    assert stamped_counts(WORKER, [master]) == '{"worker":3}'
