"""The AdmissionReviews the benchmark sends, built the way the API server would send them.

Workloads are admitted by the core and expanded into pods the way the StatefulSet controller
makes them (`webhook.core.render.expand`); every object then gets what the API server has added by
the time mutating webhooks see it: field defaults, the service account token volume, owner
references and the controller's labels. So the bodies have the size and shape of real ones.
"""

from __future__ import annotations

import copy
import itertools
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from webhook.core import contract
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import expand

NAMESPACE = "research"
_uids = itertools.count(1)


@dataclass(frozen=True)
class Case:
    """One review to benchmark, and the workloads the lookup would return for it."""

    name: str
    review: dict[str, Any]
    siblings: list[dict[str, Any]] = field(default_factory=list)

    @property
    def object(self) -> dict[str, Any]:
        obj: dict[str, Any] = self.review["request"]["object"]
        return obj


def review(obj: Mapping[str, Any], operation: str = "CREATE") -> dict[str, Any]:
    kind = str(obj["kind"])
    group, _, version = str(obj["apiVersion"]).rpartition("/")
    resource = kind.lower() + "s"
    request = {
        "uid": f"6f1c0a52-8f7e-4d1b-9a63-{next(_uids):012d}",
        "kind": {"group": group, "version": version, "kind": kind},
        "resource": {"group": group, "version": version, "resource": resource},
        "requestKind": {"group": group, "version": version, "kind": kind},
        "requestResource": {"group": group, "version": version, "resource": resource},
        "name": obj["metadata"].get("name", ""),
        "namespace": NAMESPACE,
        "operation": operation,
        "userInfo": {
            "username": "system:serviceaccount:kube-system:statefulset-controller",
            "uid": "0b3c7f0e-2b1a-4f57-8a9e-4d8f2c1e7a10",
            "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
        },
        "object": obj,
        "oldObject": None,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def statefulset(
    framework: str,
    job: str,
    role: str,
    replicas: int,
    containers: list[dict[str, Any]],
    annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    name = f"{job}-{role}"
    labels = {contract.FRAMEWORK: framework, contract.JOB: job, contract.ROLE: role}
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": f"5a0d{zlib.crc32(name.encode()):08x}-1c2e-4b7a-9d3f-6e8a2b4c0d1f",
            "generation": 1,
            "creationTimestamp": "2026-03-02T09:14:27Z",
            "labels": {"app.kubernetes.io/name": job, **labels},
            "annotations": dict(annotations or {}),
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "serviceName": job,
            "podManagementPolicy": "OrderedReady",
            "revisionHistoryLimit": 10,
            "persistentVolumeClaimRetentionPolicy": {
                "whenDeleted": "Retain",
                "whenScaled": "Retain",
            },
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
            "template": {
                "metadata": {"labels": {"app": name, **labels}},
                "spec": {
                    "containers": containers,
                    "restartPolicy": "Always",
                    "terminationGracePeriodSeconds": 30,
                    "dnsPolicy": "ClusterFirst",
                    "securityContext": {},
                    "schedulerName": "default-scheduler",
                },
            },
        },
    }


def container(name: str, image: str, env_count: int, cpu: str, memory: str) -> dict[str, Any]:
    env: list[dict[str, Any]] = [
        {"name": f"TRAIN_SETTING_{n:02d}", "value": f"value-{n}"} for n in range(env_count)
    ]
    if env_count:
        env[0] = {
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        }
    spec: dict[str, Any] = {
        "name": name,
        "image": image,
        "command": ["python", "-m", "train", "--config=/etc/train/config.yaml"],
        "ports": [{"containerPort": 8080, "name": "metrics", "protocol": "TCP"}],
        "resources": {
            "limits": {"cpu": cpu, "memory": memory},
            "requests": {"cpu": cpu, "memory": memory},
        },
        "volumeMounts": [{"name": "data", "mountPath": "/data"}],
        "imagePullPolicy": "IfNotPresent",
        "terminationMessagePath": "/dev/termination-log",
        "terminationMessagePolicy": "File",
    }
    if env:
        spec["env"] = env
    return spec


def admitted(workload: dict[str, Any], siblings: list[dict[str, Any]]) -> dict[str, Any]:
    """The workload as stored after its admission: pod template stamped with the topology, and
    the resourceVersion the API server gives it."""
    mutated = copy.deepcopy(mutate_workload(workload, "CREATE", NAMESPACE, siblings).workload)
    mutated["metadata"]["resourceVersion"] = str(zlib.crc32(mutated["metadata"]["uid"].encode()))
    return mutated


def controller_pod(workload: dict[str, Any], ordinal: int) -> dict[str, Any]:
    """Pod `ordinal` of a StatefulSet as it reaches the webhooks: created and defaulted."""
    pod = next(
        p for p in expand(workload, NAMESPACE) if p["metadata"]["name"].endswith(f"-{ordinal}")
    )
    return as_served(workload, pod)


def service_account_volume(name: str) -> dict[str, Any]:
    """The projected token volume the API server's ServiceAccount admission adds to every pod."""
    return {
        "name": name,
        "projected": {
            "defaultMode": 420,
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "namespace",
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                            }
                        ]
                    }
                },
            ],
        },
    }


def as_served(workload: dict[str, Any], pod: dict[str, Any]) -> dict[str, Any]:
    """A pod the StatefulSet controller made, as it reaches the webhooks: created and
    defaulted (changed in place)."""
    name = workload["metadata"]["name"]
    metadata = pod["metadata"]
    metadata["generateName"] = f"{name}-"
    metadata["labels"]["controller-revision-hash"] = f"{name}-6d5f8b7c9d"
    metadata["ownerReferences"] = [
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "name": name,
            "uid": workload["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    spec = pod["spec"]
    token = "kube-api-access-7xk2p"
    spec["volumes"] = [
        {"name": "data", "emptyDir": {}},
        service_account_volume(token),
    ]
    for item in spec["containers"]:
        item["volumeMounts"] = [
            *item.get("volumeMounts", []),
            {
                "name": token,
                "readOnly": True,
                "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
            },
        ]
    spec |= {
        "serviceAccountName": "default",
        "serviceAccount": "default",
        "enableServiceLinks": True,
        "preemptionPolicy": "PreemptLowerPriority",
        "priority": 0,
        "tolerations": [
            {
                "key": "node.kubernetes.io/not-ready",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            },
        ],
    }
    return pod


def pytorch_worker_pod() -> Case:
    """Worker 3 of a PyTorch StatefulSet job (1 master, 8 workers): 2 containers, 20 user env."""
    containers = [
        container("pytorch", "registry.example.com/ml/trainer:2.4", 20, "8", "32Gi"),
        container("log-shipper", "registry.example.com/ops/fluent-bit:3.1", 0, "100m", "128Mi"),
    ]
    settings = {contract.GPUS: "8", contract.SHM_SIZE: "16Gi"}
    master = statefulset("pytorch", "llm", "master", 1, copy.deepcopy(containers), settings)
    worker = statefulset("pytorch", "llm", "worker", 8, copy.deepcopy(containers), settings)
    stored = admitted(worker, [master, worker])
    return Case(
        "PyTorch worker pod (StatefulSet, 2 containers, 20 env)", review(controller_pod(stored, 3))
    )


def tensorflow_job(workers: int, chiefs: int = 1, ps: int = 4) -> list[dict[str, Any]]:
    """The chief, ps and worker StatefulSets of a TensorFlow job, as the user writes them."""
    job = f"tf{workers}"

    def containers() -> list[dict[str, Any]]:
        return [container("tensorflow", "registry.example.com/ml/tf-trainer:2.16", 4, "4", "16Gi")]

    return [
        statefulset("tensorflow", job, "chief", chiefs, containers()),
        statefulset("tensorflow", job, "ps", ps, containers()),
        statefulset("tensorflow", job, "worker", workers, containers()),
    ]


def tensorflow_worker_pod(workers: int) -> Case:
    """A worker pod of a 1 chief / 4 ps / `workers` worker TensorFlow job."""
    job = tensorflow_job(workers)
    stored = admitted(job[2], job)
    pod = controller_pod(stored, min(5, workers - 1))
    return Case(f"TF worker pod (1 chief, 4 ps, {workers} workers)", review(pod))


def tensorflow_statefulset(workers: int) -> Case:
    """The worker StatefulSet's CREATE, with the chief and ps StatefulSets already stored."""
    job = tensorflow_job(workers)
    chief, ps, worker = job
    siblings = [admitted(chief, [chief]), admitted(ps, [chief, ps])]
    return Case(f"TF worker StatefulSet CREATE ({workers} workers)", review(worker), siblings)


def headline_cases() -> list[Case]:
    return [pytorch_worker_pod(), tensorflow_worker_pod(64), tensorflow_statefulset(64)]


def apply(obj: Mapping[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = jsonpatch.apply_patch(obj, operations)
    return result
