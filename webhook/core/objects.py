"""Reading Kubernetes objects given as dicts shaped like the API's JSON (camelCase keys).

Every accessor tolerates a missing or null field: it answers an empty mapping instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata: Mapping[str, Any] = obj.get("metadata") or {}
    return metadata


def labels_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def annotations_of(obj: Mapping[str, Any]) -> Mapping[str, str]:
    return (obj.get("metadata") or {}).get("annotations") or {}


def template_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The pod template of a StatefulSet or Job."""
    return (obj.get("spec") or {}).get("template") or {}


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp as Kubernetes writes it; None when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return None
    return _parsed(value)


# A job's objects carry few distinct timestamps, read again by every review and decision.
@lru_cache(maxsize=1024)
def _parsed(value: str) -> datetime | None:
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
