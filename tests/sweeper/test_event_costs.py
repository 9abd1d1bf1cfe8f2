"""What a look at a large job costs when one pod changed: nothing that grows with the job but
what a decision acts on (the benches measure the time: `python -m bench.pod_events`)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from tests.support.stored import NAMESPACE, pod, stamped, statefulset
from webhook.core import contract
from webhook.core.shape import peers
from webhook.core.shape.peers import configmap
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Create, Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.decide.owned import labels, peer_files_of
from webhook.sweeper.job.podtable import PodTable
from webhook.sweeper.job.state import read_job_state

from .helpers import NOW

WORKERS = 80  # past the inline bound: the job's lists are in a peers ConfigMap


class Hashes:
    """Counts the SHA-256 digests the peer lists' module takes."""

    def __init__(self) -> None:
        self.taken = 0

    def sha256(self, data: bytes = b"") -> Any:
        self.taken += 1
        return hashlib.sha256(data)


def test_a_large_jobs_peers_configmap_is_hashed_once_per_version_held(monkeypatch):
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=WORKERS),
    )
    pods = [pod(master, 0), *(pod(workers, i) for i in range(WORKERS))]
    table = PodTable(pods)
    state = read_job_state(NAMESPACE, "pt", workloads=[master, workers], pod_table=table)
    (files,) = peer_files_of(state).values()
    held = configmap(files, NAMESPACE)
    held["metadata"].update(labels=labels(state), uid="cm-uid", resourceVersion="31")
    hashes = Hashes()
    monkeypatch.setattr(peers, "hashlib", hashes)

    def look() -> None:
        state = read_job_state(
            NAMESPACE, "pt", workloads=[master, workers], pod_table=table, configmaps=[held]
        )
        assert not [a for a in decide(state, NOW).actions if "ConfigMap" in a.describe()]

    look()
    first = hashes.taken
    for ordinal in range(5):  # pods turning Ready, one by one
        table.changed(f"pt-worker-{ordinal}", pod(workers, ordinal))
        look()
    assert hashes.taken == first
    assert first <= 2  # the lists the job wants, and the ConfigMap held
    changed = {**held, "metadata": {**held["metadata"], "resourceVersion": "32"}}
    held = changed  # a new version is hashed again
    look()
    assert hashes.taken == first + 1


@pytest.fixture(autouse=True)
def _fresh_digests(monkeypatch):
    from webhook.sweeper.job import owned

    monkeypatch.setattr(owned, "_digests", {}, raising=False)


def test_a_large_jobs_start_writes_one_patch_per_gated_pod_and_a_few_more():
    """The documented bound (docs/sweeper.md, "Bounded writes"): the Service, the peers
    ConfigMap and a record per workload (the proof among them), then the owned-objects gate of
    each pod that came gated lifted by a patch of its own once the ConfigMap is proven; the pods
    created after the proof come ungated (tests/sweeper/test_start_writes_live.py)."""
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=WORKERS),
    )
    pods = [pod(master, 0), *(pod(workers, i) for i in range(WORKERS))]
    state = read_job_state(NAMESPACE, "pt", workloads=[master, workers], pods=pods)
    (files,) = peer_files_of(state).values()
    for made in pods:
        made["spec"]["schedulingGates"] = [{"name": contract.WAITING_FOR_OWNED_OBJECTS}]
        made["spec"]["volumes"] = [{"name": "trainhook-peers", "configMap": {"name": files.name}}]
        made["status"]["phase"] = "Pending"
        made["metadata"]["resourceVersion"] += "-gated"
    first = decide(read_job_state(NAMESPACE, "pt", workloads=[master, workers], pods=pods), NOW)
    creates = [a for a in first.actions if isinstance(a, Create)]
    assert sorted(a.resource.kind for a in creates) == ["ConfigMap", "Service"]
    assert not [a for a in first.actions if isinstance(a, Patch) and a.resource == PODS]
    held = configmap(files, NAMESPACE)
    held["metadata"].update(labels=labels(state), uid="cm-uid", resourceVersion="31")
    state = read_job_state(
        NAMESPACE, "pt", workloads=[master, workers], pods=pods, configmaps=[held]
    )
    patches = [a for a in decide(state, NOW).actions if isinstance(a, Patch)]
    lifted = [a for a in patches if a.resource == PODS]
    assert len(lifted) == len(pods)  # one per pod, nothing else on a pod
    assert len(patches) - len(lifted) <= 2  # the records on the two workloads
