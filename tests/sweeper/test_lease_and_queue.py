"""Leader election decisions, the work queue and the error backoff, without any server."""

from webhook.kube.informer import backoff
from webhook.sweeper.lease import LeaseRecord, next_step
from webhook.sweeper.queue import WorkQueue


def lease(holder, duration=15):
    return LeaseRecord(holder, duration, "2025-01-01T00:00:00.000000Z", 2, "7")


def test_the_first_candidate_creates_the_lease():
    assert next_step(None, "a", 0.0) == "create"


def test_the_holder_renews_its_lease():
    assert next_step(lease("a"), "a", 100.0) == "renew"


def test_a_follower_waits_while_the_holder_keeps_renewing():
    assert next_step(lease("a"), "b", 14.9) == "wait"


def test_a_follower_takes_over_a_lease_left_unchanged_for_its_duration():
    assert next_step(lease("a"), "b", 15.0) == "acquire"


def test_a_released_lease_is_taken_at_once():
    assert next_step(lease(""), "b", 0.0) == "acquire"


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def test_the_queue_hands_out_each_job_once_and_earliest_first():
    clock = Clock()
    queue = WorkQueue(clock)
    queue.add(("ml", "b"), 2.0)
    queue.add(("ml", "a"))
    queue.add(("ml", "a"))
    assert len(queue) == 2
    assert queue.pop(timeout=0) == ("ml", "a")
    assert queue.pop(timeout=0) is None
    clock.now += 2.0
    assert queue.pop(timeout=0) == ("ml", "b")
    assert len(queue) == 0


def test_an_earlier_request_for_a_job_replaces_a_later_one():
    clock = Clock()
    queue = WorkQueue(clock)
    queue.add(("ml", "a"), 30.0)
    queue.add(("ml", "a"), 0.0)
    assert queue.pop(timeout=0) == ("ml", "a")
    clock.now += 60
    assert queue.pop(timeout=0) is None


def test_a_later_request_does_not_postpone_a_job_already_due():
    clock = Clock()
    queue = WorkQueue(clock)
    queue.add(("ml", "a"))
    queue.add(("ml", "a"), 30.0)
    assert queue.pop(timeout=0) == ("ml", "a")


def test_errors_back_off_exponentially_up_to_a_minute():
    assert [backoff(n, 1.0) for n in (1, 2, 3, 4, 7, 20)] == [1.0, 2.0, 4.0, 8.0, 60.0, 60.0]
