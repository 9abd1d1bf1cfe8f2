"""A pod's patch, made once per workload revision and filled in for each of its pods.

Every pod of a StatefulSet revision or an Indexed Job reaches the webhook with the same template,
and differs only by what its index makes (its name, index labels, hostname and the name the API
server gives its token volume). Its patch differs only in the ops that `write_own` makes (the
rank labels, the hostname, the env). So the patch of a job's first pod is kept, keyed by the pod
encoded with those fields left out, and each later pod computes its own place and env, makes
those ops alone and takes every other op from the kept patch.

A kept patch is used only where it provably gives the bytes a full mutation would: each own op
of the first pod sits unchanged in its patch, no other op carries a value that varies by pod, and
a later pod's own ops have the same paths in the same order; anything else is mutated in full.

Where the user set none of the env Trainhook gives (the usual case), a later pod's own ops are
the first pod's with its own values put in (`_Values`): its rank labels, and in each env list
the items whose value differs. Otherwise they are written on a draft and diffed.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from webhook.core import contract, jsoncodec
from webhook.core.draft import Draft
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import ProgressEndpoint
from webhook.core.mutation.pod_mutation import (
    Place,
    PodReading,
    check_hostname,
    env_item,
    field_env_item,
    identity_labels,
    mutate_pod,
    place_pod,
    write_own,
)
from webhook.core.objects import annotations_of, field_of, labels_of
from webhook.core.patch import PatchOp, diff, escape
from webhook.core.shape.pods import (
    PodIdentity,
    annotation_bytes,
    check_annotation_size,
    env_by_name,
    equipped,
    identify,
)

# One entry per workload revision being rolled out, with room for many jobs at once; an entry
# holds one patch, the reading of one pod and its key, the pod encoded (a few KB).
MAX_KEPT: Final = 256
# What the API server names the projected service-account token volume: a prefix and five
# random characters, different for every pod.
TOKEN_VOLUME_PREFIX: Final = "kube-api-access-"
# Set by the controllers per pod; read only to find the pod's index.
_PER_POD_LABELS: Final = frozenset(
    {contract.STATEFULSET_POD_NAME, contract.STATEFULSET_POD_INDEX, contract.JOB_COMPLETION_INDEX}
)
_PER_POD_ANNOTATIONS: Final = frozenset({contract.JOB_COMPLETION_INDEX})
# An Indexed Job's pod is named from `<job>-<index>-` (generateName); the mutation reads neither.
_PER_POD_METADATA: Final = frozenset(
    {"name", "generateName", "uid", "creationTimestamp", "labels", "annotations"}
)


@dataclass(frozen=True)
class _Values:
    """Where the first pod's own values sit in its patch, and what they were."""

    labels: tuple[tuple[int, str], ...]  # (position in the patch, label key) of each label op
    envs: tuple[int, ...]  # positions of the env ops: each list starts with the env, in order
    env: dict[str, str]
    field_env: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Kept:
    reading: PodReading
    ops: list[PatchOp]
    own_at: tuple[int, ...]  # where the first pod's own ops sit in `ops`
    own_shape: tuple[tuple[str, str], ...]  # their (op, path), which a later pod's must match
    shared_warnings: list[str]
    added_annotation_bytes: int
    values: _Values | None  # None where a later pod's own ops must be written and diffed


Key = tuple[bytes, str, str, str, frozenset[str]]

# A pod with more containers than this, or sent in a review larger than MAX_SHARED_BYTES, is
# mutated in full, never keyed: its key costs in proportion to the pod (encoding a pod of
# megabytes takes several times its size) and is as large, and a crowded pod is no training
# job's usual shape, but a hostile one.
MAX_SHARED_CONTAINERS = 16
MAX_SHARED_BYTES = 256 * 1024


def _containers(pod: Mapping[str, Any]) -> int:
    spec = pod.get("spec")
    if not isinstance(spec, dict):  # as decoded (isinstance of an ABC runs Python code)
        return 0
    return sum(
        len(items) if isinstance(items, list) else 0
        for items in (spec.get("containers"), spec.get("initContainers"))
    )


@dataclass(frozen=True)
class Counts:
    """How the pods seen so far were answered (counted without a lock: exact in one thread)."""

    keyed: int  # pods whose key was made to look for a kept patch
    reused: int  # pods answered by filling in a kept patch
    full: int  # pods mutated in full
    drafted: int  # of the reused, those whose own ops were written on a draft and diffed


_counts: Counter[str] = Counter()


@functools.lru_cache(maxsize=MAX_KEPT)
def _slot(key: Key) -> list[_Kept | None]:
    """The place of one kept patch: lru_cache bounds them and drops the least recently used,
    safely across the serving threads."""
    return [None]


def pod_patch(
    pod: Mapping[str, Any],
    namespace: str,
    *,
    owner: Mapping[str, Any] | None = None,
    siblings: Sequence[Mapping[str, Any]] = (),
    cluster_domain: str = "",
    coscheduling_scheduler: str = contract.DEFAULT_COSCHEDULING_SCHEDULER,
    progress: ProgressEndpoint | None = None,
    review_bytes: int = 0,
    proven: frozenset[str] = frozenset(),
) -> tuple[list[PatchOp], list[str]]:
    """The JSONPatch and warnings of `mutate_pod` for a labelled pod, reusing what an earlier
    pod of the same workload revision, with the same objects proven, made (`review_bytes`: the
    size of the review it came in, 0 when unknown)."""
    key = None
    try:
        identity = identify(pod)
    except TrainhookError:
        identity = None  # refused below, by the full mutation, with its checks in their order
    if (
        owner is None
        and isinstance(pod, dict)  # as decoded: read through dict's own methods
        and identity is not None
        and identity.owner_kind != "Pod"
        and _containers(pod) <= MAX_SHARED_CONTAINERS
        and review_bytes <= MAX_SHARED_BYTES
    ):
        # The encoding itself, not a hash of it: equal keys are equal pods, and no hash
        # function is set up (OpenSSL's) or lets go of the interpreter lock (for long data).
        key = (_shared_encoding(pod), namespace, cluster_domain, coscheduling_scheduler, proven)
        _counts["keyed"] += 1
        kept = _slot(key)[0]
        if kept is not None and _owner(kept.reading.identity) == _owner(identity):
            filled = _fill(kept, identity, pod)
            if filled is not None:
                _counts["reused"] += 1
                return filled
    _counts["full"] += 1
    own: list[tuple[list[PatchOp], bytes, int]] = []

    def own_written(written: Mapping[str, Any], warnings: list[str]) -> None:
        ops = diff(pod, written)  # encoded now: what is written next may share their values
        own.append((ops, jsoncodec.dumps(ops), len(warnings)))

    mutation = mutate_pod(
        pod,
        namespace,
        owner=owner,
        siblings=siblings,
        cluster_domain=cluster_domain,
        coscheduling_scheduler=coscheduling_scheduler,
        progress=progress,
        own_written=own_written if key is not None else None,
        proven=proven,
    )
    ops = diff(pod, mutation.pod)
    # A pod that reports progress gets its endpoint's env and files first, and a preflight
    # container a copy of the pod's own env: mutated in full.
    reports = mutation.reading is not None and (
        mutation.reading.settings.report_progress or mutation.reading.settings.preflight
    )
    if key is not None and mutation.reading is not None and not reports:
        kept = _keep(pod, mutation.reading, mutation.pod, ops, mutation.warnings, *own[0])
        if kept is not None:
            _slot(key)[0] = kept
    return ops, mutation.warnings


def kept_count() -> int:
    return _slot.cache_info().currsize


def counts() -> Counts:
    return Counts(_counts["keyed"], _counts["reused"], _counts["full"], _counts["drafted"])


def forget() -> None:
    """Drop every kept patch (for measuring a job's first pod) and the counts."""
    _slot.cache_clear()
    _counts.clear()


def _owner(identity: PodIdentity) -> tuple[str, str]:
    return identity.owner_kind, identity.owner_name


def _fill(
    kept: _Kept, identity: PodIdentity, pod: Mapping[str, Any]
) -> tuple[list[PatchOp], list[str]] | None:
    place = place_pod(kept.reading, identity, pod)
    if place.placement.topology is not kept.reading.topology:
        return None  # an elastic pod beyond the stamp: its job's lists differ
    ops = _with_values(kept, kept.values, pod, place) if kept.values is not None else None
    if ops is not None:
        check_annotation_size(annotations_of(pod), kept.added_annotation_bytes)
        return ops, list(kept.shared_warnings)
    draft = Draft(pod)
    warnings: list[str] = []
    write_own(draft, pod, identity, place, kept.reading.training, warnings)
    own = _own_ops(pod, draft.root)
    if own is None or tuple((op["op"], op["path"]) for op in own) != kept.own_shape:
        return None
    check_annotation_size(annotations_of(pod), kept.added_annotation_bytes)
    ops = list(kept.ops)
    for position, op in zip(kept.own_at, own, strict=True):
        ops[position] = op
    _counts["drafted"] += 1
    return ops, warnings + kept.shared_warnings


def _with_values(
    kept: _Kept, values: _Values, pod: Mapping[str, Any], place: Place
) -> list[PatchOp] | None:
    """The kept patch with this pod's labels and env put in, as `write_own` and the diff would
    make them; None when its env names or changed labels are not the first pod's."""
    env = place.env
    if len(env) != len(values.env) or tuple(place.field_env.items()) != values.field_env:
        return None
    differ: list[tuple[int, str, str]] = []  # where this pod's env item differs, and its value
    for i, ((name, value), (first_name, first_value)) in enumerate(
        zip(env.items(), values.env.items(), strict=True)
    ):
        if name != first_name:
            return None
        if value != first_value:
            differ.append((i, name, value))
    wanted = identity_labels(place.placement)
    labels = labels_of(pod)
    changed = {key for key, value in wanted.items() if labels.get(key) != value}
    if changed != {key for _, key in values.labels}:
        return None
    spec: dict[str, Any] = field_of(pod, "spec") or {}
    check_hostname(spec.get("hostname"), place.placement)
    ops = list(kept.ops)
    for position, key in values.labels:
        ops[position] = {**ops[position], "value": wanted[key]}
    for position in values.envs:
        items = list(ops[position]["value"])
        for i, name, value in differ:
            items[i] = env_item(name, value)
        ops[position] = {**ops[position], "value": items}
    return ops


def _own_ops(pod: Mapping[str, Any], mutated: Mapping[str, Any]) -> list[PatchOp] | None:
    """`diff(pod, mutated)` for a pod that `write_own` alone changed, walking only what it
    writes (the labels, the containers' env) in the order the full diff walks them; None for a
    pod it gave a field the pod did not have."""
    if len(mutated) != len(pod) or not isinstance(pod.get("spec"), dict):
        return None
    ops: list[PatchOp] = []
    for key in pod:
        if key == "metadata":
            ops += diff(pod[key], mutated[key], "/metadata")
        elif key == "spec":
            spec, changed = pod[key], mutated[key]
            if len(changed) != len(spec):
                return None
            for field in spec:
                if field in ("initContainers", "containers") and spec[field] is not changed[field]:
                    for position, container in enumerate(spec[field]):
                        after = changed[field][position]
                        ops += diff(container, after, f"/spec/{field}/{position}")
    return ops


def _keep(
    pod: Mapping[str, Any],
    reading: PodReading,
    mutated: Mapping[str, Any],
    ops: list[PatchOp],
    warnings: list[str],
    own: list[PatchOp],
    own_encoded: bytes,
    own_warnings: int,
) -> _Kept | None:
    """What a later pod of the workload can take from this one's patch; None when its patch
    cannot be split into its own ops and ops every pod shares."""
    paths = [op["path"] for op in ops]
    own_at = []
    for op in own:
        if op["path"].endswith("/-") or op["path"] not in paths:
            return None
        own_at.append(paths.index(op["path"]))
    if jsoncodec.dumps([ops[position] for position in own_at]) != own_encoded:
        return None  # an own op was changed or joined by what was written after it
    shared = [op for position, op in enumerate(ops) if position not in own_at]
    if any(_varies(op["path"]) for op in shared):
        return None
    encoded = jsoncodec.dumps(shared)
    if any(value.encode() in encoded for value in _per_pod_values(pod)):
        return None
    return _Kept(
        reading,
        ops,
        tuple(own_at),
        tuple((op["op"], op["path"]) for op in own),
        warnings[own_warnings:],
        annotation_bytes(annotations_of(mutated)) - annotation_bytes(annotations_of(pod)),
        _values(pod, reading, own, own_at) if own_warnings == 0 else None,
    )


def _values(
    pod: Mapping[str, Any], reading: PodReading, own: list[PatchOp], own_at: list[int]
) -> _Values | None:
    """Where the first pod's own values sit, when its own ops are only its rank labels and the
    env put ahead of containers' env lists that have none of the same names; else None."""
    place = place_pod(reading, reading.identity, pod)
    wanted = identity_labels(place.placement)
    label_at = {f"/metadata/labels/{escape(key)}": key for key in wanted}
    names = {*place.env, *place.field_env}
    items = [env_item(k, v) for k, v in place.env.items()]
    items += [field_env_item(k, path) for k, path in place.field_env.items()]
    env_at: set[str] = set()
    for field, position, container in equipped(pod, reading.training):
        if env_by_name(container.get("env") or [], names):
            return None  # the user's own items decide what is added, and what is warned of
        if items:
            env_at.add(f"/spec/{field}/{position}/env")
    labels: list[tuple[int, str]] = []
    envs: list[int] = []
    for op, position in zip(own, own_at, strict=True):
        path = op["path"]
        if path in label_at and op["value"] == wanted[label_at[path]]:
            labels.append((position, label_at[path]))
        elif path in env_at and op["value"][: len(items)] == items:
            envs.append(position)
        else:
            return None
    if len(envs) != len(env_at):
        return None
    return _Values(
        tuple(labels),
        tuple(envs),
        dict(place.env),
        tuple(place.field_env.items()),
    )


def _varies(path: str) -> bool:
    """Whether an op at `path` touches what differs between pods."""
    return path.startswith(("/metadata/name", "/spec/hostname")) or any(
        path.startswith(f"/metadata/{field}/{key.replace('/', '~1')}")
        for field, keys in (("labels", _PER_POD_LABELS), ("annotations", _PER_POD_ANNOTATIONS))
        for key in keys
    )


def _per_pod_values(pod: Mapping[str, Any]) -> list[str]:
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    values = [metadata.get("name"), metadata.get("generateName"), spec.get("hostname")]
    values += [v.get("name") for v in spec.get("volumes") or [] if _is_token(v)]
    return [v for v in values if isinstance(v, str) and v]


def _is_token(volume: object) -> bool:
    name = volume.get("name") if isinstance(volume, dict) else None
    return isinstance(name, str) and name.startswith(TOKEN_VOLUME_PREFIX)


def _shared_encoding(pod: dict[str, Any]) -> bytes:
    """The pod encoded less what differs by its index; keys keep their order (the patch follows
    it). Its cost is bounded by the pod's size, whatever the pod claims."""
    same = dict(pod)
    metadata = pod.get("metadata")
    if isinstance(metadata, dict):
        copied: dict[str, Any] = dict(metadata)
        for key in _PER_POD_METADATA:
            _drop(copied, key)
        copied["labels"] = _without(metadata.get("labels"), _PER_POD_LABELS)
        copied["annotations"] = _without(metadata.get("annotations"), _PER_POD_ANNOTATIONS)
        same["metadata"] = copied
    spec = pod.get("spec")
    if isinstance(spec, dict):
        shared: dict[str, Any] = dict(spec)
        _drop(shared, "hostname")
        volumes = spec.get("volumes")
        tokens = {v["name"] for v in volumes if _is_token(v)} if isinstance(volumes, list) else ()
        if tokens and isinstance(volumes, list):
            shared["volumes"] = _renamed(volumes, tokens)
            for field in ("initContainers", "containers"):
                containers = spec.get(field)
                if isinstance(containers, list):
                    shared[field] = [_mounts_renamed(c, tokens) for c in containers]
        same["spec"] = shared
    return jsoncodec.dumps(same)


def _without(pairs: object, keys: frozenset[str]) -> object:
    if not isinstance(pairs, dict) or not any(key in pairs for key in keys):
        return pairs
    kept: dict[str, Any] = dict(pairs)
    for key in keys:
        _drop(kept, key)
    return kept


def _drop(pairs: dict[str, Any], key: str) -> None:
    """`pairs.pop(key, None)` through dict's own operations: compiled, `pop` is a method call."""
    if key in pairs:
        del pairs[key]  # noqa: RUF051


def _renamed(items: list[Any], tokens: set[str] | tuple[()]) -> list[Any]:
    return [
        {**item, "name": TOKEN_VOLUME_PREFIX}
        if isinstance(item, dict) and item.get("name") in tokens
        else item
        for item in items
    ]


def _mounts_renamed(container: object, tokens: set[str] | tuple[()]) -> object:
    if not isinstance(container, dict) or not isinstance(container.get("volumeMounts"), list):
        return container
    return {**container, "volumeMounts": _renamed(container["volumeMounts"], tokens)}
