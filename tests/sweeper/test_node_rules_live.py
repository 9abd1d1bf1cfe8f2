"""Node health end to end: a sweeper against the API emulator, the test playing
node-problem-detector (it sets a condition on a node) and the kubelet that bound the pods."""

from __future__ import annotations

from typing import Any

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import NODES, PODS, STATEFULSETS

from .test_failure_rules_live import events, status_of
from .test_sweeper_api import names

RULE = "node-condition=GpuHealthy:False -> restart-job max=2 exclude-node"


def node(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]},
    }


def gpu_unhealthy(kube: Any, name: str) -> None:
    """What node-problem-detector's custom plugin monitor writes when a GPU check fails."""
    conditions = [
        {"type": "Ready", "status": "True", "reason": "KubeletReady"},
        {"type": "GpuHealthy", "status": "False", "reason": "XidError", "message": "Xid 79"},
    ]
    kube.patch(NODES, None, name, {"status": {"conditions": conditions}})


def test_a_gpu_turning_unhealthy_under_a_rank_restarts_the_job_off_its_node(emulator, kube):
    for name in ("gpu-1", "gpu-2", "gpu-3"):
        kube.create(NODES, None, node(name))
    settings = {contract.FAILURE_POLICY: RULE, contract.RESTART_POLICY: "RestartJob"}
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=settings),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=settings),
    )
    master = kube.create(STATEFULSETS, "ml", master)
    workers = kube.create(STATEFULSETS, "ml", workers)
    for obj, where in (
        (pod(master, 0), "gpu-1"),
        (pod(workers, 0), "gpu-2"),
        (pod(workers, 1), "gpu-3"),
    ):
        obj["spec"]["nodeName"] = where
        kube.create(PODS, "ml", obj)
    with sweeping(kube):
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        assert not events(emulator, "Restarting")
        gpu_unhealthy(kube, "gpu-3")
        eventually(lambda: names(emulator, PODS) == [], what="the job's pods deleted")
        eventually(lambda: status_of(emulator).get("excludedNodes"), what="the exclusion")
    (event,) = events(emulator, "Restarting")
    assert event["message"] == (
        "restarting all 3 pod(s) of the job together (restart 1): pod pt-worker-1: its node "
        f"gpu-3 has condition GpuHealthy=False; failure-policy rule 1 ({RULE}); node gpu-3 "
        "excluded: the pods keep off it (1 of at most 8)"
    )
    for workload in ("pt-master", "pt-worker"):
        assert status_of(emulator, workload)["excludedNodes"] == ["gpu-3"]
