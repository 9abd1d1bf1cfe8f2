"""What Trainhook reads of a pod, and the small edits it makes to one.

A pod's identity (the controller that made it and its index), its containers, the training
container, and adding a volume or a mount to a draft without repeating one the pod has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.limits import MAX_INT32, whole_number
from webhook.core.objects import annotations_of, field_of, labels_of, metadata_of

ORDINAL_SUFFIX = re.compile(r"-(\d+)$")


@dataclass(frozen=True, init=False)
class PodIdentity:
    """Where a pod comes from and its index in its role."""

    owner_kind: str  # StatefulSet, Job or Pod (a bare pod)
    owner_name: str
    index: int | None  # None: a bare pod with no index label

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(self, owner_kind: str, owner_name: str, index: int | None) -> None:
        object.__setattr__(self, "owner_kind", owner_kind)
        object.__setattr__(self, "owner_name", owner_name)
        object.__setattr__(self, "index", index)


def identify(pod: Mapping[str, Any]) -> PodIdentity:
    """The controller a pod comes from and its index: the StatefulSet ordinal, the Job's
    completion index, or a bare pod's index label (None when it has none)."""
    metadata = metadata_of(pod)
    labels = labels_of(pod)
    annotations = annotations_of(pod)
    refs: list[dict[str, Any]] = metadata.get("ownerReferences") or []
    owners = [ref for ref in refs if ref.get("controller")]
    owner = owners[0] if owners else {}
    name = metadata.get("name") or ""
    if owner.get("kind") == "StatefulSet" or contract.STATEFULSET_POD_INDEX in labels:
        raw = labels.get(contract.STATEFULSET_POD_INDEX)
        if raw is None:
            match = ORDINAL_SUFFIX.search(name)
            raw = match.group(1) if match else None
        ordinal = _index(contract.STATEFULSET_POD_INDEX, raw)
        owner_name = owner.get("name") or name.rpartition("-")[0]
        return PodIdentity("StatefulSet", owner_name, ordinal)
    completion = annotations.get(
        contract.JOB_COMPLETION_INDEX, labels.get(contract.JOB_COMPLETION_INDEX)
    )
    if owner.get("kind") == "Job" or completion is not None:
        owner_name = owner.get("name") or labels.get(contract.JOB_NAME, "")
        return PodIdentity("Job", owner_name, _index(contract.JOB_COMPLETION_INDEX, completion))
    raw_index = labels.get(contract.INDEX)
    index = None if raw_index is None else _index(contract.INDEX, raw_index)
    return PodIdentity("Pod", name, index)


def _index(key: str, raw: str | None) -> int:
    index = None if raw is None else whole_number(raw)
    if index is None:
        raise InvalidSetting(key, raw, f"a whole number from 0 to {MAX_INT32}")
    return index


def containers(pod: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """Every container of a pod as (field, position, container): init containers first."""
    spec = pod.get("spec") or {}
    return [
        (field, position, container)
        for field in ("initContainers", "containers")
        for position, container in enumerate(spec.get(field) or [])
    ]


# A training pod gets Trainhook's env in each of its init containers (they often wait for or
# prepare the job's peers): this many at most, so a pod's cost never grows with what it claims.
MAX_INIT_CONTAINERS = 16
MAX_VOLUMES = 1024


def equipped(
    pod: Mapping[str, Any], training: int | None
) -> list[tuple[str, int, Mapping[str, Any]]]:
    """The containers that get the job's env and files, as (field, position, container): every
    init container but a fabric profile's sidecar, then the training container; sidecars get
    nothing."""
    spec = pod.get("spec") or {}
    found = [
        ("initContainers", i, c)
        for i, c in enumerate(spec.get("initContainers") or [])
        if not fabric_sidecar(c)
    ]
    if training is not None:
        found.append(("containers", training, spec["containers"][training]))
    return found


def fabric_sidecar(container: Mapping[str, Any]) -> bool:
    """Whether a container is the sidecar of a fabric profile (trainhook.io/fabric)."""
    env = container.get("env")
    return (
        container.get("restartPolicy") == "Always"
        and isinstance(env, list)
        and bool(env)
        and isinstance(env[0], Mapping)
        and env[0].get("name") == contract.FABRIC_SIDECAR_ENV
    )


def check_counts(pod: Mapping[str, Any]) -> None:
    """Raises Refused for a pod (or pod template) with more init containers than Trainhook
    equips, or more volumes than it looks through for each one it adds."""
    spec: dict[str, Any] = field_of(pod, "spec") or {}
    count = len(spec.get("initContainers") or [])
    if count > MAX_INIT_CONTAINERS:
        raise Refused(
            f"spec.initContainers: a training pod has at most {MAX_INIT_CONTAINERS} init "
            f"containers (each gets the job's env); this one has {count}"
        )
    count = len(spec.get("volumes") or [])
    if count > MAX_VOLUMES:
        raise Refused(
            f"spec.volumes: a training pod has at most {MAX_VOLUMES} volumes (each volume "
            f"Trainhook adds is looked for among them); this one has {count}"
        )


def training_container(
    pod: Mapping[str, Any], default: str | None, wanted: str | None
) -> int | None:
    """The position of the training container: the one `wanted` names (trainhook.io/container),
    else the framework's `default` one, else the first; None for a pod without containers.
    Raises InvalidSetting when `wanted` names no container of the pod."""
    spec: dict[str, Any] = field_of(pod, "spec") or {}
    found: list[dict[str, Any]] = spec.get("containers") or []
    names = [c.get("name") for c in found]
    if wanted is not None:
        if wanted not in names:
            raise InvalidSetting(
                contract.CONTAINER,
                wanted,
                f"no such container; the pod has {_listed(names) or 'none'}",
            )
        return names.index(wanted)
    if default in names:
        return names.index(default)
    return 0 if found else None


def _listed(names: list[Any], most: int = 10) -> str:
    """The first `most` names, and how many more: a pod may have thousands of containers."""
    shown = ", ".join(map(str, names[:most]))
    return f"{shown} and {len(names) - most} more" if len(names) > most else shown


def env_by_name(env: list[Any], names: set[str]) -> dict[str, Any]:
    """The items of a container's `env` named one of `names`, by name (the last of a name wins).
    One compiled pass: a container may carry tens of thousands of entries, and an item that is
    no object raises (the server names it in a 422)."""
    found: dict[str, Any] = {}
    for item in env:
        if not isinstance(item, dict):  # tested first: then read by dict's own `get`
            raise TypeError("an env item is not an object")
        name = item.get("name")
        if name in names:
            found[name] = item
    return found


def _holds(items: list[Any], key: str, value: object) -> bool:
    """Whether an item of `items` has `value` at `key`, read in C: a pod may list tens of
    thousands of volumes or mounts."""
    try:
        return value in map(dict.get, items, repeat(key))
    except TypeError:  # an item that is no object: the server names it in a 422
        return any(item.get(key) == value for item in items)


def mount(
    draft: Draft,
    field: str,
    position: int,
    container: Mapping[str, Any],
    volume: str,
    path: str,
    read_only: bool = True,
) -> None:
    """Mount `volume` at `path` in one container, unless it mounts that path or volume already."""
    mounts = container.get("volumeMounts") or []
    if len(mounts) > MAX_VOLUMES:
        raise Refused(
            f"spec.{field}[{position}].volumeMounts: a container Trainhook equips has at most "
            f"{MAX_VOLUMES} volume mounts; container {container.get('name')} has {len(mounts)}"
        )
    if _holds(mounts, "mountPath", path) or _holds(mounts, "name", volume):
        return
    mount: dict[str, Any] = {"name": volume, "mountPath": path}
    if read_only:
        mount["readOnly"] = True
    draft.list_at("spec", field, position, "volumeMounts").append(mount)


def add_volume(draft: Draft, volume: dict[str, Any]) -> None:
    """Add a volume to the pod unless it has one of that name."""
    volumes = (draft.original.get("spec") or {}).get("volumes") or []
    if _holds(volumes, "name", volume["name"]):
        return
    draft.list_at("spec", "volumes").append(volume)


def add_gate(draft: Draft, pod: Mapping[str, Any], name: str) -> None:
    """Hold the pod before scheduling until the sweeper lifts gate `name`. Kubernetes accepts a
    gate only at creation and never on a pod already bound to a node."""
    spec = pod.get("spec") or {}
    gates = [gate.get("name") for gate in spec.get("schedulingGates") or []]
    if name in gates or spec.get("nodeName"):
        return
    draft.list_at("spec", "schedulingGates").append({"name": name})


def annotation_bytes(annotations: Mapping[str, str]) -> int:
    return sum(len(k) + len(v) for k, v in annotations.items())


def check_annotation_size(annotations: Mapping[str, str], added: int = 0) -> None:
    """Refuse a pod whose annotations (and `added` bytes more) exceed what Kubernetes allows."""
    total = annotation_bytes(annotations) + added
    if total > contract.ANNOTATIONS_TOTAL_LIMIT:
        raise Refused(
            f"the job is too large for one pod's annotations ({total} bytes of the "
            f"{contract.ANNOTATIONS_TOTAL_LIMIT} Kubernetes allows): use fewer replicas per role"
        )
