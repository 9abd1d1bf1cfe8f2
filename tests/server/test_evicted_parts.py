"""`python -m bench.evicted` times the admission part by part; its parts must do what the server
does, or their costs say nothing about the handler's."""

from __future__ import annotations

import base64
import json

import pytest

from bench.evicted import parts
from bench.reviews import Case, headline_cases


@pytest.mark.parametrize("case", headline_cases(), ids=lambda case: case.name[:24])
def test_the_core_part_makes_the_patch_the_handler_answers_with(case: Case) -> None:
    made = parts(case)

    outcome = made.core()
    answer = json.loads(made.handler())["response"]

    assert outcome is not None
    assert json.loads(base64.b64decode(answer["patch"])) == outcome.patch
    assert json.loads(made.nothing()) == {
        "response": {"uid": case.review["request"]["uid"], "allowed": True}
    }
