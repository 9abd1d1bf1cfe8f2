"""Waiting in tests without guessing how long: poll until a condition holds, within a bound."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def eventually(check: Callable[[], T | None], timeout: float = 10.0, what: str = "") -> T:
    """Poll `check()` until it returns something truthy, and return that.

    Fails the test with `what` (or the check) named when it has not within `timeout` seconds.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what or check}")
        time.sleep(0.02)
