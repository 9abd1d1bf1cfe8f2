"""`trainhook.io/nvlink-domain`: the pods of a role that sets it share the job's NVLink domain.

On Multi-Node NVLink systems (GB200 and GB300 NVL72) pods on different nodes reach each other's
GPU memory over NVLink through an IMEX channel. NVIDIA's DRA driver gives a workload one through
a ComputeDomain (`resource.nvidia.com/v1beta1`): the driver makes the ResourceClaimTemplate the
ComputeDomain names, and each pod that claims from it gets a channel of that domain. The sweeper
makes one ComputeDomain per job (sweeper/decide/compute_domain.py); the webhook writes the claim
on every pod of the roles that ask for it, here.

The setting is a role's: an MPI launcher, which runs no GPU work, leaves it unset and is not
placed on the domain's nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.fabrics.apply import add_claim
from webhook.core.limits import shown
from webhook.core.objects import annotations_of, labels_of

COMPUTE_DOMAIN_API = "resource.nvidia.com/v1beta1"
COMPUTE_DOMAIN_KIND = "ComputeDomain"
# The pod's claim and the training container's entry for it.
CHANNEL_CLAIM = "nvlink-channel"
TEMPLATE_SUFFIX = "-nvlink"
# Said where the cluster serves no ComputeDomain.
NOT_SERVED = (
    f"this cluster serves no {COMPUTE_DOMAIN_KIND} of {COMPUTE_DOMAIN_API}: install NVIDIA's "
    "DRA driver for GPUs (k8s-dra-driver-gpu) with ComputeDomains enabled, or remove it"
)


def read_nvlink_domain(value: str | None) -> bool:
    """The annotation's value: "true" or "false" (unset: false)."""
    if value is None or value == "false":
        return False
    if value == "true":
        return True
    raise InvalidSetting(contract.NVLINK_DOMAIN, value, "one of true, false")


def compute_domain_name(job: str) -> str:
    """The job's ComputeDomain, and the ResourceClaimTemplate it names: `<job>-nvlink`."""
    return job + TEMPLATE_SUFFIX


def compute_domain(job: str, namespace: str, pods: int) -> dict[str, Any]:
    """The job's ComputeDomain as the sweeper makes it (less the managed-by label and owner
    references it adds): one IMEX daemon per pod of the roles that ask (a training pod takes its
    node's GPUs), and the channel's ResourceClaimTemplate, which the driver makes, named as the
    domain."""
    name = compute_domain_name(job)
    return {
        "apiVersion": COMPUTE_DOMAIN_API,
        "kind": COMPUTE_DOMAIN_KIND,
        "metadata": {"name": name, "namespace": namespace, "labels": {contract.JOB: job}},
        "spec": {"numNodes": pods, "channel": {"resourceClaimTemplate": {"name": name}}},
    }


def add_nvlink_channel(
    draft: Draft, pod: Mapping[str, Any], job: str, training: int | None
) -> None:
    """The job's IMEX channel as a pod claim and the training container's claim; a pod claim of
    that name from anything else is refused."""
    if training is None:
        return
    container = pod["spec"]["containers"][training]
    template = compute_domain_name(job)
    have = add_claim(draft, pod, container, training, CHANNEL_CLAIM, template)
    if have is not None:
        raise InvalidSetting(
            contract.NVLINK_DOMAIN,
            "true",
            f"the job's IMEX channel is claim {CHANNEL_CLAIM} from ResourceClaimTemplate "
            f"{template}, the pod's claim {CHANNEL_CLAIM} is {shown(dict(have))}: rename the "
            "pod's claim",
        )


def refuse_unserved_nvlink(obj: Mapping[str, Any]) -> None:
    """Raises Refused for a labelled workload or pod that asks for an NVLink domain, on its own
    annotations or its pod template's: what the webhook says where the cluster serves no
    ComputeDomain."""
    template = (obj.get("spec") or {}).get("template") or {}
    asked = annotations_of(obj).get(contract.NVLINK_DOMAIN) or annotations_of(template).get(
        contract.NVLINK_DOMAIN
    )
    labelled = contract.FRAMEWORK in labels_of(obj) or contract.FRAMEWORK in labels_of(template)
    if asked == "true" and labelled:
        raise Refused(f"{contract.NVLINK_DOMAIN}: true: {NOT_SERVED}")
