"""JobSet (jobset.x-k8s.io/v1alpha2): each Job of each replicated Job becomes a labelled
Indexed Job of the same name, a generic job's role.

The JobSet controller (pkg/controllers/jobset_controller.go) names Job i of replicated Job R
`<jobset>-<R>-<i>`, so its pods are `<jobset>-<R>-<i>-<index>` under the headless Service
`<jobset>`; it injects no env, but labels and annotates each Job's pods with where they are
(`jobset.sigs.k8s.io/jobset-name`, `replicatedjob-name`, `replicatedjob-replicas`,
`global-replicas`, `job-index`, `job-global-index`, `restart-attempt`), which scripts read
through the downward API. The migrated pods keep the names (Trainhook's Service is the job's,
`<jobset>`) and get the same labels and annotations on their template; a role is the replicated
Job's name, or `<R>-<i>` when it has several Jobs.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from webhook.core import contract
from webhook.core.migrate.base import (
    JOB,
    Fields,
    Job,
    MigrationError,
    Notes,
    Role,
    carry_metadata,
    metadata,
)

PREFIX = "jobset.sigs.k8s.io/"


def migrate_jobset(source: Mapping[str, Any], key: tuple[str, str], notes: Notes) -> Job:
    name, namespace, meta, spec = metadata(source, key[1], notes)
    job = Job(name=name, namespace=namespace, framework="generic", roles=[])
    carry_metadata(meta, job, notes)
    replicated = spec.get("replicatedJobs") or []
    if not isinstance(replicated, list) or not replicated:
        raise MigrationError("spec.replicatedJobs: at least one replicated Job")
    counts = [_replicas(raw, position) for position, raw in enumerate(replicated)]
    total = sum(counts)
    roles_of: dict[str, list[str]] = {}
    first = 0
    for position, raw in enumerate(replicated):
        where = f"spec.replicatedJobs[{position}]"
        fields = notes.track(Fields(raw, where))
        step = fields.text("name")
        if not step:
            raise MigrationError(f"{where}.name: a replicated Job needs a name")
        fields.get("replicas")
        for field_name, why in (
            ("dependsOn", "every Job starts at once"),
            ("groupName", "Trainhook gives no group labels"),
        ):
            if fields.has(field_name):
                notes.add(fields.at(field_name), f"{fields.get(field_name)!r}: {why}")
        job_template = notes.track(Fields(fields.get("template"), f"{where}.template"))
        template_meta = job_template.get("metadata") or {}
        if template_meta:
            notes.add(
                job_template.at("metadata"),
                "not carried over to the Job: put its labels and annotations on the pod template",
            )
        job_spec = notes.track(Fields(job_template.get("spec"), f"{where}.template.spec"))
        pods = _pods(job_spec)
        pod = job_spec.get("template")
        if not isinstance(pod, Mapping) or not isinstance(pod.get("spec"), Mapping):
            raise MigrationError(f"{job_spec.at('template')}: a pod template with a spec")
        for field_name in job_spec.data:
            if field_name not in ("template", "completions", "parallelism", "completionMode"):
                notes.add(
                    job_spec.at(str(field_name)),
                    f"{job_spec.get(str(field_name))!r} has no equivalent: "
                    f"{contract.RESTART_POLICY} and {contract.BACKOFF_LIMIT} decide for the job",
                )
        count = counts[position]
        for index in range(count):
            role = step if count == 1 else f"{step}-{index}"
            roles_of.setdefault(step, []).append(role)
            template = copy.deepcopy(dict(pod))
            stamped = {
                f"{PREFIX}jobset-name": name,
                f"{PREFIX}replicatedjob-name": step,
                f"{PREFIX}replicatedjob-replicas": str(count),
                f"{PREFIX}global-replicas": str(total),
                f"{PREFIX}job-index": str(index),
                f"{PREFIX}job-global-index": str(first + index),
                f"{PREFIX}restart-attempt": "0",
            }
            template_metadata = template.setdefault("metadata", {})
            template_metadata.setdefault("labels", {}).update(stamped)
            template_metadata.setdefault("annotations", {}).update(stamped)
            job.roles.append(
                Role(
                    role=role,
                    replicas=pods,
                    template=template,
                    path=f"{where}.template.spec.template",
                    kind=JOB,
                    name=f"{name}-{step}-{index}",
                )
            )
        first += count
    _policies(spec, job, notes, roles_of)
    return job


def _replicas(raw: Any, position: int) -> int:
    value = raw.get("replicas", 1) if isinstance(raw, Mapping) else 1
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise MigrationError(
            f"spec.replicatedJobs[{position}].replicas: invalid value {value!r}: a whole "
            "number >= 1"
        )
    return value


def _pods(job_spec: Fields) -> int:
    """The pods of one Job: its completions, which an Indexed Job runs at once."""
    completions = job_spec.integer("completions", 1)
    parallelism = job_spec.integer("parallelism", 0)
    mode = job_spec.text("completionMode")
    pods = completions or parallelism or 1
    if parallelism is not None and parallelism != pods:
        raise MigrationError(
            f"{job_spec.at('parallelism')}: {parallelism} of {pods} completions: a training "
            "Job runs every pod at once"
        )
    if mode not in (None, "Indexed"):
        raise MigrationError(
            f"{job_spec.at('completionMode')}: {mode!r}: the Jobs of a job are Indexed"
        )
    return pods


def _policies(spec: Fields, job: Job, notes: Notes, roles_of: Mapping[str, list[str]]) -> None:
    success = spec.child("successPolicy")
    operator = success.text("operator") or "All"
    targets = success.get("targetReplicatedJobs") or list(roles_of)
    if operator == "All" and list(targets) != list(roles_of):
        roles = [role for target in targets for role in roles_of.get(str(target), [])]
        if len(roles) == 1:
            job.annotations[contract.SUCCESS_POLICY] = f"role={roles[0]}"
        else:
            notes.add(
                success.path,
                f"every Job of {', '.join(map(str, targets))} has no equivalent: "
                f"{contract.SUCCESS_POLICY} names one role (role=<role>), and each Job is one",
            )
    elif operator != "All":
        notes.add(
            success.path,
            f"{operator!r} (any one Job) has no equivalent: the job is done when every pod is",
        )
    failure = spec.child("failurePolicy")
    restarts = failure.integer("maxRestarts")
    if restarts:
        job.annotations[contract.RESTART_POLICY] = "RestartJob"
        job.annotations[contract.BACKOFF_LIMIT] = str(restarts)
    for field_name in ("rules", "restartStrategy"):
        if failure.has(field_name):
            notes.add(
                failure.at(field_name),
                f"{failure.get(field_name)!r} has no equivalent: a failed pod restarts the "
                f"whole job, up to {contract.BACKOFF_LIMIT} times",
            )
    network = spec.child("network")
    subdomain = network.text("subdomain")
    if subdomain not in (None, job.name):
        notes.add(
            network.at("subdomain"),
            f"{subdomain!r} → {job.name!r}: the pods' Service is the job's",
        )
    network.get("enableDNSHostnames")
    network.get("publishNotReadyAddresses")
    if spec.get("suspend") is True:
        job.annotations[contract.SUSPEND] = "true"
    ttl = spec.integer("ttlSecondsAfterFinished")
    if ttl is not None:
        job.annotations[contract.TTL_SECONDS_AFTER_FINISHED] = str(ttl)
    coordinator = spec.child("coordinator")
    if coordinator.data:
        endpoint = (
            f"{job.name}-{coordinator.text('replicatedJob')}-{coordinator.integer('jobIndex') or 0}"
            f"-{coordinator.integer('podIndex') or 0}.{job.name}"
        )
        notes.add(
            coordinator.path,
            f"no {PREFIX}coordinator label or annotation: the coordinator is {endpoint}",
        )
    for field_name, why in (
        ("startupPolicy", "every Job starts at once"),
        ("managedBy", "no controller owns the workloads"),
        ("volumeClaimPolicies", "Trainhook creates no volume claims: put them in the templates"),
    ):
        if spec.has(field_name):
            notes.add(spec.at(field_name), f"{spec.get(field_name)!r}: {why}")
