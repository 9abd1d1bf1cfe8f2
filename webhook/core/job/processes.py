"""How many GPUs and processes a pod of a job trains with: from its settings and its training
container's own GPU limit."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core import contract
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.job.settings import Settings
from webhook.core.limits import whole_number


def gpu_count(pod: Mapping[str, Any], training: int | None, settings: Settings) -> int:
    """GPUs of the training container: trainhook.io/gpus, else the container's own limit of the
    GPU resource, else 0. Raises Refused when the two are both set and disagree."""
    limit = None
    if training is not None:
        container: dict[str, Any] = pod["spec"]["containers"][training]
        resources: dict[str, Any] = container.get("resources") or {}
        limits: dict[str, Any] = resources.get("limits") or {}
        raw = limits.get(settings.gpu_resource)
        if raw is not None:
            limit = whole_number(str(raw))
            if limit is None:
                raise InvalidSetting(
                    f"resources.limits[{settings.gpu_resource}]",
                    raw,
                    f"container {container.get('name')}: a whole number of GPUs",
                )
            if settings.gpus is not None and settings.gpus != limit:
                raise Refused(
                    f"{contract.GPUS} {settings.gpus} contradicts the {settings.gpu_resource} "
                    f"limit {limit} of container {container.get('name')}; set one of them, "
                    "or both to the same count"
                )
    if settings.gpus is not None:
        return settings.gpus
    return limit or 0


def processes_per_pod(pod: Mapping[str, Any], training: int | None, settings: Settings) -> int:
    """trainhook.io/nproc-per-node when a number; else (unset or `auto`) one process per GPU
    of the training container; 1 without GPUs."""
    gpus = gpu_count(pod, training, settings)
    if settings.nproc_per_node is not None:
        return settings.nproc_per_node
    return gpus or 1
