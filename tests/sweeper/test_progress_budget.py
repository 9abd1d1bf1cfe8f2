# ruff: noqa: F811  (the fixtures of test_progress are imported by name)
"""What one tenant's junk costs the others: new tokens are reviewed on a budget per namespace,
so a flood of junk tokens in one namespace leaves another's honest reports their own."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.emulator import EmulatorThread
from tests.sweeper.test_progress import (  # noqa: F401  (fixtures)
    REPORT,
    certs,
    clock,
    desk,
    endpoint,
    make_job,
    post,
    token_for,
)
from webhook.core.job.progress import status_path
from webhook.sweeper.serving.progress import ProgressDesk


def test_junk_tokens_from_one_namespace_leave_another_namespaces_new_tokens_reviewed(
    emulator: EmulatorThread, desk: ProgressDesk, endpoint: str, certs: Path
) -> None:
    honest = [token_for(emulator, f"job-{n}", make_job(emulator, f"job-{n}")) for n in range(5)]
    junk = [
        desk.handle(
            status_path("tenant-b", "anything"),
            {"Authorization": f"Bearer junk-{n}", "Content-Type": "application/json"},
            b"{}",
        ).status
        for n in range(200)  # the clock stands still: all at once
    ]

    answers = [
        post(endpoint, certs, f"job-{n}", token, json.dumps(REPORT).encode())[0]
        for n, token in enumerate(honest)
    ]

    assert set(junk) == {403, 429} and junk.count(403) <= 20
    assert answers == [200] * 5


def test_a_namespace_flooding_new_tokens_is_told_which_budget_it_spent(
    emulator: EmulatorThread, desk: ProgressDesk
) -> None:
    answers = [
        desk.handle(
            status_path("tenant-b", "anything"), {"Authorization": f"Bearer junk-{n}"}, b"{}"
        )
        for n in range(30)
    ]
    refused = [a for a in answers if a.status == 429]
    assert refused and refused[0].body["message"] == (
        "too many new tokens from namespace tenant-b at once: retry later"
    )
