"""A pod as the sweeper reads it: its role and index, how its training container ran, and
whether it was stopped from outside."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.frameworks import Framework
from webhook.core.job.restart_in_place import BARRIER
from webhook.core.job.workload import job_of
from webhook.core.limits import one_line
from webhook.core.objects import annotations_of, labels_of, metadata_of, parse_time
from webhook.core.shape.peers import configmap_prefix
from webhook.core.shape.pods import identify, training_container
from webhook.sweeper.job.recorded import FailedRuns

# A pod the kubelet evicted says so in its status reason; one the API evicted or preempted has
# the DisruptionTarget condition.
DISRUPTED_REASONS = ("Evicted", "Preempting", "Terminated", "DeletionByTaintManager")
# The label the StatefulSet controller gives a pod: the revision of the template it was made of.
REVISION_LABEL = "controller-revision-hash"
# What the sweeper writes on pods and reads back: an in-place restart's attempt and its release,
# the Kueue marker that ends a pod group, and the request to save a checkpoint before a stop.
POD_RECORDS = (
    contract.ATTEMPT,
    contract.RELEASED_ATTEMPT,
    contract.KUEUE_RETRIABLE_IN_GROUP,
    contract.CHECKPOINT_REQUESTED,
)
# The conditions of a pod stopped from outside: evicted or preempted, or stopped by Kueue.
STOP_CONDITIONS = (contract.DISRUPTION_TARGET, contract.KUEUE_STOPPED)
# Why a container cannot start, as the kubelet says it.
WAITING_PROBLEMS = (
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
)


class PodOwner(Protocol):
    """What reading a pod takes from the workload that owns it."""

    @property
    def name(self) -> str: ...

    @property
    def role(self) -> str: ...

    @property
    def ordinal_start(self) -> int: ...


@dataclass(frozen=True)
class Run:
    """One terminated run of a container."""

    exit_code: int
    reason: str  # what the kubelet says: Completed, Error, OOMKilled, ...
    message: str  # the container's termination message as one line, its end when long
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
    started: datetime | None = None  # when its current run started, while it runs
    # Worked out once at construction: a table reads them for every pod reading it keeps.
    succeeded: bool = field(init=False, repr=False, compare=False)
    # Failed runs: restarts not caused by a success, a failed current run, and every failed
    # run of an init container.
    failures: int = field(init=False, repr=False, compare=False)
    _failed: tuple[Run, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        current, last = self.current, self.last
        exit_code = current.exit_code if current else None
        last_exit_code = last.exit_code if last else None
        restarts = self.restarts
        if last_exit_code == 0 and restarts > 0:
            restarts -= 1
        failures = restarts + (1 if exit_code not in (None, 0) else 0) + self.init_failures
        runs = (current, self.init_failed, last)
        object.__setattr__(self, "succeeded", exit_code == 0 or last_exit_code == 0)
        object.__setattr__(self, "failures", failures)
        object.__setattr__(
            self, "_failed", tuple(run for run in runs if run is not None and run.exit_code != 0)
        )

    @property
    def exit_code(self) -> int | None:
        return self.current.exit_code if self.current else None

    @property
    def last_exit_code(self) -> int | None:
        return self.last.exit_code if self.last else None

    def failed_runs(self) -> tuple[Run, ...]:
        """The failed runs whose details are still known: newest first."""
        return self._failed

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
    annotations: Mapping[str, str] = field(default_factory=dict)  # what the sweeper wrote on it
    has_barrier: bool = False  # it carries the in-place restart's barrier
    # When its barrier started waiting, while it waits (an in-place restart under way).
    barrier_waiting: datetime | None = None
    gates: tuple[str, ...] = ()  # its scheduling gates, in order
    resource_version: str = ""
    node: str = ""  # the node it is bound to (spec.nodeName)
    # The revision of its StatefulSet's template it was created from (controller-revision-hash).
    revision: str = ""
    rank: str = ""  # its global rank, as the webhook labelled it (trainhook.io/rank)
    # Short enough to be recorded for thousands of pods, long enough within one job; worked out
    # once at construction, as whether it counts: a table reads both for every reading it keeps.
    uid8: str = field(init=False, repr=False, compare=False)
    # Whether what the pod does now says something about the training (a pod being deleted or
    # evicted may exit 0 or fail on SIGTERM: neither counts).
    counts: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "uid8", self.uid.replace("-", "")[:8] or self.name)
        object.__setattr__(self, "counts", not self.terminating and not self.disrupted)

    @property
    def waiting_for_roles(self) -> bool:
        return contract.WAITING_FOR_ROLES in self.gates

    @property
    def waiting_for_owned_objects(self) -> bool:
        return contract.WAITING_FOR_OWNED_OBJECTS in self.gates


def is_plain(pod: PodView) -> bool:
    """Whether a pod says nothing to a decision but that it is there, pending or running: it
    counts, has not failed, succeeded, crashed or been stopped, waits for no gate and no
    release of an in-place restart, and carries no Kueue marker. A pod the scheduler cannot
    place yet is plain too (PodFacts.unschedulable lists those): while a large job waits for
    its gang, every event of it would otherwise cost a walk of all its waiting pods.
    Most pods of a large job are plain; the decision reads the others one by one and plain
    ones only through their numbers (PodFacts)."""
    training = pod.training
    if training is not None and (
        training.failures
        or training.failed_runs()
        or training.succeeded
        or training.init_failed is not None
        or training.waiting in ("CrashLoopBackOff", *WAITING_PROBLEMS)
    ):
        return False
    return _plain_but_training(pod)


def is_unschedulable(pod: PodView) -> bool:
    """Whether a Pending pod waits for the scheduler to find it a node."""
    return pod.phase == "Pending" and bool(pod.scheduling)


def is_quiet(pod: PodView) -> bool:
    """Whether a pod is plain but for failed runs of its training container that are over: it
    restarted and runs (or waits to be scheduled) again, not crashing now. Once its workload's
    ledger counts those runs in full (FailedRuns), what it says to a decision is in the ledger
    and in the numbers of plain pods (PodFacts.retired)."""
    training = pod.training
    return (
        training is not None
        and training.failures > 0
        and training.current is None
        and training.init_failed is None
        and training.init_failures == 0
        and not training.succeeded
        and training.waiting not in ("CrashLoopBackOff", *WAITING_PROBLEMS)
        and _plain_but_training(pod)
    )


def _plain_but_training(pod: PodView) -> bool:
    return (
        pod.counts
        and pod.phase in ("Pending", "Running")
        and pod.owner_kind in ("StatefulSet", "Job")
        and pod.role is not None
        and pod.index is not None
        and not pod.status_reason
        and not pod.stop_conditions
        and not pod.gates
        # an in-place restart's attempt not released yet on this pod
        and pod.annotations.get(contract.ATTEMPT) == pod.annotations.get(contract.RELEASED_ATTEMPT)
        and contract.KUEUE_RETRIABLE_IN_GROUP not in pod.annotations  # Kueue's finished marker
    )


@dataclass(frozen=True)
class PodFacts:
    """What the decision reads of a job's pods, short of the pods themselves: the pods that are
    not plain, one by one in name order, and the plain ones by their numbers. Kept up to date
    pod event by pod event (webhook/sweeper/job/podtable.py), so deciding costs the job's notable
    pods, not all of them."""

    notable: tuple[PodView, ...]
    plain: int  # plain pods: counted, not terminating, Pending or Running
    running: int  # plain Running pods
    plain_running: Mapping[tuple[str, int], int]  # plain Running pods per (role, index)
    topologies: frozenset[str | None]  # every stamp the pods carry
    mounted_peers: frozenset[str | None]  # the peers ConfigMaps pods not terminating mount
    uid8s: Mapping[str, frozenset[str]]  # short uid -> names of the pods with it
    # Pods stopped from outside (evicted, preempted, stopped by Kueue) that are gone since,
    # deleted or replaced under their name, as they last were: the job's PodTable remembers
    # them from the pods' events, so a disruption counts however fast its pod went.
    gone: tuple[PodView, ...] = ()
    # Per workload (kind, name): its quiet pods (is_quiet) whose failed runs its ledger counts
    # in full. They are counted among the plain pods (plain, running, plain_running), not
    # listed in `notable`: a Ready flip of a pod whose old restarts are counted costs the
    # decision nothing more than a plain pod's.
    retired: Mapping[tuple[str, str], Retired] = field(default_factory=dict)
    # (when its last failed run finished, kind, name, short uid) of each retired pod whose
    # run has a time, oldest first: the ones still in the grace period are counted one by one.
    retired_runs: Sequence[tuple[datetime, str, str, str]] = ()
    # The plain Pending pods the scheduler could not place (PodView.scheduling says why), in
    # name order: the job's status names the first.
    unschedulable: Sequence[PodView] = ()

    def retired_views(self) -> list[PodView]:
        """Every retired pod, in name order (for the rare decisions that read each one)."""
        return sorted(
            (view for group in self.retired.values() for view in group.pods.values()),
            key=lambda view: view.name,
        )

    def with_retired(self, pods: Sequence[PodView]) -> tuple[PodView, ...]:
        """`pods` (notable ones, in name order) and the retired pods, in name order."""
        if not self.retired:
            return tuple(pods)
        return tuple(sorted([*pods, *self.retired_views()], key=lambda view: view.name))

    @staticmethod
    def of(pods: Sequence[PodView]) -> PodFacts:
        """The facts of `pods` (in name order), counted afresh."""
        running: dict[tuple[str, int], int] = {}
        uid8s: dict[str, set[str]] = {}
        notable = []
        unschedulable = []
        for pod in pods:
            uid8s.setdefault(pod.uid8, set()).add(pod.name)
            if not is_plain(pod):
                notable.append(pod)
            elif pod.phase == "Running":
                replica = plain_replica(pod)
                running[replica] = running.get(replica, 0) + 1
            elif is_unschedulable(pod):
                unschedulable.append(pod)
        return PodFacts(
            notable=tuple(notable),
            plain=len(pods) - len(notable),
            running=sum(running.values()),
            plain_running=running,
            topologies=frozenset(pod.topology for pod in pods),
            mounted_peers=frozenset(pod.peers for pod in pods if not pod.terminating),
            uid8s={uid: frozenset(names) for uid, names in uid8s.items()},
            unschedulable=tuple(unschedulable),
        )

    def any_running_besides(self, replicas: set[tuple[str, int]]) -> bool:
        """Whether a plain pod runs whose (role, index) is not among `replicas`."""
        if not replicas or self.running == 0:
            return self.running > 0
        return self.running > sum(self.plain_running.get(replica, 0) for replica in replicas)


@dataclass(frozen=True)
class Retired:
    """The retired pods of one workload (PodFacts.retired): quiet pods whose failed runs
    `ledger` (the workload's, as the job was read) counts in full."""

    ledger: FailedRuns
    pods: Mapping[str, PodView]  # by short uid (one pod of the job each)
    others: AbstractSet[str]  # the short uids `ledger` names that are not among `pods`


def plain_replica(pod: PodView) -> tuple[str, int]:
    assert pod.role is not None and pod.index is not None  # is_plain says so
    return (pod.role, pod.index)


# The controllers a job's pods may have: the workloads of the APIs the webhook admits.
WORKLOAD_APIS = {"StatefulSet": "apps/v1", "Job": "batch/v1"}


def controller_of(obj: Mapping[str, Any]) -> tuple[str, str]:
    """(kind, name) of the controller owning a pod; ("Pod", own name) for a bare pod; kind
    "Other" for a controller of another kind, or of another API under a workload's kind."""
    for ref in metadata_of(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            kind = ref.get("kind")
            known = kind in WORKLOAD_APIS and ref.get("apiVersion") == WORKLOAD_APIS[kind]
            return (kind if known else "Other", ref.get("name") or "")
    return ("Pod", metadata_of(obj).get("name") or "")


def controller_uid(obj: Mapping[str, Any]) -> str:
    """The uid of the controller owning a pod, as its owner reference says ("" for none)."""
    for ref in metadata_of(obj).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""


# A pod is read once per version: a pod event costs one pod's reading, not the whole job's. One
# reading is kept per pod (its latest version), so pod events do not pile readings up.
_READ_PODS_AT_MOST = 100_000
_read_pods: dict[str, tuple[str, str, tuple[str, str, int], PodView]] = {}


def read_pod_once(
    pod: Mapping[str, Any],
    framework: Framework | None,
    workloads: Mapping[tuple[str, str], PodOwner],
) -> PodView:
    metadata = metadata_of(pod)
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if not uid or not version:
        return _read_pod(pod, framework, workloads)
    reader = framework.name if framework else ""
    found = _read_pods.get(uid)
    if found is not None:
        seen_version, seen_reader, seen_owner, view = found
        if (
            seen_version == version
            and seen_reader == reader
            and _owner_facts(workloads.get((view.owner_kind, view.owner_name))) == seen_owner
        ):
            return view
    view = _read_pod(pod, framework, workloads)
    if len(_read_pods) >= _READ_PODS_AT_MOST:
        _read_pods.clear()  # pods that are gone leave their readings behind until then
    owner = _owner_facts(workloads.get((view.owner_kind, view.owner_name)))
    _read_pods[uid] = (version, reader, owner, view)
    return view


def _owner_facts(owner: PodOwner | None) -> tuple[str, str, int]:
    """What a pod's reading takes from its workload."""
    return (owner.name, owner.role, owner.ordinal_start) if owner else ("", "", 0)


def _read_pod(
    pod: Mapping[str, Any],
    framework: Framework | None,
    workloads: Mapping[tuple[str, str], PodOwner],
) -> PodView:
    # Each part of the pod is walked once: a pod event costs its pod's reading.
    metadata = metadata_of(pod)
    labels = labels_of(pod)
    annotations = annotations_of(pod)
    owner_kind, owner_name = controller_of(pod)
    owner = workloads.get((owner_kind, owner_name))
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    ready = False
    scheduling: str | None = None
    stops = []
    for condition in status.get("conditions") or []:
        kind, true = condition.get("type"), condition.get("status") == "True"
        if kind == "Ready" and true:
            ready = True
        elif kind == "PodScheduled" and scheduling is None and condition.get("status") == "False":
            scheduling = _reading(condition.get("message") or condition.get("reason") or "")
        elif kind in STOP_CONDITIONS and true:
            stops.append((str(kind), str(condition.get("reason") or "")))
    reason = status.get("reason")
    return PodView(
        name=metadata.get("name") or "",
        uid=metadata.get("uid") or "",
        owner_kind=owner_kind,
        owner_name=owner_name,
        role=labels.get(contract.ROLE) or (owner.role if owner else None),
        index=_pod_index(pod, owner_kind, owner),
        phase=status.get("phase") or "Pending",
        ready=ready,
        topology=annotations.get(contract.TOPOLOGY),
        training=_training(pod, framework),
        terminating=bool(metadata.get("deletionTimestamp")),
        disrupted=reason in DISRUPTED_REASONS or bool(stops),
        created=parse_time(metadata.get("creationTimestamp")),
        scheduling=scheduling or "",
        peers=pod_peers(pod),
        status_reason=str(reason or ""),
        stop_conditions=tuple(stops),
        annotations={k: v for k, v in annotations.items() if k in POD_RECORDS},
        has_barrier=any(c.get("name") == BARRIER for c in spec.get("initContainers") or []),
        barrier_waiting=_barrier_waiting(status),
        resource_version=metadata.get("resourceVersion") or "",
        gates=gates_of(pod),
        node=str(spec.get("nodeName") or ""),
        revision=str(labels.get(REVISION_LABEL) or ""),
        rank=str(labels.get(contract.RANK) or ""),
    )


def _barrier_waiting(status: Mapping[str, Any]) -> datetime | None:
    for container in status.get("initContainerStatuses") or []:
        if container.get("name") == BARRIER:
            running = (container.get("state") or {}).get("running")
            if isinstance(running, dict):
                return parse_time(running.get("startedAt")) or datetime.min.replace(tzinfo=UTC)
    return None


def _pod_index(pod: Mapping[str, Any], owner_kind: str, owner: PodOwner | None) -> int | None:
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
        waiting_message=_reading(waiting.get("message") or ""),
        init_failures=init_failures,
        init_failed=init_failed,
        started=parse_time(((status.get("state") or {}).get("running") or {}).get("startedAt")),
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
        message=_last_words(terminated.get("message") or ""),
        finished=parse_time(terminated.get("finishedAt")),
    )


def _last_words(text: str, limit: int = 200) -> str:
    """A termination message as one line of a person's reading length, cut at its start when
    long: the end of a log (FallbackToLogsOnError) is where it says why, as a Python traceback
    ends with the error."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else "…" + line[-(limit - 1) :]


def _reading(text: str) -> str:
    """A pod's message as one line of a person's reading length."""
    return one_line(str(text), at_most=200)


def gates_of(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """The names of a pod's scheduling gates, in order."""
    return tuple(
        str(gate.get("name"))
        for gate in (pod.get("spec") or {}).get("schedulingGates") or []
        if isinstance(gate, dict)
    )


def pod_peers(pod: Mapping[str, Any]) -> str | None:
    """The peers ConfigMap of the pod's own job that it mounts, if it mounts one."""
    return mounted_peers(pod, labels_of(pod).get(contract.JOB) or job_of(pod) or "")


def mounted_peers(pod: Mapping[str, Any], job: str) -> str | None:
    """The job's peers ConfigMap a pod mounts, if it mounts one."""
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = (volume.get("configMap") or {}).get("name")
        if isinstance(name, str) and name.startswith(configmap_prefix(job)):
            return name
    return None


def created_before(
    pod: PodView, since: datetime, same_second: frozenset[str] = frozenset()
) -> bool:
    """Whether a pod was created before a restart at `since` (a whole second). Creation times
    are kept to the second, so a pod of that very second is older only if the restart named it
    among the pods it found (`same_second`, their short uids); one unknown is taken as older."""
    if pod.created is None:
        return True
    return pod.created < since or (pod.created == since and pod.uid8 in same_second)


def stopped_from_outside(pod: Mapping[str, Any]) -> bool:
    """Whether a pod object carries the signs of a stop from outside that PodView.disrupted
    reads: the DisruptionTarget or TerminationTarget condition, or an eviction's reason."""
    status = pod.get("status") or {}
    if status.get("reason") in DISRUPTED_REASONS:
        return True
    return any(
        c.get("type") in (contract.DISRUPTION_TARGET, contract.KUEUE_STOPPED)
        and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
