"""The admission request handling on its own: a request body in, a status and a response out."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from tests.support.reviews import (
    StoredWorkloads,
    admit_job,
    encoded,
    example_documents,
    is_review,
    is_status,
    patched,
    pods_of,
    review,
    validate,
    workloads_of,
)
from webhook.core import contract
from webhook.server.admission import MAX_BODY_BYTES, Answer, Context
from webhook.server.admission import review as answer_to

JSON = "application/json"
CONTEXT = Context()


def labelled_pod(**extra_labels: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": "default",
            "labels": {contract.FRAMEWORK: "pytorch", **extra_labels},
        },
        "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
    }


def ask(document: Any, content_type: str | None = JSON) -> Answer:
    return answer_to(encoded(document), content_type, CONTEXT)


def good_review() -> dict[str, Any]:
    return review(labelled_pod())


def without(path: str) -> dict[str, Any]:
    document = good_review()
    *parents, last = path.split(".")
    node = document
    for key in parents:
        node = node[key]
    del node[last]
    return document


BAD_REQUESTS = [
    pytest.param(
        b"{not json",
        JSON,
        400,
        "request body is not JSON: Expecting property name enclosed in double quotes "
        "at line 1 column 2",
        id="not-json",
    ),
    pytest.param(b"", JSON, 400, "request body is empty; expected an AdmissionReview", id="empty"),
    pytest.param(
        b" \r\n\t ", JSON, 400, "request body is empty; expected an AdmissionReview", id="blank"
    ),
    pytest.param(
        b'{"kind": "Adm\xffssionReview"}',
        JSON,
        400,
        "request body is not UTF-8 text: invalid start byte",
        id="not-utf8",
    ),
    pytest.param(
        b"[" * 100_000 + b"]" * 100_000,
        JSON,
        400,
        "request body is JSON nested too deeply",
        id="nested-too-deeply",
    ),
    pytest.param(
        b"[]",
        JSON,
        422,
        "expected an AdmissionReview object, got an array",
        id="array",
    ),
    pytest.param(
        encoded({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}),
        JSON,
        422,
        "expected kind AdmissionReview, got 'Pod'",
        id="not-an-admission-review",
    ),
    pytest.param(
        encoded({**good_review(), "apiVersion": "admission.k8s.io/v1beta1"}),
        JSON,
        422,
        "AdmissionReview apiVersion 'admission.k8s.io/v1beta1' is not served; "
        "send admission.k8s.io/v1 (admissionReviewVersions: [v1])",
        id="v1beta1",
    ),
    pytest.param(
        encoded(without("request")),
        JSON,
        422,
        "AdmissionReview has no request object (nothing)",
        id="no-request",
    ),
    pytest.param(
        encoded(without("request.uid")),
        JSON,
        422,
        "request.uid must be a non-empty string, got nothing",
        id="no-uid",
    ),
    pytest.param(
        encoded(without("request.object")),
        JSON,
        422,
        "request.object must be the Pod being admitted, got nothing",
        id="no-object",
    ),
    pytest.param(
        encoded(without("request.kind")),
        JSON,
        422,
        "request.kind.kind must name the kind of the object",
        id="no-kind",
    ),
    pytest.param(
        encoded(good_review()),
        "text/plain",
        415,
        "Content-Type must be application/json, got 'text/plain'",
        id="text-plain",
    ),
    pytest.param(
        encoded(good_review()),
        None,
        415,
        "Content-Type must be application/json, got none",
        id="no-content-type",
    ),
    pytest.param(
        b" " * (MAX_BODY_BYTES + 1),
        JSON,
        413,
        f"request body is {MAX_BODY_BYTES + 1} bytes; the limit is 3 MiB",
        id="over-3-mib",
    ),
]


@pytest.mark.parametrize(("body", "content_type", "status", "message"), BAD_REQUESTS)
def test_bad_request_gets_a_4xx_status_with_a_one_line_reason(
    body: bytes, content_type: str | None, status: int, message: str
) -> None:
    answer = answer_to(body, content_type, CONTEXT)

    assert answer.status == status
    assert answer.body == {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": status,
        "reason": {
            400: "BadRequest",
            413: "RequestEntityTooLarge",
            415: "UnsupportedMediaType",
        }.get(status, "Invalid"),
        "message": message,
    }
    assert answer.record.result == "rejected"


def test_content_type_with_a_charset_is_json() -> None:
    answer = ask(good_review(), "application/json; charset=utf-8")

    assert answer.status == 200


def test_labelled_pod_gets_a_json_patch_that_makes_it_a_valid_training_pod() -> None:
    pod = labelled_pod()
    document = review(pod)

    answer = ask(document)

    assert answer.status == 200
    assert is_review(answer.body), answer.body
    response = answer.body["response"]
    assert response["uid"] == document["request"]["uid"]
    assert response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    mutated = patched(pod, answer.body)
    validate(mutated)
    env = {e["name"]: e["value"] for e in mutated["spec"]["containers"][0]["env"]}
    assert env["RANK"] == "0"
    assert env["WORLD_SIZE"] == "1"
    assert answer.record.result == "mutated"
    assert answer.record.patch_bytes == len(base64.b64decode(response["patch"]))


def test_answer_echoes_api_version_kind_and_uid_and_nothing_else_of_the_request() -> None:
    document = review({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}})

    answer = ask(document)

    assert answer.body == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": document["request"]["uid"], "allowed": True},
    }


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(review({**labelled_pod(), "metadata": {"name": "plain"}}), id="unlabelled"),
        pytest.param(
            review(
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": "c", "labels": {contract.FRAMEWORK: "pytorch"}},
                }
            ),
            id="other-kind",
        ),
        pytest.param(review(None, kind="Pod", operation="DELETE", old=labelled_pod()), id="delete"),
        pytest.param(
            review(
                {"apiVersion": "v1", "kind": "PodExecOptions", "command": ["sh"]},
                kind="Pod",
                operation="CONNECT",
            ),
            id="connect",
        ),
    ],
)
def test_objects_trainhook_does_not_handle_are_allowed_without_a_patch(
    document: dict[str, Any],
) -> None:
    answer = ask(document)

    assert answer.status == 200
    assert is_review(answer.body), answer.body
    assert answer.body["response"] == {
        "uid": document["request"]["uid"],
        "allowed": True,
    }
    assert answer.record.result == "allowed"


def test_invalid_trainhook_setting_refuses_the_object_with_400_and_the_cores_message() -> None:
    pod = labelled_pod()
    pod["metadata"]["annotations"] = {contract.GPUS: "two"}

    answer = ask(review(pod))

    assert answer.status == 200
    assert is_review(answer.body), answer.body
    assert answer.body["response"]["allowed"] is False
    assert answer.body["response"]["status"] == {
        "code": 400,
        "message": "trainhook.io/gpus: invalid value 'two': a whole number, 0 or more",
    }
    assert answer.record.result == "denied"


def test_job_that_is_not_indexed_is_refused_with_403() -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train", "labels": {contract.FRAMEWORK: "pytorch"}},
        "spec": {"template": {"spec": {"containers": [{"name": "pytorch", "image": "t:1"}]}}},
    }

    answer = ask(review(job))

    assert is_review(answer.body), answer.body
    status = answer.body["response"]["status"]
    assert status["code"] == 403
    assert status["message"].startswith("Job train: a training job needs spec.completionMode")


def test_user_env_wins_and_the_answer_warns_under_120_characters() -> None:
    pod = labelled_pod()
    pod["spec"]["containers"][0]["env"] = [{"name": "MASTER_PORT", "value": "1234"}]

    answer = ask(review(pod))

    assert is_review(answer.body), answer.body
    warnings = answer.body["response"]["warnings"]
    assert warnings == ["env MASTER_PORT in container pytorch was set by the user and is kept"]
    assert all(len(warning) < 120 for warning in warnings)
    mutated = patched(pod, answer.body)
    env = {e["name"]: e["value"] for e in mutated["spec"]["containers"][0]["env"]}
    assert env["MASTER_PORT"] == "1234"
    assert answer.record.warnings == 1


def test_dry_run_is_answered_exactly_like_the_real_request() -> None:
    real = review(labelled_pod())
    dry = copy.deepcopy(real)
    dry["request"]["dryRun"] = True

    assert ask(dry).body == ask(real).body


def test_request_object_is_not_modified_by_admission() -> None:
    documents = dict(example_documents())["pytorch.yaml"]
    workload = workloads_of(documents)[0]
    pod = pods_of(workload)[0]
    before = copy.deepcopy(pod)

    ask(review(pod))

    assert pod == before


def test_every_example_workload_and_pod_gets_a_patch_that_validates() -> None:
    for _name, documents in example_documents():
        stored = StoredWorkloads()
        context = Context(lookup=stored)

        def send(document: dict[str, Any], context: Context = context) -> Mapping[str, Any]:
            answer = answer_to(encoded(document), JSON, context)
            assert answer.status == 200
            assert is_review(answer.body), answer.body
            return answer.body

        for pod, answer in admit_job(documents, send, stored).pods:
            assert answer["response"]["allowed"] is True, answer["response"]
            validate(patched(pod, answer))
        for workload in stored.objects.values():
            validate(workload)


def test_answer_body_is_plain_json() -> None:
    answer = ask(review(labelled_pod()))

    assert json.loads(json.dumps(answer.body)) == answer.body


def test_object_that_breaks_its_schema_gets_422_naming_the_field() -> None:
    pod = labelled_pod()
    pod["spec"]["containers"][0]["env"] = {"RANK": "0"}
    document = review(pod)

    answer = ask(document)

    assert answer.status == 422
    assert is_status(answer.body), answer.body
    assert answer.body["message"] == (
        "request.object.spec.containers[0].env must be an array, got an object"
    )
    assert answer.record.error == "malformed_object"
    assert (answer.record.uid, answer.record.kind) == (document["request"]["uid"], "Pod")


def _labels_as_text(pod: dict[str, Any]) -> None:
    pod["metadata"]["labels"] = "app=trainer"


def _env_item_as_text(pod: dict[str, Any]) -> None:
    pod["spec"]["containers"][0]["env"] = [{"name": "DATA", "value": "/data"}, "RANK=0"]


@pytest.mark.parametrize(
    ("malform", "message"),
    [
        (_labels_as_text, "request.object.metadata.labels must be an object, got a string"),
        (
            _env_item_as_text,
            "request.object.spec.containers[0].env[1] must be an object, got a string",
        ),
    ],
    ids=["labels", "env item"],
)
def test_a_field_that_is_no_object_gets_422_naming_it(
    malform: Callable[[dict[str, Any]], None], message: str
) -> None:
    pod = labelled_pod()
    malform(pod)

    answer = ask(review(pod))

    assert answer.status == 422
    assert is_status(answer.body), answer.body
    assert answer.body["message"] == message
    assert answer.record.error == "malformed_object"


def test_object_of_another_kind_than_the_request_says_gets_422() -> None:
    document = review(labelled_pod(), kind="StatefulSet")

    answer = ask(document)

    assert answer.status == 422
    assert is_status(answer.body), answer.body
    assert answer.body["message"] == (
        "request.object.kind 'Pod' does not match request.kind.kind 'StatefulSet'"
    )


class BrokenLookup:
    def siblings(self, namespace: str, job: str, *, exclude: object = None) -> None:
        raise RuntimeError("lookup is broken")

    def get(self, namespace: str, kind: str, name: str) -> None:
        raise RuntimeError("lookup is broken")

    def cached(self, namespace: str, kind: str, name: str) -> None:
        raise RuntimeError("lookup is broken")


def test_a_fault_of_the_webhook_is_a_500_with_one_line_and_its_traceback_only_in_the_log(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from webhook.server.app import create_app

    app = create_app(Context(lookup=BrokenLookup()))
    workload = workloads_of(dict(example_documents())["pytorch.yaml"])[0]

    response = app.test_client().post("/mutate", data=encoded(review(workload)), content_type=JSON)

    assert response.status_code == 500
    assert response.get_json() == {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": 500,
        "reason": "InternalError",
        "message": "internal error; see the webhook's log",
    }
    [record] = [r for r in caplog.records if r.name == "trainhook.server"]
    assert record.exc_info is not None
    assert str(record.exc_info[1]) == "lookup is broken"
