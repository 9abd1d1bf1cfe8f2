"""What every pod of a workload gets alike, whatever its framework: the GPU limit, a /dev/shm
volume, a termination message that falls back to the log, and its scheduler and gang membership."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.frameworks import Placement
from webhook.core.job.settings import Settings
from webhook.core.objects import labels_of
from webhook.core.shape.pods import add_volume, mount

SHM_VOLUME = "dshm"
DEFAULT_SCHEDULER = "default-scheduler"


def set_gpus(
    draft: Draft, pod: Mapping[str, Any], training: int | None, settings: Settings
) -> None:
    """trainhook.io/gpus as the training container's limit and request (a limit the container
    already has equals it: gpu_count refuses any other)."""
    if not settings.gpus or training is None:
        return
    container = pod["spec"]["containers"][training]
    resources = container.get("resources") or {}
    resource, count = settings.gpu_resource, str(settings.gpus)
    if (resources.get("limits") or {}).get(resource) is not None:
        return
    draft.dict_at("spec", "containers", training, "resources", "limits")[resource] = count
    requests = resources.get("requests") or {}
    if resource not in requests:
        draft.dict_at("spec", "containers", training, "resources", "requests")[resource] = count


FALLBACK_TO_LOGS = "FallbackToLogsOnError"


def keep_last_words(draft: Draft, pod: Mapping[str, Any], training: int | None) -> None:
    """The training container's termination message falls back to the end of its log when it
    fails without writing one, so the failing rank says why after its pod is gone (the sweeper
    records it). `File`, the API server's default, cannot be told from a choice; a container
    that writes its message file keeps it either way."""
    if training is None:
        return
    policy = pod["spec"]["containers"][training].get("terminationMessagePolicy")
    if policy in (None, "File"):
        draft.dict_at("spec", "containers", training)["terminationMessagePolicy"] = FALLBACK_TO_LOGS


def set_shm(draft: Draft, pod: Mapping[str, Any], training: int | None, settings: Settings) -> None:
    if settings.shm_size is None:
        return
    add_volume(
        draft,
        {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": settings.shm_size}},
    )
    if training is not None:
        container = pod["spec"]["containers"][training]
        mount(draft, "containers", training, container, SHM_VOLUME, "/dev/shm", read_only=False)


def set_scheduler(
    draft: Draft,
    pod: Mapping[str, Any],
    settings: Settings,
    placement: Placement,
    coscheduling_scheduler: str,
    warnings: list[str],
) -> None:
    job, role = placement.topology.job, placement.role
    if settings.scheduler == "volcano":
        _set_scheduler_name(draft, pod, "volcano", warnings)
        _set_metadata(
            draft,
            pod,
            "annotations",
            {contract.VOLCANO_GROUP_NAME: job, contract.VOLCANO_TASK_SPEC: role},
        )
    elif settings.scheduler == "coscheduling":
        _set_scheduler_name(draft, pod, coscheduling_scheduler, warnings)
        _set_metadata(draft, pod, "labels", {contract.COSCHEDULING_POD_GROUP: job})
    elif settings.scheduler == "kueue":
        _join_kueue_group(draft, pod, settings.queue, job, placement.topology.total, warnings)
    elif settings.scheduler == "kubernetes":
        _join_kubernetes_group(draft, pod, job, warnings)
    elif settings.scheduler == "kai":
        _set_scheduler_name(draft, pod, contract.KAI_SCHEDULER_NAME, warnings)
        # The job's PodGroup, not the one KAI's podgrouper would make for each workload.
        annotations = {contract.KAI_POD_GROUP: job, contract.KAI_SKIP_PODGROUPER: "true"}
        _set_metadata(draft, pod, "annotations", annotations)
        _set_metadata(draft, pod, "labels", {contract.KAI_QUEUE: settings.queue})


def _join_kubernetes_group(
    draft: Draft, pod: Mapping[str, Any], job: str, warnings: list[str]
) -> None:
    """The pod joins the job's PodGroup: immutable once the pod exists, so set here or never."""
    group = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    if group is None:
        draft.dict_at("spec", "schedulingGroup")["podGroupName"] = job
    elif group != job:
        warnings.append(
            f"spec.schedulingGroup.podGroupName {group} was set by the user and is kept: the "
            f"pod is not in the job's PodGroup {job}"
        )


def _set_scheduler_name(
    draft: Draft, pod: Mapping[str, Any], name: str, warnings: list[str]
) -> None:
    current = (pod.get("spec") or {}).get("schedulerName")
    if current in (None, DEFAULT_SCHEDULER):
        draft.dict_at("spec")["schedulerName"] = name
    elif current != name:
        warnings.append(f"schedulerName {current} was set by the user and is kept")


def _set_metadata(
    draft: Draft, pod: Mapping[str, Any], field: str, wanted: Mapping[str, str]
) -> None:
    current = (pod.get("metadata") or {}).get(field) or {}
    if any(current.get(key) != value for key, value in wanted.items()):
        draft.dict_at("metadata", field).update(wanted)


def _join_kueue_group(
    draft: Draft, pod: Mapping[str, Any], queue: str, job: str, total: int, warnings: list[str]
) -> None:
    """Every pod of the job in one Kueue pod group, held by Kueue's gate until it is admitted.

    Kueue's own webhook adds the gate, its managed label and its finalizer to a pod that carries
    a queue label when it sees one; when it ran before Trainhook (no label yet) it added nothing,
    so they are added here, as Kueue would. Nothing of Kueue's is ever removed or reordered.
    """
    labels = labels_of(pod)
    given = labels.get(contract.KUEUE_QUEUE_NAME)
    if given is not None and given != queue:
        warnings.append(
            f"label {contract.KUEUE_QUEUE_NAME} {given} is replaced by {contract.QUEUE} {queue}: "
            "every pod of a job waits in one queue"
        )
    _set_metadata(
        draft,
        pod,
        "labels",
        {contract.KUEUE_QUEUE_NAME: queue, contract.KUEUE_POD_GROUP_NAME: job},
    )
    _set_metadata(draft, pod, "annotations", {contract.KUEUE_POD_GROUP_TOTAL_COUNT: str(total)})
    spec = pod.get("spec") or {}
    gates = [gate.get("name") for gate in spec.get("schedulingGates") or []]
    if contract.KUEUE_ADMISSION_GATE in gates or spec.get("nodeName"):
        return  # Kueue's webhook has been here, or the pod is bound and cannot be gated
    draft.list_at("spec", "schedulingGates").append({"name": contract.KUEUE_ADMISSION_GATE})
    _set_metadata(draft, pod, "labels", {contract.KUEUE_MANAGED: "true"})
    finalizers = (pod.get("metadata") or {}).get("finalizers") or []
    if contract.KUEUE_MANAGED not in finalizers:
        draft.list_at("metadata", "finalizers").append(contract.KUEUE_MANAGED)
