"""Restarts: of the whole job (recreating its pods, or in place), of one role or of one pod,
as the job's failure rules say, each counted against its budgets or free."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from webhook.core import contract
from webhook.core.job.failure_rules import straggler_rule
from webhook.core.job.node_exclusion import RECORDED
from webhook.core.objects import parse_time
from webhook.sweeper.actions import Emit
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.failures import counts_restarts, job_failure_policy
from webhook.sweeper.decide.lifecycle.in_place import InPlace, last_attempt, start_in_place
from webhook.sweeper.decide.nodes import (
    dropped_said,
    excluded_of,
    exclusion_said,
    kueue_replaces_nodes,
    straggler_nodes,
    stragglers_said,
    with_excluded,
)
from webhook.sweeper.decide.policy import FAILED, Replica, RestartCause, Verdict, restart_cause
from webhook.sweeper.decide.records import positive_count
from webhook.sweeper.job.pods import PodView, created_before
from webhook.sweeper.job.state import JobState
from webhook.sweeper.job.stragglers import Straggler

# At most this many pods created in a restart's own second are recorded with it, each by the
# first 8 characters of its uid (unique enough among one job's pods).
MAX_SAME_SECOND = 256


@dataclass(frozen=True)
class RestartPlan:
    """A restart under way: the job's pods (or one role's) created before `since` are deleted,
    or, in place, every pod restarts its containers for the next attempt."""

    since: datetime
    cause: str  # the RestartCause key
    restarts: int
    new: RestartCause | None  # set when this decision starts the restart
    rule: str = ""  # the name of the rule that fired
    fired: dict[str, int] = field(default_factory=dict)  # per budgeted rule: times it acted
    disruptions: dict[str, int] = field(default_factory=dict)  # free restarts, by kind
    role: str | None = None  # restart-role: the only role whose pods are deleted
    pod: str | None = None  # restart-pod: the only pod deleted
    in_place: InPlace | None = None
    fallback: str = ""  # why the pods are recreated although the rule restarts in place
    # When the job's current attempt began: `since` for a whole-job restart; for one role's or
    # one pod's, the latest whole-job restart's (None: the first attempt), so the successes of
    # the roles it leaves alone still count.
    attempt_began: datetime | None = None
    # The short uids of the pods created in `since`'s own second before the restart: they are older
    # than it, the pods its controllers create in that second after it are not.
    same_second: frozenset[str] = frozenset()
    # The nodes the job's restarts keep its pods off (exclude-node), oldest first; in place, the
    # pods on them are the ones recreated.
    excluded: tuple[str, ...] = ()
    dropped: str = ""  # the node no longer excluded to keep the bound, set with `new`
    # The ranks flagged as stragglers whose nodes this restart excludes too (a straggler rule).
    stragglers: tuple[Straggler, ...] = ()
    dropped_by_stragglers: str = ""  # the nodes they pushed out of the bound, comma-separated

    def older(self, pod: PodView) -> bool:
        """Whether `pod` was created before this restart."""
        return created_before(pod, self.since, self.same_second)

    def extra(self) -> dict[str, Any]:
        """What trainhook.io/status records of it besides the count and the cause."""
        value: dict[str, Any] = {}
        if self.same_second:
            value["sameSecond"] = sorted(self.same_second)
        if self.rule:
            value["rule"] = self.rule
        if self.fired:
            value["fired"] = self.fired
        if self.disruptions:
            value["disruptions"] = self.disruptions
        if self.role:
            value["role"] = self.role
        if self.pod:
            value["pod"] = self.pod
        if self.in_place is not None:
            value.update(self.in_place.recorded())
        if self.excluded:
            value[RECORDED] = list(self.excluded)
        return value


def plan_restart(
    state: JobState, now: datetime, recorded: dict[str, Any], succeeded: set[Replica]
) -> tuple[RestartPlan | None, Verdict | None]:
    since = parse_time(recorded.get("restartedAt"))
    same_second = recorded_same_second(recorded)
    handled = str(recorded.get("cause") or "")
    restarts = positive_count(recorded.get("restarts"))
    fired = _counts(recorded.get("fired"))
    disruptions = _counts(recorded.get("disruptions"))
    in_place = InPlace.read(recorded)
    if in_place is not None and not in_place.released:
        # Every rank is on its way back to the barrier: what happens meanwhile is the restart's.
        return _current_plan(state, recorded, since, same_second, handled, restarts, in_place), None
    runs_since = in_place.released_at if in_place is not None else since
    cause = restart_cause(
        state,
        now,
        succeeded,
        runs_since,
        handled,
        in_place=in_place is not None,
        restarted=_restarted_by(recorded.get("role"), recorded.get("pod")),
        same_second=same_second,
    )
    if cause is None:
        plan = _current_plan(state, recorded, since, same_second, handled, restarts, in_place)
        return plan, None
    count = restarts + (1 if cause.counted else 0)
    limit = state.settings.backoff_limit
    rule = cause.rule
    if rule is not None and rule.budget is not None:
        used = fired.get(rule.key, 0)
        if used >= rule.budget:
            verdict = Verdict(
                FAILED,
                "BackoffLimitExceeded",
                f"{cause.message}; {rule.name} has acted {used} time(s), its max is {rule.budget}",
                rule.name,
            )
            return None, verdict
        fired = {**fired, rule.key: used + 1}
    if cause.counted and limit is not None and count > limit and counts_restarts(state):
        verdict = Verdict(
            FAILED,
            "BackoffLimitExceeded",
            f"{cause.message}; the job was restarted {restarts} time(s) "
            f"and {contract.BACKOFF_LIMIT} is {limit}"
            + (f" ({rule.name})" if rule is not None else ""),
            rule.name if rule is not None else "",
        )
        return None, verdict
    if cause.disruption is not None:
        disruptions = {**disruptions, cause.disruption: disruptions.get(cause.disruption, 0) + 1}
    excluded, dropped = excluded_of(recorded), ""
    if cause.node is not None and not kueue_replaces_nodes(state):
        excluded, dropped = with_excluded(excluded, cause.node)
    whole_job = cause.role is None and cause.pod is None
    stragglers, pushed_out = _stragglers(state, whole_job, excluded)
    for straggler in stragglers:
        excluded, _ = with_excluded(excluded, straggler.node)
    in_place_now, fallback = (
        start_in_place(state, now, last_attempt(recorded) + 1) if cause.in_place else (None, "")
    )
    # In place no pod is created, and the release must not come before the restart it ends.
    since, same_second = (
        (now, frozenset()) if in_place_now is not None else restart_moment(state, now)
    )
    plan = RestartPlan(
        since,
        cause.key,
        count,
        cause,
        rule.name if rule is not None else "",
        fired,
        disruptions,
        cause.role,
        cause.pod,
        in_place_now,
        fallback,
        since if whole_job else state.attempt_began,
        same_second,
        excluded,
        dropped,
        stragglers,
        ", ".join(pushed_out),
    )
    return plan, None


def recorded_plan(state: JobState, recorded: dict[str, Any]) -> RestartPlan | None:
    """The restart recorded last, as it stands: what a restart held back leaves in place."""
    return _current_plan(
        state,
        recorded,
        parse_time(recorded.get("restartedAt")),
        recorded_same_second(recorded),
        str(recorded.get("cause") or ""),
        positive_count(recorded.get("restarts")),
        InPlace.read(recorded),
    )


def _stragglers(
    state: JobState, whole_job: bool, excluded: tuple[str, ...]
) -> tuple[tuple[Straggler, ...], list[str]]:
    """The stragglers whose nodes a whole-job restart excludes too, when the job has a
    `straggler` rule (never for a job Kueue places), and the nodes they push out of the bound."""
    if not whole_job or kueue_replaces_nodes(state):
        return (), []
    if straggler_rule(job_failure_policy(state)) is None:
        return (), []
    found = tuple(s for s in straggler_nodes(state) if s.node not in excluded)
    pushed_out: list[str] = []
    for straggler in found:
        excluded, out = with_excluded(excluded, straggler.node)
        if out:
            pushed_out.append(out)
    return found, pushed_out


def _restarted_by(role: object, pod: object) -> Callable[[PodView], bool] | None:
    """The pods a partial restart restarted: one role's, or one pod."""
    if isinstance(pod, str):
        return lambda view: view.name == pod
    if isinstance(role, str):
        return lambda view: view.role == role
    return None


def _current_plan(
    state: JobState,
    recorded: dict[str, Any],
    since: datetime | None,
    same_second: frozenset[str],
    handled: str,
    restarts: int,
    in_place: InPlace | None,
) -> RestartPlan | None:
    """The restart recorded last, while it is under way or once it is done (its counts stay)."""
    if since is None:
        return None
    role, pod = recorded.get("role"), recorded.get("pod")
    return RestartPlan(
        since,
        handled,
        restarts,
        None,
        str(recorded.get("rule") or ""),
        _counts(recorded.get("fired")),
        _counts(recorded.get("disruptions")),
        role if isinstance(role, str) else None,
        pod if isinstance(pod, str) else None,
        in_place,
        attempt_began=state.attempt_began,
        same_second=same_second,
        excluded=excluded_of(recorded),
    )


def _counts(value: object) -> dict[str, int]:
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if positive_count(v)}


def restart_moment(state: JobState, now: datetime) -> tuple[datetime, frozenset[str]]:
    """When a recreating restart begins, to the second as pods' creation times are kept, and the
    pods of the job created in that second so far (they are older than the restart). Past
    MAX_SAME_SECOND of them the restart begins at the next second instead: every pod of this
    one is then older, and one its controller recreates within it is deleted once more."""
    whole = now.replace(microsecond=0)
    same_second = frozenset(pod.uid8 for pod in state.pods if pod.created == whole)
    if len(same_second) > MAX_SAME_SECOND:
        return whole + timedelta(seconds=1), frozenset()
    return whole, same_second


def recorded_same_second(recorded: dict[str, Any]) -> frozenset[str]:
    value = recorded.get("sameSecond")
    if not isinstance(value, list):
        return frozenset()
    return frozenset(uid for uid in value[:MAX_SAME_SECOND] if isinstance(uid, str))


def restart_pods(state: JobState, plan: RestartPlan) -> list[PodView]:
    """The pods a restart still has to delete: every pod of the job's StatefulSets and Jobs
    (of its one role, for restart-role) created before it, not already going or finished. A
    restart in place deletes only the pods on the nodes it excludes."""
    if plan.in_place is not None:
        return [
            pod
            for pod in state.pods
            if pod.node in plan.excluded
            and pod.owner_kind == "StatefulSet"
            and not pod.terminating
            and plan.older(pod)
        ]
    return [
        pod
        for pod in state.pods
        if pod.owner_kind in ("StatefulSet", "Job")
        and (plan.role is None or pod.role == plan.role)
        and (plan.pod is None or pod.name == plan.pod)
        and not pod.terminating
        and pod.phase not in ("Succeeded", "Failed")
        and plan.older(pod)
    ]


def restart_took(state: JobState, plan: RestartPlan) -> bool:
    """Whether a pod created since the restart runs (or has already finished); in place,
    whether every rank is back and released."""
    if plan.in_place is not None:
        return plan.in_place.released
    return any(
        pod.phase in ("Running", "Succeeded") and not plan.older(pod)
        for pod in state.pods
        if not pod.terminating
    )


def restart_event(state: JobState, plan: RestartPlan, cause: RestartCause, pods: int) -> Emit:
    limit = state.settings.backoff_limit
    if cause.counted:
        of = f" of {contract.BACKOFF_LIMIT} {limit}" if limit is not None else ""
        counted = f"restart {plan.restarts}{of}"
    elif cause.disruption is not None:
        counted = f"not counted against the backoff limit: {cause.disruption}"
    else:
        counted = "not counted against the backoff limit"
    if plan.in_place is not None:
        what = (
            f"restarting all {plan.in_place.pods} pod(s) of the job in place "
            f"(attempt {plan.in_place.attempt})"
        )
    elif plan.pod is not None:
        what = f"restarting pod {plan.pod} alone"
    elif plan.role is not None:
        what = f"restarting the {pods} pod(s) of role {plan.role}"
    else:
        what = f"restarting all {pods} pod(s) of the job together"
    rule = f"; {cause.rule.name}" if cause.rule is not None else ""
    instead = f"; not in place: {plan.fallback}" if plan.fallback else ""
    in_place = plan.in_place is not None
    excluded = exclusion_said(state, cause.node, in_place, plan.excluded, plan.dropped)
    excluded += stragglers_said(plan.stragglers, in_place, plan.excluded)
    excluded += dropped_said(plan.dropped_by_stragglers)
    message = f"{what} ({counted}): {cause.message}{rule}{instead}{excluded}"
    kind = "Warning" if cause.counted else "Normal"
    return event_on(state, state.workloads[0], kind, "Restarting", message, key=cause.key)


def fallback_event(state: JobState, plan: RestartPlan, pods: int) -> Emit:
    message = (
        f"restarting all {pods} pod(s) of the job by recreating them, not in place: {plan.fallback}"
    )
    return event_on(state, state.workloads[0], "Warning", "Restarting", message, key=message)
