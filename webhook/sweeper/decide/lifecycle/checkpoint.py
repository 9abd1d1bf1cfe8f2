"""trainhook.io/checkpoint-on-stop: a checkpoint before every planned stop.

A planned stop is the job's suspend, a pod of it stopped from outside (the DisruptionTarget
condition: preempted, evicted, drained) or a node under one of its pods being drained (cordoned,
or tainted NoExecute). Once per stop the sweeper writes trainhook.io/checkpoint-requested (the
request's time) on every running pod of the job, which each pod reads as a file, and records the
request in the job's trainhook.io/status (`checkpoint`): the stop, when it asked and the last
checkpoint known then. What the sweeper itself does to stop the job (suspending it, restarting
it for a pod stopped from outside or a node's rule) waits until a progress report names a newer
checkpoint, or the duration is up; what Kubernetes stops on its own (a preemption, an eviction)
it cannot hold, only ask early. Everything lives in annotations, so a sweeper restarted in the
middle neither loses the deadline nor asks twice. Pure: the clock is passed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Final

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.objects import parse_time
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Action, Patch
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.decide.failures import (
    DISRUPTION_REPORTS,
    describe_disruption,
    disruption_of,
    restarts_whole_job,
)
from webhook.sweeper.decide.nodes import NODE_CONDITION, NODE_TAINTED
from webhook.sweeper.decide.policy import RestartCause
from webhook.sweeper.job.goodput import job_summary
from webhook.sweeper.job.pods import PodView, created_before
from webhook.sweeper.job.state import JobState, format_time

RECORDED: Final = "checkpoint"  # the field of trainhook.io/status
SAVED: Final = "saved"
NOT_SAVED: Final = "notSaved"
WORKLOADS: Final = ("StatefulSet", "Job")


@dataclass(frozen=True)
class Stop:
    """A planned stop of the job: `key` names it (one request each), `before` says what stops,
    `held` what of it waits for the checkpoint ("" when Trainhook holds nothing of it)."""

    key: str
    before: str
    held: str
    outside: str = ""  # what Kubernetes stops on its own, whatever Trainhook waits for


@dataclass(frozen=True)
class CheckpointStep:
    """What asking for a checkpoint does now: the pods' requests and the events, the record for
    trainhook.io/status, and whether the stop still waits (until `until`)."""

    actions: tuple[Action, ...] = ()
    record: dict[str, Any] = field(default_factory=dict)
    holding: bool = False
    until: datetime | None = None


NOTHING: Final = CheckpointStep()  # a job asks nothing


def checkpoint_step(state: JobState, now: datetime, recorded: dict[str, Any]) -> CheckpointStep:
    timeout = _timeout(state)
    previous = recorded.get(RECORDED)
    previous = previous if isinstance(previous, dict) else None
    stop = planned_stop(state, recorded) if timeout is not None and not state.deleting else None
    if stop is None:
        if previous is None:
            return CheckpointStep()
        # The stop is over (a resume, a pod back, the annotation removed): a request still on a
        # pod is taken back, and the record kept until none carries one.
        taken_back = tuple(
            _request(state, pod, None)
            for pod in state.pods
            if pod.annotations.get(contract.CHECKPOINT_REQUESTED) is not None
            and not pod.terminating
        )
        return CheckpointStep(taken_back, {RECORDED: previous} if taken_back else {})
    assert timeout is not None
    requested = parse_time(previous.get("requestedAt")) if previous is not None else None
    if previous is None or previous.get("stop") != stop.key or requested is None:
        return _ask(state, now, stop, timeout)
    if previous.get("outcome"):
        return CheckpointStep(record={RECORDED: previous})
    deadline = requested + timeout
    asked_at = format_time(requested)
    checkpoint = (job_summary(state) or {}).get("checkpoint")
    if _newer(checkpoint, previous):
        assert isinstance(checkpoint, dict)
        step = checkpoint.get("step")
        what = f"step {step}" if isinstance(step, int) else str(checkpoint.get("time"))
        message = (
            f"checkpoint saved at {what}, {_shown(now - requested)} after the request at "
            f"{asked_at}{_goes_ahead(stop)}"
        )
        record = {**previous, "outcome": SAVED, "savedStep": step}
        said = event_on(state, state.workloads[0], "Normal", "CheckpointSaved", message)
        return CheckpointStep((said,), {RECORDED: record})
    if now >= deadline:
        known = previous.get("step")
        last = f"the last is step {known}" if isinstance(known, int) else "none reported yet"
        message = (
            f"no checkpoint saved within {_shown(timeout)} of the request at {asked_at} "
            f"({last}){_goes_ahead(stop)}"
        )
        said = event_on(state, state.workloads[0], "Warning", "CheckpointNotSaved", message)
        return CheckpointStep((said,), {RECORDED: {**previous, "outcome": NOT_SAVED}})
    # Still waiting: a pod that runs without the request (created since) is asked too.
    late = tuple(
        _request(state, pod, asked_at)
        for pod in _running(state)
        if pod.annotations.get(contract.CHECKPOINT_REQUESTED) != asked_at
    )
    return CheckpointStep(late, {RECORDED: previous}, holding=bool(stop.held), until=deadline)


def holds_restart(step: CheckpointStep, cause: RestartCause | None) -> bool:
    """Whether a restart about to start waits for the checkpoint: one a planned stop causes (a
    pod stopped from outside, a node's rule) while the job waits for its checkpoint."""
    return (
        step.holding
        and cause is not None
        and (cause.disruption is not None or cause.reason in (NODE_CONDITION, NODE_TAINTED))
    )


def planned_stop(state: JobState, recorded: dict[str, Any]) -> Stop | None:
    """The job's planned stop now: its suspend, else a pod of it stopped from outside (gone
    since, until the job restarted after it), else a node under a pod of it being drained."""
    if state.settings.suspend:
        return Stop("suspend", "the job is suspended", "the suspend")
    restarts = "the job's restart" if restarts_whole_job(state) else ""
    since = parse_time(recorded.get("restartedAt"))
    facts = state.pod_facts
    present = [(pod, False) for pod in facts.notable]
    for pod, gone in [*present, *((pod, True) for pod in facts.gone)]:
        if not pod.disrupted or pod.owner_kind not in WORKLOADS:
            continue
        if gone and since is not None and created_before(pod, since):
            continue
        kind = disruption_of(pod) or "kubelet"
        _, said = describe_disruption(pod, kind)
        what = DISRUPTION_REPORTS[kind][1]
        before = said.replace(f"pod {pod.name} {what}", f"pod {pod.name} is stopped: it {what}", 1)
        outside = "Kubernetes stops it within its terminationGracePeriodSeconds"
        return Stop(f"{pod.uid8}/disrupted", before, restarts, outside)
    draining = {name for name, node in state.nodes.items() if node.draining}
    for pod in state.pods if draining else ():
        node = state.nodes.get(pod.node) if pod.node in draining and not pod.terminating else None
        if node is not None and node.draining and pod.owner_kind in WORKLOADS:
            before = f"node {node.name} is drained: {node.draining}"
            outside = "a drain evicts its pods, each within its terminationGracePeriodSeconds"
            return Stop(f"node/{node.name}", before, restarts, outside)
    return None


def _ask(state: JobState, now: datetime, stop: Stop, timeout: timedelta) -> CheckpointStep:
    """The request, once per stop, on every running pod of the job."""
    running = _running(state)
    if not running:
        return CheckpointStep()  # nothing runs: nothing to save
    asked_at = format_time(now)
    requested = parse_time(asked_at) or now
    deadline = requested + timeout
    checkpoint = (job_summary(state) or {}).get("checkpoint")
    known = checkpoint if isinstance(checkpoint, dict) else {}
    record: dict[str, Any] = {"stop": stop.key, "requestedAt": asked_at}
    record |= {k: known[k] for k in ("step", "time") if known.get(k) is not None}
    waits = f" ({contract.CHECKPOINT_ON_STOP} {_shown(timeout)})"
    if stop.held:
        then = f"{stop.held} waits for it until {format_time(deadline)}{waits}"
    else:
        then = (
            "Trainhook holds nothing of this stop; a checkpoint counts until "
            f"{format_time(deadline)}{waits}"
        )
    outside = f"{stop.outside}, whatever Trainhook waits for; " if stop.outside else ""
    message = (
        f"asked the job's {len(running)} running pod(s) to save a checkpoint "
        f"({contract.CHECKPOINT_REQUESTED}: {asked_at}) before {stop.before}; {outside}{then}"
    )
    said = event_on(state, state.workloads[0], "Normal", "CheckpointRequested", message)
    asks = tuple(_request(state, pod, asked_at) for pod in running)
    return CheckpointStep(
        (said, *asks), {RECORDED: record}, holding=bool(stop.held), until=deadline
    )


def _running(state: JobState) -> list[PodView]:
    return [p for p in state.pods if p.phase == "Running" and p.owner_kind in WORKLOADS]


def _request(state: JobState, pod: PodView, value: str | None) -> Patch:
    patch = {"metadata": {"annotations": {contract.CHECKPOINT_REQUESTED: value}}}
    return Patch(PODS, state.namespace, pod.name, patch)


def _newer(found: object, known: dict[str, Any]) -> bool:
    """Whether the job's last checkpoint is newer than the one known at the request."""
    if not isinstance(found, dict):
        return False
    step, time = found.get("step"), found.get("time")
    if step is None and time is None:
        return False
    if (step, time) == (known.get("step"), known.get("time")):
        return False
    before = known.get("step")
    return not (isinstance(step, int) and isinstance(before, int) and step < before)


def _goes_ahead(stop: Stop) -> str:
    return f"; {stop.held} goes ahead" if stop.held else ""


def _timeout(state: JobState) -> timedelta | None:
    try:
        seconds = state.settings.checkpoint_on_stop if state.workloads else None
    except TrainhookError:  # roles that disagree: the job is refused, and nothing is asked
        return None
    if seconds is None or not any(w.kind in WORKLOADS for w in state.workloads):
        return None  # a job of bare pods records nothing to remember a request by
    return timedelta(seconds=seconds)


def _shown(elapsed: timedelta) -> str:
    """A duration as the annotation writes it: 45s, 5m, 1h, 2m30s."""
    seconds = max(0, int(elapsed.total_seconds()))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m"), (seconds, "s")) if n]
    return "".join(parts) or "0s"
