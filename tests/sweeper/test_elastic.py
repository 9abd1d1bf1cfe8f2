"""Elastic PyTorch: scaling within min:max (by hand or by a HorizontalPodAutoscaler) restarts no
pod, and the documented HPA example is what it says."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import yaml

from tests.support.stored import NAMESPACE
from webhook.core import contract
from webhook.core.mutation.admit import Request, admit
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import expand, render
from webhook.sweeper.actions import Delete, Patch

from .helpers import decision, of_type

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "elastic" / "pytorch-elastic-hpa.yaml"


def documents() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]


def stored_worker() -> dict[str, Any]:
    """The example's worker StatefulSet as the API server stores it after the webhook."""
    (worker,) = [d for d in documents() if d["kind"] == "StatefulSet"]
    worker = copy.deepcopy(worker)
    worker["metadata"] |= {
        "namespace": NAMESPACE,
        "uid": "5a0d0000-1c2e-4b7a-9d3f-6e8a2b4c0d1f",
        "resourceVersion": "10",
        "creationTimestamp": "2025-01-01T00:00:00Z",
    }
    admitted: dict[str, Any] = mutate_workload(worker, "CREATE", NAMESPACE).workload
    return admitted


def running_pods(worker: dict[str, Any], replicas: int) -> list[dict[str, Any]]:
    """The pods the StatefulSet controller makes at `replicas`, each admitted by the webhook."""
    scaled = copy.deepcopy(worker)
    scaled["spec"]["replicas"] = replicas
    pods = []
    for i, raw in enumerate(expand(scaled, NAMESPACE)):
        outcome = admit(Request("Pod", "CREATE", raw, NAMESPACE))
        assert outcome is not None, "every pod of the job is Trainhook's to mutate"
        pod = jsonpatch.apply_patch(raw, outcome.patch)
        pod["metadata"] |= {
            "uid": f"0000000{i}-0000-0000-0000-000000000000",
            "resourceVersion": str(100 + i),
            "creationTimestamp": "2025-01-01T00:00:10Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": worker["metadata"]["name"],
                    "uid": worker["metadata"]["uid"],
                    "controller": True,
                }
            ],
        }
        pod["status"] = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": "pytorch", "restartCount": 0, "state": {"running": {}}, "lastState": {}}
            ],
        }
        pods.append(pod)
    return pods


def test_the_hpa_example_is_valid_and_scales_the_worker_statefulset_within_its_elastic_range():
    worker, hpa = documents()
    admitted = mutate_workload(worker, "CREATE", NAMESPACE).workload  # gets its serviceName
    for document in (admitted, hpa):
        kubernetes_validate.validate(document, "1.29", strict=True)
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": worker["metadata"]["name"],
    }
    low, high = map(int, worker["metadata"]["annotations"][contract.ELASTIC].split(":"))
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (low, high)
    env = render(documents()[:1])[1].env
    assert (env["PET_NNODES"], env["PET_MAX_RESTARTS"], env["PET_RDZV_BACKEND"]) == (
        "2:8",
        "3",
        "c10d",
    )


def test_scaling_an_elastic_job_within_its_range_restamps_and_restarts_nothing():
    worker = stored_worker()
    assert worker["spec"]["template"]["metadata"]["annotations"][contract.TOPOLOGY] == (
        '{"worker":2}'
    )
    scaled = copy.deepcopy(worker)
    scaled["spec"]["replicas"] = 5  # the HPA, through /scale: the webhook never sees it
    pods = running_pods(worker, 5)  # the new pods carry the old stamp, admitted all the same
    actions = decision("elastic", [scaled], pods).actions
    assert [a for a in of_type(actions, Patch) if a.name == "elastic-worker"] == []
    assert of_type(actions, Delete) == []


def test_scaling_an_elastic_job_beyond_its_range_restarts_it_with_a_new_topology():
    worker = stored_worker()
    scaled = copy.deepcopy(worker)
    scaled["spec"]["replicas"] = 9
    actions = decision("elastic", [scaled], running_pods(worker, 2)).actions
    (patch,) = [a for a in of_type(actions, Patch) if a.name == "elastic-worker"]
    stamp = patch.patch["spec"]["template"]["metadata"]["annotations"][contract.TOPOLOGY]
    assert stamp == '{"worker":9}'
