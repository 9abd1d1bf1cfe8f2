"""The sweeper's full garbage collections, at idle moments rather than on pod events."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from webhook.sweeper.heap import FULL_AFTER, THAW_EVERY, Heap


class Node:
    """An object in a reference cycle: only the cyclic collector frees it."""

    def __init__(self) -> None:
        self.me = self


@pytest.fixture(autouse=True)
def thawed() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()  # what a test froze goes back to the interpreter's passes
    gc.set_threshold(*thresholds)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_tidy_freezes_what_survives_so_the_interpreters_own_passes_skip_it() -> None:
    kept = [Node() for _ in range(100)]
    heap = Heap(60.0, Clock())
    assert heap.tidy()
    assert gc.get_freeze_count() >= len(kept)
    assert all(node.me is node for node in kept)


def test_a_tidy_comes_at_most_once_a_period() -> None:
    clock = Clock()
    heap = Heap(60.0, clock)
    assert heap.tidy()
    clock.now = 59.0
    assert not heap.tidy()
    clock.now = 60.0
    assert heap.tidy()
    assert heap.tidied == 2


def test_cyclic_garbage_made_between_tidies_is_collected_by_the_next() -> None:
    clock = Clock()
    heap = Heap(60.0, clock)
    heap.tidy()
    node = Node()
    gone = weakref.ref(node)
    del node
    clock.now = 60.0
    heap.tidy()
    assert gone() is None


def test_cyclic_garbage_among_frozen_objects_is_collected_by_a_thawing_tidy() -> None:
    clock = Clock()
    heap = Heap(60.0, clock)
    node = Node()
    gone = weakref.ref(node)
    heap.tidy()  # frozen while alive
    del node
    for tidy in range(1, THAW_EVERY):
        clock.now = 60.0 * tidy
        heap.tidy()
        assert gone() is not None  # frozen: the interpreter's passes and these tidies skip it
    clock.now = 60.0 * THAW_EVERY
    heap.tidy()
    assert gone() is None


def test_a_period_of_zero_leaves_the_collector_as_the_interpreter_runs_it() -> None:
    thresholds = gc.get_threshold()
    heap = Heap(0.0, Clock())
    before = gc.get_freeze_count()
    assert not heap.tidy()
    assert gc.get_freeze_count() == before
    assert gc.get_threshold() == thresholds


def test_the_interpreters_own_full_passes_come_after_a_thousand_middle_ones_not_ten() -> None:
    young, middle, _ = gc.get_threshold()
    Heap(60.0, Clock())
    assert gc.get_threshold() == (young, middle, FULL_AFTER) == (young, middle, 1000)


def _walked(heap: Heap) -> list[int]:
    """The generations the collector's passes during one tidy walked up to."""
    walked: list[int] = []

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            walked.append(info["generation"])

    gc.callbacks.append(seen)
    try:
        heap.tidy()
    finally:
        gc.callbacks.remove(seen)
    return walked


def test_only_the_thawing_tidy_walks_every_generation_the_others_walk_the_young_ones() -> None:
    clock = Clock()
    heap = Heap(60.0, clock)
    walks = []
    for tidy in range(THAW_EVERY + 1):
        clock.now = 60.0 * tidy
        walks.append(_walked(heap))
    assert walks == [[2]] + [[1]] * (THAW_EVERY - 1) + [[2]]


def test_cyclic_garbage_that_grew_old_before_it_died_waits_for_the_thawing_tidy() -> None:
    clock = Clock()
    heap = Heap(60.0, clock)
    heap.tidy()
    node = Node()
    gone = weakref.ref(node)
    gc.collect(1)  # survives the middle generation's pass: it is old now
    del node
    clock.now = 60.0
    heap.tidy()
    assert gone() is not None
    for tidy in range(2, THAW_EVERY + 1):
        clock.now = 60.0 * tidy
        heap.tidy()
    assert gone() is None
