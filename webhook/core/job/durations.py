"""Durations as people write them in annotations: `90s`, `30m`, `1h30m`, `2d`."""

from __future__ import annotations

from typing import Final

from webhook.core import contract
from webhook.core.errors import InvalidSetting

UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds_of(text: str) -> int | None:
    """The whole seconds of a duration (numbers each followed by s, m, h or d, largest unit
    first, each unit once); None for anything else."""
    if not text or len(text) > 32:
        return None
    total, number, last = 0, "", None
    order = list(UNITS)
    for char in text:
        if char.isdigit() and char.isascii():
            number += char
            continue
        if char not in UNITS or not number:
            return None
        at = order.index(char)
        if last is not None and at >= last:
            return None  # units from the largest down, each once: 1h30m, not 30m1h
        total += int(number) * UNITS[char]
        number, last = "", at
    return None if number else total


def duration(key: str, value: str | None, low: int, high: int) -> int | None:
    """A duration setting in seconds, from `low` to `high`; refused in one line otherwise."""
    if value is None:
        return None
    seconds = seconds_of(value.strip())
    if seconds is None or not low <= seconds <= high:
        raise InvalidSetting(
            key,
            value,
            f"a duration like 90s, 30m or 1h30m, from {_shown(low)} to {_shown(high)}",
        )
    return seconds


def _shown(seconds: int) -> str:
    for unit in ("d", "h", "m"):
        if seconds % UNITS[unit] == 0:
            return f"{seconds // UNITS[unit]}{unit}"
    return f"{seconds}s"


# A stall is judged between progress reports (a few a minute at most): a minute at least.
MIN_STALL: Final = 60
MAX_STALL: Final = 7 * 86400


def stall_timeout(value: str | None) -> int | None:
    """trainhook.io/stall-timeout in seconds."""
    return duration(contract.STALL_TIMEOUT, value, MIN_STALL, MAX_STALL)
