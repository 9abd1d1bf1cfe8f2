"""A job that asks for Kubernetes' own gang where the cluster serves no PodGroup: one line."""

from __future__ import annotations

import pytest

from tests.support.builders import statefulset
from tests.support.reviews import encoded, is_review, review
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to
from webhook.server.reviews import AdmissionResponse

NOT_SERVED = (
    "trainhook.io/scheduler: kubernetes: this cluster serves no PodGroup of scheduling.k8s.io "
    "(one of scheduling.k8s.io/v1beta1, scheduling.k8s.io/v1alpha3, scheduling.k8s.io/v1alpha2): "
    "Kubernetes' own gang scheduling needs Kubernetes 1.36 or later with the GenericWorkload "
    "feature gate and that API version enabled"
)


def answer(served: bool | None, scheduler: str = "kubernetes") -> AdmissionResponse:
    workload = statefulset("pt", "pytorch", annotations={contract.SCHEDULER: scheduler})
    context = Context(kubernetes_podgroups_served=served)
    body = answer_to(encoded(review(workload)), "application/json", context).body
    assert is_review(body)
    return body["response"]


def test_a_kubernetes_job_is_refused_in_one_line_where_no_podgroup_is_served() -> None:
    response = answer(served=False)
    assert response["allowed"] is False
    assert response["status"] == {"code": 403, "message": NOT_SERVED}


@pytest.mark.parametrize("served", [True, None], ids=["served", "not known"])
def test_a_kubernetes_job_is_admitted_where_served_or_when_the_cluster_could_not_say(
    served: bool | None,
) -> None:
    assert answer(served)["allowed"] is True


def test_other_schedulers_are_admitted_where_no_kubernetes_podgroup_is_served() -> None:
    assert answer(served=False, scheduler="volcano")["allowed"] is True
