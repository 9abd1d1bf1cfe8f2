"""One training job in detail, as `trainhook describe JOB` shows it: its roles and workloads,
its pods with rank, phase and restarts, its Service and PodGroup, recent Events, and the last
failure's message."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.core import contract
from webhook.core.job.node_exclusion import MAX_EXCLUDED, recorded_exclusions
from webhook.core.job.progress import human_duration
from webhook.core.objects import parse_time
from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import EVENTS, JOBS, NODES, PODGROUPS, PODS, SERVICES, STATEFULSETS
from webhook.sweeper.decide import recorded_outcome, recorded_status
from webhook.sweeper.decide.failures import job_failure_policy
from webhook.sweeper.decide.records import WAITING_FOR_OWNED_OBJECTS, WAITING_FOR_ROLES
from webhook.sweeper.job.goodput import Goodput, goodput_text
from webhook.sweeper.job.state import JobState, job_key, read_job_state, status_field
from webhook.sweeper.job.stragglers import stragglers_line
from webhook.sweeper.report.status import (
    job_progress,
    job_rows,
    job_stragglers,
    ordered_ready_line,
)

RECENT_EVENTS = 10


@dataclass(frozen=True)
class JobObjects:
    """Everything of one job that the API server returned."""

    namespace: str
    job: str
    workloads: tuple[Mapping[str, Any], ...]
    pods: tuple[Mapping[str, Any], ...]
    service: Mapping[str, Any] | None
    podgroup: Mapping[str, Any] | None
    events: tuple[Mapping[str, Any], ...]
    # The labels of the nodes the pods run on, read when the job asks for a placement; None
    # when the reader may not get nodes.
    nodes: Mapping[str, Mapping[str, str]] | None = dataclasses.field(default_factory=dict)


def read_job(kube: Kube, namespace: str, job: str) -> JobObjects:
    """The job's workloads, pods, Service, PodGroup and the Events about any of them."""
    key = (namespace, job)
    workloads = tuple(
        obj
        for resource in (STATEFULSETS, JOBS)
        for obj in kube.list(resource, namespace, contract.FRAMEWORK)[0]
        if job_key(resource, obj) == key
    )
    pods = tuple(
        obj
        for obj in kube.list(PODS, namespace, f"{contract.JOB}={job}")[0]
        if job_key(PODS, obj) == key
    )
    named = {_name(obj) for obj in (*workloads, *pods)} | {job}
    events = tuple(
        event
        for event in kube.list(EVENTS, namespace)[0]
        if (event.get("involvedObject") or event.get("regarding") or {}).get("name") in named
    )
    return JobObjects(
        namespace,
        job,
        workloads,
        pods,
        _get(kube, SERVICES, namespace, job),
        _get(kube, PODGROUPS, namespace, job),
        events,
        _nodes(kube, pods) if placement_key((*workloads, *pods)) else {},
    )


def placement_key(objects: Iterable[Mapping[str, Any]]) -> str | None:
    """The node label key the job is kept within, as its workloads (or bare pods) ask."""
    for obj in objects:
        key = (_metadata(obj).get("annotations") or {}).get(contract.PLACEMENT_TOPOLOGY)
        if key:
            return str(key)
    return None


def _nodes(kube: Kube, pods: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, str]] | None:
    found: dict[str, Mapping[str, str]] = {}
    for name in sorted(
        {str(p["spec"]["nodeName"]) for p in pods if p.get("spec", {}).get("nodeName")}
    ):
        try:
            node = kube.get(NODES, None, name)
        except ApiError as error:
            if error.status == 404:
                continue  # the node has gone: the pods on it are going too
            if error.status == 403:
                return None
            raise
        found[name] = _labels(node)
    return found


def _get(kube: Kube, resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.get(resource, namespace, name)
    except ApiError as error:
        if error.status == 404:  # not created (yet), or Volcano is not installed
            return None
        raise


def describe(objects: JobObjects, now: datetime) -> str:
    """The description a person reads, in kubectl describe's spirit."""
    rows = job_rows(objects.workloads, objects.pods, now)
    row = rows[0] if rows else None
    lines = [
        f"Name:         {objects.job}",
        f"Namespace:    {objects.namespace}",
        f"Framework:    {row.framework if row else '?'}",
        f"Phase:        {row.phase if row else '-'}",
    ]
    state = read_job_state(
        objects.namespace, objects.job, workloads=objects.workloads, pods=objects.pods
    )
    waiting = _waiting(state)
    if waiting:
        lines.append(f"Waiting:      {waiting}")
    lines += [
        f"Roles:        {row.roles if row else '-'}",
        f"Age:          {row.age if row else '-'}",
    ]
    summary = job_progress(state)
    if summary is not None:
        lines += progress_lines(summary, now)
    ledger = Goodput.read(recorded_status(state)) if state.workloads else None
    if ledger is not None:
        step = (summary or {}).get("step")
        shown = goodput_text(ledger, now, step if isinstance(step, int) else None)
        lines.append(f"Goodput:      {shown}")
    stragglers = job_stragglers(state)
    if stragglers is not None:
        lines.append(f"Stragglers:   {stragglers_line(stragglers)}")
    if objects.workloads:
        lines.append("Workloads:")
        lines += _indent(_table(["KIND", "NAME", "ROLE", "REPLICAS"], _workload_rows(objects)))
    lines.append("Pods:")
    if objects.pods:
        lines += _indent(
            _table(["NAME", "ROLE", "RANK", "PHASE", "RESTARTS", "AGE"], _pod_rows(objects, now))
        )
    else:
        lines.append("  none")
    lines.append(f"Service:      {_service(objects.service)}")
    lines.append(f"PodGroup:     {_podgroup(objects.podgroup)}")
    key = placement_key(objects.workloads or objects.pods)
    if key:
        lines.append(f"Placement:    {key}: {_domains(key, objects)}")
    if row is not None:
        lines += [
            f"Start order:  {ordered_ready_line(objects.namespace, name)}"
            for name in row.ordered_ready
        ]
    if row is not None and row.unattributed:
        lines.append(
            f"Unattributed: {', '.join(row.unattributed)}: no {contract.CREATED_BY}, not admitted "
            "by the webhook; the sweeper acts on no outcome recorded only on them"
        )
    lines.append(f"Last failure: {last_failure(objects) or 'none'}")
    lines += _failure_rules(objects)
    lines.append("Events:")
    recent = sorted(objects.events, key=_event_time)[-RECENT_EVENTS:]
    if recent:
        lines += _indent(
            _table(
                ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"],
                [_event_row(event, now) for event in recent],
            )
        )
    else:
        lines.append("  none")
    return "\n".join(lines)


def _waiting(state: JobState) -> str | None:
    """What a pending job's pods wait for, as the sweeper recorded it: a role, or an object
    someone else made under the name of the job's own."""
    if not state.workloads or recorded_outcome(state) is not None:
        return None
    recorded = recorded_status(state)
    if recorded.get("reason") not in (WAITING_FOR_ROLES, WAITING_FOR_OWNED_OBJECTS):
        return None
    return str(recorded.get("message") or recorded["reason"])


def _failure_rules(objects: JobObjects) -> list[str]:
    """The job's failure rules in the order they are tried, the last one that fired and the
    restarts that did not count, when the job sets a failure or restart policy."""
    workloads = [w for w in objects.workloads if w.get("kind") in ("StatefulSet", "Job")]
    if not workloads:
        return []
    state = read_job_state(objects.namespace, objects.job, workloads=workloads, pods=())
    if not state.workloads or state.problems:
        return []
    if not (state.settings.failure_rules or state.settings.restart_policy):
        return []
    lines = ["Failure rules (first match wins):"]
    lines += _indent(job_failure_policy(state).lines())
    recorded = recorded_status(state)
    if recorded.get("rule"):
        lines.append(f"Rule fired:   {recorded['rule']}")
    disruptions = recorded.get("disruptions")
    if isinstance(disruptions, dict) and disruptions:
        counted = ", ".join(f"{kind} {n}" for kind, n in sorted(disruptions.items()))
        lines.append(f"Not counted:  {counted} (restarts after pods were stopped from outside)")
    excluded = recorded_exclusions(recorded)
    if excluded:
        lines.append(
            f"Excluded:     nodes {', '.join(excluded)} (exclude-node: the pods its restarts "
            f"recreate keep off them; at most {MAX_EXCLUDED}, until the job ends)"
        )
    return lines


def progress_lines(summary: Mapping[str, Any], now: datetime) -> list[str]:
    """The job's last progress report: how far, how long left, its metrics, its checkpoint,
    and what the last restart lost."""
    done = []
    if isinstance(summary.get("progress"), int):
        done.append(f"{summary['progress']}%")
    counts = [
        f"{what} {summary[key]}"
        + (f"/{summary[total]}" if isinstance(summary.get(total), int) else "")
        for what, key, total in (("step", "step", "totalSteps"), ("epoch", "epoch", "totalEpochs"))
        if isinstance(summary.get(key), int)
    ]
    text = " ".join(done) + (f" ({', '.join(counts)})" if done and counts else ", ".join(counts))
    if isinstance(summary.get("etaSeconds"), int):
        text += f", {human_duration(summary['etaSeconds'])} left"
    updated = parse_time(summary.get("updated"))
    if updated is not None:
        text += f", reported {_ago(updated, now)}"
    lines = [f"Progress:     {text.strip(', ') or '-'}"]
    metrics = summary.get("metrics")
    if isinstance(metrics, dict) and metrics:
        lines.append("Metrics:      " + ", ".join(f"{k}={v}" for k, v in metrics.items()))
    checkpoint = summary.get("checkpoint")
    if isinstance(checkpoint, dict):
        parts = [f"step {checkpoint['step']}"] if isinstance(checkpoint.get("step"), int) else []
        saved = parse_time(checkpoint.get("time"))
        if saved is not None:
            parts.append(f"saved {_ago(saved, now)}")
        lines.append(f"Checkpoint:   {', '.join(parts) or '-'}")
    restart = summary.get("restart")
    if isinstance(restart, dict) and isinstance(restart.get("lostSteps"), int):
        at = parse_time(restart.get("at"))
        since = (
            f"last checkpoint step {restart['checkpointStep']}"
            if isinstance(restart.get("checkpointStep"), int)
            else "no checkpoint"
        )
        when = f"the restart {_ago(at, now)}" if at else "the last restart"
        lines.append(
            f"Lost work:    {when} lost {restart['lostSteps']} steps "
            f"(step {restart.get('reachedStep')} reached, {since})"
        )
    return lines


def _ago(when: datetime, now: datetime) -> str:
    return f"{human_duration((now - when).total_seconds())} ago"


def last_failure(objects: JobObjects) -> str | None:
    """What went wrong last: the failure the sweeper recorded (with the failing rank's message,
    kept once its pods are gone), and the last container that exited with an error (its
    termination message when it left one)."""
    parts = []
    for workload in objects.workloads:
        annotations = _metadata(workload).get("annotations") or {}
        if annotations.get(contract.PHASE) == "Failed":
            said = status_field(annotations.get(contract.STATUS), "message")
            reason = annotations.get(contract.REASON) or "Failed"
            parts.append(f"job failed: {reason}" + (f": {said}" if said else ""))
            break
    exits = [exit for pod in objects.pods for exit in _failed_exits(pod)]
    if exits:
        _, text = max(exits, key=lambda found: found[0])
        parts.append(text)
    return "; ".join(parts) or None


def _failed_exits(pod: Mapping[str, Any]) -> Iterable[tuple[datetime, str]]:
    status = pod.get("status") or {}
    for container in [
        *(status.get("initContainerStatuses") or []),
        *(status.get("containerStatuses") or []),
    ]:
        for state in (container.get("state") or {}, container.get("lastState") or {}):
            terminated = state.get("terminated") or {}
            code = terminated.get("exitCode")
            if not code:
                continue
            when = parse_time(terminated.get("finishedAt")) or datetime.min.replace(tzinfo=UTC)
            text = f"pod {_name(pod)}, container {container.get('name')}: exit code {code}"
            if terminated.get("reason"):
                text += f" ({terminated['reason']})"
            message = " ".join(str(terminated.get("message") or "").split())
            if message:
                text += f": {message[-300:]}"
            yield when, text


def _workload_rows(objects: JobObjects) -> list[list[str]]:
    rows = []
    for obj in objects.workloads:
        spec = obj.get("spec") or {}
        replicas = spec.get("replicas", spec.get("completions", spec.get("parallelism", 1)))
        rows.append(
            [
                str(obj.get("kind")),
                _name(obj),
                _labels(obj).get(contract.ROLE, "-"),
                str(replicas),
            ]
        )
    return rows


def _pod_rows(objects: JobObjects, now: datetime) -> list[list[str]]:
    def rank(pod: Mapping[str, Any]) -> tuple[int, str]:
        value = _labels(pod).get(contract.RANK, "")
        return (int(value) if value.isdigit() else 1 << 30, _name(pod))

    rows = []
    for pod in sorted(objects.pods, key=rank):
        status = pod.get("status") or {}
        restarts = sum(
            int(c.get("restartCount") or 0) for c in status.get("containerStatuses") or []
        )
        phase = str(status.get("phase") or "Unknown")
        if _metadata(pod).get("deletionTimestamp"):
            phase = "Terminating"
        created = parse_time(_metadata(pod).get("creationTimestamp"))
        rows.append(
            [
                _name(pod),
                _labels(pod).get(contract.ROLE, "-"),
                _labels(pod).get(contract.RANK, "-"),
                phase,
                str(restarts),
                human_duration((now - created).total_seconds()) if created else "-",
            ]
        )
    return rows


def _service(service: Mapping[str, Any] | None) -> str:
    if service is None:
        return "none yet (the sweeper creates the job's headless Service)"
    spec = service.get("spec") or {}
    ports = ",".join(str(p.get("port")) for p in spec.get("ports") or []) or "none"
    kind = "headless" if spec.get("clusterIP") == "None" else str(spec.get("type") or "ClusterIP")
    return f"{_name(service)} ({kind}, ports {ports})"


def _podgroup(podgroup: Mapping[str, Any] | None) -> str:
    if podgroup is None:
        return "none (no gang scheduling, or not created yet)"
    spec = podgroup.get("spec") or {}
    phase = (podgroup.get("status") or {}).get("phase")
    text = f"{_name(podgroup)} (minMember {spec.get('minMember')}, queue {spec.get('queue', '-')}"
    return text + (f", {phase})" if phase else ")")


def _domains(key: str, objects: JobObjects) -> str:
    """Which domains of the key the job's pods landed in, and how many pods in each."""
    if objects.nodes is None:
        return "unknown (you may not get nodes)"
    landed: Counter[str] = Counter()
    for pod in objects.pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if not node:
            landed["not scheduled yet"] += 1
        elif node not in objects.nodes:
            landed["node gone"] += 1
        else:
            landed[objects.nodes[node].get(key) or f"node without {key}"] += 1
    if not landed:
        return "no pods yet"
    return ", ".join(
        f"{domain} ({count} pod{'s' if count > 1 else ''})"
        for domain, count in sorted(landed.items())
    )


def _event_time(event: Mapping[str, Any]) -> datetime:
    for field in ("lastTimestamp", "eventTime", "firstTimestamp"):
        found = parse_time(event.get(field))
        if found is not None:
            return found
    found = parse_time(_metadata(event).get("creationTimestamp"))
    return found or datetime.min.replace(tzinfo=UTC)


def _event_row(event: Mapping[str, Any], now: datetime) -> list[str]:
    involved = event.get("involvedObject") or event.get("regarding") or {}
    seen = _event_time(event)
    return [
        "-" if seen.year == 1 else f"{human_duration((now - seen).total_seconds())} ago",
        str(event.get("type") or "-"),
        str(event.get("reason") or "-"),
        f"{involved.get('kind', '?')}/{involved.get('name', '?')}",
        " ".join(str(event.get("message") or event.get("note") or "").split()),
    ]


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _indent(lines: list[str]) -> list[str]:
    return [f"  {line}" for line in lines]


def _metadata(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata: Mapping[str, Any] = obj.get("metadata") or {}
    return metadata


def _name(obj: Mapping[str, Any]) -> str:
    return str(_metadata(obj).get("name", ""))


def _labels(obj: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = _metadata(obj).get("labels") or {}
    return labels
