"""A pod whose StatefulSet records the sweeper's proof of every object it mounts is admitted
without the owned-objects gate, so a large job's start costs no patch per pod; any other pod
waits for the sweeper to lift the gate, as before."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support import builders
from tests.support.reviews import StoredWorkloads, encoded, patched, pods_of, review
from tests.support.stored import indexed_job, stamped, statefulset
from webhook.core import contract
from webhook.core.mutation.owned_objects import (
    needed_objects,
    proof_record,
    proven_objects,
    workload_controller,
)
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.render import expand
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to

JSON = "application/json"
OWNED_GATE = {"name": contract.WAITING_FOR_OWNED_OBJECTS}


def large_job() -> tuple[StoredWorkloads, dict[str, Any]]:
    """A PyTorch job of 101 pods (its lists in a peers ConfigMap), admitted and stored; its
    worker StatefulSet."""
    store = StoredWorkloads()
    for name, role, replicas in (("pt-master", "master", 1), ("pt-worker", "worker", 100)):
        workload = builders.statefulset(
            name,
            "pytorch",
            role=role,
            job="pt",
            replicas=replicas,
            namespace="ml",
            labelled_template=True,
        )
        workload["metadata"]["uid"] = f"uid-{name}"
        store.store(workload)
    for workload in list(store.objects.values()):  # each stamped with the whole job
        answer = answer_to(encoded(review(workload, namespace="ml")), JSON, Context(lookup=store))
        store.store(patched(workload, answer.body))
    return store, store.objects[("ml", "StatefulSet", "pt-worker")]


def controlled(workload: dict[str, Any], index: int, uid: str | None = None) -> dict[str, Any]:
    """Pod `index` of `workload` as its StatefulSet controller sends it to admission."""
    pod = pods_of(workload)[index]
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": workload["metadata"]["name"],
            "uid": uid or workload["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    return pod


def admitted(pod: dict[str, Any], store: StoredWorkloads | None) -> dict[str, Any]:
    answer = answer_to(encoded(review(pod, namespace="ml")), JSON, Context(lookup=store))
    assert answer.status == 200
    return patched(pod, answer.body)


def peers_of(pod: dict[str, Any]) -> str:
    (name,) = [v["configMap"]["name"] for v in pod["spec"]["volumes"] if "configMap" in v]
    return str(name)


def record(store: StoredWorkloads, value: str) -> None:
    for workload in store.objects.values():
        workload["metadata"].setdefault("annotations", {})[contract.PROVEN_OBJECTS] = value


def test_a_pod_created_before_the_proof_waits_for_the_sweeper_to_lift_its_gate() -> None:
    store, workers = large_job()
    pod = admitted(controlled(workers, 0), store)
    assert pod["spec"]["schedulingGates"] == [OWNED_GATE]
    assert peers_of(pod).startswith("pt-peers-")


def test_a_pod_created_once_its_configmap_is_recorded_proven_starts_without_the_gate() -> None:
    store, workers = large_job()
    gated = admitted(controlled(workers, 7), store)
    record(store, f"ConfigMap/{peers_of(gated)}")

    ungated = admitted(controlled(workers, 7), store)

    assert "schedulingGates" not in ungated["spec"]
    del gated["spec"]["schedulingGates"]
    assert ungated == gated  # the same pod in every other field
    # A later pod of the same revision, from the kept patch: no gate either.
    assert "schedulingGates" not in admitted(controlled(workers, 8), store)["spec"]


@pytest.mark.parametrize(
    "proof",
    [
        "ConfigMap/pt-peers-0123456789",  # the lists of another topology (before a scale)
        "Secret/pt-ssh",  # something else proven
        "ConfigMap/pt-peers-0123456789 ConfigMap/x",  # not a record the sweeper writes
        "",
    ],
)
def test_a_pod_whose_configmap_is_not_the_one_recorded_proven_waits(proof: str) -> None:
    store, workers = large_job()
    record(store, proof)
    assert admitted(controlled(workers, 0), store)["spec"]["schedulingGates"] == [OWNED_GATE]


def test_the_record_of_another_statefulset_under_the_same_name_proves_nothing() -> None:
    store, workers = large_job()
    name = peers_of(admitted(controlled(workers, 0), store))
    record(store, f"ConfigMap/{name}")
    # A pod claiming to be controlled by a StatefulSet of that name the cache does not hold.
    pod = admitted(controlled(workers, 0, uid="uid-of-an-earlier-pt-worker"), store)
    assert pod["spec"]["schedulingGates"] == [OWNED_GATE]


def test_without_the_lookup_every_pod_that_mounts_an_owned_object_waits() -> None:
    store, workers = large_job()
    record(store, f"ConfigMap/{peers_of(admitted(controlled(workers, 0), store))}")
    assert admitted(controlled(workers, 0), None)["spec"]["schedulingGates"] == [OWNED_GATE]


def test_an_mpi_pod_starts_without_the_gate_once_the_jobs_ssh_secret_is_recorded_proven() -> None:
    _, workers = stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd"),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2),
    )
    raw = expand(workers, "default")[1]
    gated = mutate_pod(copy.deepcopy(raw), "default").pod["spec"]
    assert gated["schedulingGates"] == [OWNED_GATE]
    proven = frozenset({"Secret/hvd-ssh"})
    assert "schedulingGates" not in mutate_pod(raw, "default", proven=proven).pod["spec"]


def test_the_objects_a_pod_needs_are_named_as_the_sweeper_records_them() -> None:
    assert needed_objects("pt", "pt-peers-0a1b2c3d4e", True, True) == (
        "ConfigMap/pt-peers-0a1b2c3d4e",
        "Secret/pt-ssh",
        "ComputeDomain/pt-nvlink",
    )
    assert needed_objects("pt", None, False, False) == ()
    assert proof_record(["Secret/pt-ssh", "ConfigMap/b", "ConfigMap/a"]) == (
        "ConfigMap/a,ConfigMap/b,Secret/pt-ssh"
    )


@pytest.mark.parametrize(
    ("value", "read"),
    [
        ("ConfigMap/a,Secret/b", {"ConfigMap/a", "Secret/b"}),
        ("ComputeDomain/pt-nvlink", {"ComputeDomain/pt-nvlink"}),
        ("Pod/a", set()),  # not a kind the sweeper proves
        ("ConfigMap/", set()),
        ("ConfigMap/a," + "ConfigMap/b," * 400, set()),  # longer than any record it writes
    ],
)
def test_a_record_is_read_only_as_the_sweeper_writes_it(value: str, read: set[str]) -> None:
    owner = {"metadata": {"annotations": {contract.PROVEN_OBJECTS: value}}}
    assert proven_objects(owner) == read


def test_only_a_pod_controlled_by_a_statefulset_or_job_reads_a_record() -> None:
    _, workers = large_job()
    pod = controlled(workers, 0)
    assert workload_controller(pod) == ("StatefulSet", "pt-worker", "uid-pt-worker")
    pod["metadata"]["ownerReferences"][0]["apiVersion"] = "example.com/v1"
    assert workload_controller(pod) is None
    pod["metadata"]["ownerReferences"][0]["controller"] = False
    assert workload_controller(pod) is None
