"""trainhook.io/checkpoint-on-stop: a pod of such a job sees the sweeper's request to save a
checkpoint as a file, kept up to date by the kubelet; a bad value is refused in one line."""

from __future__ import annotations

import pytest

from webhook.core.mutation.admit import Policy, Request, admit

from .test_failure_rules import refusal
from .test_progress_pod import ENDPOINT, mutated

REPORTS = {"trainhook.io/report-progress": "true"}


def test_the_training_container_reads_the_request_at_etc_trainhook_checkpoint_requested() -> None:
    pod = mutated({**REPORTS, "trainhook.io/checkpoint-on-stop": "5m"})
    assert {
        "name": "trainhook-checkpoint",
        "downwardAPI": {
            "items": [
                {
                    "path": "requested",
                    "fieldRef": {
                        "fieldPath": "metadata.annotations['trainhook.io/checkpoint-requested']"
                    },
                }
            ]
        },
    } in pod["spec"]["volumes"]
    training, sidecar = pod["spec"]["containers"]
    assert {
        "name": "trainhook-checkpoint",
        "mountPath": "/etc/trainhook-checkpoint",
        "readOnly": True,
    } in training["volumeMounts"]
    assert "volumeMounts" not in sidecar


def test_a_pod_mutated_twice_gets_the_file_once() -> None:
    once = mutated({**REPORTS, "trainhook.io/checkpoint-on-stop": "5m"})
    request = Request(kind="Pod", operation="CREATE", object=once, namespace="ml")
    outcome = admit(request, policy=Policy(progress=ENDPOINT))
    assert outcome is None or not [
        op for op in outcome.patch if "trainhook-checkpoint" in str(op.get("value"))
    ]


def test_a_job_without_the_annotation_gets_no_file() -> None:
    pod = mutated(REPORTS)
    assert all(v["name"] != "trainhook-checkpoint" for v in pod["spec"].get("volumes") or [])


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {**REPORTS, "trainhook.io/checkpoint-on-stop": "soon"},
            "trainhook.io/checkpoint-on-stop: invalid value 'soon': a duration like 90s, 30m "
            "or 1h30m, from 10s to 1h",
        ),
        (
            {**REPORTS, "trainhook.io/checkpoint-on-stop": "2h"},
            "trainhook.io/checkpoint-on-stop: invalid value '2h': a duration like 90s, 30m "
            "or 1h30m, from 10s to 1h",
        ),
        (
            {**REPORTS, "trainhook.io/checkpoint-on-stop": "5s"},
            "trainhook.io/checkpoint-on-stop: invalid value '5s': a duration like 90s, 30m "
            "or 1h30m, from 10s to 1h",
        ),
        (
            {"trainhook.io/checkpoint-on-stop": "5m"},
            "trainhook.io/checkpoint-on-stop: invalid value '5m': the saved checkpoint comes "
            'from the job\'s progress reports: set trainhook.io/report-progress: "true" too, '
            "or remove it",
        ),
    ],
)
def test_a_bad_checkpoint_on_stop_is_refused_in_one_line(
    annotations: dict[str, str], message: str
) -> None:
    assert refusal(annotations) == message
