"""Reading Kubernetes objects given as dicts shaped like the API's JSON (camelCase keys).

Every accessor tolerates a missing or null field: it answers an empty dict instead. The parts it
answers are the decoder's dicts, typed as such so that the compiled admission path reads them
through dict's own methods; a part that is set but no object raises TypeError (the server then
names the malformed field: `webhook.server.shape`).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any


def metadata_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    return _object_at(obj, "metadata")


def labels_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return _object_at(metadata_of(obj), "labels")


def annotations_of(obj: Mapping[str, Any]) -> dict[str, str]:
    return _object_at(metadata_of(obj), "annotations")


def template_of(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The pod template of a StatefulSet or Job."""
    return _object_at(_object_at(obj, "spec"), "template")


def _object_at(parent: Mapping[str, Any], key: str) -> dict[Any, Any]:
    value = field_of(parent, key) or {}
    if not isinstance(value, dict):  # in plain Python as compiled, where the type is checked
        raise TypeError(f"{key} is not an object")
    return value


def field_of(obj: Mapping[str, Any], key: str) -> Any:
    """`obj.get(key)`, through dict's own lookup for the decoder's dicts: compiled, a mapping
    typed only as a Mapping is read by a method call that costs about twice as much."""
    if isinstance(obj, dict):
        return obj.get(key)
    return obj.get(key)


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
