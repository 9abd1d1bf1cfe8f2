"""A pod watch's events are read into what the sweeper keeps of a pod, and hold the same."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tests.support import stored
from tests.support.emulator import EmulatorThread
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.client import Kube, watch_event
from webhook.kube.resources import PODS
from webhook.sweeper.informers import MESSAGE_KEPT, pod_event, slim_pod, watch_of

LONG_MESSAGE = "Traceback (most recent call last):\n" + "  frame\n" * 200 + "RuntimeError: NCCL"


def whole_pod() -> dict[str, Any]:
    """A running training pod as the API server sends it: everything the sweeper reads, and the
    much larger rest it does not."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "llm-worker-3",
            "generateName": "llm-worker-",
            "namespace": "ml",
            "uid": "0f2d4c1e-3b7a-4e55-9d1c-7a1f1a2b3c4d",
            "resourceVersion": "81234",
            "creationTimestamp": "2026-03-02T09:14:58Z",
            "labels": {
                contract.JOB: "llm",
                contract.ROLE: "worker",
                contract.ROLE_INDEX: "3",
                contract.RANK: "4",
                "apps.kubernetes.io/pod-index": "3",
                "controller-revision-hash": "llm-worker-7c9f",
            },
            "annotations": {
                contract.TOPOLOGY: '{"master":1,"worker":8}',
                contract.HOSTS: '{"worker":{"pod":"llm-worker","start":0,"service":"llm"}}',
                contract.HOSTFILE: "llm-worker-0.llm slots=8\n" * 8,
                "trainhook.io/env.PET_PEERS": "x" * 4000,
                contract.KUEUE_RETRIABLE_IN_GROUP: "false",
                "kubectl.kubernetes.io/restartedAt": "2026-03-02T09:00:00Z",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "StatefulSet",
                    "name": "llm-worker",
                    "uid": "5c1b7f7e-0000-4000-8000-000000000001",
                    "controller": True,
                    "blockOwnerDeletion": True,
                },
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "u2"},
            ],
            "managedFields": [
                {
                    "manager": "kubelet",
                    "operation": "Update",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:status": {"f:conditions": {}, "f:podIP": {}}},
                }
            ],
        },
        "spec": {
            "subdomain": "llm",
            "hostname": "llm-worker-3",
            "nodeName": "gpu-node-17",
            "priorityClassName": "training",
            "schedulingGates": [{"name": "trainhook.io/waiting-for-owned-objects"}],
            "initContainers": [
                {"name": "trainhook-barrier", "image": "busybox"},
                {"name": "log-shipper", "image": "fluent-bit", "restartPolicy": "Always"},
            ],
            "containers": [
                {
                    "name": "pytorch",
                    "image": "registry/train:1",
                    "env": [{"name": f"VAR_{i}", "value": "v" * 40} for i in range(40)],
                    "resources": {"limits": {"nvidia.com/gpu": "8"}},
                    "volumeMounts": [{"name": "trainhook-peers", "mountPath": "/etc/trainhook"}],
                },
                {"name": "sidecar", "image": "metrics:2"},
            ],
            "volumes": [
                {"name": "trainhook-peers", "configMap": {"name": "llm-peers-1a2b3c4d"}},
                {"name": "scratch", "emptyDir": {}},
                {"name": "kube-api-access", "projected": {"sources": [{"downwardAPI": {}}]}},
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.3.17",
            "podIPs": [{"ip": "10.244.3.9"}],
            "qosClass": "Guaranteed",
            "startTime": "2026-03-02T09:15:01Z",
            "conditions": [
                {"type": "PodReadyToStartContainers", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-03-02T09:15:09Z"},
                {"type": "PodScheduled", "status": "True"},
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "PreemptionByScheduler",
                    "message": "Preempted by a higher priority job",
                },
            ],
            "initContainerStatuses": [
                {
                    "name": "trainhook-barrier",
                    "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-03-02T09:15:02Z"}},
                    "lastState": {},
                    "image": "busybox",
                }
            ],
            "containerStatuses": [
                {
                    "name": "pytorch",
                    "restartCount": 2,
                    "ready": True,
                    "image": "registry/train:1",
                    "imageID": "registry/train@sha256:0123",
                    "containerID": "containerd://abc",
                    "state": {"running": {"startedAt": "2026-03-02T09:20:00Z"}},
                    "lastState": {
                        "terminated": {
                            "exitCode": 1,
                            "reason": "Error",
                            "message": LONG_MESSAGE,
                            "startedAt": "2026-03-02T09:15:03Z",
                            "finishedAt": "2026-03-02T09:19:58Z",
                            "containerID": "containerd://old",
                        }
                    },
                },
                {"name": "sidecar", "restartCount": 0, "state": {"waiting": {"reason": "X"}}},
            ],
        },
    }


def line(kind: str, obj: Any) -> bytes:
    return json.dumps({"type": kind, "object": obj}, separators=(",", ":")).encode()


def pending_pod() -> dict[str, Any]:
    pod = whole_pod()
    pod["status"] = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/40 nodes are available: 40 Insufficient nvidia.com/gpu.",
            }
        ],
    }
    del pod["spec"]["nodeName"]
    return pod


def with_nulls() -> dict[str, Any]:
    pod = whole_pod()
    pod["metadata"]["deletionTimestamp"] = None
    pod["spec"]["volumes"][0]["configMap"] = None
    pod["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"] = None
    return pod


POD_SHAPES = {
    "a running training pod": whole_pod,
    "a pod waiting for the scheduler": pending_pod,
    "a pod with null fields": with_nulls,
    "a pod of a stored StatefulSet": lambda: stored.pod(stored.statefulset("llm", replicas=4), 2),
    "a pod with nothing but its name": lambda: {"metadata": {"name": "p", "namespace": "ml"}},
}


@pytest.mark.parametrize("shape", POD_SHAPES)
@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_a_pod_event_read_into_the_kept_shape_holds_what_the_whole_pod_would(
    shape: str, kind: str
) -> None:
    sent = line(kind, POD_SHAPES[shape]())
    read = pod_event(sent)
    assert read["type"] == kind
    assert slim_pod(read["object"]) == slim_pod(watch_event(sent)["object"])


def test_what_the_sweeper_does_not_keep_of_a_pod_is_never_decoded() -> None:
    read = pod_event(line("MODIFIED", whole_pod()))["object"]
    assert "managedFields" not in read["metadata"]
    assert set(read["spec"]["containers"][0]) == {"name"}  # no env, image or mounts
    assert read["spec"]["volumes"][2] == {"name": "kube-api-access"}
    assert "podIPs" not in read["status"]
    kept = slim_pod(read)
    message = kept["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"]
    assert message == LONG_MESSAGE[-MESSAGE_KEPT:]
    assert kept["metadata"]["annotations"] == {
        contract.TOPOLOGY: '{"master":1,"worker":8}',
        contract.HOSTS: '{"worker":{"pod":"llm-worker","start":0,"service":"llm"}}',
        contract.KUEUE_RETRIABLE_IN_GROUP: "false",
    }


def test_a_watch_error_is_read_whole_with_its_status_code() -> None:
    gone = {"kind": "Status", "status": "Failure", "reason": "Expired", "code": 410}
    assert pod_event(line("ERROR", gone)) == {"type": "ERROR", "object": gone}


def test_a_bookmark_keeps_its_version() -> None:
    mark = {"kind": "Pod", "metadata": {"resourceVersion": "90210"}}
    assert pod_event(line("BOOKMARK", mark))["object"]["metadata"]["resourceVersion"] == "90210"


def test_a_pod_the_kept_shape_does_not_fit_is_read_whole() -> None:
    odd = whole_pod()
    odd["status"]["containerStatuses"][0]["restartCount"] = "2"  # not a number
    odd["metadata"]["labels"]["replicas"] = 3
    sent = line("MODIFIED", odd)
    assert pod_event(sent) == watch_event(sent)


@pytest.mark.parametrize("sent", [b'{"type":"ADDED"}', b'{"type":"ADDED","object":null}', b"[1,2]"])
def test_a_line_that_is_no_watch_event_is_refused_as_before(sent: bytes) -> None:
    with pytest.raises(ValueError, match="not a watch event"):
        pod_event(sent)


def test_the_sweepers_pod_watch_holds_each_pod_as_slim_pod_keeps_the_whole_one(
    emulator: EmulatorThread, kube: Kube
) -> None:
    pod = whole_pod()
    del pod["metadata"]["resourceVersion"], pod["metadata"]["uid"]
    kube.create(PODS, "ml", pod)
    informer = watch_of(kube, PODS, contract.JOB, resync_seconds=30).start()
    try:
        eventually(informer.synced.is_set, what="listed")
        before = informer.get("ml", "llm-worker-3")
        assert before is not None
        changed = copy.deepcopy(kube.get(PODS, "ml", "llm-worker-3"))
        changed["status"]["conditions"][2]["status"] = "False"
        kube.replace(PODS, "ml", "llm-worker-3", changed)
        version = kube.get(PODS, "ml", "llm-worker-3")["metadata"]["resourceVersion"]

        def held() -> dict[str, Any] | None:
            return next(iter(informer.objects_of(("ml", "llm"))), None)

        eventually(
            lambda: (held() or {}).get("metadata", {}).get("resourceVersion") == version,
            what="the change seen",
        )
        assert held() == slim_pod(kube.get(PODS, "ml", "llm-worker-3"))
        assert informer.decode is pod_event
        now = held() or {}
        assert now["spec"] is before["spec"]  # held once across the pod's versions
        assert now["metadata"]["labels"] is before["metadata"]["labels"]
    finally:
        informer.stop(timeout=5)


@pytest.mark.parametrize(
    "change",
    ["the Ready condition", "a container restart", "a label", "the pod replaced", "nothing"],
)
def test_a_pod_slimmed_like_its_held_version_is_what_slimming_it_alone_gives(change: str) -> None:
    pod = whole_pod()
    held = slim_pod(pod)
    new = copy.deepcopy(pod)
    status = new["status"]
    if change == "the Ready condition":
        status["conditions"][2]["status"] = "False"
    elif change == "a container restart":
        status["containerStatuses"][0]["restartCount"] = 3
        status["containerStatuses"][0]["state"] = {"waiting": {"reason": "CrashLoopBackOff"}}
    elif change == "a label":
        new["metadata"]["labels"]["team"] = "vision"
    elif change == "the pod replaced":
        new = pending_pod()
        new["metadata"]["uid"] = "another"
    alone = slim_pod(new)
    like = slim_pod(new, held)
    assert like == alone
    assert (like is held) == (change == "nothing")
    if change in ("the Ready condition", "a container restart"):
        assert like["metadata"] is held["metadata"]
        assert like["spec"] is held["spec"]
