"""PaddleFlow's paddle-operator PaddleJob (batch.paddlepaddle.org/v1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core import contract
from webhook.core.migrate.base import (
    Job,
    MigrationError,
    Notes,
    Role,
    carry_metadata,
    check_roles,
    metadata,
    template_of,
)
from webhook.core.migrate.kubeflow import (
    DEFAULT_GANG_SCHEDULER,
    gang_minimum,
    priority_and_resources,
)

# The resource specs, in Trainhook's role order.
ROLES = ("ps", "worker", "heter")
# cleanPodPolicy -> trainhook.io/clean-pod-policy, by what it deletes; OnFailure has none
CLEAN_POD_POLICIES = {"Always": "All", "OnCompletion": "All", "Never": "None"}
# The port paddle-operator gives every endpoint of a job (PADDLE_PORT in its controller).
PORT = 36000


def migrate_paddle_operator(source: Mapping[str, Any], key: tuple[str, str], notes: Notes) -> Job:
    name, namespace, meta, spec = metadata(source, key[1], notes)
    job = Job(name=name, namespace=namespace, framework="paddle", roles=[])
    carry_metadata(meta, job, notes)
    for role in ROLES:
        if not spec.has(role):
            spec.get(role)
            continue
        resource = spec.child(role)
        replicas = resource.integer("replicas")
        job.roles.append(
            Role(
                role=role,
                replicas=1 if replicas is None else replicas,
                template=template_of(resource),
                path=resource.path,
            )
        )
        for bound in ("requests", "limits"):
            if resource.has(bound):
                notes.add(
                    resource.at(bound),
                    f"{resource.get(bound)!r} has no equivalent, because only PyTorch jobs are "
                    f"elastic ({contract.ELASTIC}); the job runs {role} replicas",
                )
    check_roles(job, ROLES, "spec")
    # The operator cleans a completed job's pods when the policy is empty (its default), Always
    # or OnCompletion, a failed job's when Always or OnFailure; any other value cleans none.
    clean = spec.text("cleanPodPolicy") or "OnCompletion"
    if clean == "OnFailure":
        notes.add(
            "spec.cleanPodPolicy",
            "'OnFailure' (clean failed jobs only) has no equivalent, because the clean-pod "
            f"policy applies whatever the outcome: {contract.CLEAN_POD_POLICY} stays 'None'",
        )
    elif clean not in CLEAN_POD_POLICIES:
        notes.add(
            "spec.cleanPodPolicy",
            f"{clean!r} is none of the operator's (Always, OnCompletion, OnFailure, Never), "
            f"which cleans no pod, as Never: {contract.CLEAN_POD_POLICY} stays 'None'",
        )
    else:
        job.annotations[contract.CLEAN_POD_POLICY] = CLEAN_POD_POLICIES[clean]
    intranet = spec.text("intranet")
    if intranet == "Host":
        raise MigrationError(
            "spec.intranet: 'Host' cannot be migrated: Trainhook picks no free host ports, every "
            "pod listens on trainhook.io/port; set hostNetwork in the templates yourself"
        )
    if intranet not in (None, "Service", "PodIP"):
        raise MigrationError(f"spec.intranet: invalid value {intranet!r}: PodIP, Service or Host")
    if intranet == "PodIP":
        notes.add(
            "spec.intranet",
            "'PodIP' → the job's headless Service: peers are DNS names that resolve to the pod IPs",
        )
    gloo = spec.get("withGloo")
    if gloo not in (None, 1):  # trainhook.io/compat gives withGloo 1's variables
        notes.add(
            "spec.withGloo",
            f"{gloo!r} has no equivalent yet: PADDLE_WITH_GLOO and its rendezvous are not set; "
            "set them in the container's env",
        )
    if spec.get("elastic"):
        notes.add("spec.elastic", "no equivalent, because only PyTorch jobs are elastic")
    if spec.has("sampleSetRef"):
        spec.get("sampleSetRef")
        notes.add("spec.sampleSetRef", "no equivalent: mount the data set in the templates")
    scheduling = spec.child("schedulingPolicy")
    queue = scheduling.text("queue")
    if queue is not None:
        job.annotations[contract.SCHEDULER] = DEFAULT_GANG_SCHEDULER
        job.annotations[contract.QUEUE] = queue
    gang_minimum(scheduling.integer("minAvailable"), job, notes, scheduling.at("minAvailable"))
    priority_and_resources(scheduling, job, notes)
    job.annotations[contract.PORT] = str(PORT)
    job.annotations[contract.COMPAT] = "paddle-operator"
    return job
