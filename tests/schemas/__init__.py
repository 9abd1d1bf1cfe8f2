"""The gang schedulers' own schemas (vendored, see README.md) as checks on what Trainhook renders.

`custom_resource_problems` validates a PodGroup the way the API server does for a CRD with strict
field validation: the apiVersion and kind the CRD serves, a DNS-1123 name, then the version's
openAPIV3Schema with unknown fields refused. `kueue_pod_problems` checks one Pod against what
Kueue's pod webhook accepts for a plain-pod group, and `kueue_group_problems` that a set of pods
forms one Kueue pod group (one Workload, as many pods as it counts).
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

HERE = Path(__file__).resolve().parent
CRD_FILES = (
    "scheduling.volcano.sh_podgroups.yaml",
    "scheduling.x-k8s.io_podgroups.yaml",
    "scheduling.run.ai_podgroups.yaml",
    "resource.nvidia.com_computedomains.yaml",
)
KUEUE_POD_GROUP = "kueue.x-k8s.io_pod-group.schema.yaml"
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

KUEUE_QUEUE = "kueue.x-k8s.io/queue-name"
KUEUE_GROUP = "kueue.x-k8s.io/pod-group-name"
KUEUE_TOTAL = "kueue.x-k8s.io/pod-group-total-count"


def strict(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema with every object that lists its properties closed to others (strict mode)."""
    closed = copy.deepcopy(dict(schema))

    def close(node: Any) -> None:
        if isinstance(node, dict):
            if "properties" in node and "additionalProperties" not in node:
                node["additionalProperties"] = False
            for value in node.values():
                close(value)
        elif isinstance(node, list):
            for item in node:
                close(item)

    close(closed)
    return closed


@functools.cache
def served_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the strict openAPIV3Schema of every served version of every CRD."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for name in CRD_FILES:
        crd = yaml.safe_load((HERE / name).read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = strict(version["schema"]["openAPIV3Schema"])
                schema["properties"]["metadata"]["additionalProperties"] = True
                schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas


def problems_of(validator: jsonschema.protocols.Validator, obj: Any) -> list[str]:
    return sorted(
        f"{'.'.join(str(part) for part in error.absolute_path) or '(root)'}: {error.message}"
        for error in validator.iter_errors(obj)
    )


# Kubernetes' own PodGroup is built in: its schema is the release's OpenAPI, as the
# kubernetes-validate package ships it, for the release that first serves each version.
KUBERNETES_RELEASES = {
    "scheduling.k8s.io/v1alpha2": "1.36",
    "scheduling.k8s.io/v1alpha3": "1.37",
    "scheduling.k8s.io/v1beta1": "1.37",
}


def custom_resource_problems(obj: Mapping[str, Any]) -> list[str]:
    """What the API server would refuse in this PodGroup; empty when it accepts it."""
    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    if key[0] in KUBERNETES_RELEASES:
        try:
            kubernetes_validate.validate(dict(obj), KUBERNETES_RELEASES[key[0]], strict=True)
        except kubernetes_validate.ValidationError as error:
            return [f"{'.'.join(map(str, error.path)) or '(root)'}: {error.message}"]
        return []
    schema = served_schemas().get(key)
    if schema is None:
        return [f"no vendored CRD serves apiVersion {key[0]!r} kind {key[1]!r}"]
    found: list[str] = []
    name = obj.get("metadata", {}).get("name", "")
    if not DNS1123_SUBDOMAIN.fullmatch(name) or len(name) > 253:
        found.append(f"metadata.name: {name!r} is not a DNS-1123 subdomain")
    validator = jsonschema.Draft7Validator(schema)
    return found + problems_of(validator, obj)


@functools.cache
def kueue_validator() -> jsonschema.protocols.Validator:
    schema = yaml.safe_load((HERE / KUEUE_POD_GROUP).read_text())
    return jsonschema.Draft202012Validator(schema)


def kueue_gate() -> str:
    gate: str = yaml.safe_load((HERE / KUEUE_POD_GROUP).read_text())["x-kueue-scheduling-gate"]
    return gate


def kueue_pod_problems(pod: Mapping[str, Any]) -> list[str]:
    """What Kueue's pod webhook refuses in this pod of a pod group; empty when it accepts it."""
    return problems_of(kueue_validator(), pod)


def kueue_group_problems(pods: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why these pods are not one Kueue pod group of exactly them (empty when they are)."""
    pods = list(pods)
    found = [
        f"pod {i}: {problem}" for i, pod in enumerate(pods) for problem in kueue_pod_problems(pod)
    ]
    if found:
        return found
    labels = [pod["metadata"]["labels"] for pod in pods]
    totals = {pod["metadata"]["annotations"][KUEUE_TOTAL] for pod in pods}
    for key, values in ((KUEUE_GROUP, {x[KUEUE_GROUP] for x in labels}), (KUEUE_TOTAL, totals)):
        if len(values) != 1:
            found.append(f"{key}: the pods disagree: {sorted(values)}")
    queues = {x[KUEUE_QUEUE] for x in labels}
    if len(queues) != 1:
        found.append(f"{KUEUE_QUEUE}: the pods disagree: {sorted(queues)}")
    if len(totals) == 1 and int(next(iter(totals))) != len(pods):
        found.append(f"{KUEUE_TOTAL}: {next(iter(totals))} counted, {len(pods)} pods in the group")
    return found
