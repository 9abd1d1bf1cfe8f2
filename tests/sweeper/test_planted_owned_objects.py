"""A ConfigMap or Secret planted under the name of a job's own, before the job exists, is never
mounted: against the emulator, with the webhook's admission, the StatefulSet and Job controllers,
a kubelet that starts only ungated pods (recording what each one mounts as it starts) and the
sweeper.

Anyone who may create ConfigMaps or Secrets in the namespace can compute the names from the
victim's manifest (`<job>-ssh`, `<job>-peers-<digest>`), with or without Trainhook's label. The
job's pods wait, the job gets one Warning naming the object and says it waits for it, the sweeper
sends no request per reconcile for it, and once it is gone the job runs with its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support import builders
from tests.support.apply_order import Cluster, namespace_of
from tests.support.emulator import EmulatorThread
from tests.support.sweeping import Running, sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.render import render
from webhook.core.shape.peers import PeerFiles, content_digest
from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import (
    CONFIGMAPS,
    EVENTS,
    JOBS,
    MANAGED_BY,
    MANAGER,
    SECRETS,
    STATEFULSETS,
)

NAMESPACE = "ml"
MPI_JOB = "hvd"
# Long names make a job of 23 pods hold its peer lists in a ConfigMap rather than in env.
PEERS_JOB = "imagenet-resnet50-pretraining-run-with-long-names"
ATTACKER = {"id_ed25519": "YXR0YWNrZXIncyBrZXk=", "config": "SG9zdCAqCg=="}
LABELS = {MANAGED_BY: MANAGER}


@dataclass
class Kubelet(Cluster):
    """The cluster of tests.support.apply_order, whose kubelet also records, for each pod it
    starts, the data of every ConfigMap and Secret the pod mounts at that moment."""

    mounted: list[dict[str, Any]] = field(default_factory=list)

    def run(self, pod: dict[str, Any]) -> None:
        if not pod["spec"].get("schedulingGates") and not (pod.get("status") or {}).get("phase"):
            self.mounted.append(self.mounts(pod))
        super().run(pod)

    def mounts(self, pod: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = {}
        for volume in pod["spec"].get("volumes") or []:
            for source, resource, key in (
                ("configMap", CONFIGMAPS, "name"),
                ("secret", SECRETS, "secretName"),
            ):
                if source in volume:
                    name = volume[source][key]
                    try:
                        found[name] = self.kube.get(resource, namespace_of(pod), name).get("data")
                    except ApiError:
                        found[name] = None  # the real kubelet holds such a pod
        return found


def mpi_job() -> list[dict[str, Any]]:
    launcher = builders.indexed_job(
        f"{MPI_JOB}-launcher", "mpi", role="launcher", job=MPI_JOB, completions=1
    )
    workers = builders.statefulset(
        f"{MPI_JOB}-worker", "mpi", role="worker", job=MPI_JOB, replicas=2, namespace=NAMESPACE
    )
    launcher["metadata"]["namespace"] = NAMESPACE
    return [workers, launcher]


def large_job() -> list[dict[str, Any]]:
    return [
        builders.statefulset(
            f"{PEERS_JOB}-{role}",
            "pytorch",
            role=role,
            job=PEERS_JOB,
            replicas=replicas,
            namespace=NAMESPACE,
            # The first workload applied waits for the other, not with a world of its own.
            annotations={contract.ROLES: "master,worker"},
        )
        for role, replicas in (("master", 1), ("worker", 22))
    ]


def peer_lists(workloads: list[dict[str, Any]]) -> PeerFiles:
    """What the victim's manifest gives away: the name of its peers ConfigMap, and its lists."""
    (files,) = {pod.peers for pod in render(workloads) if pod.peers is not None}
    return files


def planted(kind: str, name: str, data: dict[str, str], labels: dict[str, str]) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "data": data,
    }
    if kind == "ConfigMap":
        obj["immutable"] = True
    return obj


def warnings(emulator: EmulatorThread, reason: str) -> list[tuple[str, str, str]]:
    return [
        (event["type"], event["involvedObject"]["name"], event["message"])
        for event in emulator.objects(EVENTS, NAMESPACE)
        if event["reason"] == reason
    ]


def requests(emulator: EmulatorThread, method: str, plural: str) -> int:
    return sum(
        1
        for entry in list(emulator.emulator.log)
        if entry[0] == method and f"/{plural}" in entry[1]
    )


def status(cluster: Cluster, workload: dict[str, Any]) -> dict[str, Any]:
    return cluster.status_of(workload)


def start_without_sweeper(cluster: Kubelet, workloads: list[dict[str, Any]]) -> None:
    """The job is applied and its pods created while no sweeper acts (one starting, or behind):
    nothing but their gates keeps the pods from mounting what they find."""
    for obj in workloads:
        cluster.apply(obj)
    for _ in range(3):
        cluster.step()


def wait_with_planted(
    cluster: Kubelet, sweeper: Running, job: str, workloads: list[dict[str, Any]], reason: str
) -> tuple[str, str, str]:
    """Step the cluster while the sweeper reconciles the job with the planted object there:
    returns the one Warning, once the job says it waits; no pod may start meanwhile."""

    def said() -> tuple[str, str, str] | None:
        cluster.step()
        found = warnings(cluster.emulator, reason)
        waiting = status(cluster, workloads[0]).get("reason") == "WaitingForOwnedObjects"
        return found[0] if found and waiting else None

    warning = eventually(said, timeout=30, what=f"a {reason} Warning and a waiting job")
    sweeper.reconciled(NAMESPACE, job, times=3)
    cluster.step()
    assert cluster.mounted == []
    assert len(warnings(cluster.emulator, reason)) == 1
    return warning


def run_to_the_end(cluster: Kubelet, pods: int) -> None:
    def all_started() -> bool:
        cluster.step()
        return len(cluster.mounted) == pods

    eventually(all_started, timeout=60, what=f"all {pods} pods started")


@pytest.mark.parametrize("labels", [{}, LABELS], ids=["unlabelled", "labelled"])
def test_a_planted_ssh_secret_is_never_mounted(
    emulator: EmulatorThread, kube: Kube, labels: dict[str, str]
) -> None:
    kube.create(SECRETS, NAMESPACE, planted("Secret", f"{MPI_JOB}-ssh", ATTACKER, labels))
    cluster = Kubelet(kube, emulator)
    workloads = mpi_job()
    start_without_sweeper(cluster, workloads)
    assert cluster.mounted == []
    with sweeping(kube) as sweeper:
        if not labels:
            warning = wait_with_planted(cluster, sweeper, MPI_JOB, workloads, "ForeignSecret")
            assert warning == (
                "Warning",
                f"{MPI_JOB}-launcher",
                f"Secret {MPI_JOB}-ssh was not made by Trainhook for the job (it has no "
                "app.kubernetes.io/managed-by=trainhook label): the job's pods wait "
                "(trainhook.io/waiting-for-owned-objects) and never mount it as their SSH keys; "
                "delete it so the sweeper makes the job's own SSH keys, or rename the job",
            )
            assert status(cluster, workloads[0])["message"] == (
                f"the job's pods wait for Secret {MPI_JOB}-ssh, which Trainhook did not make for "
                "the job and never lets them mount: delete it so the sweeper makes the job's own"
            )
            # A GET by name per reconcile; never a create over someone else's Secret.
            assert requests(emulator, "POST", "secrets") == 1  # the attacker's
            assert requests(emulator, "GET", "secrets") <= sum(sweeper.reconciles.values())
            kube.delete(SECRETS, NAMESPACE, f"{MPI_JOB}-ssh", {})
        run_to_the_end(cluster, pods=3)
        assert len(warnings(emulator, "ForeignSecret")) == 1

    own = kube.get(SECRETS, NAMESPACE, f"{MPI_JOB}-ssh")
    assert own["data"] != ATTACKER and own["metadata"]["labels"][MANAGED_BY] == MANAGER
    assert cluster.mounted == [{f"{MPI_JOB}-ssh": own["data"]}] * 3
    for resource, name in ((STATEFULSETS, f"{MPI_JOB}-worker"), (JOBS, f"{MPI_JOB}-launcher")):
        recorded = kube.get(resource, NAMESPACE, name)["metadata"]["annotations"]
        assert recorded[contract.SSH_KEYS_DIGEST] == content_digest(own["data"])


@pytest.mark.parametrize(
    ("labels", "content"),
    [({}, "evil"), (LABELS, "evil"), ({}, "the job's own")],
    ids=["unlabelled", "labelled", "unlabelled-with-the-jobs-lists"],
)
def test_a_planted_peers_configmap_is_never_mounted(
    emulator: EmulatorThread, kube: Kube, labels: dict[str, str], content: str
) -> None:
    workloads = large_job()
    lists = peer_lists(workloads)
    evil = {key: "evil-0.evil.ml.svc" for key in lists.data}
    data = dict(lists.data) if content == "the job's own" else evil
    kube.create(CONFIGMAPS, NAMESPACE, planted("ConfigMap", lists.name, data, labels))
    cluster = Kubelet(kube, emulator)
    start_without_sweeper(cluster, workloads)
    assert cluster.mounted == []
    with sweeping(kube) as sweeper:
        if content == "evil" and not labels:
            warning = wait_with_planted(cluster, sweeper, PEERS_JOB, workloads, "ForeignConfigMap")
            assert warning == (
                "Warning",
                f"{PEERS_JOB}-master",
                f"ConfigMap {lists.name} was not made by Trainhook for the job (it has no "
                "app.kubernetes.io/managed-by=trainhook label): the job's pods wait "
                "(trainhook.io/waiting-for-owned-objects) and never mount it as their peer "
                "lists; delete it so the sweeper makes the job's own, or rename the job",
            )
            assert requests(emulator, "POST", "configmaps") == 1  # the attacker's
            kube.delete(CONFIGMAPS, NAMESPACE, lists.name, {})
        run_to_the_end(cluster, pods=23)
        said = len(warnings(emulator, "ForeignConfigMap"))
        assert said == (0 if content == "the job's own" else 1)

    assert cluster.mounted == [{lists.name: lists.data}] * 23
    held = kube.get(CONFIGMAPS, NAMESPACE, lists.name)
    assert held["immutable"] is True and held["data"] == lists.data
