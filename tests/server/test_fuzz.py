"""Whatever arrives as a request body, the answer is a 2xx or a 4xx, never a 5xx or a crash."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.reviews import (
    cost_past_decoding,
    example_documents,
    is_review,
    is_status,
    pods_of,
    review,
    workloads_of,
)
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to

JSON = "application/json"
CONTEXT = Context()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)
content_types = st.sampled_from(
    [JSON, "application/json; charset=utf-8", "text/plain", "application/yaml", "", None]
)


def _objects() -> list[dict[str, Any]]:
    found = []
    for _, documents in example_documents():
        for workload in workloads_of(documents):
            found.append(workload)
            found.extend(pods_of(workload)[:1])
    return found


OBJECTS = _objects()


def _paths(node: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [path]
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*path, index))
    return found


@st.composite
def damaged_reviews(draw: st.DrawFn) -> bytes:
    """An AdmissionReview of a real labelled object with one part replaced by any JSON value."""
    obj = copy.deepcopy(draw(st.sampled_from(OBJECTS)))
    document = review(obj, operation=draw(st.sampled_from(["CREATE", "UPDATE"])))
    paths = [p for p in _paths(document) if p]
    where = draw(st.sampled_from(paths))
    node: Any = document
    for key in where[:-1]:
        node = node[key]
    node[where[-1]] = draw(json_values)
    return json.dumps(document).encode()


@st.composite
def labelled_garbage(draw: st.DrawFn) -> bytes:
    """A labelled object of a handled kind whose every other part is any JSON."""
    kind = draw(st.sampled_from(["Pod", "StatefulSet", "Job"]))
    labels = {contract.FRAMEWORK: draw(st.sampled_from(["pytorch", "mpi", "tensorflow", "x"]))}
    labels.update(
        draw(
            st.dictionaries(
                st.sampled_from([contract.JOB, contract.ROLE, contract.INDEX]), json_values
            )
        )
    )
    metadata = {"name": draw(st.text(max_size=8)), "labels": labels}
    metadata.update(
        draw(
            st.dictionaries(
                st.sampled_from(["annotations", "ownerReferences", "namespace"]), json_values
            )
        )
    )
    obj = {"kind": kind, "metadata": metadata, "spec": draw(json_values)}
    return json.dumps(review(obj, kind=kind)).encode()


# What a tenant writes to make the webhook work hard or fail: numbers past Python's 4,300-digit
# conversion limit, digits that are not ASCII, stamps nested thousands deep, names with newlines.
hostile_strings = st.one_of(
    st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n),
    st.sampled_from(["²:³", "٣", "1:²", "-1", "0x10", " 7 ", "1e9", "4294967296"]),
    st.integers(min_value=1, max_value=3000).map(lambda n: "[" * n + "]" * n),
    st.integers(min_value=1, max_value=3000).map(lambda n: '{"a":' * n + "1" + "}" * n),
    st.text(alphabet="ab\n-.9", max_size=80),
)
hostile_hosts = st.dictionaries(
    st.sampled_from(["worker", "master", "a=b", "W", "x" * 70]),
    st.fixed_dictionaries(
        {},
        optional={
            "pod": st.one_of(
                st.integers(min_value=1, max_value=30000).map(lambda n: "a" * n),
                st.text(alphabet="ab\n-.", max_size=10),
            ),
            "start": st.one_of(
                st.integers(min_value=-5, max_value=2**40),
                st.integers(min_value=1, max_value=4000).map(lambda n: int("9" * n)),
                st.booleans(),
            ),
            "service": st.one_of(st.text(alphabet="sb\n-", max_size=80), st.integers()),
            "nproc": st.one_of(st.integers(min_value=-1, max_value=2**40), st.none()),
        },
    ),
    max_size=3,
)
hostile_counts = st.dictionaries(
    st.sampled_from(["worker", "master", "a=b", "ps"]),
    st.one_of(st.integers(min_value=-1, max_value=2**33), st.booleans(), st.text(max_size=3)),
    max_size=3,
)
NULLABLE_LISTS = [
    ("spec", "containers"),
    ("spec", "initContainers"),
    ("spec", "volumes"),
    ("metadata", "ownerReferences"),
]


@st.composite
def hostile_pods(draw: st.DrawFn) -> bytes:
    """A labelled pod as a tenant who may create pods can send it, through the API server or
    straight to the webhook's Service."""
    labels = {contract.FRAMEWORK: draw(st.sampled_from(["pytorch", "generic", "mpi", "jax"]))}
    for key in draw(st.sets(st.sampled_from([contract.JOB, contract.ROLE, contract.INDEX]))):
        labels[key] = draw(st.one_of(hostile_strings, st.sampled_from(["j" * 60, "worker", "0"])))
    annotations: dict[str, str] = {}
    for key in draw(
        st.sets(
            st.sampled_from(
                [
                    contract.PORT,
                    contract.GPUS,
                    contract.ELASTIC,
                    contract.NPROC_PER_NODE,
                    contract.JOB_COMPLETION_INDEX,
                    contract.TTL_SECONDS_AFTER_FINISHED,
                    contract.PHASE,
                ]
            )
        )
    ):
        annotations[key] = draw(hostile_strings)
    if draw(st.booleans()):
        annotations[contract.TOPOLOGY] = draw(
            st.one_of(hostile_counts.map(json.dumps), hostile_strings)
        )
        annotations[contract.HOSTS] = json.dumps(draw(hostile_hosts))
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainer", "namespace": "ml", "labels": labels},
        "spec": {"containers": [{"name": "pytorch", "image": "t", "env": []}]},
    }
    if annotations:
        obj["metadata"]["annotations"] = annotations
    if draw(st.booleans()):
        obj["spec"]["containers"][0]["env"] = [None]
    for parent, field in draw(st.sets(st.sampled_from(NULLABLE_LISTS))):
        obj[parent][field] = [None]
    if draw(st.integers(min_value=0, max_value=9)) == 0:
        obj["spec"] = None
    if draw(st.booleans()):
        obj["spec"] = obj["spec"] and {**obj["spec"], "hostname": draw(hostile_strings)}
    return json.dumps(review(obj, namespace="ml")).encode()


bodies = (
    st.binary(max_size=200)
    | json_values.map(lambda value: json.dumps(value).encode())
    | damaged_reviews()
    | labelled_garbage()
    | hostile_pods()
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies, content_type=content_types)
def test_no_request_body_gets_a_server_error(body: bytes, content_type: str | None) -> None:
    answer = answer_to(body, content_type, CONTEXT)

    assert 200 <= answer.status < 500
    if answer.status == 200:
        assert is_review(answer.body), answer.body
        status = answer.body["response"].get("status")
        if status is not None:
            assert "\n" not in status["message"]
    else:
        assert is_status(answer.body), answer.body
        assert "\n" not in answer.body["message"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=hostile_pods())
def test_no_hostile_pod_gets_a_server_error_or_a_denial_of_several_lines(body: bytes) -> None:
    answer = answer_to(body, JSON, CONTEXT)

    assert answer.status in (200, 422), answer.body
    if answer.status == 200:
        assert is_review(answer.body), answer.body
        status = answer.body["response"].get("status")
        if status is not None:
            assert status["code"] in (400, 403)
            assert "\n" not in status["message"]
            assert len(status["message"]) < 1100


@st.composite
def crowded_pods(draw: st.DrawFn) -> bytes:
    """A hostile pod with as many containers, init containers and env entries as a tenant
    likes: what it costs must not grow with them."""
    if draw(st.booleans()):
        document = json.loads(draw(hostile_pods()))
    else:  # one the webhook admits: a lone bare pod, a job of one
        framework = draw(st.sampled_from(["pytorch", "generic", "mpi", "jax", "tensorflow"]))
        lone = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "t", "namespace": "ml", "labels": {contract.FRAMEWORK: framework}},
            "spec": {"containers": [{"name": framework, "image": "t"}]},
        }
        document = review(lone, namespace="ml")
    obj = document["request"]["object"]
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    obj["spec"] = spec
    env = [{"name": f"V{i}", "value": "x"} for i in range(draw(st.integers(0, 20)))]
    for field, most in (("containers", 3000), ("initContainers", 40)):
        extra = [
            {"name": f"{field[:4].lower()}-{i}", "image": "i", "env": env}
            for i in range(draw(st.integers(0, most)))
        ]
        kept = [c for c in spec.get(field) or [] if isinstance(c, dict)]
        spec[field] = kept + extra
    return json.dumps(document).encode()


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=crowded_pods() | hostile_pods())
def test_no_hostile_pod_costs_over_10_ms_or_5_mib_past_decoding(body: bytes) -> None:
    milliseconds, mebibytes = cost_past_decoding(body, within=10)

    assert milliseconds < 10
    assert mebibytes < 5
