"""Events about a job, named after what they say so that recording one twice finds it exists."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from webhook.kube.resources import JOBS, PODS, STATEFULSETS
from webhook.sweeper.actions import Action, Emit, ObjectRef
from webhook.sweeper.job.state import JobState, WorkloadView


def problem_events(state: JobState) -> Iterable[Action]:
    for problem in state.problems:
        target = ObjectRef(_api_version(problem.kind), problem.kind, problem.name, problem.uid)
        yield _emit(state, target, "Warning", "InvalidJob", problem.message, problem.message)


def intruder_events(state: JobState) -> Iterable[Action]:
    for intruder in state.intruders:
        kind = intruder.kind
        target = ObjectRef(_api_version(kind), kind, intruder.name, intruder.uid)
        yield _emit(state, target, "Warning", "NotInJob", intruder.message, "NotInJob")


def unattributed_events(state: JobState) -> Iterable[Action]:
    for workload in state.unattributed:
        kind = workload.kind
        target = ObjectRef(_api_version(kind), kind, workload.name, workload.uid)
        yield _emit(state, target, "Warning", "NotAttributed", workload.message, "NotAttributed")


def _api_version(kind: str) -> str:
    return {"StatefulSet": STATEFULSETS, "Job": JOBS}.get(kind, PODS).api_version


def event_on(
    state: JobState, workload: WorkloadView, kind: str, reason: str, message: str, key: str = ""
) -> Emit:
    target = ObjectRef(workload.resource.api_version, workload.kind, workload.name, workload.uid)
    return _emit(state, target, kind, reason, message, key or message)


def _emit(
    state: JobState, target: ObjectRef, kind: str, reason: str, message: str, key: str
) -> Emit:
    """An Event named after what it says: recording the same thing twice finds it exists."""
    digest = hashlib.sha256(f"{target.uid}|{reason}|{key}".encode()).hexdigest()[:12]
    name = f"{target.name[:240]}.{digest}"
    return Emit(state.namespace, name, target, kind, reason, message, job=state.job)
