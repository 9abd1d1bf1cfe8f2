"""Shortcuts for decision tests: a job's state from its objects, and its decision."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from tests.support.stored import NAMESPACE
from webhook.sweeper.actions import Action, Decision
from webhook.sweeper.decide import decide
from webhook.sweeper.state import JobState, read_job_state

NOW = datetime(2025, 1, 1, 1, 0, 0, tzinfo=UTC)


def state_of(
    job: str,
    workloads: Sequence[dict[str, Any]] = (),
    pods: Sequence[dict[str, Any]] = (),
    *,
    services: Sequence[dict[str, Any]] = (),
    podgroups: Sequence[dict[str, Any]] = (),
    coscheduling_podgroups: Sequence[dict[str, Any]] = (),
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
    **owned: Any,
) -> Decision:
    return decide(state_of(job, workloads, pods, **owned), now)


def described(actions: Sequence[Action]) -> list[str]:
    return [action.describe() for action in actions]


def of_type(actions: Sequence[Action], kind: type) -> list[Any]:
    return [action for action in actions if isinstance(action, kind)]
