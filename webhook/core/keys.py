"""Every trainhook.io/ key on an object must be one Trainhook knows, in the place it is read.

A misspelt key (`trainhook.io/gpu`) would otherwise be ignored without a word, and the job run
without what it asked for; the refusal names the nearest known key.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from webhook.core import contract
from webhook.core.errors import TrainhookError

KNOWN = contract.known_keys()
ANNOTATIONS = KNOWN - frozenset(contract.LABELS) | frozenset(contract.LABELS_AND_ANNOTATIONS)


class UnknownKey(TrainhookError):
    """A trainhook.io/ label or annotation key that is not part of the contract."""

    def __init__(self, key: str, value: str, where: str, hint: str) -> None:
        self.key = key
        shown = value if len(value) <= 60 else value[:59] + "…"
        super().__init__(f"{key}: unknown {where} (value {shown!r}); {hint}")


_CHECKED_AT_MOST = 256
# Every pod of a job carries the same keys: a set of keys found good is not looked at again.
_checked: set[tuple[tuple[str, ...], tuple[str, ...]]] = set()


def check_keys(labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
    """Raise UnknownKey for the first trainhook.io/ label or annotation Trainhook does not read."""
    keys = (tuple(labels), tuple(annotations))
    if keys in _checked:
        return
    _check(labels, annotations)
    if len(_checked) >= _CHECKED_AT_MOST:
        _checked.clear()
    _checked.add(keys)


def _check(labels: Mapping[str, str], annotations: Mapping[str, str]) -> None:
    for key, value in labels.items():
        if key.startswith(contract.PREFIX) and key not in contract.LABELS:
            raise UnknownKey(key, value, "label", _hint(key, contract.LABELS, "label"))
    for key, value in annotations.items():
        if key.startswith(contract.PREFIX) and key not in ANNOTATIONS:
            raise UnknownKey(key, value, "annotation", _hint(key, ANNOTATIONS, "annotation"))


def _hint(key: str, allowed: frozenset[str] | tuple[str, ...], where: str) -> str:
    if where == "label" and key in ANNOTATIONS:
        return f"{key} is an annotation, not a label"
    if where == "annotation" and key in contract.LABELS:
        return f"{key} is a label, not an annotation"
    names = sorted(name.removeprefix(contract.PREFIX) for name in allowed)
    short = key.removeprefix(contract.PREFIX)
    close = (
        difflib.get_close_matches(short, names, n=1, cutoff=0.6)
        or [name for name in names if short and name.startswith(short)][:1]
    )
    if close:
        return f"did you mean {contract.PREFIX}{close[0]}?"
    return f"the {contract.PREFIX} {where}s are {', '.join(names)}"
