"""Shortcuts for decision tests: a job's state from its objects, and its decision."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.stored import NAMESPACE
from webhook.core import contract
from webhook.sweeper.actions import Action, Decision, Emit, Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.job.state import JobState, format_time, read_job_state

NOW = datetime(2025, 1, 1, 1, 0, 0, tzinfo=UTC)


def state_of(
    job: str,
    workloads: Sequence[dict[str, Any]] = (),
    pods: Sequence[dict[str, Any]] = (),
    *,
    services: Sequence[dict[str, Any]] = (),
    podgroups: Sequence[dict[str, Any]] = (),
    coscheduling_podgroups: Sequence[dict[str, Any]] = (),
    kai_podgroups: Sequence[dict[str, Any]] = (),
    kubernetes_podgroups: Sequence[dict[str, Any]] = (),
    kubernetes_podgroup_api: str | None = None,
    secrets: Sequence[dict[str, Any]] = (),
    configmaps: Sequence[dict[str, Any]] = (),
    cluster_domain: str = "",
) -> JobState:
    return read_job_state(
        NAMESPACE,
        job,
        workloads=workloads,
        pods=pods,
        services=services,
        podgroups=podgroups,
        coscheduling_podgroups=coscheduling_podgroups,
        kai_podgroups=kai_podgroups,
        kubernetes_podgroups=kubernetes_podgroups,
        kubernetes_podgroup_api=kubernetes_podgroup_api,
        secrets=secrets,
        configmaps=configmaps,
        cluster_domain=cluster_domain,
    )


def decision(
    job: str,
    workloads: Sequence[dict[str, Any]] = (),
    pods: Sequence[dict[str, Any]] = (),
    *,
    now: datetime = NOW,
    records: bool = False,
    **owned: Any,
) -> Decision:
    """The decision on a job; without `records`, leaving out what the sweeper records about
    the job's progress (its state, successes and failed runs) and the state's events."""
    made = decide(state_of(job, workloads, pods, **owned), now)
    return made if records else without_records(made)


RECORDS = (contract.STATUS, contract.SUCCEEDED, contract.FAILED_RUNS)
STATE_EVENTS = ("Pending", "Running", "Restarting")


def without_records(made: Decision) -> Decision:
    kept: list[Action] = []
    for action in made.actions:
        if isinstance(action, Emit) and action.reason in STATE_EVENTS:
            continue
        if isinstance(action, Patch):
            patch = {k: dict(v) if isinstance(v, dict) else v for k, v in action.patch.items()}
            metadata = patch.get("metadata")
            if metadata and "annotations" in metadata:
                annotations = {k: v for k, v in metadata["annotations"].items() if k not in RECORDS}
                if annotations:
                    metadata["annotations"] = annotations
                else:
                    del metadata["annotations"]
                if not metadata:
                    del patch["metadata"]
            if not patch:
                continue
            action = Patch(
                action.resource, action.namespace, action.name, patch, action.resource_version
            )
        kept.append(action)
    return Decision(tuple(kept), made.recheck_at)


def described(actions: Sequence[Action]) -> list[str]:
    return [action.describe() for action in actions]


def of_type(actions: Sequence[Action], kind: type) -> list[Any]:
    return [action for action in actions if isinstance(action, kind)]


# --- pods in the states the kubelet reports, and what a decision records ------------------


def terminated(
    obj: dict[str, Any],
    code: int,
    *,
    reason: str = "Error",
    message: str = "",
    ago: int = 60,
    last: bool = False,
) -> dict[str, Any]:
    """The training container's current (or last) run ended `ago` seconds before NOW."""
    status = obj["status"]["containerStatuses"][0]
    run: dict[str, Any] = {
        "exitCode": code,
        "reason": reason,
        "finishedAt": format_time(NOW - timedelta(seconds=ago)),
    }
    if message:
        run["message"] = message
    status["lastState" if last else "state"] = {"terminated": run}
    return obj


def evicted(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}
    )
    return obj


def annotations_patched(actions: Sequence[Action], name: str) -> dict[str, str]:
    patches: list[Patch] = [a for a in of_type(actions, Patch) if a.name == name]
    assert len(patches) <= 1
    found: dict[str, str] = patches[0].patch["metadata"]["annotations"] if patches else {}
    return found


def status_of(actions: Sequence[Action], name: str = "pt-master") -> dict[str, Any]:
    value: dict[str, Any] = json.loads(annotations_patched(actions, name)[contract.STATUS])
    return value
