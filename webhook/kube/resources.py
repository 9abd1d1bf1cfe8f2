"""The Kubernetes resources Trainhook reads and writes, and how it marks what it creates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True)
class Resource:
    """One API resource: enough to build its REST paths and name it in messages.

    A cluster-scoped one (a MutatingWebhookConfiguration) is addressed with no namespace."""

    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(self, namespace: str | None = None, name: str | None = None) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            base += f"/namespaces/{namespace}"
        base += f"/{self.plural}"
        return f"{base}/{name}" if name else base


STATEFULSETS: Final = Resource("apps", "v1", "statefulsets", "StatefulSet")
JOBS: Final = Resource("batch", "v1", "jobs", "Job")
PODS: Final = Resource("", "v1", "pods", "Pod")
SERVICES: Final = Resource("", "v1", "services", "Service")
SECRETS: Final = Resource("", "v1", "secrets", "Secret")
CONFIGMAPS: Final = Resource("", "v1", "configmaps", "ConfigMap")
PODGROUPS: Final = Resource("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
COSCHEDULING_PODGROUPS: Final = Resource("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
KAI_PODGROUPS: Final = Resource("scheduling.run.ai", "v2alpha2", "podgroups", "PodGroup")
# Kubernetes' own PodGroups (workload-aware scheduling), by apiVersion; the cluster serves one
# or none of them (see `webhook.kube.discovery`).
KUBERNETES_PODGROUPS: Final = {
    f"scheduling.k8s.io/{version}": Resource("scheduling.k8s.io", version, "podgroups", "PodGroup")
    for version in ("v1beta1", "v1alpha3", "v1alpha2")
}
# NVIDIA's DRA driver for GPUs: a job's NVLink domain (trainhook.io/nvlink-domain).
COMPUTE_DOMAINS: Final = Resource(
    "resource.nvidia.com", "v1beta1", "computedomains", "ComputeDomain"
)
EVENTS: Final = Resource("", "v1", "events", "Event")
NODES: Final = Resource("", "v1", "nodes", "Node")  # cluster-scoped
TOKEN_REVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", "Lease")
MUTATING_WEBHOOK_CONFIGURATIONS: Final = Resource(
    "admissionregistration.k8s.io",
    "v1",
    "mutatingwebhookconfigurations",
    "MutatingWebhookConfiguration",
)

WORKLOAD_RESOURCES: Final = {"StatefulSet": STATEFULSETS, "Job": JOBS, "Pod": PODS}

# Objects the sweeper creates carry this label, so it never deletes anything it did not create.
MANAGED_BY: Final = "app.kubernetes.io/managed-by"
MANAGER: Final = "trainhook"
COMPONENT: Final = "trainhook-sweeper"
