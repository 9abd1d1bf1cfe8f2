"""Run a measurement in a process of its own, so what it measures of memory is its own: in one
long process the memory an earlier section freed is reused and reads as nothing added."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def in_fresh_process(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` in a new interpreter (spawned, not forked: nothing inherited)."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=1, mp_context=context) as pool:
        return pool.submit(function, *args).result()
