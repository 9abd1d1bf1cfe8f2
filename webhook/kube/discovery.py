"""Which version of Kubernetes' own PodGroup the cluster serves: the API is alpha (beta from
Kubernetes 1.37), behind feature gates, and changes between releases. And whether it serves
NVIDIA's ComputeDomain, which only its DRA driver for GPUs installs."""

from __future__ import annotations

from webhook.core.contract import KUBERNETES_PODGROUP_APIS
from webhook.core.job.gang import KUBERNETES_NOT_SERVED as NOT_SERVED
from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import COMPUTE_DOMAINS

__all__ = ["NOT_SERVED", "compute_domains_served", "served_podgroup_api"]


def served_podgroup_api(kube: Kube) -> str | None:
    """The newest scheduling.k8s.io version whose resources include podgroups; None when the
    cluster serves none. Raises ApiError when the API server cannot be asked."""
    for api_version in KUBERNETES_PODGROUP_APIS:
        try:
            found = kube.request("GET", f"/apis/{api_version}")
        except ApiError as error:
            if error.status == 404:
                continue
            raise
        if any(r.get("name") == "podgroups" for r in found.get("resources") or []):
            return api_version
    return None


def compute_domains_served(kube: Kube) -> bool:
    """Whether the cluster serves ComputeDomains (resource.nvidia.com/v1beta1). Raises ApiError
    when the API server cannot be asked."""
    try:
        found = kube.request("GET", f"/apis/{COMPUTE_DOMAINS.api_version}")
    except ApiError as error:
        if error.status == 404:
            return False
        raise
    return any(r.get("name") == COMPUTE_DOMAINS.plural for r in found.get("resources") or [])
