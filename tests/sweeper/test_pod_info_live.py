"""`trainhook_pod_info` end to end: a sweeper against the API emulator decides on a job, and its
/metrics names every pod of the job with its job, role and rank, which is what the chart's "GPUs
by job" dashboard joins dcgm-exporter's per-pod series on; the series go with the job."""

from __future__ import annotations

from prometheus_client import generate_latest

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.serving.metrics import SweeperMetrics


def info_lines(metrics: SweeperMetrics) -> list[str]:
    return [
        line
        for line in generate_latest(metrics.registry).decode().splitlines()
        if line.startswith("trainhook_pod_info")
    ]


def test_the_sweepers_metrics_name_the_job_role_and_rank_of_every_pod_of_a_job(emulator, kube):
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt"),
        statefulset("pt-worker", role="worker", job="pt", replicas=2),
    )
    master = kube.create(STATEFULSETS, "ml", master)
    workers = kube.create(STATEFULSETS, "ml", workers)
    for rank, (owner, index) in enumerate([(master, 0), (workers, 0), (workers, 1)]):
        obj = pod(owner, index)
        obj["metadata"]["labels"][contract.RANK] = str(rank)  # as the webhook labels it
        kube.create(PODS, "ml", obj)
    # A pod of another owner carrying the job's label is not the job's: it is not named.
    stray = pod(workers, 7)
    stray["metadata"]["ownerReferences"][0]["kind"] = "ReplicaSet"
    kube.create(PODS, "ml", stray)
    expected = [
        'trainhook_pod_info{job="pt",namespace="ml",pod="pt-master-0",rank="0",role="master"} 1.0',
        'trainhook_pod_info{job="pt",namespace="ml",pod="pt-worker-0",rank="1",role="worker"} 1.0',
        'trainhook_pod_info{job="pt",namespace="ml",pod="pt-worker-1",rank="2",role="worker"} 1.0',
    ]
    with sweeping(kube) as sweeper:
        metrics = SweeperMetrics(sweeper.leads, sweeper.sweeper.health)
        eventually(lambda: info_lines(metrics) == expected, what="every pod of the job named")
        for name in ("pt-master-0", "pt-worker-0", "pt-worker-1", "pt-worker-7"):
            kube.delete(PODS, "ml", name, {"gracePeriodSeconds": 0})
        for name in ("pt-master", "pt-worker"):
            kube.delete(STATEFULSETS, "ml", name, {})
        eventually(lambda: info_lines(metrics) == [], what="the job's pods forgotten with it")
