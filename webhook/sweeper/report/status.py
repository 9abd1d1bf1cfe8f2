"""The training jobs of a cluster at a glance: one row per job, as `trainhook status` shows it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.core import contract
from webhook.core.job.progress import human_duration, read_summary
from webhook.core.mutation.workload_mutation import ordered_ready_trap
from webhook.core.objects import parse_time
from webhook.kube.client import Kube
from webhook.kube.resources import JOBS, PODS, STATEFULSETS
from webhook.sweeper.decide import recorded_outcome, recorded_status
from webhook.sweeper.decide.policy import role_counts
from webhook.sweeper.job.state import (
    JobKey,
    JobState,
    is_bare_pod,
    job_key,
    read_job_state,
)
from webhook.sweeper.job.stragglers import StragglerRecord, read_stragglers


@dataclass(frozen=True)
class JobRow:
    namespace: str
    job: str
    framework: str
    roles: str  # e.g. "master 1/1, worker 2/3": ready pods / replicas, per role
    phase: str
    age: str
    finished: str
    reason: str = "-"  # why it is in that phase: OOMKilled, ImagePullBackOff, Completed, ...
    restarts: str = "0"  # whole-job restarts with RestartJob, else failed runs
    start: str = "-"  # when it started, e.g. "12m ago"
    rule: str = "-"  # the failure rule that fired last, e.g. "failure-policy rule 2"
    progress: str = "-"  # the last progress report: "45%", else "step 450/1000"
    eta: str = "-"  # its estimated time left, e.g. "13m"
    checkpoint: str = "-"  # the last checkpoint: "step 400, 5m ago"
    # The StatefulSets and Jobs the webhook did not admit into the job ("StatefulSet a"): they
    # record no creator, and the sweeper acts on no outcome recorded only on them.
    unattributed: tuple[str, ...] = ()
    # Its StatefulSets that start their pods one after the other although the job did not ask
    # for it (labelled after their creation, they keep OrderedReady): the job never starts.
    ordered_ready: tuple[str, ...] = ()
    stragglers: str = "-"  # the ranks flagged as stragglers: "rank 2", "ranks 2, 5"


def job_rows(
    workloads: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], now: datetime
) -> list[JobRow]:
    """One row per job, from its StatefulSets and Jobs (`workloads`) and its pods."""
    grouped: dict[JobKey, dict[str, list[Mapping[str, Any]]]] = {}
    for obj in workloads:
        resource = STATEFULSETS if obj.get("kind") == "StatefulSet" else JOBS
        key = job_key(resource, obj)
        if key is not None:
            grouped.setdefault(key, {"workloads": [], "pods": []})["workloads"].append(obj)
    for obj in pods:
        key = job_key(PODS, obj)
        if key is not None and (key in grouped or is_bare_pod(obj)):
            grouped.setdefault(key, {"workloads": [], "pods": []})["pods"].append(obj)
    rows = []
    for (namespace, job), objects in sorted(grouped.items()):
        state = read_job_state(namespace, job, workloads=objects["workloads"], pods=objects["pods"])
        rows.append(_row(state, now, objects["workloads"]))
    return rows


def ordered_ready(state: JobState, workloads: Iterable[Mapping[str, Any]]) -> tuple[str, ...]:
    """The names of the job's StatefulSets caught in the OrderedReady trap, while it runs."""
    if not state.workloads or recorded_outcome(state) is not None:
        return ()
    by_name = {
        (obj.get("metadata") or {}).get("name"): obj
        for obj in workloads
        if obj.get("kind") == "StatefulSet"
    }
    return tuple(
        w.name
        for w in state.workloads
        if w.kind == "StatefulSet"
        and ordered_ready_trap(by_name.get(w.name) or {}, w.settings.ordered_start)
    )


def ordered_ready_line(namespace: str, name: str) -> str:
    """What `trainhook status` and `describe` say of such a StatefulSet, with the way out."""
    return (
        f"StatefulSet {name} has podManagementPolicy OrderedReady: later pods wait for rank 0 "
        f"to be Ready, rank 0 for them; recreate it: kubectl delete statefulset {name} "
        f"-n {namespace} --cascade=orphan, then apply it again"
    )


def _row(state: JobState, now: datetime, workloads: Iterable[Mapping[str, Any]] = ()) -> JobRow:
    outcome = recorded_outcome(state) if state.workloads else None
    recorded = recorded_status(state) if state.workloads else {}
    reason = str(recorded.get("reason") or "-")
    if outcome is not None:
        phase, reason = outcome.phase, outcome.reason
        if not outcome.verified:
            reason = f"{reason} (unverified)"
    elif state.problems:
        phase, reason = "Invalid", "InvalidJob"
    elif recorded.get("state"):
        phase = str(recorded["state"])
    elif any(pod.phase == "Running" and not pod.terminating for pod in state.pods):
        phase = "Running"
    else:
        phase = "Pending"
    started = parse_time(recorded.get("startTime"))
    restarts = recorded.get("restarts")
    totals = role_counts(state) if state.workloads else {}
    for workload in state.workloads:  # roles scaled to 0, a finished job's StatefulSets too
        totals.setdefault(workload.role, 0)
    order = state.framework.order(totals) if state.workloads else []
    roles = ", ".join(f"{role} {_ready(state, role)}/{totals[role]}" for role in order)
    created = [w.created for w in state.workloads if w.created is not None]
    finished = outcome.finished_at if outcome else None
    return JobRow(
        namespace=state.namespace,
        job=state.job,
        framework=state.framework.name if state.workloads else "?",
        roles=roles or "-",
        phase=phase,
        age=human_duration((now - min(created)).total_seconds()) if created else "-",
        finished=f"{human_duration((now - finished).total_seconds())} ago" if finished else "-",
        reason=reason,
        restarts=str(restarts) if isinstance(restarts, int) else "0",
        start=f"{human_duration((now - started).total_seconds())} ago" if started else "-",
        rule=short_rule(recorded.get("rule")),
        **progress_cells(state, now, finished=outcome is not None),
        unattributed=tuple(f"{p.kind} {p.name}" for p in state.unattributed),
        ordered_ready=ordered_ready(state, workloads),
        stragglers=stragglers_cell(job_stragglers(state)),
    )


def job_stragglers(state: JobState) -> StragglerRecord | None:
    """The ranks an unfinished job's workloads record as stragglers, if any."""
    if not state.workloads or recorded_outcome(state) is not None:
        return None
    found = (read_stragglers(w.annotations) for w in state.workloads)
    return next((record for record in found if record is not None), None)


def stragglers_cell(record: StragglerRecord | None) -> str:
    if record is None:
        return "-"
    names = [str(s.rank) if s.rank is not None else s.pod for s in record.flagged]
    more = record.count - len(names)
    cell = ("rank " if len(names) == 1 else "ranks ") + ", ".join(names)
    return cell + (f" +{more}" if more > 0 else "")


def short_rule(name: object) -> str:
    """`failure-policy rule 2` or `RestartJob rule 2`: a rule's name without its text."""
    if not isinstance(name, str) or not name:
        return "-"
    return name.split(" (", 1)[0].removeprefix(f"{contract.RESTART_POLICY} ")


def job_progress(state: JobState) -> dict[str, Any] | None:
    """The job's last progress summary (trainhook.io/progress on its workloads), if any."""
    found = [read_summary(w.annotations) for w in state.workloads]
    summaries = [s for s in found if s is not None]
    return max(summaries, key=lambda s: str(s.get("updated", ""))) if summaries else None


def progress_cells(state: JobState, now: datetime, *, finished: bool) -> dict[str, str]:
    summary = job_progress(state)
    if summary is None:
        return {}
    cells: dict[str, str] = {}
    step, total = summary.get("step"), summary.get("totalSteps")
    if isinstance(summary.get("progress"), int):
        cells["progress"] = f"{summary['progress']}%"
    elif isinstance(step, int):
        cells["progress"] = f"step {step}/{total}" if isinstance(total, int) else f"step {step}"
    eta = summary.get("etaSeconds")
    if isinstance(eta, int) and not finished:
        cells["eta"] = human_duration(eta)
    checkpoint = summary.get("checkpoint")
    if isinstance(checkpoint, dict):
        when = parse_time(checkpoint.get("time"))
        parts = [f"step {checkpoint['step']}"] if isinstance(checkpoint.get("step"), int) else []
        if when is not None:
            parts.append(f"{human_duration((now - when).total_seconds())} ago")
        cells["checkpoint"] = ", ".join(parts) or "-"
    return cells


def _ready(state: JobState, role: str) -> int:
    return sum(1 for pod in state.pods if pod.role == role and pod.ready and not pod.terminating)


def format_table(rows: Sequence[JobRow], *, with_namespace: bool) -> str:
    header = [
        "JOB",
        "FRAMEWORK",
        "ROLES",
        "PHASE",
        "REASON",
        "RESTARTS",
        "PROGRESS",
        "ETA",
        "CHECKPOINT",
        "START",
        "AGE",
        "FINISHED",
    ]
    lines = [
        [
            r.job,
            r.framework,
            r.roles,
            r.phase,
            r.reason,
            r.restarts,
            r.progress,
            r.eta,
            r.checkpoint,
            r.start,
            r.age,
            r.finished,
        ]
        for r in rows
    ]
    if any(r.rule != "-" for r in rows):  # jobs whose failure rules acted
        header.insert(5, "RULE")
        for line, row in zip(lines, rows, strict=True):
            line.insert(5, row.rule)
    if any(r.stragglers != "-" for r in rows):  # jobs with a rank flagged as a straggler
        header.append("STRAGGLERS")
        for line, row in zip(lines, rows, strict=True):
            line.append(row.stragglers)
    if any(r.unattributed for r in rows):  # jobs with workloads the webhook did not admit
        header.append("UNATTRIBUTED")
        for line, row in zip(lines, rows, strict=True):
            line.append(str(len(row.unattributed)) if row.unattributed else "-")
    if with_namespace:
        header.insert(0, "NAMESPACE")
        for line, row in zip(lines, rows, strict=True):
            line.insert(0, row.namespace)
    widths = [max(len(cell) for cell in column) for column in zip(header, *lines, strict=True)]
    table = [
        "   ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip()
        for line in [header, *lines]
    ]
    notes = [
        f"{row.job}: {ordered_ready_line(row.namespace, name)}"
        for row in rows
        for name in row.ordered_ready
    ]
    return "\n".join([*table, *(["", *notes] if notes else [])])


def read_rows(kube: Kube, namespace: str | None) -> list[JobRow]:
    """Every training job of `namespace` (None: every namespace), read from the API server now."""
    workloads = [
        obj
        for resource in (STATEFULSETS, JOBS)
        for obj in kube.list(resource, namespace, contract.FRAMEWORK)[0]
    ]
    pods, _ = kube.list(PODS, namespace, contract.JOB)
    return job_rows(workloads, pods, datetime.now(UTC))
