"""A job that asks for an NVLink domain where the webhook found that the cluster serves no
ComputeDomain: refused in one line when its workload (or bare pod) is created."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.builders import bare_pod, indexed_job, statefulset
from tests.support.reviews import encoded, is_review, review
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to
from webhook.server.reviews import AdmissionResponse

NOT_SERVED = (
    "trainhook.io/nvlink-domain: true: this cluster serves no ComputeDomain of "
    "resource.nvidia.com/v1beta1: install NVIDIA's DRA driver for GPUs (k8s-dra-driver-gpu) with "
    "ComputeDomains enabled, or remove it"
)
ASKS = {contract.NVLINK_DOMAIN: "true"}


def answer(obj: dict[str, Any], served: bool | None) -> AdmissionResponse:
    context = Context(compute_domains_served=served)
    body = answer_to(encoded(review(obj)), "application/json", context).body
    assert is_review(body)
    return body["response"]


def on_template(obj: dict[str, Any]) -> dict[str, Any]:
    obj["spec"]["template"].setdefault("metadata", {})["annotations"] = dict(ASKS)
    return obj


ASKING = {
    "StatefulSet": lambda: statefulset("pt-worker", "pytorch", role="worker", annotations=ASKS),
    "its pod template": lambda: on_template(statefulset("pt-worker", "pytorch", role="worker")),
    "Job": lambda: on_template(indexed_job("pt-worker", "pytorch", completions=2, role="worker")),
    "bare Pod": lambda: bare_pod("solo", "pytorch", annotations=ASKS),
}


@pytest.mark.parametrize("where", ASKING)
def test_a_job_asking_for_an_nvlink_domain_is_refused_in_one_line_where_none_is_served(
    where: str,
) -> None:
    response = answer(ASKING[where](), served=False)
    assert response["allowed"] is False
    assert response["status"] == {"code": 403, "message": NOT_SERVED}


@pytest.mark.parametrize("served", [True, None], ids=["served", "not known"])
def test_it_is_admitted_where_served_or_when_the_cluster_could_not_say(
    served: bool | None,
) -> None:
    assert answer(ASKING["StatefulSet"](), served)["allowed"] is True


def test_a_job_without_it_is_admitted_where_none_is_served() -> None:
    workload = statefulset("pt-worker", "pytorch", annotations={contract.NVLINK_DOMAIN: "false"})
    assert answer(workload, served=False)["allowed"] is True
