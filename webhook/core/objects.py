"""Reading Kubernetes objects given as dicts shaped like the API's JSON (camelCase keys).

Every accessor tolerates a missing or null field: it answers an empty mapping instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def template_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod template of a StatefulSet or Job."""
    return (obj.get("spec") or {}).get("template") or {}
