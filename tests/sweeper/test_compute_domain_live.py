"""A job's NVLink domain against the API emulator: the sweeper makes one ComputeDomain per job
whose roles set trainhook.io/nvlink-domain, adopts it after a restart, never touches someone
else's under the job's name, and it goes with the job; where the cluster serves no
ComputeDomain, the job says so once."""

from __future__ import annotations

import json
import logging
from typing import Any

from tests.schemas import custom_resource_problems
from tests.support.stored import indexed_job, pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import (
    COMPUTE_DOMAINS,
    EVENTS,
    JOBS,
    PODS,
    SERVICES,
    STATEFULSETS,
    Resource,
)

NVLINK = {contract.NVLINK_DOMAIN: "true"}
SERVED = "resource.nvidia.com/v1beta1/computedomains"


def names(emulator: Any, resource: Resource) -> list[str]:
    return [obj["metadata"]["name"] for obj in emulator.objects(resource, "ml")]


GATE = contract.WAITING_FOR_OWNED_OBJECTS


def create_job(kube: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """An MPI job whose two workers share an NVLink domain and whose launcher does not; its pods
    as the webhook makes them, held for the objects the sweeper makes for the job."""
    launcher, workers = stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd"),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2,
                    annotations=NVLINK),
    )  # fmt: skip
    launcher = kube.create(JOBS, "ml", launcher)
    workers = kube.create(STATEFULSETS, "ml", workers)
    for created in (pod(launcher, 0), pod(workers, 0), pod(workers, 1)):
        created["spec"]["schedulingGates"] = [{"name": GATE}]
        kube.create(PODS, "ml", created)
    return launcher, workers


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": meta["name"],
            "uid": meta["uid"]}  # fmt: skip


def gated(emulator: Any) -> list[str]:
    """The job's pods still held for the objects the sweeper makes."""
    return [
        p["metadata"]["name"]
        for p in emulator.objects(PODS, "ml")
        if {"name": GATE} in (p["spec"].get("schedulingGates") or [])
    ]


def warnings(emulator: Any, reason: str) -> list[str]:
    return [e["message"] for e in emulator.objects(EVENTS, "ml") if e["reason"] == reason]


def test_the_sweeper_makes_the_jobs_compute_domain_valid_against_the_drivers_crd(
    emulator: Any, kube: Any, caplog: Any
) -> None:
    emulator.serve(SERVED, "ComputeDomain")
    caplog.set_level(logging.INFO, logger="trainhook.sweeper")
    with sweeping(kube):
        assert "NVLink domains: ComputeDomains of resource.nvidia.com/v1beta1" in caplog.messages
        launcher, workers = create_job(kube)
        eventually(lambda: names(emulator, COMPUTE_DOMAINS) == ["hvd-nvlink"], what="domain")
        eventually(lambda: gated(emulator) == [], what="the pods let go once it is made")
    (domain,) = emulator.objects(COMPUTE_DOMAINS, "ml")
    assert domain["apiVersion"] == "resource.nvidia.com/v1beta1"
    assert domain["kind"] == "ComputeDomain"
    assert domain["metadata"]["labels"] == {
        "trainhook.io/job": "hvd",
        "app.kubernetes.io/managed-by": "trainhook",
    }
    assert domain["metadata"]["ownerReferences"] == [owner(launcher), owner(workers)]
    assert domain["spec"] == {
        "numNodes": 2,
        "channel": {"resourceClaimTemplate": {"name": "hvd-nvlink"}},
    }
    sent = {k: v for k, v in domain.items() if k != "status"}
    sent["metadata"] = {k: domain["metadata"][k] for k in ("name", "namespace", "labels")}
    assert custom_resource_problems(sent) == []


def test_a_restarted_sweeper_adopts_the_compute_domain_it_made(emulator: Any, kube: Any) -> None:
    emulator.serve(SERVED, "ComputeDomain")
    with sweeping(kube):
        create_job(kube)
        eventually(lambda: names(emulator, COMPUTE_DOMAINS) == ["hvd-nvlink"], what="domain")
    (made,) = emulator.objects(COMPUTE_DOMAINS, "ml")
    with sweeping(kube, identity="sweeper-b") as again:
        eventually(again.leads, what="the new sweeper leads")
        again.reconciled("ml", "hvd")
        touched = [a for a in again.actions if a.split()[1] == "ComputeDomain"]
    assert touched == []
    assert emulator.objects(COMPUTE_DOMAINS, "ml") == [made]


def test_someone_elses_compute_domain_under_the_jobs_name_is_said_once_and_never_touched(
    emulator: Any, kube: Any
) -> None:
    emulator.serve(SERVED, "ComputeDomain")
    planted = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {"name": "hvd-nvlink", "namespace": "ml"},
        "spec": {"numNodes": 8, "channel": {"resourceClaimTemplate": {"name": "hvd-nvlink"}}},
    }
    kube.create(COMPUTE_DOMAINS, "ml", planted)
    (before,) = emulator.objects(COMPUTE_DOMAINS, "ml")
    with sweeping(kube) as running:
        create_job(kube)
        eventually(lambda: warnings(emulator, "ForeignComputeDomain"), what="the Warning")
        running.reconciled("ml", "hvd")
    assert warnings(emulator, "ForeignComputeDomain") == [
        "ComputeDomain hvd-nvlink was not made by Trainhook for the job (it has no "
        "app.kubernetes.io/managed-by=trainhook label): the sweeper never changes or deletes "
        "it, and the job's pods wait (trainhook.io/waiting-for-owned-objects) and never claim "
        "its channel; delete it so the sweeper makes the job's own, or rename the job"
    ]
    assert emulator.objects(COMPUTE_DOMAINS, "ml") == [before]
    assert gated(emulator) == ["hvd-launcher-0-abcde", "hvd-worker-0", "hvd-worker-1"]


def test_one_labelled_as_trainhooks_but_not_owned_by_the_job_is_refused_too(
    emulator: Any, kube: Any
) -> None:
    emulator.serve(SERVED, "ComputeDomain")
    planted = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": "hvd-nvlink",
            "namespace": "ml",
            "labels": {"trainhook.io/job": "hvd", "app.kubernetes.io/managed-by": "trainhook"},
        },
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "hvd-nvlink"}}},
    }
    kube.create(COMPUTE_DOMAINS, "ml", planted)
    (before,) = emulator.objects(COMPUTE_DOMAINS, "ml")
    with sweeping(kube) as running:
        create_job(kube)
        eventually(lambda: warnings(emulator, "ForeignComputeDomain"), what="the Warning")
        running.reconciled("ml", "hvd")
        touched = [a for a in running.actions if a.split()[1] == "ComputeDomain"]
    (said,) = warnings(emulator, "ForeignComputeDomain")
    assert said.startswith(
        "ComputeDomain hvd-nvlink was not made by Trainhook for the job (it is labelled as "
        "Trainhook's but not owned by the job's workloads, or names another channel)"
    )
    assert touched == []
    assert emulator.objects(COMPUTE_DOMAINS, "ml") == [before]
    assert gated(emulator) == ["hvd-launcher-0-abcde", "hvd-worker-0", "hvd-worker-1"]


def test_the_compute_domain_goes_with_the_job(emulator: Any, kube: Any) -> None:
    emulator.serve(SERVED, "ComputeDomain")
    with sweeping(kube) as running:
        create_job(kube)
        eventually(lambda: names(emulator, COMPUTE_DOMAINS) == ["hvd-nvlink"], what="domain")
        kube.delete(JOBS, "ml", "hvd-launcher", {})
        kube.delete(STATEFULSETS, "ml", "hvd-worker", {})
        eventually(lambda: not names(emulator, COMPUTE_DOMAINS), what="the domain deleted")
        eventually(lambda: not names(emulator, SERVICES), what="the Service deleted")
        running.reconciled("ml", "hvd")
    assert names(emulator, COMPUTE_DOMAINS) == []


def test_a_cluster_without_compute_domains_is_said_once_as_an_event_and_in_the_status(
    emulator: Any, kube: Any, caplog: Any
) -> None:
    caplog.set_level(logging.INFO, logger="trainhook.sweeper")
    message = (
        "trainhook.io/nvlink-domain: the job's pods claim an IMEX channel of ComputeDomain "
        "hvd-nvlink, but this cluster serves no ComputeDomain of resource.nvidia.com/v1beta1: "
        "install NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu) with ComputeDomains "
        "enabled, or remove it"
    )
    with sweeping(kube) as running:
        create_job(kube)
        eventually(lambda: warnings(emulator, "NVLinkDomainUnavailable"), what="the Warning")
        running.reconciled("ml", "hvd", times=3)
    assert warnings(emulator, "NVLinkDomainUnavailable") == [message]
    (workers,) = emulator.objects(STATEFULSETS, "ml")
    status = json.loads(workers["metadata"]["annotations"][contract.STATUS])
    assert (status["state"], status["reason"], status["message"]) == (
        "Pending",
        "NVLinkDomainUnavailable",
        message,
    )
    assert gated(emulator) == ["hvd-launcher-0-abcde", "hvd-worker-0", "hvd-worker-1"]
    said = [m for m in caplog.messages if "serves no ComputeDomain" in m]
    assert said == [
        "this cluster serves no ComputeDomain of resource.nvidia.com/v1beta1; jobs with "
        "trainhook.io/nvlink-domain are said to wait for it"
    ]
    assert not any("/apis/resource.nvidia.com/v1beta1/namespaces" in str(r.url)
                   for r in emulator.requests())  # fmt: skip
