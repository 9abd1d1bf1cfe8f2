"""A copy-on-write draft of a Kubernetes object.

Only the dicts and lists on the path to a change are copied; everything else is shared with the
original, which stays untouched. That keeps admission cheap and lets `webhook.core.patch.diff` skip
unchanged subtrees by identity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

Key = str | int


class Draft:
    def __init__(self, original: Mapping[str, Any]) -> None:
        self.original = original
        self.root: dict[str, Any] = dict(original)
        self._owned: set[int] = {id(self.root)}

    def dict_at(self, *path: Key) -> dict[str, Any]:
        """The dict at `path`, copied for writing; missing dicts on the way are created."""
        return self._walk(path, dict)  # type: ignore[no-any-return]

    def list_at(self, *path: Key) -> list[Any]:
        """The list at `path`, copied for writing; created empty when missing."""
        return self._walk(path, list)  # type: ignore[no-any-return]

    def _walk(self, path: tuple[Key, ...], last: type) -> Any:
        # One loop, no call per step: mutations walk these paths many times per admission.
        node: Any = self.root
        owned = self._owned
        final = len(path) - 1
        for depth, key in enumerate(path):
            if isinstance(node, dict):  # dict's own lookup, compiled
                child = node.get(key)
            elif isinstance(node, list):
                child = node[key]  # type: ignore[index]
            else:
                child = node.get(key)
            if child is None:
                child = last() if depth == final else {}
            elif id(child) in owned:
                node = child
                continue
            else:
                child = type(child)(child)
            node[key] = child
            owned.add(id(child))
            node = child
        return node
