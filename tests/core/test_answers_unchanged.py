"""The webhook answers every example's workloads and pods with the very bytes it answered before
a job's later pods took their patch from its first (recorded by `tests.core.answers`)."""

from __future__ import annotations

import json

import pytest

from tests.core.answers import RECORDED, example_answers
from webhook.core.mutation import pod_patches


@pytest.mark.parametrize("first_pods_kept", [False, True])
def test_every_answer_is_byte_for_byte_the_recorded_one(first_pods_kept: bool) -> None:
    pod_patches.forget()
    if first_pods_kept:
        example_answers()  # every job's pods again: now each finds its first pod's patch kept
    recorded = json.loads(RECORDED.read_text())

    answers = example_answers()

    assert sorted(answers) == sorted(recorded)
    changed = [key for key in recorded if answers[key] != recorded[key]]
    assert changed == []
