"""One training job as the sweeper sees it: plain data read from the objects of the cluster."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import Any

from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.fabrics.nvlink import compute_domain_name
from webhook.core.frameworks import Framework
from webhook.core.job.claims import creator_of
from webhook.core.job.completeness import missing_roles
from webhook.core.job.gang import template_requests
from webhook.core.job.settings import JobSettings, Settings, job_settings, read_settings
from webhook.core.job.workload import Workload, job_of, read_framework, read_role, read_workload
from webhook.core.objects import annotations_of, labels_of, metadata_of, parse_time
from webhook.core.shape.requests import Requests, pod_requests
from webhook.kube.resources import (
    JOBS,
    MANAGED_BY,
    MANAGER,
    PODS,
    STATEFULSETS,
    WORKLOAD_RESOURCES,
    Resource,
)
from webhook.sweeper.job.nodes import NodeView
from webhook.sweeper.job.owned import Owned, owned_named, peers_configmaps
from webhook.sweeper.job.pods import PodFacts, PodView, controller_of
from webhook.sweeper.job.podtable import PodTable
from webhook.sweeper.job.problems import Problem, claimed, intruder, why_unproven
from webhook.sweeper.job.recorded import FailedRuns, parse_indexes

JobKey = tuple[str, str]  # (namespace, job)
STAMP_KEYS = (contract.TOPOLOGY, contract.HOSTS)


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
    # When the attempt its recorded status names began (its latest whole-job restart, "" before
    # any): the attempt its recorded successes belong to.
    attempt: str = ""
    failed_runs: FailedRuns = field(default_factory=lambda: FailedRuns(0, {}))
    phase_label: str | None = None  # its trainhook.io/phase label, recorded with the annotation
    # A StatefulSet's revision of its current template, once its controller has seen its spec
    # (status.observedGeneration is its generation); "" otherwise and for other kinds. A pod of
    # that revision was made with the current template's annotations.
    update_revision: str = ""
    # Admitted by the webhook (a recorded creator; a bare pod at its creation): only an outcome
    # recorded on such a workload was judged, and is acted on.
    attributed: bool = True

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
class JobState:
    namespace: str
    job: str
    workloads: tuple[WorkloadView, ...]  # in the framework's role order
    pods: Sequence[PodView]  # in name order
    service: Owned | None = None
    podgroup: Owned | None = None  # Volcano's
    coscheduling_podgroup: Owned | None = None  # scheduler-plugins'
    kai_podgroup: Owned | None = None  # NVIDIA KAI's
    kubernetes_podgroup: Owned | None = None  # Kubernetes' own, of `kubernetes_podgroup_api`
    kubernetes_podgroup_api: str | None = None  # the version the cluster serves, if any
    secret: Owned | None = None
    compute_domain: Owned | None = None  # <job>-nvlink, NVIDIA's DRA driver's
    compute_domains_served: bool = False  # whether the cluster serves ComputeDomains
    problems: tuple[Problem, ...] = ()
    # Pods labelled with the job that its workloads did not make, and workloads labelled with it
    # that another user created than the job's first creator: never acted on, never read.
    intruders: tuple[Problem, ...] = ()
    # StatefulSets and Jobs of the job that record no creator: the webhook did not admit them
    # into the job (made before it recorded creators, or while it was not asked). Kept in the
    # job and said so; an outcome recorded only on them is not acted on.
    unattributed: tuple[Problem, ...] = ()
    # The job's other Services (the ClusterIP ones its framework asks for), by name.
    cluster_services: tuple[Owned, ...] = ()
    peers: tuple[Owned, ...] = ()  # the job's peers ConfigMaps the sweeper created
    # ConfigMaps labelled as the job's peer lists whose content is not what their name says:
    # made by someone else (the label is anyone's to write), never mounted as the job's.
    forged_peers: tuple[Owned, ...] = ()
    # ConfigMaps under the names of the job's peer lists without the label, read by name.
    foreign_peers: tuple[Owned, ...] = ()
    cluster_domain: str = ""  # as the webhook's --cluster-domain: host names in peer lists
    deleting: bool = False  # one of its workloads is being deleted: the job is going away
    facts: PodFacts | None = None  # of `pods`, when kept by a PodTable; else counted on demand
    # The nodes its pods are bound to, by name, as the sweeper's watch of Nodes holds them.
    nodes: Mapping[str, NodeView] = field(default_factory=dict)

    @property
    def key(self) -> JobKey:
        return (self.namespace, self.job)

    @cached_property
    def pod_facts(self) -> PodFacts:
        """What the decision reads of the pods besides the notable ones (see PodFacts)."""
        return self.facts if self.facts is not None else PodFacts.of(self.pods)

    @cached_property
    def attempt(self) -> str:
        """The job's current attempt: the latest whole-job restart any workload records (a
        restart's record may have reached only some of them)."""
        return max((workload.attempt for workload in self.workloads), default="")

    @cached_property
    def attempt_began(self) -> datetime | None:
        return parse_time(self.attempt) if self.attempt else None

    @property
    def framework(self) -> Framework:
        return self.workloads[0].framework

    @cached_property
    def settings(self) -> JobSettings:
        """The job-wide settings, merged from its workloads in role order."""
        return job_settings(w.settings for w in self.workloads)

    def missing_roles(self) -> tuple[str, ...]:
        """The roles the job still waits for (see core/job/completeness.py)."""
        present = {workload.role for workload in self.workloads}
        return missing_roles(self.framework, present, self.settings.roles)


def format_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job_key(resource: Resource, obj: Mapping[str, Any]) -> JobKey | None:
    """The job an object belongs to, as far as the sweeper is concerned; None for others."""
    namespace = metadata_of(obj).get("namespace") or ""
    labels = labels_of(obj)
    job: str | None
    # `in` tries identity before a dataclass's `==`, which runs as Python: a watch indexes the
    # object of every event.
    if resource in (PODS,):
        job = labels.get(contract.JOB) or job_of(obj)
    elif resource in (STATEFULSETS, JOBS):
        job = job_of(obj)
    else:
        job = labels.get(contract.JOB) if labels.get(MANAGED_BY) == MANAGER else None
    return (namespace, job) if job else None


def is_bare_pod(obj: Mapping[str, Any]) -> bool:
    if any(ref.get("controller") for ref in metadata_of(obj).get("ownerReferences") or []):
        return False
    return contract.FRAMEWORK in labels_of(obj)


class WorkloadViews:
    """The readings of each job's workloads as its last look found them, so that a look after
    a pod event reads again only a workload whose object changed.

    A job's StatefulSets and Jobs seldom change with its pods: a reading (framework, settings,
    stamp, a pod's requests, what is recorded on it) is kept by the object's uid and
    resourceVersion and made again once either differs. What a look at a job read replaces what
    the job kept, so a workload that is gone is dropped, and a job found with none keeps
    nothing. An object without a uid or a resourceVersion is read every time.
    """

    def __init__(self) -> None:
        self._jobs: dict[JobKey, dict[str, tuple[str, WorkloadView]]] = {}

    def __len__(self) -> int:
        """How many readings are kept."""
        return sum(len(kept) for kept in list(self._jobs.values()))

    def look(self, key: JobKey) -> WorkloadLook:
        return WorkloadLook(self._jobs, key)


class WorkloadLook:
    """One look at a job's workloads: kept readings where the object is the same version,
    fresh ones elsewhere; `done` keeps what this look read for the next."""

    def __init__(self, jobs: dict[JobKey, dict[str, tuple[str, WorkloadView]]], key: JobKey):
        self._jobs, self._key = jobs, key
        self._kept = jobs.get(key, {})
        self._read: dict[str, tuple[str, WorkloadView]] = {}

    def read(self, obj: Mapping[str, Any], namespace: str) -> WorkloadView:
        metadata = metadata_of(obj)
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if not (isinstance(uid, str) and uid and isinstance(version, str) and version):
            return _read_workload(obj, namespace)
        kept = self._kept.get(uid)
        view = kept[1] if kept is not None and kept[0] == version else None
        if view is None:  # raises for a workload it refuses: not kept
            view = _read_workload(obj, namespace, kept[1] if kept is not None else None)
        self._read[uid] = (version, view)
        return view

    def done(self) -> None:
        if self._read:
            self._jobs[self._key] = self._read
        else:
            self._jobs.pop(self._key, None)


def read_job_state(
    namespace: str,
    job: str,
    *,
    workloads: Iterable[Mapping[str, Any]] = (),
    pods: Iterable[Mapping[str, Any]] = (),
    services: Iterable[Mapping[str, Any]] = (),
    podgroups: Iterable[Mapping[str, Any]] = (),
    coscheduling_podgroups: Iterable[Mapping[str, Any]] = (),
    kai_podgroups: Iterable[Mapping[str, Any]] = (),
    kubernetes_podgroups: Iterable[Mapping[str, Any]] = (),
    kubernetes_podgroup_api: str | None = None,
    secrets: Iterable[Mapping[str, Any]] = (),
    configmaps: Iterable[Mapping[str, Any]] = (),
    compute_domains: Iterable[Mapping[str, Any]] = (),
    compute_domains_served: bool = False,
    cluster_domain: str = "",
    pod_table: PodTable | None = None,
    workload_views: WorkloadViews | None = None,
) -> JobState:
    """Assemble the state of one job from its objects (StatefulSets and Jobs in `workloads`);
    its pods from `pods`, or from the job's PodTable, which reads only what changed since; its
    workloads read again only where they changed since `workload_views` read them."""
    table = PodTable(pods) if pod_table is None else pod_table
    look = workload_views.look((namespace, job)) if workload_views is not None else None
    read_view = _read_workload if look is None else look.read
    workloads, strangers, unattributed = claimed(list(workloads), job)
    views: list[WorkloadView] = []
    problems: list[Problem] = []
    # A job of StatefulSets and Jobs is those workloads and the pods they own, by uid, that
    # carry the job's label the webhook gave them; a pod that only carries the label, or names
    # a workload of the job as its owner without its uid (anyone allowed to create pods can
    # write either), joins nothing. Only a job made of bare pods alone takes its bare pods as
    # its workloads.
    members = {(str(obj.get("kind")), metadata_of(obj).get("name") or "") for obj in workloads}
    member_uids = {
        (str(obj.get("kind")), metadata_of(obj).get("name") or ""): str(
            metadata_of(obj).get("uid") or ""
        )
        for obj in workloads
    }
    unproven: set[str] = set()
    intruders = [problem for _, problem in strangers]
    ignored = {(str(obj.get("kind")), metadata_of(obj).get("name") or "") for obj, _ in strangers}
    deleting = False  # a workload of the job is being deleted, or was and its pods are going
    controllers = table.controllers()
    left_out: set[tuple[str, str]] = set()
    sources = list(workloads)
    if members:
        deleted_roles = _stamped_pod_owners(workloads)
        strays = []
        for controller in controllers:
            if controller in members:
                for candidate in table.unproven(controller, (member_uids[controller], job)):
                    unproven.add(metadata_of(candidate).get("name") or "")
                    intruders.append(intruder(candidate, job, members, why_unproven(candidate)))
                continue
            left_out.add(controller)
            if controller in ignored:
                continue  # pods of another user's workload: that workload has the Warning
            if controller[0] in ("StatefulSet", "Job") and controller[1] in deleted_roles:
                # A role the job's stamp still names whose workload is gone: its pods wait for
                # the garbage collector, and the job is not restamped for the roles left until
                # they are gone.
                deleting = True
                continue
            strays += table.objects_of(controller)
        for candidate in sorted(strays, key=lambda pod: metadata_of(pod).get("name") or ""):
            intruders.append(intruder(candidate, job, members))
            if controller_of(candidate)[0] in ("StatefulSet", "Job") and metadata_of(candidate).get(
                "deletionTimestamp"
            ):
                deleting = True  # garbage collected with a workload of the job that is gone
    else:
        bare = [pod for c in controllers if c[0] == "Pod" for pod in table.objects_of(c)]
        sources += [pod for pod in bare if is_bare_pod(pod)]
    for obj in sources:
        if metadata_of(obj).get("deletionTimestamp"):
            deleting = deleting or obj.get("kind") != "Pod"
            continue
        try:
            views.append(read_view(obj, namespace))
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
    if look is not None:
        look.done()
    views.sort(key=_role_order(views))
    by_owner = {(view.kind, view.name): view for view in views}
    framework = views[0].framework if views else None
    pod_views, facts = table.read(framework, by_owner, left_out, frozenset(unproven))
    facts = table.with_gone(facts, framework, by_owner, left_out)
    # Pods of a StatefulSet or Job being deleted: a role of the job is going away.
    deleting = deleting or any(
        controller[0] in ("StatefulSet", "Job") and controller not in by_owner
        for controller in controllers
        if controller not in left_out
    )
    return JobState(
        namespace=namespace,
        job=job,
        workloads=tuple(views),
        pods=pod_views,
        facts=facts,
        service=owned_named(services, job),
        podgroup=owned_named(podgroups, job),
        coscheduling_podgroup=owned_named(coscheduling_podgroups, job),
        kai_podgroup=owned_named(kai_podgroups, job),
        kubernetes_podgroup=owned_named(kubernetes_podgroups, job),
        kubernetes_podgroup_api=kubernetes_podgroup_api,
        secret=owned_named(secrets, f"{job}-ssh", content=True),
        compute_domain=owned_named(compute_domains, compute_domain_name(job)),
        compute_domains_served=compute_domains_served,
        problems=tuple(problems),
        cluster_services=tuple(
            extra
            for name in sorted({metadata_of(obj).get("name") or "" for obj in services} - {job})
            if (extra := owned_named(services, name)) is not None
        ),
        intruders=tuple(intruders),
        unattributed=tuple(unattributed),
        peers=peers_configmaps(configmaps, job),
        forged_peers=peers_configmaps(configmaps, job, forged=True),
        foreign_peers=peers_configmaps(configmaps, job, managed=False),
        cluster_domain=cluster_domain,
        deleting=deleting,
    )


def _stamped_pod_owners(workloads: Sequence[Mapping[str, Any]]) -> set[str]:
    """The workloads (their names are the pods' prefixes) the job's topology stamps name."""
    names: set[str] = set()
    for obj in workloads:
        template = (obj.get("spec") or {}).get("template") or {}
        try:
            hosts = json.loads(annotations_of(template).get(contract.HOSTS) or "{}")
        except ValueError:
            continue
        if isinstance(hosts, dict):
            names.update(
                str(entry["pod"])
                for entry in hosts.values()
                if isinstance(entry, dict) and entry.get("pod")
            )
    return names - {metadata_of(obj).get("name") or "" for obj in workloads}


def _role_order(views: Sequence[WorkloadView]) -> Any:
    roles = views[0].framework.order(view.role for view in views) if views else []
    position = {role: i for i, role in enumerate(roles)}

    def key(view: WorkloadView) -> tuple[int, str, str]:
        return (position.get(view.role, len(position)), view.kind, view.name)

    return key


def _read_workload(
    obj: Mapping[str, Any], namespace: str, before: WorkloadView | None = None
) -> WorkloadView:
    """A workload's reading; the ledger of `before` (its last reading) kept when the record is
    the same text (a workload written again for its status most often leaves it as it was)."""
    metadata = metadata_of(obj)
    recorded = annotations_of(obj).get(contract.FAILED_RUNS)
    ledger = before.failed_runs if before is not None else None
    if ledger is None or ledger.text is None or ledger.text != recorded:
        ledger = FailedRuns.parse(recorded)
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
        attempt=attempt_of(annotations_of(obj).get(contract.STATUS)),
        failed_runs=ledger,
        phase_label=labels_of(obj).get(contract.PHASE),
        update_revision=_update_revision(obj),
        attributed=workload.kind == "Pod" or creator_of(obj) is not None,
    )


def _update_revision(obj: Mapping[str, Any]) -> str:
    if obj.get("kind") != "StatefulSet":
        return ""
    status = obj.get("status") or {}
    generation = metadata_of(obj).get("generation")
    if generation is None or status.get("observedGeneration") != generation:
        return ""
    return str(status.get("updateRevision") or "")


def attempt_of(status: str | None) -> str:
    """When the attempt a recorded trainhook.io/status belongs to began: its latest whole-job
    restart, "" for the job's first attempt. A status without `attemptStartedAt` was written
    before restarts of one role or pod were told apart: each of its restarts began an attempt."""
    try:
        value = json.loads(status or "{}")
    except ValueError:
        return ""
    if isinstance(value, dict) and "attemptStartedAt" in value:
        began = value["attemptStartedAt"]
        return began if isinstance(began, str) else ""
    return status_field(status, "restartedAt")


def status_field(status: str | None, key: str) -> str:
    """One text field (restartedAt, message) of a recorded trainhook.io/status, "" when it
    names none."""
    try:
        value = json.loads(status or "{}")
    except ValueError:
        return ""
    field = value.get(key) if isinstance(value, dict) else None
    return field if isinstance(field, str) else ""


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
