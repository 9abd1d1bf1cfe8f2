"""What the sweeper records on a workload in compact form: the failed runs counted for its
pods, and lists of role indexes ("1,3-5,7", as a Job's completedIndexes)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True)
class FailedRuns:
    """Failed runs counted for the pods of one workload: those of pods that are gone, and per
    live pod (by its short uid). Recorded on the workload, so replacing a pod loses nothing."""

    gone: int
    pods: Mapping[str, int]
    # The record it was read from: a workload written again with the same record keeps the
    # ledger it was read with (a large job's names thousands of pods).
    text: str | None = field(default=None, compare=False, repr=False)

    @staticmethod
    def parse(raw: str | None) -> FailedRuns:
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            value = {}
        if not isinstance(value, dict):
            value = {}
        gone = value.get("gone")
        pods = value.get("pods")
        return FailedRuns(
            gone if isinstance(gone, int) and gone >= 0 else 0,
            {
                str(k): v
                for k, v in (pods.items() if isinstance(pods, dict) else ())
                if isinstance(v, int) and v > 0
            },
            raw,
        )

    def format(self) -> str:
        return json.dumps({"gone": self.gone, "pods": dict(self.pods)}, separators=(",", ":"))


def parse_indexes(text: str) -> frozenset[int]:
    """A Job's completedIndexes, e.g. "1,3-5,7"."""
    found: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            found.update(range(int(low), int(high or low) + 1))
    return frozenset(found)


def format_indexes(indexes: Iterable[int]) -> str:
    """The inverse of parse_indexes: runs of consecutive indexes as ranges."""
    parts: list[str] = []
    ordered = sorted(set(indexes))
    start = 0
    for i, index in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1] == index + 1:
            continue
        low = ordered[start]
        parts.append(str(low) if low == index else f"{low}-{index}")
        start = i + 1
    return ",".join(parts)
