"""JSONPatch from an object and its mutated copy.

Mutations copy only what they change (see `webhook.core.draft`), so unchanged subtrees are the very
same objects in both versions and the diff skips them by identity. The patch applies to the
object exactly as received: a missing parent is added whole, and lists that only grew at the
end get appends, so it never depends on indexes the API server might not have.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict


class PatchOp(TypedDict, total=False):
    op: str
    path: str
    value: Any


def escape(key: str) -> str:
    if "~" in key or "/" in key:
        return key.replace("~", "~0").replace("/", "~1")
    return key


def diff(old: Any, new: Any, path: str = "") -> list[PatchOp]:
    ops: list[PatchOp] = []
    _diff(old, new, path, ops)
    return ops


# Final: compiled, a constant rather than a read of the module's globals for every key compared.
_MISSING: Final[Any] = object()


def _diff(old: Any, new: Any, path: str, ops: list[PatchOp]) -> None:
    # Children are compared by identity before any call or path is made: on the admission path
    # almost every child is shared with the original.
    if old is new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        added = 0
        for key, value in new.items():
            before = old.get(key, _MISSING)
            if before is value:
                continue
            if before is _MISSING:
                added += 1
                ops.append({"op": "add", "path": f"{path}/{escape(key)}", "value": value})
            else:
                _diff(before, value, f"{path}/{escape(key)}", ops)
        if len(old) > len(new) - added:
            for key in old:
                if key not in new:
                    ops.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        return
    if isinstance(old, list) and isinstance(new, list):
        if len(new) == len(old):
            for index, (before, after) in enumerate(zip(old, new, strict=True)):
                if before is not after:
                    _diff(before, after, f"{path}/{index}", ops)
            return
        if len(new) > len(old) and new[: len(old)] == old:  # elements compare by identity first
            ops.extend({"op": "add", "path": f"{path}/-", "value": v} for v in new[len(old) :])
            return
        grown = len(new) - len(old)
        if len(old) > grown > 0 and new[grown:] == old:
            # Grew at the front by less than it held (the job's env before a long env of the
            # user's): inserted one by one, so the patch grows with what was added, not with
            # what the list held.
            ops.extend(
                {"op": "add", "path": f"{path}/{index}", "value": v}
                for index, v in enumerate(new[:grown])
            )
            return
    if old != new or type(old) is not type(new):
        ops.append({"op": "replace", "path": path, "value": new})
