"""The types the Kubernetes schema gives the fields Trainhook reads, to name what is malformed.

The API server only sends objects it has decoded into their Go types, so a well-formed object
is the rule and this check runs only after the core failed on one: it tells a client that sent
a malformed object which field is wrong, and leaves a real fault of the webhook to be one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final


@dataclass(frozen=True)
class MapOf:
    """A JSON object with any keys, every value of one shape (labels, limits, ...)."""

    value: Shape


@dataclass(frozen=True)
class ListOf:
    item: Shape


@dataclass(frozen=True)
class AnyOf:
    """int-or-string fields, such as quantities."""

    shapes: tuple[type, ...]


Shape = type | MapOf | ListOf | AnyOf | Mapping[str, "Shape"]

QUANTITY: Final = AnyOf((str, int, float))
METADATA: Final[Shape] = {
    "name": str,
    "generateName": str,
    "namespace": str,
    "labels": MapOf(str),
    "annotations": MapOf(str),
    "ownerReferences": ListOf({"kind": str, "name": str, "controller": bool}),
}
CONTAINER: Final[Shape] = {
    "name": str,
    "env": ListOf({"name": str, "value": str, "valueFrom": dict}),
    "resources": {"limits": MapOf(QUANTITY), "requests": MapOf(QUANTITY)},
    "volumeMounts": ListOf({"name": str, "mountPath": str}),
}
POD_SPEC: Final[Shape] = {
    "containers": ListOf(CONTAINER),
    "initContainers": ListOf(CONTAINER),
    "volumes": ListOf({"name": str}),
    "hostname": str,
    "subdomain": str,
    "schedulerName": str,
}
TEMPLATE: Final[Shape] = {"metadata": METADATA, "spec": POD_SPEC}
SELECTOR: Final[Shape] = {
    "matchLabels": MapOf(str),
    "matchExpressions": ListOf({"key": str, "operator": str, "values": ListOf(str)}),
}
KINDS: Final[Mapping[str, Shape]] = {
    "Pod": {"metadata": METADATA, "spec": POD_SPEC},
    "StatefulSet": {
        "metadata": METADATA,
        "spec": {
            "replicas": int,
            "ordinals": {"start": int},
            "serviceName": str,
            "podManagementPolicy": str,
            "selector": SELECTOR,
            "template": TEMPLATE,
        },
    },
    "Job": {
        "metadata": METADATA,
        "spec": {
            "completionMode": str,
            "completions": int,
            "parallelism": int,
            "selector": SELECTOR,
            "template": TEMPLATE,
        },
    },
}

_NAMES: Final = {
    dict: "an object",
    list: "an array",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "a boolean",
}


def malformed(obj: Mapping[str, Any], kind: str) -> str | None:
    """The first field of `obj` whose type is not the schema's, as a one-line message."""
    shape = KINDS.get(kind)
    if shape is None:
        return None
    return _check(obj, shape, "request.object")


def _check(value: Any, shape: Shape, path: str) -> str | None:
    if value is None:
        return None  # absent and null are alike to Kubernetes
    if isinstance(shape, type):
        return None if _is(value, (shape,)) else _wrong(path, _NAMES.get(shape, "an object"), value)
    if isinstance(shape, AnyOf):
        return None if _is(value, shape.shapes) else _wrong(path, "a string or a number", value)
    if isinstance(shape, ListOf):
        if not isinstance(value, list):
            return _wrong(path, "an array", value)
        return _first(
            _wrong(f"{path}[{i}]", "an object", item)
            if item is None  # a list of null items is not what any schema allows
            else _check(item, shape.item, f"{path}[{i}]")
            for i, item in enumerate(value)
        )
    if not isinstance(value, dict):
        return _wrong(path, "an object", value)
    if isinstance(shape, MapOf):
        return _first(
            _wrong(f"{path}[{k!r}]", "set", v)
            if v is None
            else _check(v, shape.value, f"{path}[{k!r}]")
            for k, v in value.items()
        )
    return _first(_check(value.get(key), inner, f"{path}.{key}") for key, inner in shape.items())


def _is(value: Any, types: tuple[type, ...]) -> bool:
    if isinstance(value, bool):
        return bool in types
    return isinstance(value, types)


def _first(problems: Any) -> str | None:
    return next((problem for problem in problems if problem is not None), None)


def _wrong(path: str, expected: str, value: Any) -> str:
    got = "null" if value is None else _NAMES.get(type(value), type(value).__name__)
    return f"{path} must be {expected}, got {got}"
