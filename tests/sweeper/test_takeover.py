"""A dead replica's shards are served again within about one lease duration, while a shard
given up on shutdown still goes first to a replica below its share."""

from __future__ import annotations

from webhook.kube.client import Kube
from webhook.sweeper.lease import LeaseRecord, ShardElector, next_step

DURATION = 15


def lease(holder: str) -> LeaseRecord:
    return LeaseRecord(holder, DURATION, None, 0, "1", shards=2)


def test_a_replica_at_its_share_takes_a_dead_holders_shard_once_its_lease_expires():
    step = next_step(lease("dead"), "b", DURATION, holding=1, share=1, grace=DURATION)
    assert step == "acquire"


def test_a_replica_at_its_share_leaves_a_shard_given_up_to_one_below_it_for_a_while():
    assert next_step(lease(""), "b", 0.0, holding=1, share=1, grace=DURATION) == "wait"
    assert next_step(lease(""), "c", 0.0, holding=0, share=1, grace=DURATION) == "acquire"
    assert next_step(lease(""), "b", DURATION, holding=1, share=1, grace=DURATION) == "acquire"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(kube: Kube, identity: str, clock: Clock) -> ShardElector:
    return ShardElector(
        kube,
        namespace="trainhook",
        name="sweeper",
        identity=identity,
        shards=2,
        replicas=2,
        duration_seconds=DURATION,
        renew_deadline=10.0,
        retry_period=2.0,
        monotonic=clock,
    )


def test_the_survivor_of_two_replicas_serves_both_shards_one_lease_duration_after_the_other_died(
    kube,
):
    clock = Clock()
    a, b = elector(kube, "a", clock), elector(kube, "b", clock)
    a.step()
    b.step()
    assert (a.held(), b.held()) == (frozenset({0}), frozenset({1}))
    # a dies without giving its lease up; b keeps renewing, every retry period
    taken_after = None
    for tick in range(1, 40):
        clock.now += 1.0
        if tick % 2 == 0:
            b.step()
        if b.held() == frozenset({0, 1}):
            taken_after = tick
            break
    assert taken_after is not None
    assert taken_after <= DURATION + 2  # one lease duration, seen at the next poll
