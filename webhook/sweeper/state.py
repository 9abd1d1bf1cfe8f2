"""One training job as the sweeper sees it: plain data read from the objects of the cluster."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from webhook.core import contract
from webhook.core.claims import Claim, claim_of, creator_of
from webhook.core.errors import TrainhookError
from webhook.core.frameworks import Framework
from webhook.core.gang import template_requests
from webhook.core.objects import annotations_of, labels_of, parse_time
from webhook.core.peers import configmap_prefix
from webhook.core.pods import identify, training_container
from webhook.core.requests import Requests, pod_requests
from webhook.core.restart_in_place import BARRIER
from webhook.core.settings import Settings, read_settings
from webhook.core.workload import Workload, job_of, read_framework, read_role, read_workload
from webhook.kube.resources import (
    JOBS,
    MANAGED_BY,
    MANAGER,
    PODS,
    STATEFULSETS,
    WORKLOAD_RESOURCES,
    Resource,
)

JobKey = tuple[str, str]  # (namespace, job)
# A pod the kubelet evicted says so in its status reason; one the API evicted or preempted has
# the DisruptionTarget condition.
DISRUPTED_REASONS = ("Evicted", "Preempting", "Terminated", "DeletionByTaintManager")
STAMP_KEYS = (contract.TOPOLOGY, contract.HOSTS)
# What the sweeper writes on pods and reads back: an in-place restart's attempt and its release,
# and the Kueue marker that ends a pod group.
POD_RECORDS = (contract.ATTEMPT, contract.RELEASED_ATTEMPT, contract.KUEUE_RETRIABLE_IN_GROUP)


@dataclass(frozen=True)
class Run:
    """One terminated run of a container."""

    exit_code: int
    reason: str  # what the kubelet says: Completed, Error, OOMKilled, ...
    message: str  # the container's termination message, first line
    finished: datetime | None

    def describe(self) -> str:
        plain = ("Error", "Completed", "")
        reason = f" ({self.reason})" if self.reason not in plain else ""
        message = f": {self.message}" if self.message else ""
        return f"exited with code {self.exit_code}{reason}{message}"


@dataclass(frozen=True)
class Training:
    """The status of a pod's training container (and of its init containers)."""

    name: str
    restarts: int
    current: Run | None  # the current state, when it has terminated
    last: Run | None  # the previous run, when there was one
    waiting: str = ""  # why it is not running: CrashLoopBackOff, ImagePullBackOff, ...
    waiting_message: str = ""
    init_failures: int = 0  # failed runs of init containers (sidecars left out)
    init_failed: Run | None = None  # the latest failed run of an init container

    @property
    def exit_code(self) -> int | None:
        return self.current.exit_code if self.current else None

    @property
    def last_exit_code(self) -> int | None:
        return self.last.exit_code if self.last else None

    @cached_property
    def succeeded(self) -> bool:
        return self.exit_code == 0 or self.last_exit_code == 0

    @cached_property
    def failures(self) -> int:
        """Failed runs: restarts not caused by a success, a failed current run, and every failed
        run of an init container."""
        restarts = self.restarts
        if self.last_exit_code == 0 and restarts > 0:
            restarts -= 1
        return restarts + (1 if self.exit_code not in (None, 0) else 0) + self.init_failures

    def failed_runs(self) -> tuple[Run, ...]:
        """The failed runs whose details are still known: newest first."""
        return self._failed

    @cached_property
    def _failed(self) -> tuple[Run, ...]:
        runs = (self.current, self.init_failed, self.last)
        return tuple(run for run in runs if run is not None and run.exit_code != 0)

    def exit_codes(self) -> tuple[int, ...]:
        return tuple(code for code in (self.exit_code, self.last_exit_code) if code is not None)


@dataclass(frozen=True)
class PodView:
    name: str
    uid: str
    owner_kind: str  # StatefulSet, Job, Pod (a bare pod) or Other
    owner_name: str
    role: str | None
    index: int | None
    phase: str
    ready: bool
    topology: str | None
    training: Training | None
    terminating: bool
    # Stopped from outside, not by its training: evicted or preempted (DisruptionTarget, or
    # status reason Evicted), or stopped by Kueue (TerminationTarget) when it preempts or evicts
    # the job's pod group.
    disrupted: bool = False
    peers: str | None = None  # the peers ConfigMap it mounts (a job past the inline bound)
    created: datetime | None = None
    scheduling: str = ""  # why a Pending pod is not scheduled (the PodScheduled condition)
    status_reason: str = ""  # the pod's status.reason: Evicted, UnexpectedAdmissionError, ...
    # (type, reason) of its True DisruptionTarget and TerminationTarget conditions
    stop_conditions: tuple[tuple[str, str], ...] = ()
    annotations: Mapping[str, str] = field(default_factory=dict)  # its trainhook.io/ ones
    has_barrier: bool = False  # it carries the in-place restart's barrier
    # When its barrier started waiting, while it waits (an in-place restart under way).
    barrier_waiting: datetime | None = None

    @cached_property
    def uid8(self) -> str:
        """Short enough to be recorded for thousands of pods, long enough within one job."""
        return self.uid.replace("-", "")[:8] or self.name

    @cached_property
    def counts(self) -> bool:
        """Whether what the pod does now says something about the training (a pod being
        deleted or evicted may exit 0 or fail on SIGTERM: neither counts)."""
        return not self.terminating and not self.disrupted


@dataclass(frozen=True)
class JobStatus:
    """What an Indexed Job reports about itself."""

    complete: bool
    failed: str | None  # "reason: message" of its Failed condition
    completed_indexes: frozenset[int]
    suspended: bool
    started: bool

    @property
    def finished(self) -> bool:
        return self.complete or self.failed is not None


@dataclass(frozen=True)
class FailedRuns:
    """Failed runs counted for the pods of one workload: those of pods that are gone, and per
    live pod (by its short uid). Recorded on the workload, so replacing a pod loses nothing."""

    gone: int
    pods: Mapping[str, int]

    @staticmethod
    def parse(raw: str | None) -> FailedRuns:
        try:
            value = json.loads(raw) if raw else {}
        except ValueError:
            value = {}
        if not isinstance(value, dict):
            value = {}
        gone = value.get("gone")
        pods = value.get("pods")
        return FailedRuns(
            gone if isinstance(gone, int) and gone >= 0 else 0,
            {
                str(k): v
                for k, v in (pods.items() if isinstance(pods, dict) else ())
                if isinstance(v, int) and v > 0
            },
        )

    def format(self) -> str:
        return json.dumps({"gone": self.gone, "pods": dict(self.pods)}, separators=(",", ":"))


@dataclass(frozen=True)
class WorkloadView:
    """One StatefulSet, Indexed Job or bare Pod of the job: the core's reading of it (`workload`)
    and what the sweeper needs of the object besides."""

    workload: Workload
    uid: str
    resource_version: str
    stamp: Mapping[str, str]  # the topology annotations its pods are created with
    annotations: Mapping[str, str]  # its own annotations, where the sweeper records the phase
    priority_class: str | None
    created: datetime | None
    job_status: JobStatus | None = None
    pod_requests: Requests = field(default_factory=dict)  # what one of its pods asks for
    succeeded: frozenset[int] = frozenset()  # role indexes recorded as succeeded
    failed_runs: FailedRuns = field(default_factory=lambda: FailedRuns(0, {}))

    @property
    def kind(self) -> str:
        return self.workload.kind

    @property
    def name(self) -> str:
        return self.workload.name

    @property
    def framework(self) -> Framework:
        return self.workload.framework

    @property
    def role(self) -> str:
        return self.workload.role

    @property
    def replicas(self) -> int:
        return self.workload.replicas

    @property
    def settings(self) -> Settings:
        return self.workload.settings

    @property
    def pod_prefix(self) -> str:
        return self.workload.pod_prefix

    @property
    def ordinal_start(self) -> int:
        return self.workload.ordinal_start

    @property
    def service(self) -> str:
        return self.workload.service

    @property
    def resource(self) -> Resource:
        return WORKLOAD_RESOURCES[self.kind]


@dataclass(frozen=True)
class Owned:
    """A Service, PodGroup or Secret named after the job."""

    name: str
    uid: str
    resource_version: str
    managed: bool  # created by the sweeper (carries its managed-by label)
    owners: frozenset[str]  # uids in its ownerReferences
    spec: Mapping[str, Any]


@dataclass(frozen=True)
class Problem:
    """A workload the sweeper cannot act on, and why (one line for a person)."""

    kind: str
    name: str
    uid: str
    message: str


@dataclass(frozen=True)
class JobState:
    namespace: str
    job: str
    workloads: tuple[WorkloadView, ...]  # in the framework's role order
    pods: tuple[PodView, ...]
    service: Owned | None = None
    podgroup: Owned | None = None  # Volcano's
    coscheduling_podgroup: Owned | None = None  # scheduler-plugins'
    secret: Owned | None = None
    problems: tuple[Problem, ...] = ()
    # Pods labelled with the job that its workloads did not make, and workloads labelled with it
    # that another user created than the job's first creator: never acted on, never read.
    intruders: tuple[Problem, ...] = ()
    # The job's other Services (the ClusterIP ones its framework asks for), by name.
    cluster_services: tuple[Owned, ...] = ()
    peers: tuple[Owned, ...] = ()  # the job's peers ConfigMaps the sweeper created
    cluster_domain: str = ""  # as the webhook's --cluster-domain: host names in peer lists
    deleting: bool = False  # one of its workloads is being deleted: the job is going away

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.job)

    @property
    def framework(self) -> Framework:
        return self.workloads[0].framework

    def setting(self, name: str) -> Any:
        """A job-wide setting: the first workload in role order that sets it."""
        for workload in self.workloads:
            value = getattr(workload.settings, name)
            if value is not None:
                return value
        return None


def metadata_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    metadata: Mapping[str, Any] = obj.get("metadata") or {}
    return metadata


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def controller_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the controller owning a pod; ("Pod", own name) for a bare pod."""
    for ref in metadata_of(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            kind = ref.get("kind")
            return (kind if kind in ("StatefulSet", "Job") else "Other", ref.get("name") or "")
    return ("Pod", metadata_of(obj).get("name") or "")


def job_key(resource: Resource, obj: Mapping[str, Any]) -> JobKey | None:
    """The job an object belongs to, as far as the sweeper is concerned; None for others."""
    namespace = metadata_of(obj).get("namespace") or ""
    labels = labels_of(obj)
    job: str | None
    if resource in (STATEFULSETS, JOBS):
        job = job_of(obj)
    elif resource == PODS:
        job = labels.get(contract.JOB) or job_of(obj)
    else:
        job = labels.get(contract.JOB) if labels.get(MANAGED_BY) == MANAGER else None
    return (namespace, job) if job else None


# What the sweeper keeps of a pod's status conditions, and how much of a termination message.
KEPT_CONDITIONS = ("Ready", "DisruptionTarget", "PodScheduled", "TerminationTarget")
# Where pods made before peers ConfigMaps held their large env values, one annotation each.
LARGE_VALUES = "trainhook.io/env."
MESSAGE_KEPT = 512


def slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Only what the sweeper decides on (the informer's `keep`): a pod's env, volumes and most
    annotations list its peers, so whole pods cost memory in the square of a job's size; this
    costs a few hundred bytes a pod, whatever the job."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    kept_metadata = {
        key: metadata[key]
        for key in (
            "name",
            "namespace",
            "uid",
            "resourceVersion",
            "creationTimestamp",
            "deletionTimestamp",
            "labels",
        )
        if key in metadata
    }
    kept_metadata["annotations"] = {
        key: value
        for key, value in (metadata.get("annotations") or {}).items()
        if key in (contract.JOB_COMPLETION_INDEX, contract.KUEUE_RETRIABLE_IN_GROUP)
        or (
            key.startswith(contract.PREFIX)
            and key != contract.HOSTFILE
            and not key.startswith(LARGE_VALUES)
        )
    }
    owners = [
        {k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}
        for ref in metadata.get("ownerReferences") or []
        if ref.get("controller")
    ]
    if owners:
        kept_metadata["ownerReferences"] = owners
    kept_spec: dict[str, Any] = {
        "containers": [{"name": c.get("name")} for c in spec.get("containers") or []]
    }
    if spec.get("initContainers"):
        kept_spec["initContainers"] = [
            {k: c[k] for k in ("name", "restartPolicy") if k in c} for c in spec["initContainers"]
        ]
    for key in ("subdomain", "priorityClassName"):
        if key in spec:
            kept_spec[key] = spec[key]
    mounted = [  # the job's peers ConfigMap, by name
        {"name": v.get("name"), "configMap": {"name": v["configMap"].get("name")}}
        for v in spec.get("volumes") or []
        if isinstance(v.get("configMap"), dict)
    ]
    if mounted:
        kept_spec["volumes"] = mounted
    kept_status: dict[str, Any] = {key: status[key] for key in ("phase", "reason") if key in status}
    kept_status["conditions"] = [
        {k: c[k] for k in ("type", "status", "reason", "message") if k in c}
        for c in status.get("conditions") or []
        if c.get("type") in KEPT_CONDITIONS
    ]
    for key in ("containerStatuses", "initContainerStatuses"):
        if key in status:
            kept_status[key] = [_slim_container_status(c) for c in status[key] or []]
    return {
        "kind": pod.get("kind") or "Pod",
        "apiVersion": pod.get("apiVersion") or "v1",
        "metadata": kept_metadata,
        "spec": kept_spec,
        "status": kept_status,
    }


def _slim_container_status(status: Mapping[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {"name": status.get("name"), "restartCount": status.get("restartCount")}
    for key in ("state", "lastState"):
        state = status.get(key) or {}
        kept[key] = {
            phase: {
                k: (v[:MESSAGE_KEPT] if k == "message" and isinstance(v, str) else v)
                for k, v in (detail or {}).items()
                if k in ("exitCode", "reason", "message", "finishedAt", "startedAt")
            }
            for phase, detail in state.items()
        }
    return kept


def is_bare_pod(obj: Mapping[str, Any]) -> bool:
    if any(ref.get("controller") for ref in metadata_of(obj).get("ownerReferences") or []):
        return False
    return contract.FRAMEWORK in labels_of(obj)


def read_job_state(
    namespace: str,
    job: str,
    *,
    workloads: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[Mapping[str, Any]] = (),
    services: Iterable[Mapping[str, Any]] = (),
    podgroups: Iterable[Mapping[str, Any]] = (),
    coscheduling_podgroups: Iterable[Mapping[str, Any]] = (),
    secrets: Iterable[Mapping[str, Any]] = (),
    configmaps: Iterable[Mapping[str, Any]] = (),
    cluster_domain: str = "",
) -> JobState:
    """Assemble the state of one job from its objects (StatefulSets and Jobs in `workloads`)."""
    pods = list(pods)
    workloads, strangers = _claimed(list(workloads), job)
    views: list[WorkloadView] = []
    problems: list[Problem] = []
    # A job of StatefulSets and Jobs is those workloads and the pods they own; a pod that only
    # carries the job's label (anyone allowed to create pods can write one) joins nothing. Only
    # a job made of bare pods alone takes its bare pods as its workloads.
    members = {(str(obj.get("kind")), metadata_of(obj).get("name") or "") for obj in workloads}
    intruders = [problem for _, problem in strangers]
    ignored = {(str(obj.get("kind")), metadata_of(obj).get("name") or "") for obj, _ in strangers}
    deleting = False  # a workload of the job is being deleted, or was and its pods are going
    if members:
        owned = []
        for candidate in pods:
            controller = controller_of(candidate)
            if controller in members:
                owned.append(candidate)
                continue
            if controller in ignored:
                continue  # a pod of another user's workload: that workload has the Warning
            intruders.append(_intruder(candidate, job, members))
            if controller[0] in ("StatefulSet", "Job") and metadata_of(candidate).get(
                "deletionTimestamp"
            ):
                deleting = True  # garbage collected with a workload of the job that is gone
        pods = owned
    sources = [*workloads, *(pod for pod in pods if is_bare_pod(pod))]
    for obj in sources:
        if metadata_of(obj).get("deletionTimestamp"):
            deleting = deleting or obj.get("kind") != "Pod"
            continue
        try:
            views.append(_read_workload(obj, namespace))
        except (TrainhookError, ValueError) as error:
            metadata = metadata_of(obj)
            problems.append(
                Problem(
                    str(obj.get("kind") or "Pod"),
                    metadata.get("name") or "",
                    metadata.get("uid") or "",
                    str(error),
                )
            )
    views.sort(key=_role_order(views))
    by_owner = {(view.kind, view.name): view for view in views}
    framework = views[0].framework if views else None
    pod_views = sorted(
        (_read_pod_once(pod, framework, by_owner) for pod in pods),
        key=lambda pod: pod.name,
    )
    # Pods of a StatefulSet or Job being deleted: a role of the job is going away.
    deleting = deleting or any(
        pod.owner_kind in ("StatefulSet", "Job")
        and (pod.owner_kind, pod.owner_name) not in by_owner
        for pod in pod_views
    )
    return JobState(
        namespace=namespace,
        job=job,
        workloads=tuple(views),
        pods=tuple(pod_views),
        service=_owned(services, job),
        podgroup=_owned(podgroups, job),
        coscheduling_podgroup=_owned(coscheduling_podgroups, job),
        secret=_owned(secrets, f"{job}-ssh"),
        problems=tuple(problems),
        cluster_services=tuple(
            extra
            for name in sorted({metadata_of(obj).get("name") or "" for obj in services} - {job})
            if (extra := _owned(services, name)) is not None
        ),
        intruders=tuple(intruders),
        peers=_peers(configmaps, job),
        cluster_domain=cluster_domain,
        deleting=deleting,
    )


def _claimed(
    workloads: list[Mapping[str, Any]], job: str
) -> tuple[list[Mapping[str, Any]], list[tuple[Mapping[str, Any], Problem]]]:
    """The job's workloads: those its first creator created (and those created before the webhook
    recorded creators); the others, each with why it is ignored."""
    claim = claim_of(workloads)
    if claim is None:
        return workloads, []
    kept, strangers = [], []
    for obj in workloads:
        creator = creator_of(obj)
        if creator is None or creator == claim.creator:
            kept.append(obj)
        else:
            strangers.append((obj, _stranger(obj, creator, job, claim)))
    return kept, strangers


def _stranger(obj: Mapping[str, Any], creator: str, job: str, claim: Claim) -> Problem:
    metadata = metadata_of(obj)
    kind, name = str(obj.get("kind") or ""), metadata.get("name") or ""
    return Problem(
        kind,
        name,
        metadata.get("uid") or "",
        f"{kind} {name} is labelled {contract.JOB}={job} but was created by {creator}, and the "
        f"job belongs to {claim.creator} ({claim.kind} {claim.name}); the sweeper ignores it",
    )


def _intruder(pod: Mapping[str, Any], job: str, members: set[tuple[str, str]]) -> Problem:
    metadata = metadata_of(pod)
    name = metadata.get("name") or ""
    workloads = ", ".join(f"{kind} {workload}" for kind, workload in sorted(members))
    return Problem(
        "Pod",
        name,
        metadata.get("uid") or "",
        f"pod {name} is labelled {contract.JOB}={job} but is not a pod of the job's workloads "
        f"({workloads}); the sweeper ignores it",
    )


def _role_order(views: Sequence[WorkloadView]) -> Any:
    roles = views[0].framework.order(view.role for view in views) if views else []
    position = {role: i for i, role in enumerate(roles)}

    def key(view: WorkloadView) -> tuple[int, str, str]:
        return (position.get(view.role, len(position)), view.kind, view.name)

    return key


def _read_workload(obj: Mapping[str, Any], namespace: str) -> WorkloadView:
    metadata = metadata_of(obj)
    spec = obj.get("spec") or {}
    if obj.get("kind") == "Pod":
        workload = _bare_pod_workload(obj, namespace)
        pod_spec, stamped = spec, annotations_of(obj)
    else:
        workload = read_workload(obj, namespace)
        template = spec.get("template") or {}
        pod_spec, stamped = template.get("spec") or {}, annotations_of(template)
    return WorkloadView(
        workload=workload,
        uid=metadata.get("uid") or "",
        resource_version=metadata.get("resourceVersion") or "",
        stamp={key: stamped[key] for key in STAMP_KEYS if key in stamped},
        annotations=dict(annotations_of(obj)),
        priority_class=pod_spec.get("priorityClassName"),
        pod_requests=(
            pod_requests(pod_spec)
            if workload.kind == "Pod"  # a bare pod is mutated already: GPUs and all
            else template_requests(pod_spec, workload.settings, workload.framework.container)
        ),
        created=parse_time(metadata.get("creationTimestamp")),
        job_status=_job_status(obj) if workload.kind == "Job" else None,
        succeeded=parse_indexes(annotations_of(obj).get(contract.SUCCEEDED) or ""),
        failed_runs=FailedRuns.parse(annotations_of(obj).get(contract.FAILED_RUNS)),
    )


def _bare_pod_workload(pod: Mapping[str, Any], namespace: str) -> Workload:
    """A bare pod plays a role of one replica, named as itself."""
    labels = labels_of(pod)
    framework = read_framework(labels)
    name = metadata_of(pod).get("name") or ""
    return Workload(
        kind="Pod",
        name=name,
        namespace=metadata_of(pod).get("namespace") or namespace,
        framework=framework,
        job=job_of(pod) or name,
        role=read_role(labels, framework),
        replicas=1,
        settings=read_settings(annotations_of(pod), framework),
        pod_prefix=name,
        ordinal_start=0,
        service=(pod.get("spec") or {}).get("subdomain") or "",
    )


def _job_status(obj: Mapping[str, Any]) -> JobStatus:
    status = obj.get("status") or {}
    complete = False
    failed = None
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            complete = True
        elif condition.get("type") == "Failed":
            reason = condition.get("reason") or "Failed"
            message = condition.get("message")
            failed = f"{reason}: {message}" if message else reason
    return JobStatus(
        complete=complete,
        failed=failed,
        completed_indexes=parse_indexes(status.get("completedIndexes") or ""),
        suspended=bool((obj.get("spec") or {}).get("suspend")),
        started=bool(status.get("startTime")),
    )


def parse_indexes(text: str) -> frozenset[int]:
    """A Job's completedIndexes, e.g. "1,3-5,7"."""
    found: set[int] = set()
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            found.update(range(int(low), int(high or low) + 1))
    return frozenset(found)


def format_indexes(indexes: Iterable[int]) -> str:
    """The inverse of parse_indexes: runs of consecutive indexes as ranges."""
    parts: list[str] = []
    ordered = sorted(set(indexes))
    start = 0
    for i, index in enumerate(ordered):
        if i + 1 < len(ordered) and ordered[i + 1] == index + 1:
            continue
        low = ordered[start]
        parts.append(str(low) if low == index else f"{low}-{index}")
        start = i + 1
    return ",".join(parts)


# A pod is read once per version: a pod event costs one pod's reading, not the whole job's.
_READ_PODS_AT_MOST = 50_000
_read_pods: dict[tuple[str, str, str], tuple[tuple[str, str, int], PodView]] = {}


def _read_pod_once(
    pod: Mapping[str, Any],
    framework: Framework | None,
    workloads: Mapping[tuple[str, str], WorkloadView],
) -> PodView:
    metadata = metadata_of(pod)
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if not uid or not version:
        return _read_pod(pod, framework, workloads)
    key = (uid, version, framework.name if framework else "")
    found = _read_pods.get(key)
    if found is not None:
        seen_owner, view = found
        if _owner_facts(workloads.get((view.owner_kind, view.owner_name))) == seen_owner:
            return view
    view = _read_pod(pod, framework, workloads)
    if len(_read_pods) >= _READ_PODS_AT_MOST:
        _read_pods.clear()
    _read_pods[key] = (_owner_facts(workloads.get((view.owner_kind, view.owner_name))), view)
    return view


def _owner_facts(owner: WorkloadView | None) -> tuple[str, str, int]:
    """What a pod's reading takes from its workload."""
    return (owner.name, owner.role, owner.ordinal_start) if owner else ("", "", 0)


def _read_pod(
    pod: Mapping[str, Any],
    framework: Framework | None,
    workloads: Mapping[tuple[str, str], WorkloadView],
) -> PodView:
    metadata = metadata_of(pod)
    labels = labels_of(pod)
    annotations = annotations_of(pod)
    owner_kind, owner_name = controller_of(pod)
    owner = workloads.get((owner_kind, owner_name))
    status = pod.get("status") or {}
    conditions = status.get("conditions") or []
    return PodView(
        name=metadata.get("name") or "",
        uid=metadata.get("uid") or "",
        owner_kind=owner_kind,
        owner_name=owner_name,
        role=labels.get(contract.ROLE) or (owner.role if owner else None),
        index=_pod_index(pod, owner_kind, owner),
        phase=status.get("phase") or "Pending",
        ready=any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions),
        topology=annotations.get(contract.TOPOLOGY),
        training=_training(pod, framework),
        terminating=bool(metadata.get("deletionTimestamp")),
        disrupted=status.get("reason") in DISRUPTED_REASONS
        or any(
            c.get("type") in (contract.DISRUPTION_TARGET, contract.KUEUE_STOPPED)
            and c.get("status") == "True"
            for c in conditions
        ),
        created=parse_time(metadata.get("creationTimestamp")),
        scheduling=next(
            (
                _one_line(c.get("message") or c.get("reason") or "")
                for c in conditions
                if c.get("type") == "PodScheduled" and c.get("status") == "False"
            ),
            "",
        ),
        peers=_mounted_peers(pod, labels.get(contract.JOB) or job_of(pod) or ""),
        status_reason=str(status.get("reason") or ""),
        stop_conditions=tuple(
            (str(c.get("type")), str(c.get("reason") or ""))
            for c in conditions
            if c.get("type") in (contract.DISRUPTION_TARGET, contract.KUEUE_STOPPED)
            and c.get("status") == "True"
        ),
        annotations={k: v for k, v in annotations.items() if k in POD_RECORDS},
        has_barrier=any(
            c.get("name") == BARRIER for c in (pod.get("spec") or {}).get("initContainers") or []
        ),
        barrier_waiting=_barrier_waiting(status),
    )


def _barrier_waiting(status: Mapping[str, Any]) -> datetime | None:
    for container in status.get("initContainerStatuses") or []:
        if container.get("name") == BARRIER:
            running = (container.get("state") or {}).get("running")
            if isinstance(running, dict):
                return parse_time(running.get("startedAt")) or datetime.min.replace(tzinfo=UTC)
    return None


def _pod_index(pod: Mapping[str, Any], owner_kind: str, owner: WorkloadView | None) -> int | None:
    """The pod's index in its role: the label the webhook wrote, else what its controller says."""
    written = labels_of(pod).get(contract.ROLE_INDEX)
    if written is not None and written.isdigit():
        return int(written)
    if owner_kind == "Other":
        return None
    try:
        identity = identify(pod)
    except TrainhookError:
        return None
    if identity.index is None:
        return None
    start = owner.ordinal_start if owner is not None and owner_kind == "StatefulSet" else 0
    return identity.index - start


def _training(pod: Mapping[str, Any], framework: Framework | None) -> Training | None:
    spec_names = [c.get("name") for c in (pod.get("spec") or {}).get("containers") or []]
    statuses = {s.get("name"): s for s in (pod.get("status") or {}).get("containerStatuses") or []}
    default = framework.container if framework else None
    try:
        position = training_container(pod, default, annotations_of(pod).get(contract.CONTAINER))
    except TrainhookError:  # a container the pod does not have: the framework's, else the first
        position = training_container(pod, default, None)
    wanted = spec_names[position] if position is not None else next(iter(statuses), None)
    status = statuses.get(wanted)
    if wanted is None or status is None:
        return None
    waiting = (status.get("state") or {}).get("waiting") or {}
    init_failures, init_failed = _init_failures(pod)
    return Training(
        name=str(wanted),
        restarts=int(status.get("restartCount") or 0),
        current=_run(status.get("state")),
        last=_run(status.get("lastState")),
        waiting=str(waiting.get("reason") or ""),
        waiting_message=_one_line(waiting.get("message") or ""),
        init_failures=init_failures,
        init_failed=init_failed,
    )


def _init_failures(pod: Mapping[str, Any]) -> tuple[int, Run | None]:
    """Failed runs of the pod's init containers; sidecars (restartPolicy Always) and the
    in-place barrier (stopped by every in-place restart) left out."""
    sidecars = {
        c.get("name")
        for c in (pod.get("spec") or {}).get("initContainers") or []
        if c.get("restartPolicy") == "Always" or c.get("name") == BARRIER
    }
    count = 0
    newest: Run | None = None
    for status in (pod.get("status") or {}).get("initContainerStatuses") or []:
        if status.get("name") in sidecars:
            continue
        current, last = _run(status.get("state")), _run(status.get("lastState"))
        failed_now = current is not None and current.exit_code != 0
        count += int(status.get("restartCount") or 0) + (1 if failed_now else 0)
        for run in (current, last):
            if run is not None and run.exit_code != 0 and newest is None:
                newest = run
    return count, newest


def _run(state: Mapping[str, Any] | None) -> Run | None:
    terminated = (state or {}).get("terminated")
    if not terminated:
        return None
    code = terminated.get("exitCode")
    if not isinstance(code, int):
        return None
    return Run(
        exit_code=code,
        reason=str(terminated.get("reason") or ""),
        message=_one_line(terminated.get("message") or ""),
        finished=parse_time(terminated.get("finishedAt")),
    )


def _one_line(text: str, limit: int = 200) -> str:
    """A message as one line of a person's reading length."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _mounted_peers(pod: Mapping[str, Any], job: str) -> str | None:
    """The job's peers ConfigMap a pod mounts, if it mounts one."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = (volume.get("configMap") or {}).get("name")
        if isinstance(name, str) and name.startswith(configmap_prefix(job)):
            return name
    return None


def _owned(objects: Iterable[Mapping[str, Any]], name: str) -> Owned | None:
    for obj in objects:
        metadata = metadata_of(obj)
        if metadata.get("name") != name or metadata.get("deletionTimestamp"):
            continue
        return _as_owned(obj)
    return None


def _as_owned(obj: Mapping[str, Any]) -> Owned:
    metadata = metadata_of(obj)
    return Owned(
        name=metadata.get("name") or "",
        uid=metadata.get("uid") or "",
        resource_version=metadata.get("resourceVersion") or "",
        managed=labels_of(obj).get(MANAGED_BY) == MANAGER,
        owners=frozenset(ref.get("uid") or "" for ref in metadata.get("ownerReferences") or []),
        spec=obj.get("spec") or {},
    )


def _peers(objects: Iterable[Mapping[str, Any]], job: str) -> tuple[Owned, ...]:
    """The job's managed peers ConfigMaps (their names only: the data stays in the cache)."""
    found = [
        _as_owned(obj)
        for obj in objects
        if (metadata_of(obj).get("name") or "").startswith(configmap_prefix(job))
        and not metadata_of(obj).get("deletionTimestamp")
    ]
    return tuple(sorted((o for o in found if o.managed), key=lambda o: o.name))
