"""trainhook.io/restart-policy RestartJob: the whole job restarts together when one rank fails."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from webhook.core import contract
from webhook.core.objects import parse_time
from webhook.sweeper.actions import Emit
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.records import positive_count
from webhook.sweeper.pods import PodView
from webhook.sweeper.policy import FAILED, Replica, RestartCause, Verdict, restart_cause
from webhook.sweeper.state import JobState


@dataclass(frozen=True)
class RestartPlan:
    """A whole-job restart under way: the job's pods created before `since` are deleted."""

    since: datetime
    cause: str  # the RestartCause key
    restarts: int
    new: RestartCause | None  # set when this decision starts the restart


def plan_restart(
    state: JobState, now: datetime, recorded: dict[str, Any], succeeded: set[Replica]
) -> tuple[RestartPlan | None, Verdict | None]:
    since = parse_time(recorded.get("restartedAt"))
    handled = str(recorded.get("cause") or "")
    restarts = positive_count(recorded.get("restarts"))
    cause = restart_cause(state, now, succeeded, since, handled)
    if cause is None:
        return (RestartPlan(since, handled, restarts, None) if since else None), None
    count = restarts + (1 if cause.counted else 0)
    limit = state.settings.backoff_limit
    if cause.counted and limit is not None and count > limit:
        verdict = Verdict(
            FAILED,
            "BackoffLimitExceeded",
            f"{cause.message}; the job was restarted {restarts} time(s) "
            f"and {contract.BACKOFF_LIMIT} is {limit}",
        )
        return None, verdict
    return RestartPlan(_next_second(now), cause.key, count, cause), None


def _next_second(moment: datetime) -> datetime:
    """`moment` rounded up to a whole second: restart times are recorded, and pods' creation
    times kept, to the second, so every pod created before the restart is older than it."""
    whole = moment.replace(microsecond=0)
    return whole if whole == moment else whole + timedelta(seconds=1)


def restart_pods(state: JobState, plan: RestartPlan) -> list[PodView]:
    """The pods a restart still has to delete: every pod of the job's StatefulSets and Jobs
    created before it, not already going or finished."""
    return [
        pod
        for pod in state.pods
        if pod.owner_kind in ("StatefulSet", "Job")
        and not pod.terminating
        and pod.phase not in ("Succeeded", "Failed")
        and (pod.created is None or pod.created < plan.since)
    ]


def restart_took(state: JobState, plan: RestartPlan) -> bool:
    """Whether a pod created since the restart runs (or has already finished)."""
    return any(
        pod.phase in ("Running", "Succeeded")
        and pod.created is not None
        and pod.created >= plan.since
        for pod in state.pods
        if not pod.terminating
    )


def restart_event(state: JobState, plan: RestartPlan, cause: RestartCause, pods: int) -> Emit:
    limit = state.settings.backoff_limit
    if cause.counted:
        of = f" of {contract.BACKOFF_LIMIT} {limit}" if limit is not None else ""
        counted = f"restart {plan.restarts}{of}"
    else:
        counted = "not counted against the backoff limit"
    message = f"restarting all {pods} pod(s) of the job together ({counted}): {cause.message}"
    kind = "Warning" if cause.counted else "Normal"
    return event_on(state, state.workloads[0], kind, "Restarting", message, key=cause.key)
