"""Whatever arrives as a request body, the answer is a 2xx or a 4xx, never a 5xx or a crash."""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.reviews import example_documents, pods_of, review, workloads_of
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


bodies = (
    st.binary(max_size=200)
    | json_values.map(lambda value: json.dumps(value).encode())
    | damaged_reviews()
    | labelled_garbage()
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(body=bodies, content_type=content_types)
def test_no_request_body_gets_a_server_error(body: bytes, content_type: str | None) -> None:
    answer = answer_to(body, content_type, CONTEXT)

    assert 200 <= answer.status < 500
    if answer.status == 200:
        assert answer.body["kind"] == "AdmissionReview"
    else:
        assert "\n" not in answer.body["message"]  # type: ignore[typeddict-item]
