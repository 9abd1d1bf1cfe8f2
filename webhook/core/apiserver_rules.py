"""What the API server itself refuses in the workloads `trainhook render` shows, in the words
`kubectl apply` prints (the API server's field errors), and what a folder of workloads must not
hold twice. Only rules whose wording is the API server's own are here."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.job.workload import job_of, read_framework, read_role
from webhook.core.objects import labels_of, template_of

GROUPS = {"StatefulSet": "apps", "Job": "batch"}
RESTART_POLICIES = {"StatefulSet": ("Always",), "Job": ("OnFailure", "Never")}
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_VALUE_RULE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
MAX_LABEL_VALUE = 63
MAX_JOB_NAME = 63  # a Job's name is the value of its pods' job-name label


class Invalid(TrainhookError):
    """An object the API server would refuse: its `StatefulSet.apps "x" is invalid: ...` line."""

    status_code = 422


def check_workload(obj: Mapping[str, Any]) -> None:
    """Raise Invalid with the API server's line for the first field it would refuse."""
    kind = str(obj.get("kind"))
    if kind not in GROUPS:
        return
    name = str((obj.get("metadata") or {}).get("name") or "")
    errors = [*_name(kind, name), *_restart_policy(kind, obj)]
    errors += _labels("metadata.labels", labels_of(obj))
    errors += _labels("spec.template.metadata.labels", labels_of(template_of(obj)))
    if errors:
        raise Invalid(f'{kind}.{GROUPS[kind]} "{name}" is invalid: {errors[0]}')


def _name(kind: str, name: str) -> list[str]:
    if kind == "Job" and len(name) > MAX_JOB_NAME:
        return [f'metadata.name: Invalid value: "{name}": must be no more than 63 characters']
    return []


def _restart_policy(kind: str, obj: Mapping[str, Any]) -> list[str]:
    # The API server defaults an unset restartPolicy to Always before it validates.
    policy = (template_of(obj).get("spec") or {}).get("restartPolicy") or "Always"
    allowed = RESTART_POLICIES[kind]
    if policy in allowed:
        return []
    supported = ", ".join(f'"{value}"' for value in allowed)
    return [
        f'spec.template.spec.restartPolicy: Unsupported value: "{policy}": '
        f"supported values: {supported}"
    ]


def _labels(field: str, labels: Mapping[str, str]) -> list[str]:
    errors = []
    for value in labels.values():
        text = str(value)
        if len(text) > MAX_LABEL_VALUE:
            errors.append(f'{field}: Invalid value: "{text}": must be no more than 63 characters')
        elif not LABEL_VALUE.match(text):
            errors.append(f'{field}: Invalid value: "{text}": {LABEL_VALUE_RULE}')
    return errors


def duplicates(documents: Sequence[tuple[int, Mapping[str, Any]]]) -> tuple[int, str] | None:
    """The first document that repeats a workload of the folder, or gives a job's role a second
    workload, with the line that refuses it; None when there is none."""
    seen: dict[tuple[str, str, str], int] = {}
    roles: dict[tuple[str, str, str], str] = {}
    for position, doc, namespace, job, role in _described(documents):
        kind, name = str(doc.get("kind")), str((doc.get("metadata") or {}).get("name"))
        first = seen.setdefault((kind, namespace, name), position)
        if first != position:
            return position, (
                f"{kind} {namespace}/{name} appears twice (documents {first + 1} and "
                f"{position + 1}): each workload once, or kubectl apply keeps only the last"
            )
        if job is None:
            continue
        other = roles.setdefault((namespace, job, role), f"{kind} {name}")
        if other != f"{kind} {name}":
            return position, (
                f"job {job} has two workloads for role {role} ({other} and {kind} {name}): "
                "two jobs of one name, or one role written twice; give each job its own "
                "trainhook.io/job and each role one workload"
            )
    return None


def namespace_warnings(documents: Sequence[tuple[int, Mapping[str, Any]]]) -> list[str]:
    """A job name used in several namespaces: each namespace's workloads are a job of their
    own (a job never spans namespaces), which is seldom what was meant."""
    spaces: dict[str, set[str]] = defaultdict(set)
    for _, _, namespace, job, _ in _described(documents):
        if job is not None:
            spaces[job].add(namespace)
    return [
        f"job {job} has workloads in namespaces {', '.join(sorted(found))}: a job never spans "
        "namespaces, so each namespace runs a separate job of that name"
        for job, found in spaces.items()
        if len(found) > 1
    ]


def shm_warnings(workload: Mapping[str, Any], shm_size: str | None) -> list[str]:
    """trainhook.io/shm-size beside a container that mounts /dev/shm itself: its own mount is
    kept, so the annotation's size does not reach that container."""
    if shm_size is None:
        return []
    kind, name = workload.get("kind"), (workload.get("metadata") or {}).get("name")
    found = []
    for container in (template_of(workload).get("spec") or {}).get("containers") or []:
        for mounted in container.get("volumeMounts") or []:
            if mounted.get("mountPath") == "/dev/shm":
                found.append(
                    f"{kind} {name}: {contract.SHM_SIZE} {shm_size} is not mounted in container "
                    f"{container.get('name')}, which mounts /dev/shm itself (volume "
                    f"{mounted.get('name')}); remove one of the two"
                )
    return found


def _described(
    documents: Sequence[tuple[int, Mapping[str, Any]]],
) -> list[tuple[int, Mapping[str, Any], str, str | None, str]]:
    found = []
    for position, doc in documents:
        namespace = str((doc.get("metadata") or {}).get("namespace") or "default")
        labels = labels_of(doc)
        role = read_role(labels, read_framework(labels)) if job_of(doc) is not None else ""
        found.append((position, doc, namespace, job_of(doc), role))
    return found
