"""Opting out works: what the webhook copied onto a template goes when its source goes."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

from tests.support import builders
from tests.support.reviews import encoded, is_review, patched, review, validate
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to
from webhook.server.reviews import AdmissionReview

JSON = "application/json"
TEMPLATE_ANNOTATIONS = "/spec/template/metadata/annotations"
TEMPLATE_LABELS = "/spec/template/metadata/labels"


def workload(annotations: dict[str, str]) -> dict[str, Any]:
    made = builders.statefulset("ddp", "pytorch", replicas=2, namespace="ml", service_name="ddp")
    made["metadata"]["annotations"] = annotations
    return made


def answer(obj: dict[str, Any], **kw: Any) -> AdmissionReview:
    result = answer_to(encoded(review(obj, namespace="ml", **kw)), JSON, Context())
    assert result.status == 200
    body = result.body
    assert is_review(body), body
    assert body["response"]["allowed"] is True, body["response"]
    return body


def stored(annotations: dict[str, str]) -> dict[str, Any]:
    """The workload as the API server keeps it once the webhook admitted its creation."""
    obj = workload(annotations)
    return patched(obj, answer(obj))


def updated(old: dict[str, Any], change: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The patch the webhook answers an UPDATE with, and the object once it is applied."""
    new = copy.deepcopy(old)
    change(new)
    body = answer(new, operation="UPDATE", old=old)
    patch = json.loads(base64.b64decode(body["response"]["patch"]))
    return patch, patched(new, body)


def test_removing_gpus_from_a_statefulset_removes_its_copy_and_processes_from_the_template() -> (
    None
):
    old = stored({contract.GPUS: "2"})
    assert old["spec"]["template"]["metadata"]["annotations"][contract.GPUS] == "2"

    patch, result = updated(old, lambda new: new["metadata"]["annotations"].pop(contract.GPUS))

    assert patch == [
        {
            "op": "replace",
            "path": f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1hosts",
            "value": '{"worker":{"pod":"ddp","start":0,"service":"ddp"}}',
        },
        {"op": "remove", "path": f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1gpus"},
    ]
    validate(result)


def test_removing_the_scheduler_removes_its_copy_and_nothing_the_user_wrote_there() -> None:
    old = stored({contract.SCHEDULER: "volcano"})
    old["spec"]["template"]["metadata"]["annotations"][contract.SHM_SIZE] = "1Gi"  # the user's

    patch, _ = updated(old, lambda new: new["metadata"]["annotations"].pop(contract.SCHEDULER))

    assert patch == [{"op": "remove", "path": f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1scheduler"}]


def test_a_setting_the_user_put_on_the_template_itself_stays_when_the_workload_never_had_it() -> (
    None
):
    old = stored({})
    old["spec"]["template"]["metadata"]["annotations"][contract.GPUS] = "1"

    body = answer(copy.deepcopy(old), operation="UPDATE", old=old)

    assert "patch" not in body["response"]


def test_removing_the_framework_label_takes_every_trainhook_addition_off_the_template() -> None:
    old = stored({contract.GPUS: "2", contract.SCHEDULER: "volcano"})

    patch, result = updated(old, lambda new: new["metadata"]["labels"].pop(contract.FRAMEWORK))

    assert patch == [
        {"op": "remove", "path": f"{TEMPLATE_LABELS}/trainhook.io~1framework"},
        {"op": "remove", "path": f"{TEMPLATE_LABELS}/trainhook.io~1job"},
        {"op": "remove", "path": f"{TEMPLATE_LABELS}/trainhook.io~1role"},
        {"op": "remove", "path": f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1gpus"},
        {"op": "remove", "path": f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1scheduler"},
        {"op": "remove", "path": f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1topology"},
        {"op": "remove", "path": f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1hosts"},
    ]
    assert result["spec"]["template"]["metadata"] == {
        "labels": {"app": "ddp"},
        "annotations": {},
    }
    validate(result)


def test_a_label_the_selector_uses_stays_on_the_template_when_the_framework_label_goes() -> None:
    old = stored({})
    old["spec"]["selector"]["matchLabels"][contract.JOB] = "ddp"

    patch, _ = updated(old, lambda new: new["metadata"]["labels"].pop(contract.FRAMEWORK))

    assert {op["path"] for op in patch} == {
        f"{TEMPLATE_LABELS}/trainhook.io~1framework",
        f"{TEMPLATE_LABELS}/trainhook.io~1role",
        f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1topology",
        f"{TEMPLATE_ANNOTATIONS}/trainhook.io~1hosts",
    }


def test_an_old_object_that_cannot_be_read_is_ignored_rather_than_a_500() -> None:
    old = stored({contract.GPUS: "2"})
    unreadable = copy.deepcopy(old)
    unreadable["metadata"]["annotations"] = ["not", "a", "map"]
    new = copy.deepcopy(old)
    new["metadata"]["labels"].pop(contract.FRAMEWORK)

    body = answer(new, operation="UPDATE", old=unreadable)

    assert "patch" not in body["response"]


def test_a_selector_the_schema_does_not_allow_gets_a_422_naming_it_rather_than_a_500() -> None:
    old = stored({contract.GPUS: "2"})
    for selector, message in (
        (5, "request.object.spec.selector must be an object, got an integer"),
        (["app"], "request.object.spec.selector must be an object, got an array"),
    ):
        new = copy.deepcopy(old)
        new["metadata"]["labels"].pop(contract.FRAMEWORK)
        new["spec"]["selector"] = selector
        document = review(new, namespace="ml", operation="UPDATE", old=old)

        got = answer_to(encoded(document), "application/json", Context())

        assert (got.status, got.body.get("message")) == (422, message)
