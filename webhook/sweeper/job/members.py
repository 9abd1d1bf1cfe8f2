"""Which of a job's labelled objects speak for it, by the rules of `read_job_state`: the pods the
progress endpoint may hear from, and the workloads and pods it may write on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from webhook.core import contract
from webhook.core.objects import metadata_of
from webhook.sweeper.job.state import read_job_state


def reporter_refusal(
    namespace: str,
    job: str,
    pod: Mapping[str, Any],
    uid: str,
    workloads: Iterable[Mapping[str, Any]],
) -> str | None:
    """Why `pod` (the one a token was issued to, `uid` its uid) may not report for `job`, whose
    StatefulSets and Jobs are `workloads`; None when it may: a pod of the job by the rules of
    `read_job_state`, of a workload that reports (trainhook.io/report-progress)."""
    metadata = metadata_of(pod)
    name = metadata.get("name") or ""
    if metadata.get("uid") != uid or metadata.get("deletionTimestamp"):
        return f"the pod it was issued to, {name}, is gone"
    state = read_job_state(namespace, job, workloads=workloads, pods=[pod])
    view = next((seen for seen in state.pods if seen.name == name), None)
    if view is None:
        return f"the pod it was issued to, {name}, is not a pod of the job"
    owner = next(
        (w for w in state.workloads if (w.kind, w.name) == (view.owner_kind, view.owner_name)),
        None,
    )
    if owner is None or not owner.settings.report_progress:
        return (
            f"the pod it was issued to, {name}, is of a workload that does not report "
            f"({contract.REPORT_PROGRESS})"
        )
    return None


def member_pods(
    namespace: str,
    job: str,
    workloads: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """Of `workloads` and `pods` (labelled with `job`), those that are the job's by the rules of
    `read_job_state`: its StatefulSets and Jobs, and its pods."""
    workloads, pods = list(workloads), list(pods)
    state = read_job_state(namespace, job, workloads=workloads, pods=pods)
    kept = {(view.kind, view.name) for view in state.workloads}
    names = {view.name for view in state.pods}
    return (
        [w for w in workloads if (w.get("kind"), metadata_of(w).get("name")) in kept],
        [p for p in pods if metadata_of(p).get("name") in names],
    )
