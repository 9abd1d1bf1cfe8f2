"""trainhook.io/suspend: a suspended job gives its pods back, and gets them back on resume."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from webhook.core import contract
from webhook.sweeper.actions import Action, Decision, workload_patch
from webhook.sweeper.decide.lifecycle.checkpoint import NOTHING, CheckpointStep
from webhook.sweeper.decide.policy import Replica
from webhook.sweeper.decide.records import SUSPENDED, restarts_of, state_event, status_json
from webhook.sweeper.job.goodput import goodput_record
from webhook.sweeper.job.state import JobState


def suspend_job(
    state: JobState,
    now: datetime,
    recorded: dict[str, Any],
    start: datetime,
    succeeded: set[Replica],
    resumed: datetime | None,
    checkpoint: CheckpointStep = NOTHING,
) -> Decision:
    """StatefulSets to 0 and Jobs suspended, each remembering what it was; the job keeps its
    restarts and its recorded successes and failed runs, and what its checkpoint request
    (trainhook.io/checkpoint-on-stop) came to."""
    restarts = restarts_of(state, now, recorded, succeeded)
    message = f"{contract.SUSPEND} is true"
    ledger = goodput_record(state, recorded, SUSPENDED, SUSPENDED, now) | checkpoint.record
    status = status_json(
        SUSPENDED, SUSPENDED, message, restarts, start, resumed=resumed, extra=ledger
    )
    actions: list[Action] = list(checkpoint.actions)
    if recorded.get("state") != SUSPENDED:
        actions.append(state_event(state, SUSPENDED, SUSPENDED, message, restarts))
    for workload in state.workloads:
        if workload.kind == "Pod":
            continue
        annotations: dict[str, Any] = {}
        spec: dict[str, Any] = {}
        remembered = contract.SUSPENDED_REPLICAS in workload.annotations
        if workload.kind == "StatefulSet" and workload.replicas > 0:
            spec["replicas"] = 0
            if not remembered:
                annotations[contract.SUSPENDED_REPLICAS] = str(workload.replicas)
        status_now = workload.job_status
        if status_now is not None and not status_now.suspended and not status_now.finished:
            spec["suspend"] = True
            if not remembered:
                annotations[contract.SUSPENDED_REPLICAS] = str(workload.replicas)
        if workload.annotations.get(contract.STATUS) != status:
            annotations[contract.STATUS] = status
        patch: dict[str, Any] = {}
        if annotations:
            patch["metadata"] = {"annotations": annotations}
        if spec:
            patch["spec"] = spec
        if patch:
            actions.append(workload_patch(state, workload, patch))
    return Decision(tuple(actions), phase=SUSPENDED)


def resume_job(state: JobState) -> list[Action]:
    """Give back what suspending took: each workload's replicas, each Job running again."""
    actions: list[Action] = []
    for workload in state.workloads:
        remembered = workload.annotations.get(contract.SUSPENDED_REPLICAS)
        if remembered is None:
            continue
        patch: dict[str, Any] = {"metadata": {"annotations": {contract.SUSPENDED_REPLICAS: None}}}
        if workload.kind == "StatefulSet" and remembered.isdigit():
            patch["spec"] = {"replicas": int(remembered)}
        elif workload.job_status is not None and workload.job_status.suspended:
            patch["spec"] = {"suspend": False}
        actions.append(workload_patch(state, workload, patch))
    return actions
