"""Which version of Kubernetes' own PodGroup the cluster serves: the API is alpha (beta from
Kubernetes 1.37), behind feature gates, and changes between releases."""

from __future__ import annotations

from webhook.core.contract import KUBERNETES_PODGROUP_APIS
from webhook.kube.client import ApiError, Kube

# Said when a job asks for `kubernetes` and the cluster serves no PodGroup of it.
NOT_SERVED = (
    "this cluster serves no PodGroup of scheduling.k8s.io (one of "
    + ", ".join(KUBERNETES_PODGROUP_APIS)
    + "): Kubernetes' own gang scheduling needs Kubernetes 1.36 or later with the "
    "GenericWorkload feature gate and that API version enabled"
)


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
