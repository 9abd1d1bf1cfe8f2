# ruff: noqa: F811  (the fixtures of test_progress are imported by name)
"""Only a pod admitted into a job reports its progress: a pod that carries the job's label, or
names the job's StatefulSet without its uid, is issued a token for the job's audience all the
same, and is refused; the job's progress and its pods stay as they were."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.emulator import EmulatorThread
from tests.sweeper.test_progress import (  # noqa: F401  (fixtures)
    REPORT,
    certs,
    clock,
    desk,
    endpoint,
    make_job,
    post,
    progress_of,
    token_for,
)
from webhook.core import contract
from webhook.sweeper.serving.progress import ProgressDesk

FORGED = {"trainerStatus": {"progressPercentage": 100, "metrics": [
    {"name": "lastCheckpointStep", "value": "9999"},
    {"name": "lastCheckpointTime", "value": "2026-01-23T10:30:00Z"},
]}}  # fmt: skip


def planted(emulator: EmulatorThread, name: str, owner: dict[str, Any] | None) -> tuple[str, str]:
    """A pod nobody admitted into the job: the job's labels copied, `owner` its controller."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {contract.FRAMEWORK: "pytorch", contract.JOB: "victim"},
        "annotations": {contract.REPORT_PROGRESS: "true"},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    made = emulator.create(
        "/api/v1/namespaces/ml/pods",
        {"metadata": metadata, "spec": {"containers": [{"name": "t"}]}},
    )
    return made["metadata"]["name"], made["metadata"]["uid"]


def victims_pod(emulator: EmulatorThread) -> Any:
    return emulator.read("/api/v1/namespaces/ml/pods/victim-0")


def test_a_pod_with_the_jobs_label_alone_is_refused_and_the_progress_is_untouched(
    emulator: EmulatorThread, desk: ProgressDesk, endpoint: str, certs: Path
) -> None:
    honest = make_job(emulator, "victim")
    assert post(endpoint, certs, "victim", token_for(emulator, "victim", honest),
                json.dumps(REPORT).encode())[0] == 200  # fmt: skip
    desk.flush()
    before = progress_of(emulator, "victim")
    sts = emulator.read("/apis/apps/v1/namespaces/ml/statefulsets/victim")
    claims = {
        "bare": None,
        "by-name": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "victim",
                    "uid": "11111111-2222-3333-4444-555555555555", "controller": True},
        "other-api": {"apiVersion": "example.com/v1", "kind": "StatefulSet", "name": "victim",
                      "uid": sts["metadata"]["uid"], "controller": True},
    }  # fmt: skip

    answers = {}
    for name, owner in claims.items():
        attacker = planted(emulator, f"attacker-{name}", owner)
        token = token_for(emulator, "victim", attacker)
        answers[name] = post(endpoint, certs, "victim", token, json.dumps(FORGED).encode())
    desk.clock.now += 60  # type: ignore[attr-defined]
    desk.flush()

    assert {name: status for name, (status, _) in answers.items()} == dict.fromkeys(claims, 403)
    assert answers["bare"][1]["message"] == (
        "this token may not report for job victim: the pod it was issued to, attacker-bare, "
        "is not a pod of the job"
    )
    assert progress_of(emulator, "victim") == before
    marked = victims_pod(emulator)["metadata"].get("annotations") or {}
    assert "9999" not in marked.get(contract.LAST_CHECKPOINT, "")


def test_a_pod_of_a_workload_that_does_not_report_is_refused(
    emulator: EmulatorThread, desk: ProgressDesk, endpoint: str, certs: Path
) -> None:
    pod = make_job(emulator, "quiet", report=False)
    status, answer = post(endpoint, certs, "quiet", token_for(emulator, "quiet", pod),
                          json.dumps(REPORT).encode())  # fmt: skip
    assert status == 403
    assert answer["message"] == (
        "this token may not report for job quiet: the pod it was issued to, quiet-0, "
        "is of a workload that does not report (trainhook.io/report-progress)"
    )


def test_the_checkpoint_lands_only_on_the_jobs_own_pods(
    emulator: EmulatorThread, desk: ProgressDesk, endpoint: str, certs: Path
) -> None:
    honest = make_job(emulator, "victim")
    planted(emulator, "bystander", None)
    assert post(endpoint, certs, "victim", token_for(emulator, "victim", honest),
                json.dumps(REPORT).encode())[0] == 200  # fmt: skip
    desk.flush()

    assert contract.LAST_CHECKPOINT in victims_pod(emulator)["metadata"]["annotations"]
    bystander = emulator.read("/api/v1/namespaces/ml/pods/bystander")
    assert contract.LAST_CHECKPOINT not in (bystander["metadata"].get("annotations") or {})
