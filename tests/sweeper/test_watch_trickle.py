"""A pod watch that trickles is read at most every pause, its events of a pause together; the
first event after a quiet second, and a burst, are read at once; close() ends a pause."""

from __future__ import annotations

import itertools
import threading
import time
from functools import partial
from typing import Any

import pytest

from tests.support.emulator import EmulatorThread
from tests.support.sweeping import fast_config
from webhook.kube.client import Kube
from webhook.kube.resources import PODS
from webhook.sweeper.runner import Sweeper


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "x"}]},
    }


class Watching:
    """A watch of the namespace's pods from now, read in a thread: when each event came, by
    name."""

    def __init__(self, kube: Kube, pause: float) -> None:
        _, version = kube.list(PODS, "ml", "app=web")
        self.stream = kube.watch(PODS, "ml", "app=web", version, 60, trickle_pause=pause)
        self.received: list[tuple[float, str]] = []
        self.ended = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for event in self.stream:
                self.received.append((time.monotonic(), event["object"]["metadata"]["name"]))
        finally:
            self.ended.set()

    def close(self) -> None:
        self.stream.close()
        assert self.ended.wait(5), "the watch did not end"


def send(emulator: EmulatorThread, names: list[str], every: float) -> dict[str, float]:
    """Each pod changed in turn, `every` seconds apart; when each was sent."""
    sent: dict[str, float] = {}
    for name in names:
        emulator.call(partial(emulator.emulator.change, PODS, "MODIFIED", pod(name)))
        sent[name] = time.monotonic()
        time.sleep(every)
    return sent


def reads(received: list[tuple[float, str]], apart: float = 0.05) -> int:
    """How many times the watch was read: events that came within `apart` of the one before
    came with the same read."""
    times = [at for at, _ in received]
    return 1 + sum(1 for before, at in itertools.pairwise(times) if at - before > apart)


@pytest.fixture
def pods(emulator: EmulatorThread) -> list[str]:
    names = [f"p{i:03}" for i in range(300)]
    emulator.call(lambda: emulator.emulator.load(PODS, [pod(name) for name in names]))
    return names


@pytest.mark.parametrize("pause, most_reads", [(0.0, None), (0.3, 10)])
def test_a_trickle_is_read_once_a_pause_and_no_event_waits_longer_than_one(
    emulator: EmulatorThread, kube: Kube, pods: list[str], pause: float, most_reads: int | None
) -> None:
    watching = Watching(kube, pause)
    try:
        time.sleep(1.2)  # the watch is open, and quiet for longer than a trickle's gap
        sent = send(emulator, pods[:20], every=0.1)
        time.sleep(pause + 0.5)
    finally:
        watching.close()
    came = {name: at for at, name in watching.received}
    assert sorted(came) == pods[:20]
    waited = {name: came[name] - sent[name] for name in sent}
    assert waited[pods[0]] < 0.1, "the first event after a quiet second is read at once"
    assert max(waited.values()) < pause + 0.15
    if most_reads is None:
        assert reads(watching.received) >= 16  # about one read an event
    else:
        assert reads(watching.received) <= most_reads  # 20 events, a read every 0.3 s or so


def test_a_burst_is_read_without_pausing(
    emulator: EmulatorThread, kube: Kube, pods: list[str]
) -> None:
    watching = Watching(kube, pause=0.5)
    try:
        time.sleep(1.2)

        def burst() -> None:
            for name in pods:
                emulator.emulator.change(PODS, "MODIFIED", pod(name))

        emulator.call(burst)
        began = time.monotonic()
        while len(watching.received) < len(pods) and time.monotonic() - began < 10:
            time.sleep(0.01)
        took = time.monotonic() - began
    finally:
        watching.close()
    assert [name for _, name in watching.received] == pods
    # Paused after every read, 300 events would take minutes; a busy stream is never paused
    # (at most one pause before it is seen as busy).
    assert took < 2.0


def test_a_watch_as_busy_as_64_events_a_second_is_no_longer_paused(
    emulator: EmulatorThread, kube: Kube, pods: list[str]
) -> None:
    watching = Watching(kube, pause=0.5)
    sent: dict[str, float] = {}
    try:
        time.sleep(1.2)
        for first, second in zip(pods[::2], pods[1::2], strict=True):  # two every 10 ms
            emulator.call(partial(send_both, emulator, first, second))
            sent[first] = sent[second] = time.monotonic()
            time.sleep(0.01)
        time.sleep(1.0)
    finally:
        watching.close()
    came = {name: at for at, name in watching.received}
    assert sorted(came) == pods
    # Once the last second held 64 events or more, each is read as it comes (a pause on each
    # trickling read would hold some of them up to half a second).
    late = [came[name] - sent[name] for name in pods[len(pods) // 2 :]]
    assert max(late) < 0.15, max(late)


def send_both(emulator: EmulatorThread, first: str, second: str) -> None:
    emulator.emulator.change(PODS, "MODIFIED", pod(first))
    emulator.emulator.change(PODS, "MODIFIED", pod(second))


def test_closing_a_watch_ends_its_pause_at_once(
    emulator: EmulatorThread, kube: Kube, pods: list[str]
) -> None:
    watching = Watching(kube, pause=30.0)
    time.sleep(1.2)
    send(emulator, pods[:2], every=0.1)  # the second read waited: a trickle, then a pause
    time.sleep(0.3)
    began = time.monotonic()
    watching.close()
    assert time.monotonic() - began < 2.0
    assert [name for _, name in watching.received] == pods[:2]


@pytest.mark.parametrize("batch, pause", [(1.0, 0.5), (0.4, 0.2), (0.0, 0.0), (5.0, 0.5)])
def test_the_sweepers_pod_watches_pause_half_a_batch_period_at_most_half_a_second(
    kube: Kube, batch: float, pause: float
) -> None:
    sweeper = Sweeper(kube, fast_config("sweeper-a", batch_seconds=batch))
    by_resource = {resource: informer for (resource, _), informer in sweeper.watches.items()}
    assert by_resource[PODS].trickle_pause == pause
    assert {i.trickle_pause for r, i in by_resource.items() if r != PODS} == {0.0}
