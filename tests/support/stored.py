"""Kubernetes objects of training jobs as the API server stores and returns them."""

from __future__ import annotations

import copy
import itertools
import uuid
from collections.abc import Iterable
from typing import Any

from tests.support import builders
from webhook.core import contract
from webhook.core.job.workload import build_topology, read_workload
from webhook.core.mutation.owned_objects import proof_record
from webhook.core.shape.peers import content_digest
from webhook.core.shape.topology import stamp
from webhook.kube.resources import MANAGED_BY, MANAGER

NAMESPACE = "ml"
POD_VERSIONS = itertools.count(20)
# Who created the workloads, as the webhook records when it admits them into their job.
CREATOR = "alice"
CONTAINER = {"pytorch": "pytorch", "tensorflow": "tensorflow", "mpi": "mpi", "paddle": "paddle"}


def _uid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_DNS, name))


def statefulset(
    name: str,
    *,
    framework: str = "pytorch",
    role: str | None = None,
    job: str | None = None,
    replicas: int = 1,
    annotations: dict[str, str] | None = None,
    priority_class: str | None = None,
    rv: str = "10",
    creator: str | None = CREATOR,
) -> dict[str, Any]:
    """A StatefulSet as the user writes it (`builders.statefulset`), as the API server stores it
    once admitted: uid, resourceVersion, its creator recorded (None: made without the webhook),
    the headless Service, parallel start, labelled template."""
    container = {"name": CONTAINER.get(framework, "main"), "image": "trainer:1"}
    obj = builders.statefulset(
        name,
        framework,
        role=role,
        job=job,
        replicas=replicas,
        containers=[container],
        namespace=NAMESPACE,
    )
    metadata = obj["metadata"]
    metadata.update(
        uid=_uid(name),
        resourceVersion=rv,
        creationTimestamp="2025-01-01T00:00:00Z",
        annotations=dict(annotations or {}),
    )
    if creator is not None:
        metadata["annotations"].setdefault(contract.CREATED_BY, creator)
    spec = obj["spec"]
    spec.update(serviceName=job or name, podManagementPolicy="Parallel")
    template = spec["template"]
    template["metadata"] = {"labels": {"app": name, **metadata["labels"]}, "annotations": {}}
    if priority_class:
        template["spec"]["priorityClassName"] = priority_class
    return obj


def indexed_job(
    name: str,
    *,
    framework: str = "mpi",
    role: str | None = None,
    job: str | None = None,
    completions: int = 1,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    suspend: bool = False,
    rv: str = "10",
    creator: str | None = CREATOR,
) -> dict[str, Any]:
    obj = statefulset(
        name,
        framework=framework,
        role=role,
        job=job,
        annotations=annotations,
        rv=rv,
        creator=creator,
    )
    obj["apiVersion"], obj["kind"] = "batch/v1", "Job"
    obj["spec"] = {
        "completionMode": "Indexed",
        "completions": completions,
        "parallelism": completions,
        "suspend": suspend,
        "template": obj["spec"]["template"],
    }
    obj["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    started = {"startTime": "2025-01-01T00:00:05Z", "active": completions}
    obj["status"] = started if status is None else status
    return obj


def stamped(*workloads: dict[str, Any]) -> list[dict[str, Any]]:
    """The workloads as the webhook leaves them: each template carries the job's topology."""
    views = [read_workload(w, NAMESPACE) for w in workloads]
    annotations = stamp(build_topology(views))
    result = []
    for workload in workloads:
        copied = copy.deepcopy(workload)
        copied["spec"]["template"]["metadata"]["annotations"].update(annotations)
        result.append(copied)
    return result


def pod(
    owner: dict[str, Any],
    index: int,
    *,
    phase: str = "Running",
    exit_code: int | None = None,
    last_exit_code: int | None = None,
    restarts: int = 0,
    ready: bool = True,
    topology: str | None = "template",
    terminating: bool = False,
) -> dict[str, Any]:
    """Pod `index` of a StatefulSet or Indexed Job, labelled by the webhook."""
    meta = owner["metadata"]
    template = owner["spec"]["template"]
    role = meta["labels"].get(contract.ROLE, "worker")
    job = meta["labels"].get(contract.JOB, meta["name"])
    kind = owner["kind"]
    name = f"{meta['name']}-{index}"
    labels = {
        **template["metadata"]["labels"],
        contract.JOB: job,
        contract.ROLE: role,
        contract.ROLE_INDEX: str(index),
    }
    annotations: dict[str, str] = {}
    stamp_value = template["metadata"]["annotations"].get(contract.TOPOLOGY)
    if topology == "template" and stamp_value:
        annotations[contract.TOPOLOGY] = stamp_value
    elif topology not in (None, "template"):
        annotations[contract.TOPOLOGY] = topology
    if kind == "StatefulSet":
        labels[contract.STATEFULSET_POD_INDEX] = str(index)
    else:
        annotations[contract.JOB_COMPLETION_INDEX] = str(index)
        name = f"{meta['name']}-{index}-abcde"
    return _pod(
        name,
        labels=labels,
        annotations=annotations,
        owner=(kind, meta["name"], meta["uid"]),
        containers=[c["name"] for c in template["spec"]["containers"]],
        phase=phase,
        exit_code=exit_code,
        last_exit_code=last_exit_code,
        restarts=restarts,
        ready=ready,
        terminating=terminating,
    )


def bare_pod(
    name: str,
    *,
    framework: str = "generic",
    role: str = "worker",
    job: str = "bare",
    index: int = 0,
    topology: str | None = None,
    annotations: dict[str, str] | None = None,
    phase: str = "Running",
    exit_code: int | None = None,
) -> dict[str, Any]:
    labels = {
        contract.FRAMEWORK: framework,
        contract.JOB: job,
        contract.ROLE: role,
        contract.INDEX: str(index),
        contract.ROLE_INDEX: str(index),
    }
    all_annotations = dict(annotations or {})
    if topology:
        all_annotations[contract.TOPOLOGY] = topology
    return _pod(
        name,
        labels=labels,
        annotations=all_annotations,
        owner=None,
        containers=["main"],
        phase=phase,
        exit_code=exit_code,
        last_exit_code=None,
        restarts=0,
        ready=phase == "Running",
        terminating=False,
    )


def _pod(
    name: str,
    *,
    labels: dict[str, str],
    annotations: dict[str, str],
    owner: tuple[str, str, str] | None,
    containers: list[str],
    phase: str,
    exit_code: int | None,
    last_exit_code: int | None,
    restarts: int,
    ready: bool,
    terminating: bool,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": NAMESPACE,
        "uid": _uid(name),
        # every state of a pod is a new version, as the API server writes them
        "resourceVersion": str(next(POD_VERSIONS)),
        "creationTimestamp": "2025-01-01T00:00:10Z",
        "labels": labels,
        "annotations": annotations,
    }
    if owner:
        kind, owner_name, owner_uid = owner
        api_version = "apps/v1" if kind == "StatefulSet" else "batch/v1"
        metadata["ownerReferences"] = [
            {
                "apiVersion": api_version,
                "kind": kind,
                "name": owner_name,
                "uid": owner_uid,
                "controller": True,
            }
        ]
    if terminating:
        metadata["deletionTimestamp"] = "2025-01-01T00:01:00Z"
    state: dict[str, Any] = {"running": {"startedAt": "2025-01-01T00:00:20Z"}}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Completed"}}
    last: dict[str, Any] = {}
    if last_exit_code is not None:
        last = {"terminated": {"exitCode": last_exit_code, "reason": "Completed"}}
    statuses = [
        {
            "name": container,
            "restartCount": restarts if i == 0 else 0,
            "state": state if i == 0 else {"running": {}},
            "lastState": last if i == 0 else {},
            "ready": ready,
        }
        for i, container in enumerate(containers)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": c, "image": "trainer:1"} for c in containers]},
        "status": {
            "phase": phase,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "containerStatuses": statuses,
        },
    }


def sweepers_ssh_secret(
    job: str, *workloads: dict[str, Any], proven: bool = True
) -> dict[str, Any]:
    """The job's SSH Secret as the sweeper makes it: the digest of its data recorded on the job's
    `workloads` (changed in place) before it is created, and owned by them; with `proven`, also
    the record of its proof the sweeper writes once it has seen it."""
    owners = [{"uid": w["metadata"]["uid"]} for w in workloads]
    secret = owned("Secret", f"{job}-ssh", job=job, owners=owners)
    secret["type"] = "Opaque"
    secret["data"] = {"id_ed25519": "a2V5", "authorized_keys": "cHVi", "config": "SG9zdCAq"}
    for workload in workloads:
        annotations = workload["metadata"].setdefault("annotations", {})
        annotations[contract.SSH_KEYS_DIGEST] = content_digest(secret["data"])
    if proven:
        prove(workloads, f"Secret/{job}-ssh")
    return secret


def prove(workloads: Iterable[dict[str, Any]], *names: str) -> None:
    """Record `names` (`Kind/name`) on `workloads` as the objects the sweeper has proven, as it
    does once it has seen them (changed in place)."""
    for workload in workloads:
        annotations = workload["metadata"].setdefault("annotations", {})
        annotations[contract.PROVEN_OBJECTS] = proof_record(names)


def owned(
    kind: str,
    name: str,
    *,
    job: str,
    managed: bool = True,
    owners: list[dict[str, Any]] | None = None,
    spec: dict[str, Any] | None = None,
) -> dict[str, Any]:
    labels = {contract.JOB: job, MANAGED_BY: MANAGER} if managed else {}
    return {
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "uid": _uid(f"{kind}/{name}"),
            "resourceVersion": "30",
            "labels": labels,
            "ownerReferences": owners or [],
        },
        "spec": spec or {},
    }


def merge_patch(target: dict[str, Any], patch: Any) -> None:
    """A JSON merge patch, in place, as the API server applies the sweeper's."""
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            merge_patch(target[key], value)
        else:
            target[key] = copy.deepcopy(value)
