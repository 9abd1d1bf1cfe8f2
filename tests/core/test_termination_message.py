"""The training container keeps the end of its log as its termination message."""

from __future__ import annotations

from typing import Any

import jsonpatch

from tests.support.builders import statefulset
from webhook.core.mutation.admit import Request, admit
from webhook.core.render import expand


def admitted_pod(containers: list[dict[str, Any]]) -> dict[str, Any]:
    written = statefulset("pt", "pytorch", containers=containers)
    stamped = admit(Request("StatefulSet", "CREATE", written, "default"))
    assert stamped is not None
    pod = expand(jsonpatch.apply_patch(written, stamped.patch), "default")[0]
    pod["metadata"]["ownerReferences"] = [{"kind": "StatefulSet", "name": "pt", "controller": True}]
    outcome = admit(Request("Pod", "CREATE", pod, "default"))
    assert outcome is not None
    result: dict[str, Any] = jsonpatch.apply_patch(pod, outcome.patch)
    return result


def policies(pod: dict[str, Any]) -> dict[str, str | None]:
    return {c["name"]: c.get("terminationMessagePolicy") for c in pod["spec"]["containers"]}


def test_the_training_container_falls_back_to_its_log_and_a_sidecar_is_left_alone() -> None:
    pod = admitted_pod(
        [
            {"name": "pytorch", "image": "t", "terminationMessagePolicy": "File"},
            {"name": "logs", "image": "s", "terminationMessagePolicy": "File"},
        ]
    )
    assert policies(pod) == {"pytorch": "FallbackToLogsOnError", "logs": "File"}


def test_a_container_without_a_policy_gets_it_and_one_that_has_it_is_unchanged() -> None:
    assert policies(admitted_pod([{"name": "pytorch", "image": "t"}])) == {
        "pytorch": "FallbackToLogsOnError"
    }
    again = admitted_pod(
        [{"name": "pytorch", "image": "t", "terminationMessagePolicy": "FallbackToLogsOnError"}]
    )
    assert policies(again) == {"pytorch": "FallbackToLogsOnError"}
