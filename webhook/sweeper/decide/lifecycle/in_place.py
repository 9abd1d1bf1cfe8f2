"""Restarting a job in place: every pod keeps its name, node, IP and GPUs, restarts its
containers for the next attempt, and waits at its barrier until every rank is back.

The sweeper writes the attempt on every pod (`trainhook.io/attempt`), watches the ranks reach
their barriers, then releases the attempt on every pod (`trainhook.io/released-attempt`). A job
whose pods cannot restart in place (one is gone, being deleted or stopped from outside, carries
no barrier, or belongs to an Indexed Job), or whose ranks are not all back within
IN_PLACE_TIMEOUT (a kubelet without RestartAllContainers), is restarted by deleting and
recreating its pods instead. See webhook.core.job.restart_in_place for the pods' side.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

from webhook.core import contract
from webhook.core.objects import parse_time
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Action, Patch
from webhook.sweeper.decide.failures import disruption_of
from webhook.sweeper.job.pods import PodView
from webhook.sweeper.job.state import JobState, format_time

IN_PLACE_TIMEOUT: Final = timedelta(seconds=60)
# A restart that recreates the pods on excluded nodes waits longer: their replacements are
# scheduled on other nodes and pull their images there before they reach the barrier.
REPLACING_TIMEOUT: Final = timedelta(minutes=10)
# The kubelet's clock may run behind the sweeper's: a barrier that started waiting this much
# before the restart was recorded still counts as waiting for it.
CLOCK_SKEW: Final = timedelta(seconds=30)


@dataclass(frozen=True)
class InPlace:
    """An in-place restart, as recorded in trainhook.io/status."""

    attempt: int
    started: datetime
    pods: int  # how many pods restart
    released_at: datetime | None = None

    @property
    def released(self) -> bool:
        return self.released_at is not None

    def recorded(self) -> dict[str, Any]:
        value: dict[str, Any] = {"attempt": self.attempt, "inPlace": self.pods}
        if self.released_at is not None:
            value["releasedAt"] = format_time(self.released_at)
        return value

    @staticmethod
    def read(recorded: dict[str, Any]) -> InPlace | None:
        attempt, pods = recorded.get("attempt"), recorded.get("inPlace")
        started = parse_time(recorded.get("restartedAt"))
        if not isinstance(attempt, int) or not isinstance(pods, int) or started is None:
            return None
        return InPlace(attempt, started, pods, parse_time(recorded.get("releasedAt")))


def last_attempt(recorded: dict[str, Any]) -> int:
    attempt = recorded.get("attempt")
    return attempt if isinstance(attempt, int) and attempt > 0 else 0


def members(state: JobState, replacing: tuple[str, ...] = ()) -> list[PodView]:
    """The pods restarting in place: not those on the `replacing` nodes, which are recreated."""
    return [
        p
        for p in state.pods
        if p.owner_kind == "StatefulSet" and not p.terminating and p.node not in replacing
    ]


def in_place_timeout(replacing: tuple[str, ...]) -> timedelta:
    return REPLACING_TIMEOUT if replacing else IN_PLACE_TIMEOUT


def why_not_in_place(state: JobState, replacing: tuple[str, ...] = ()) -> str | None:
    """Why the job's pods cannot restart in place now; None when they can. The pods on the
    `replacing` nodes are recreated (exclude-node): going or gone, they are no reason."""
    jobs = [w.name for w in state.workloads if w.kind != "StatefulSet"]
    if jobs:
        return f"{jobs[0]} is not a StatefulSet (its pods are recreated)"
    pods = [p for p in state.pods if p.owner_kind == "StatefulSet"]
    for pod in pods:
        if pod.node in replacing:
            continue
        kind = disruption_of(pod)
        if kind is not None:
            return f"pod {pod.name} was stopped from outside ({kind})"
        if pod.terminating:
            return f"pod {pod.name} is being deleted"
        if pod.phase in ("Failed", "Succeeded"):
            return f"pod {pod.name} has ended ({pod.phase}) and will be replaced"
        if not pod.has_barrier:
            return (
                f"pod {pod.name} has no restart barrier (created before the job restarted in place)"
            )
    expected = sum(w.replicas for w in state.workloads)
    if len(pods) < expected and not replacing:
        return f"{expected - len(pods)} of the job's {expected} pods are gone"
    return None


def start_in_place(state: JobState, now: datetime, attempt: int) -> tuple[InPlace | None, str]:
    """The in-place restart to start, or None with why the pods must be recreated instead."""
    why = why_not_in_place(state)
    if why is not None:
        return None, why
    return InPlace(attempt, now, len(members(state))), ""


@dataclass(frozen=True)
class Step:
    """What an in-place restart does now."""

    actions: tuple[Action, ...]
    in_place: InPlace  # with released_at set once this step releases the barrier
    fallback: str = ""  # set when the pods must be recreated instead, with why
    waiting_for: int = 0  # ranks not at their barrier yet


def in_place_actions(
    state: JobState, in_place: InPlace, now: datetime, replacing: tuple[str, ...] = ()
) -> Step:
    """`replacing`: the nodes whose pods are recreated; every other pod restarts in place, and
    the barrier is released once the job has all its pods back, the new ones among them."""
    attempt = str(in_place.attempt)
    if in_place.released:
        # Repair a release that reached only some pods before a failed write (such a pod is
        # notable: a plain pod's release matches its attempt).
        repair = tuple(
            _annotate(state, pod, contract.RELEASED_ATTEMPT, attempt)
            for pod in state.pod_facts.notable
            if pod.owner_kind == "StatefulSet"
            and not pod.terminating
            and pod.annotations.get(contract.ATTEMPT) == attempt
            and pod.annotations.get(contract.RELEASED_ATTEMPT) != attempt
        )
        return Step(repair, in_place)
    pods = members(state, replacing)
    why = why_not_in_place(state, replacing)
    if why is not None:
        return Step((), in_place, fallback=why)
    asked = tuple(
        _annotate(state, pod, contract.ATTEMPT, attempt)
        for pod in pods
        if pod.annotations.get(contract.ATTEMPT) != attempt
    )
    waiting = [
        pod
        for pod in pods
        if pod.annotations.get(contract.ATTEMPT) == attempt
        and pod.barrier_waiting is not None
        and pod.barrier_waiting >= in_place.started - CLOCK_SKEW
    ]
    expected = sum(w.replicas for w in state.workloads) if replacing else len(pods)
    missing = max(len(pods), expected) - len(waiting)
    if asked or missing:
        timeout = in_place_timeout(replacing)
        if now >= in_place.started + timeout:
            late = [p.name for p in pods if p not in waiting][:3] or ["pods not recreated yet"]
            return Step(
                (),
                in_place,
                fallback=f"{missing} rank(s) did not reach their barrier within "
                f"{int(timeout.total_seconds())}s ({', '.join(late)}): the kubelet may "
                "not restart all containers (RestartAllContainers, Kubernetes 1.35+)",
            )
        return Step(asked, in_place, waiting_for=missing)
    released = InPlace(in_place.attempt, in_place.started, in_place.pods, now)
    release = tuple(_annotate(state, pod, contract.RELEASED_ATTEMPT, attempt) for pod in pods)
    return Step(release, released)


def _annotate(state: JobState, pod: PodView, key: str, value: str) -> Patch:
    return Patch(PODS, state.namespace, pod.name, {"metadata": {"annotations": {key: value}}})
