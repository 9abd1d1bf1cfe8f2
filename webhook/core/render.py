"""Offline rendering: labelled manifests in, the pods Kubernetes would run (mutated) out.

Workloads are expanded the way the StatefulSet and Job controllers create pods, then every pod
goes through the same mutation the webhook applies at admission. A gang-scheduled job also gets
the PodGroup the sweeper creates for it.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.apiserver_rules import (
    check_workload,
    duplicates,
    namespace_warnings,
    shm_warnings,
)
from webhook.core.compat import COMPATS
from webhook.core.errors import TrainhookError
from webhook.core.fabrics.nvlink import compute_domain
from webhook.core.frameworks import FRAMEWORKS, Framework
from webhook.core.job.failure_rules import FailurePolicy, failure_policy
from webhook.core.job.gang import DEFAULT_KUBERNETES_PODGROUP_API, job_gang, podgroup_of_pods
from webhook.core.job.progress import RENDERED_PROGRESS
from webhook.core.job.settings import Settings, read_settings
from webhook.core.job.workload import job_of, read_workload, replica_controller, template_only
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.objects import annotations_of, labels_of, template_of
from webhook.core.shape.peers import PeerFiles, configmap
from webhook.core.shape.pods import training_container

DEFAULT_NAMESPACE = "default"
KINDS = ("StatefulSet", "Job", "Pod")


class RenderError(Exception):
    """A document that cannot be rendered; `document` is its position in the input."""

    def __init__(self, document: int, what: str, message: str) -> None:
        self.document = document
        self.what = what
        super().__init__(message)


@dataclass(frozen=True)
class RenderedPod:
    pod: dict[str, Any]
    framework: Framework
    namespace: str
    job: str
    role: str
    index: int
    rank: int
    env: dict[str, str]  # the training container's literal env
    warnings: list[str]
    peers: PeerFiles | None = None  # the job's peers ConfigMap, past the inline bound
    settings: Settings = dataclasses.field(default_factory=Settings)
    files: tuple[str, ...] = ()  # what the mutation projected into it, e.g. the MPI hostfile

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


@dataclass(frozen=True)
class Rendering:
    workloads: list[dict[str, Any]]  # mutated StatefulSets and Jobs, in input order
    pods: list[RenderedPod]
    # The PodGroup of each gang-scheduled job (all but Kueue's), as the sweeper makes it.
    podgroups: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)  # about the folder's jobs
    # The failure rules of each job that sets trainhook.io/failure-policy or restart-policy.
    failure_policies: dict[tuple[str, str], FailurePolicy] = dataclasses.field(default_factory=dict)

    @property
    def configmaps(self) -> list[dict[str, Any]]:
        """The peers ConfigMap of every job past the inline bound, as the sweeper creates it
        (less the managed-by label and owner references it adds)."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for pod in self.pods:
            if pod.peers is not None:
                namespace = pod.pod["metadata"]["namespace"]
                if (namespace, pod.peers.name) not in found:
                    obj = configmap(pod.peers, namespace)
                    obj["metadata"]["labels"] = {contract.JOB: pod.job}
                    found[(namespace, pod.peers.name)] = obj
        return list(found.values())

    @property
    def compute_domains(self) -> list[dict[str, Any]]:
        """The ComputeDomain of every job whose roles set trainhook.io/nvlink-domain, as the
        sweeper creates it (less the managed-by label and owner references it adds)."""
        counts: dict[tuple[str, str], int] = {}
        for pod in self.pods:
            if pod.settings.nvlink_domain:
                key = (_namespace(pod.pod), pod.job)
                counts[key] = counts.get(key, 0) + 1
        return [compute_domain(job, namespace, n) for (namespace, job), n in counts.items()]


def render(
    documents: Sequence[Any],
    cluster_domain: str = "",
    coscheduling_scheduler: str = contract.DEFAULT_COSCHEDULING_SCHEDULER,
) -> list[RenderedPod]:
    """The mutated pods of every labelled workload and bare pod in `documents`."""
    return render_all(documents, cluster_domain, coscheduling_scheduler).pods


def render_all(
    documents: Sequence[Any],
    cluster_domain: str = "",
    coscheduling_scheduler: str = contract.DEFAULT_COSCHEDULING_SCHEDULER,
    kubernetes_api: str = DEFAULT_KUBERNETES_PODGROUP_API,
) -> Rendering:
    for position, doc in enumerate(documents):
        if isinstance(doc, Mapping):
            with _blame(position, doc):
                _check_kind(doc)
    labelled = [
        (position, doc)
        for position, doc in enumerate(documents)
        if isinstance(doc, Mapping) and doc.get("kind") in KINDS and job_of(doc) is not None
    ]
    groups: dict[tuple[str, str | None], list[Mapping[str, Any]]] = defaultdict(list)
    warnings: list[str] = []
    for position, doc in labelled:
        if doc["kind"] != "Pod":
            # Each workload is checked on its own first, so an error names the right document.
            with _blame(position, doc):
                check_workload(doc)
                workload = read_workload(doc, _namespace(doc))
            warnings += shm_warnings(doc, workload.settings.shm_size)
            groups[(_namespace(doc), job_of(doc))].append(doc)
    controlled = [(position, doc) for position, doc in labelled if doc["kind"] != "Pod"]
    twice = duplicates(controlled)
    if twice is not None:
        position, message = twice
        raise RenderError(position, _what(documents[position]), message)
    warnings += namespace_warnings(controlled)
    workloads: list[dict[str, Any]] = []
    pods: list[RenderedPod] = []
    members: dict[tuple[str, str], list[tuple[str, Settings]]] = defaultdict(list)
    mutated_pods: dict[tuple[str, str], list[Mapping[str, Any]]] = defaultdict(list)
    first_of: dict[tuple[str, str], tuple[int, Mapping[str, Any]]] = {}
    for position, doc in labelled:
        with _blame(position, doc):
            namespace = _namespace(doc)
            if doc["kind"] == "Pod":
                found = [_mutated(doc, namespace, cluster_domain, coscheduling_scheduler)]
                settings = read_settings(annotations_of(doc), found[0].framework)
                what = f"Pod {(doc.get('metadata') or {}).get('name')}"
            else:
                siblings = groups[(namespace, job_of(doc))]
                mutated = mutate_workload(doc, "CREATE", namespace, siblings, cluster_domain)
                workloads.append(mutated.workload)
                found = [
                    _mutated(pod, namespace, cluster_domain, coscheduling_scheduler)
                    for pod in expand(mutated.workload, namespace)
                ]
                workload = read_workload(doc, namespace)
                settings, what = workload.settings, workload.describe()
            pods.extend(found)
            for pod in found:
                key = (namespace, pod.job)
                first_of.setdefault(key, (position, doc))
                mutated_pods[key].append(pod.pod)
            if found:
                members[(namespace, found[0].job)].append((what, settings))
    # A job's pods in rank order, whatever order its workloads come in; jobs in order of
    # appearance.
    first_seen = {key: i for i, key in enumerate(mutated_pods)}
    pods.sort(key=lambda pod: (first_seen[(_namespace(pod.pod), pod.job)], pod.rank))
    podgroups = []
    policies = {
        key: job_failure_policy([settings for _, settings in found])
        for key, found in members.items()
        if any(s.failure_rules or s.restart_policy for _, s in found)
    }
    for (namespace, job), pods_of_job in mutated_pods.items():
        with _blame(*first_of[(namespace, job)]):
            gang = job_gang(job, members[(namespace, job)])
            podgroup = (
                podgroup_of_pods(gang, job, namespace, pods_of_job, kubernetes_api)
                if gang
                else None
            )
        if podgroup is not None:
            podgroups.append(podgroup)
    return Rendering(workloads, pods, podgroups, warnings, policies)


def job_failure_policy(settings: Sequence[Settings]) -> FailurePolicy:
    """The rules the sweeper applies to a job: the first role's that sets each setting."""
    rules = next((s.failure_rules for s in settings if s.failure_rules), None)
    restart_policy = next((s.restart_policy for s in settings if s.restart_policy), None)
    return failure_policy(rules, restart_policy)


def _check_kind(doc: Mapping[str, Any]) -> None:
    """Refuse what the webhook refuses whatever the labels of the workload itself: a workload
    labelled on its pod template only, and a labelled Deployment, ReplicaSet or the like."""
    kind = doc.get("kind")
    name = str((doc.get("metadata") or {}).get("name") or "")
    template = labels_of(template_of(doc))
    if kind in contract.REPLICA_CONTROLLERS and (
        contract.FRAMEWORK in labels_of(doc) or contract.FRAMEWORK in template
    ):
        raise replica_controller(str(kind), name)
    if kind in ("StatefulSet", "Job") and job_of(doc) is None and contract.FRAMEWORK in template:
        raise template_only(str(kind), name)


@contextmanager
def _blame(position: int, doc: Mapping[str, Any]) -> Iterator[None]:
    try:
        yield
    except TrainhookError as error:
        raise RenderError(position, _what(doc), str(error)) from None


def _what(doc: Mapping[str, Any]) -> str:
    return f"{doc['kind']} {(doc.get('metadata') or {}).get('name')}"


def expand(workload: Mapping[str, Any], namespace: str) -> list[dict[str, Any]]:
    """The pods the StatefulSet or Job controller creates for a workload."""
    spec = workload.get("spec") or {}
    name = workload["metadata"]["name"]
    if workload["kind"] == "StatefulSet":
        start = (spec.get("ordinals") or {}).get("start", 0)
        return [
            _statefulset_pod(workload, name, ordinal, namespace)
            for ordinal in range(start, start + spec.get("replicas", 1))
        ]
    return [_job_pod(workload, name, i, namespace) for i in range(spec.get("completions", 1))]


def _namespace(doc: Mapping[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("namespace") or DEFAULT_NAMESPACE)


def _mutated(
    pod: Mapping[str, Any], namespace: str, cluster_domain: str, coscheduling_scheduler: str
) -> RenderedPod:
    result = mutate_pod(
        pod,
        namespace,
        cluster_domain=cluster_domain,
        coscheduling_scheduler=coscheduling_scheduler,
        progress=RENDERED_PROGRESS,
    )
    placement = result.placement
    return RenderedPod(
        pod=result.pod,
        framework=FRAMEWORKS[placement.topology.framework],
        namespace=placement.topology.namespace,
        job=placement.topology.job,
        role=placement.role,
        index=placement.index,
        rank=placement.rank,
        env=training_env(result.pod),
        warnings=result.warnings,
        peers=result.peers,
        settings=result.settings,
        files=projected_files(pod, result.pod),
    )


def training_env(pod: Mapping[str, Any]) -> dict[str, str]:
    """The literal env of the pod's training container (the first container as a fallback)."""
    containers = pod["spec"].get("containers") or [{}]
    framework = FRAMEWORKS.get(labels_of(pod).get(contract.FRAMEWORK, ""))
    wanted = annotations_of(pod).get(contract.CONTAINER)
    try:
        position = training_container(pod, framework.container if framework else None, wanted)
    except TrainhookError:
        position = None
    chosen = containers[position or 0]
    return {e["name"]: e["value"] for e in chosen.get("env") or [] if "value" in e}


def _from_template(workload: Mapping[str, Any], name: str, namespace: str) -> dict[str, Any]:
    template = copy.deepcopy(workload["spec"].get("template") or {})
    metadata = template.get("metadata") or {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(metadata.get("labels") or {}),
            "annotations": dict(metadata.get("annotations") or {}),
        },
        "spec": template.get("spec") or {},
    }


def _statefulset_pod(
    workload: Mapping[str, Any], name: str, ordinal: int, namespace: str
) -> dict[str, Any]:
    pod_name = f"{name}-{ordinal}"
    pod = _from_template(workload, pod_name, namespace)
    pod["metadata"]["labels"] |= {
        contract.STATEFULSET_POD_INDEX: str(ordinal),
        contract.STATEFULSET_POD_NAME: pod_name,
    }
    pod["spec"]["hostname"] = pod_name
    service = workload["spec"].get("serviceName")
    if service:
        pod["spec"]["subdomain"] = service
    return pod


def _job_pod(workload: Mapping[str, Any], name: str, index: int, namespace: str) -> dict[str, Any]:
    pod = _from_template(workload, f"{name}-{index}", namespace)
    pod["metadata"]["labels"] |= {
        contract.JOB_COMPLETION_INDEX: str(index),
        contract.JOB_NAME: name,
        "job-name": name,
    }
    pod["metadata"]["annotations"][contract.JOB_COMPLETION_INDEX] = str(index)
    pod["spec"]["hostname"] = f"{name}-{index}"
    index_ref = f"metadata.annotations['{contract.JOB_COMPLETION_INDEX}']"
    for field in ("initContainers", "containers"):
        for container in pod["spec"].get(field) or []:
            env = container.setdefault("env", [])
            if not any(item.get("name") == "JOB_COMPLETION_INDEX" for item in env):
                env.append(
                    {
                        "name": "JOB_COMPLETION_INDEX",
                        "valueFrom": {"fieldRef": {"fieldPath": index_ref}},
                    }
                )
    return pod


def table(
    pods: Sequence[RenderedPod],
    width: int = 72,
    policies: Mapping[tuple[str, str], FailurePolicy] | None = None,
) -> str:
    """One block per job: its pods with role, index, rank and the framework's key variables,
    then its failure rules when it sets any."""
    blocks = []
    by_job: dict[tuple[str, str], list[RenderedPod]] = defaultdict(list)
    for pod in pods:
        by_job[(pod.namespace, pod.job)].append(pod)
    for (namespace, job), members in by_job.items():
        framework = members[0].framework
        settings = members[0].settings
        compat = COMPATS[settings.compat] if settings.compat is not None else None
        key_vars = list(dict.fromkeys([*framework.key_vars, *(compat.key_vars if compat else ())]))
        # POD_RANK is the pod's place in the job (the trainhook.io/rank label); the framework's
        # own variables follow under their env names (PyTorch's RANK counts processes).
        header = ["POD", "ROLE", "INDEX", "POD_RANK", *key_vars]
        rows = [
            [p.name, p.role, str(p.index), str(p.rank)]
            + [_cell(p.env.get(var, p.env.get(f"{var}_FILE", "")), width) for var in key_vars]
            for p in sorted(members, key=lambda p: p.rank)
        ]
        widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
        count = f"{len(members)} pod" + ("s" if len(members) != 1 else "")
        what = [framework.name]
        if framework.ssh_keys:
            what.append(settings.mpi_implementation)
        if compat is not None:
            what.append(f"compat {compat.name}")
        lines = [f"job {job} ({', '.join(what)}, namespace {namespace}, {count})"]
        lines += _files(members)
        files = next((p.peers for p in members if p.peers is not None), None)
        if files is not None:
            lines.append(
                f"lists in ConfigMap {files.name} at {contract.WORKDIR_FILES}: "
                + ", ".join(files.data)
            )
        for row in [header, *rows]:
            lines.append(
                "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
            )
        policy = (policies or {}).get((namespace, job))
        if policy is not None:
            lines.append("failure rules (first match wins):")
            lines += [f"  {line}" for line in policy.lines()]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _files(members: Sequence[RenderedPod]) -> list[str]:
    """One line per distinct set of files Trainhook projects into pods (the MPI hostfile and
    discovery script, Volcano's .host files), naming the roles that get it."""
    by_files: dict[tuple[str, ...], list[str]] = {}
    for pod in sorted(members, key=lambda p: p.rank):
        if pod.files:
            roles = by_files.setdefault(pod.files, [])
            if pod.role not in roles:
                roles.append(pod.role)
    return [f"files ({', '.join(roles)}): {', '.join(files)}" for files, roles in by_files.items()]


def projected_files(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[str, ...]:
    """The paths of the files the mutation projected into the first container: items of the
    downwardAPI and ConfigMap volumes it added."""
    had = {v.get("name") for v in (before.get("spec") or {}).get("volumes") or []}
    spec = after.get("spec") or {}
    volumes = {v.get("name"): v for v in spec.get("volumes") or [] if v.get("name") not in had}
    containers = spec.get("containers") or [{}]
    paths: list[str] = []
    for mount in containers[0].get("volumeMounts") or []:
        volume = volumes.get(mount.get("name")) or {}
        source = volume.get("downwardAPI") or volume.get("configMap") or {}
        paths += [f"{mount['mountPath']}/{item['path']}" for item in source.get("items") or []]
    return tuple(paths)


def _cell(value: str, width: int) -> str:
    return value if len(value) <= width else value[: width - 1] + "…"
