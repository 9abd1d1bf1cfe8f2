"""Served over TLS by gunicorn as the API server calls it: labelling a StatefulSet created before
Trainhook, which keeps the API server's default `podManagementPolicy: OrderedReady`, is admitted
with the warning kubectl prints, and a patch that leaves the immutable field alone."""

from __future__ import annotations

import copy

from tests.support import builders
from tests.support.reviews import encoded, patched, review, validate
from tests.support.serving import Webhook
from webhook.core import contract


def test_labelling_an_existing_ordered_ready_statefulset_is_answered_with_the_warning(
    webhook: Webhook,
) -> None:
    old = builders.statefulset("ddp", "pytorch", replicas=2, namespace="ml", service_name="ddp")
    del old["metadata"]["labels"][contract.FRAMEWORK]
    old["spec"]["podManagementPolicy"] = "OrderedReady"  # the API server's default
    new = copy.deepcopy(old)
    new["metadata"]["labels"][contract.FRAMEWORK] = "pytorch"

    status, answer, _ = webhook.post(
        encoded(review(new, operation="UPDATE", namespace="ml", old=old))
    )

    assert status == 200
    assert answer["response"]["allowed"] is True
    assert answer["response"]["warnings"] == [
        "podManagementPolicy OrderedReady: later pods wait for rank 0 to be Ready, rank 0 for "
        "them; recreate it with Parallel"
    ]
    stored = patched(new, answer)
    assert stored["spec"]["podManagementPolicy"] == "OrderedReady"
    assert stored["spec"]["template"]["metadata"]["annotations"][contract.TOPOLOGY] == (
        '{"worker":2}'
    )
    validate(stored)
