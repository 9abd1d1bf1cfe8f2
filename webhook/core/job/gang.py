"""A job's gang: the scheduler, queue and timeout every role shares, and what the gang asks for.

These settings are job-wide: one gang is one PodGroup (or one Kueue pod group), so a role that
names another scheduler or queue would split the job into a partial gang that holds its
resources and never starts. They must agree on every workload of the job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from webhook.core import contract
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.job.colocation import Colocation, colocation_of
from webhook.core.job.settings import Settings
from webhook.core.shape.pods import training_container
from webhook.core.shape.requests import Requests, pod_requests, sum_requests

PODGROUP_APIS = {
    "volcano": contract.VOLCANO_PODGROUP_API,
    "coscheduling": contract.COSCHEDULING_PODGROUP_API,
    "kai": contract.KAI_PODGROUP_API,
}  # Kueue's pod group is labels on the pods: no object of its own
# Said when a job asks for `kubernetes` and the cluster serves no PodGroup of it.
KUBERNETES_NOT_SERVED = (
    "this cluster serves no PodGroup of scheduling.k8s.io (one of "
    + ", ".join(contract.KUBERNETES_PODGROUP_APIS)
    + "): Kubernetes' own gang scheduling needs Kubernetes 1.36 or later with the "
    "GenericWorkload feature gate and that API version enabled"
)
# What `trainhook render` shows for `kubernetes`; the sweeper uses the version the cluster serves.
DEFAULT_KUBERNETES_PODGROUP_API = contract.KUBERNETES_PODGROUP_APIS[0]


@dataclass(frozen=True)
class Gang:
    """How a job is gang-scheduled, the same for all of its roles."""

    scheduler: str
    queue: str
    schedule_timeout_seconds: int | None
    colocation: Colocation | None = None
    # The gang is `minimum` pods: `trainhook.io/min-available` (Kubeflow's
    # schedulingPolicy.minAvailable), else an elastic job's `min` of its `trainhook.io/elastic`
    # min:max nodes (as Kubeflow's minAvailable from elasticPolicy.minReplicas).
    minimum: int | None = None
    min_available: int | None = None  # the minimum the user set, if any

    def minimum_of(self, parts: Sequence[tuple[Requests, int]]) -> tuple[int, dict[str, str]]:
        """(minMember, minResources) of a gang of the pods of `parts` ((one pod's requests,
        pods) per role, in role order): every pod, or the first `minimum` (every pod when the
        job has fewer)."""
        total = sum(count for _, count in parts)
        if self.minimum is None or self.minimum >= total:
            return total, sum_requests(parts)
        left, taken = self.minimum, []
        for requests, count in parts:
            if left > 0:
                taken.append((requests, min(count, left)))
                left -= min(count, left)
        return self.minimum, sum_requests(taken)


# Job-wide keys, in the order they are compared, with why the job has one value of each: the
# placement whatever the scheduler, the queue and timeout only with one (else meaningless).
GANG = "is one gang"
PLACED = "is placed as one"
_Key = tuple[str, str, Callable[[Settings], object]]
_ALWAYS: tuple[_Key, ...] = (
    (contract.SCHEDULER, GANG, lambda s: s.scheduler),
    (contract.PLACEMENT_TOPOLOGY, PLACED, lambda s: s.placement_topology),
    (
        contract.PLACEMENT,
        PLACED,
        lambda s: s.placement or ("required" if s.placement_topology else None),
    ),
    (contract.PLACEMENT_TIER, PLACED, lambda s: s.placement_tier),
    (contract.KAI_TOPOLOGY, PLACED, lambda s: s.kai_topology),
)
_WITH_A_SCHEDULER: tuple[_Key, ...] = (
    (contract.QUEUE, GANG, lambda s: s.queue),
    (contract.SCHEDULE_TIMEOUT_SECONDS, GANG, lambda s: s.schedule_timeout_seconds),
    (contract.MIN_AVAILABLE, GANG, lambda s: s.min_available),
)


def job_gang(job: str, members: Sequence[tuple[str, Settings]]) -> Gang | None:
    """The gang of a job from each workload's (description, settings); None when the job is
    not gang-scheduled. Raises Refused naming the first two workloads that disagree on a
    gang or placement setting."""
    if not members:
        return None
    first_name, first = members[0]
    keys = _ALWAYS + (_WITH_A_SCHEDULER if first.scheduler is not None else ())
    for key, why, value_of in keys:
        wanted = value_of(first)
        for name, settings in members[1:]:
            value = value_of(settings)
            if value != wanted:
                raise Refused(
                    f"{key}: job {job!r} {why}, so every role must say the same: "
                    f"{_shown(wanted)} on {first_name} but {_shown(value)} on {name}"
                )
    if first.scheduler is None:
        return None
    minimum = first.min_available or (first.elastic[0] if first.elastic else None)
    return Gang(
        first.scheduler,
        first.queue,
        first.schedule_timeout_seconds,
        colocation=colocation_of(first),
        minimum=minimum,
        min_available=first.min_available,
    )


def _shown(value: object) -> str:
    return "not set" if value is None else repr(str(value))


def template_requests(
    template_spec: Mapping[str, Any], settings: Settings, default: str | None
) -> Requests:
    """What one pod of a workload asks for once the webhook has mutated it: the template's
    requests plus the GPUs `trainhook.io/gpus` gives the training container (`default` is the
    framework's training container name)."""
    spec = dict(template_spec)
    if settings.gpus:
        position = training_container({"spec": spec}, default, settings.container)
        if position is not None:
            containers = [dict(c) for c in spec.get("containers") or []]
            container = containers[position]
            resources = dict(container.get("resources") or {})
            limits = dict(resources.get("limits") or {})
            if settings.gpu_resource not in limits:
                limits[settings.gpu_resource] = str(settings.gpus)
                requests = dict(resources.get("requests") or {})
                requests.setdefault(settings.gpu_resource, str(settings.gpus))
                resources["limits"], resources["requests"] = limits, requests
                container["resources"] = resources
            containers[position] = container
            spec["containers"] = containers
    return pod_requests(spec)


def podgroup_spec(
    gang: Gang,
    min_member: int,
    min_resources: Mapping[str, str],
    priority_class: str | None,
    kubernetes_api: str | None = DEFAULT_KUBERNETES_PODGROUP_API,
) -> tuple[str, dict[str, Any]] | None:
    """(apiVersion, spec) of the job's PodGroup; None for a scheduler without one (Kueue), and
    for `kubernetes` when `kubernetes_api` is None (the cluster serves no version of it).

    A field the job does not set is None, so a merge patch of the spec removes it."""
    if gang.scheduler == "kubernetes":
        if kubernetes_api is None:
            return None
        return kubernetes_api, kubernetes_podgroup_spec(min_member, priority_class, gang.colocation)
    api_version = PODGROUP_APIS.get(gang.scheduler)
    if api_version is None:
        return None
    if gang.scheduler == "kai":
        return api_version, kai_podgroup_spec(gang, min_member, priority_class)
    spec: dict[str, Any] = {"minMember": min_member, "minResources": dict(min_resources) or None}
    if gang.scheduler == "volcano":
        spec["queue"] = gang.queue
        spec["priorityClassName"] = priority_class
        spec["networkTopology"] = _volcano_network_topology(gang.colocation)
    else:
        spec["scheduleTimeoutSeconds"] = gang.schedule_timeout_seconds
    return api_version, spec


def kubernetes_podgroup_spec(
    min_count: int, priority_class: str | None, colocation: Colocation | None
) -> dict[str, Any]:
    """Kubernetes' own PodGroup: a gang of every pod, within one domain when required (its
    topology constraint has no preferred form: a preferred placement is the pods' affinity)."""
    constraints = None
    if colocation is not None and colocation.required:
        constraints = {"topology": [{"key": colocation.key}]}
    return {
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "schedulingConstraints": constraints,
        "priorityClassName": priority_class,
    }


def kai_podgroup_spec(gang: Gang, min_member: int, priority_class: str | None) -> dict[str, Any]:
    """KAI's PodGroup: every pod in the gang, in the job's queue, within one domain of a level of
    the named Topology (KAI's levels are node label keys)."""
    constraint = None
    colocation = gang.colocation
    if colocation is not None and colocation.kai_topology is not None:
        level = "requiredTopologyLevel" if colocation.required else "preferredTopologyLevel"
        constraint = {"topology": colocation.kai_topology, level: colocation.key}
    return {
        "minMember": min_member,
        "queue": gang.queue,
        "priorityClassName": priority_class,
        "topologyConstraint": constraint,
    }


def _volcano_network_topology(colocation: Colocation | None) -> dict[str, Any] | None:
    """Volcano keeps a job within one HyperNode of the tier: hard (required) or soft."""
    if colocation is None or colocation.tier is None:
        return None
    tier = colocation.tier
    highest = {"highestTierAllowed": int(tier)} if tier.isdigit() else {"highestTierName": tier}
    return {"mode": "hard" if colocation.required else "soft", **highest}


def podgroup_of_pods(
    gang: Gang,
    job: str,
    namespace: str,
    pods: Sequence[Mapping[str, Any]],
    kubernetes_api: str = DEFAULT_KUBERNETES_PODGROUP_API,
) -> dict[str, Any] | None:
    """The PodGroup a job of these (mutated) pods is scheduled with, as `trainhook render`
    shows it; the sweeper creates the same from the job's workloads."""
    specs = [pod.get("spec") or {} for pod in pods]
    wanted = gang.min_available
    if wanted is not None and wanted > len(specs):
        raise InvalidSetting(
            contract.MIN_AVAILABLE,
            str(wanted),
            f"at most the {len(specs)} pod(s) of job {job!r}: a gang of more would never be placed",
        )
    members, resources = gang.minimum_of([(pod_requests(spec), 1) for spec in specs])
    priority = next((s["priorityClassName"] for s in specs if s.get("priorityClassName")), None)
    found = podgroup_spec(gang, members, resources, priority, kubernetes_api)
    if found is None:
        return None
    api_version, spec = found
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {"name": job, "namespace": namespace},
        "spec": {key: value for key, value in spec.items() if value is not None},
    }
