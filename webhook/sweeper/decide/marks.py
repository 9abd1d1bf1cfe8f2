"""The restart marks on a job's pods that the sweeper's own record does not account for.

The sweeper writes a pod's in-place restart attempt (`trainhook.io/attempt`) only after it has
recorded that attempt in the job's trainhook.io/status, and its release
(`trainhook.io/released-attempt`) only once the record says the attempt was released. So a pod
carrying an attempt past the latest one recorded, or a release the record has not made, carries
a mark someone else wrote (the chart's policy refuses such writes; a cluster without it does
not). The sweeper acts on no such mark: it sets the pod back to what its record says (the pod's
barrier then passes or waits as the record would have it) and says so in a Warning, named after
what it says so that it is made once.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

from webhook.core import contract
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Action, ObjectRef, Patch
from webhook.sweeper.decide.events import _emit
from webhook.sweeper.job.pods import PodView
from webhook.sweeper.job.state import JobState


@dataclass(frozen=True)
class Record:
    """The latest in-place attempt the job's workloads record, and whether it was released."""

    attempt: int
    released: bool

    def describe(self) -> str:
        if self.attempt == 0:
            return "no in-place restart"
        return f"attempt {self.attempt}, {'released' if self.released else 'not released'}"

    def attempt_allowed(self, value: str) -> bool:
        return value.isdigit() and 0 < int(value) <= self.attempt

    def release_allowed(self, value: str) -> bool:
        top = self.attempt if self.released else self.attempt - 1
        return value.isdigit() and 0 < int(value) <= top


def record_of(state: JobState) -> Record:
    """The latest attempt any workload records (a write may have reached only some of them)."""
    attempt, released = 0, False
    for workload in state.workloads:
        try:
            value = json.loads(workload.annotations.get(contract.STATUS) or "{}")
        except ValueError:
            continue
        found = value.get("attempt") if isinstance(value, dict) else None
        if not isinstance(found, int) or isinstance(found, bool) or found <= 0:
            continue
        done = bool(value.get("releasedAt"))
        if found > attempt:
            attempt, released = found, done
        elif found == attempt:
            released = released or done
    return Record(attempt, released)


def forged_mark_actions(state: JobState) -> Iterable[Action]:
    """For each of the job's pods carrying a mark its record does not account for: a Warning,
    and the write that sets the pod back to the record. While an attempt is under way every
    pod is read (a release written early makes a pod look plain); otherwise the pods whose
    attempt and release differ, which are never plain: what is decided does not depend on
    which pods are read one by one."""
    record = record_of(state)
    underway = record.attempt > 0 and not record.released
    for pod in state.pods if underway else state.pod_facts.notable:
        attempt = pod.annotations.get(contract.ATTEMPT)
        released = pod.annotations.get(contract.RELEASED_ATTEMPT)
        if (attempt is None and released is None) or (not underway and attempt == released):
            continue
        restore: dict[str, str | None] = {}
        said = []
        if attempt is not None and not record.attempt_allowed(attempt):
            restore[contract.ATTEMPT] = str(record.attempt) if record.attempt else None
            said.append((contract.ATTEMPT, attempt, restore[contract.ATTEMPT]))
        if released is not None and not record.release_allowed(released):
            back = str(record.attempt) if record.released and record.attempt else None
            restore[contract.RELEASED_ATTEMPT] = back
            said.append((contract.RELEASED_ATTEMPT, released, back))
        for key, value, back in said:
            yield _warning(state, pod, record, key, value, back)
        if restore:
            patch = {"metadata": {"annotations": restore}}
            yield Patch(PODS, state.namespace, pod.name, patch)


def _warning(
    state: JobState, pod: PodView, record: Record, key: str, value: str, back: str | None
) -> Action:
    shown = value if len(value) <= 40 else value[:37] + "..."
    then = f"set back to {back}" if back is not None else "removed"
    message = (
        f"pod {pod.name} carries {key}={shown}, which the sweeper did not write "
        f"(its record: {record.describe()}): ignored, and {then}"
    )
    return pod_warning(state, pod, "ForgedMark", message, f"{key}={value}")


def pod_warning(state: JobState, pod: PodView, reason: str, message: str, key: str) -> Action:
    """A Warning on one of the job's pods, made once for what `key` names."""
    target = ObjectRef(PODS.api_version, "Pod", pod.name, pod.uid)
    return _emit(state, target, "Warning", reason, message, key)
