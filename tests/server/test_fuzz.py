"""Whatever arrives as a request body, the answer is a 2xx or a 4xx, never a 5xx or a crash."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import time
import tracemalloc
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.reviews import (
    best_milliseconds,
    cost_past_decoding,
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
from webhook.core.mutation import pod_patches
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


# What each trainhook.io/ key accepts, as the contract's tables give it (docs/contract.md); the
# keys the webhook or the sweeper write carry what they write. A key missing here is still drawn,
# with the values every key is tried with.
VALID: dict[str, list[str]] = {
    contract.FRAMEWORK: ["pytorch", "tensorflow", "paddle", "mindspore", "mpi", "xgboost", "jax"],
    contract.JOB: ["llm", "j" * 63],
    contract.ROLE: ["worker", "master", "launcher", "ps", "chief", "scheduler"],
    contract.INDEX: ["0", "1", "9999"],
    contract.RANK: ["0", "3"],
    contract.ROLE_INDEX: ["0", "2"],
    contract.PHASE: ["Succeeded", "Failed"],
    contract.PORT: ["29500", "1", "65535"],
    contract.GPUS: ["0", "1", "8"],
    contract.GPU_RESOURCE: ["nvidia.com/gpu", "amd.com/gpu"],
    contract.SHM_SIZE: ["1Gi", "512Mi"],
    contract.SCHEDULER: ["volcano", "coscheduling", "kueue", "kubernetes", "kai"],
    contract.CONTAINER: ["pytorch", "mpi", "trainer"],
    contract.NPROC_PER_NODE: ["auto", "2"],
    contract.ELASTIC: ["1:4", "2:2"],
    contract.MAX_RESTARTS: ["3"],
    contract.QUEUE: ["default", "research"],
    contract.SCHEDULE_TIMEOUT_SECONDS: ["60"],
    contract.MIN_AVAILABLE: ["1", "2"],
    contract.ORDERED_START: ["true", "false"],
    contract.SUCCESS_POLICY: ["all", "rank0", "any-worker", "role=worker"],
    contract.CLEAN_POD_POLICY: ["None", "Running", "All"],
    contract.BACKOFF_LIMIT: ["0", "3"],
    contract.RESTART_POLICY: ["OnFailure", "ExitCode", "Never", "RestartJob", "RestartJobInPlace"],
    contract.FAILURE_POLICY: [
        "reason=OOMKilled -> fail",
        "exit=0 role=worker -> restart-job",
        "role=ps -> restart-role max=2",
        "straggler -> restart-in-place exclude-node",
    ],
    contract.TTL_SECONDS_AFTER_FINISHED: ["0", "600"],
    contract.ACTIVE_DEADLINE_SECONDS: ["3600"],
    contract.SUSPEND: ["true", "false"],
    contract.STALL_TIMEOUT: ["90s", "30m", "1h30m", "7d"],
    contract.CHECKPOINT_ON_STOP: ["10s", "5m", "1h"],
    contract.STRAGGLER_THRESHOLD: ["1.5", "2", "100"],
    contract.PLACEMENT_TOPOLOGY: ["topology.kubernetes.io/zone", "example.com/rack"],
    contract.PLACEMENT: ["required", "preferred"],
    contract.PLACEMENT_TIER: ["1", "rack"],
    contract.KAI_TOPOLOGY: ["default"],
    contract.ROLES: ["master,worker", "worker", "launcher,worker"],
    contract.MPI_IMPLEMENTATION: ["OpenMPI", "Intel", "MPICH"],
    contract.SSH_AUTH_MOUNT_PATH: ["/home/mpiuser/.ssh"],
    contract.TPU_SLICES: ["1", "2"],
    contract.SSH_KEYS: ["true", "false"],
    contract.COMPAT: ["volcano", "paddle-operator"],
    contract.REPORT_PROGRESS: ["true", "false"],
    contract.FABRIC: ["aws-efa", "infiniband", "gke-tcpxo"],
    contract.PREFLIGHT: ["nccl"],
    contract.PREFLIGHT_MIN_BUSBW: ["40", "12.5"],
    contract.PREFLIGHT_EVERY_ATTEMPT: ["true", "false"],
    contract.NVLINK_DOMAIN: ["true", "false"],
    contract.TOPOLOGY: ['{"worker":2}', '{"master":1,"worker":3}'],
    contract.HOSTS: ['{"worker":{"pod":"llm-worker","start":0,"service":"llm"}}'],
    contract.ATTEMPT: ["1", "2"],
    contract.RELEASED_ATTEMPT: ["1"],
    contract.PROGRESS: ['{"step":10,"total":100}'],
    contract.LAST_CHECKPOINT: ['{"step":10,"time":"2026-01-01T00:00:00Z"}'],
    contract.CHECKPOINT_REQUESTED: ["2026-01-01T00:00:00Z"],
    contract.SUCCEEDED: ["0,2-3"],
    contract.SUSPENDED_REPLICAS: ["4"],
}
EVERY_KEY = ["true", "1", "0", "", '{"worker":2}', "Succeeded"]
KNOWN_KEYS = sorted(contract.known_keys())
# What a label value may be (the API server refuses any other): <= 63 of [-A-Za-z0-9_.],
# alphanumeric at both ends.
label_values = st.from_regex(r"\A([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?\Z")


def _values(key: str) -> st.SearchStrategy[str]:
    """Valid values for `key`, and ones it refuses."""
    return st.one_of(
        st.sampled_from(VALID.get(key, []) + EVERY_KEY),
        hostile_strings,
        st.text(max_size=20),
    )


def _label_values(key: str) -> st.SearchStrategy[str]:
    valid = [value for value in VALID.get(key, []) + EVERY_KEY if len(value) <= 63]
    return st.sampled_from([v for v in valid if v.replace("-", "a").isalnum() or not v]) | (
        label_values
    )


@st.composite
def annotated_reviews(draw: st.DrawFn) -> tuple[dict[str, Any], bytes]:
    """A real labelled object (an example's workload or pod) with trainhook.io/ keys of every kind
    drawn onto it, valid or not, as the API server sends it: the object as created or updated,
    well-formed, its labels' values what the API server allows."""
    operation = draw(st.sampled_from(["CREATE", "UPDATE"]))
    old = draw(st.sampled_from(OBJECTS if operation == "CREATE" else STORED))
    obj = copy.deepcopy(old)
    metadata = obj["metadata"]
    template = obj.get("spec", {}).get("template", {}).get("metadata")
    for key in draw(st.lists(st.sampled_from(KNOWN_KEYS), max_size=6, unique=True)):
        where = metadata if template is None or draw(st.booleans()) else template
        if key in contract.LABELS and draw(st.booleans()):
            where.setdefault("labels", {})[key] = draw(_label_values(key))
        else:
            where.setdefault("annotations", {})[key] = draw(_values(key))
    document = review(
        obj,
        operation=operation,
        namespace=str(metadata.get("namespace") or "default"),
        old=old if operation == "UPDATE" else None,
    )
    return obj, json.dumps(document).encode()


def _stored(obj: dict[str, Any]) -> dict[str, Any] | None:
    """`obj` as the API server stores it once admitted (what an UPDATE starts from), or None
    for one admitted only beside its job's other objects."""
    document = review(obj, namespace=str(obj["metadata"].get("namespace") or "default"))
    answer = answer_to(json.dumps(document).encode(), JSON, CONTEXT)
    assert is_review(answer.body), answer.body
    return patched(obj, answer.body) if answer.body["response"]["allowed"] else None


STORED = [stored for stored in map(_stored, OBJECTS) if stored is not None]


@dataclasses.dataclass
class Served:
    """What the fuzzer's reviews cost: the slowest and the largest, and what went wrong."""

    reviews: int = 0
    server_errors: list[bytes] = dataclasses.field(default_factory=list)
    bad_patches: list[tuple[bytes, str]] = dataclasses.field(default_factory=list)
    slowest: tuple[float, bytes] = (0.0, b"")
    largest: tuple[float, bytes] = (0.0, b"")  # MiB at the peak beyond json.loads's

    def line(self) -> str:
        return (
            f"{self.reviews} reviews, {len(self.server_errors)} server errors, "
            f"{len(self.bad_patches)} bad patches, slowest {self.slowest[0]:.2f} ms, "
            f"largest {self.largest[0]:.2f} MiB beyond json.loads"
        )


def _peak_mebibytes(run: Any) -> float:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def serve(obj: dict[str, Any], body: bytes, served: Served) -> None:
    """Answer `body`, and note what it cost and whether its answer is one to apply."""
    pod_patches.forget()
    started = time.thread_time()
    answer = answer_to(body, JSON, CONTEXT)
    milliseconds = (time.thread_time() - started) * 1000
    served.reviews += 1
    if milliseconds > served.slowest[0]:
        served.slowest = (milliseconds, body)
    pod_patches.forget()
    beyond = _peak_mebibytes(lambda: answer_to(body, JSON, CONTEXT)) - _peak_mebibytes(
        lambda: json.loads(body)
    )
    if beyond > served.largest[0]:
        served.largest = (beyond, body)
    if answer.status != 200 or not is_review(answer.body):
        served.server_errors.append(body)
        return
    if "patch" not in answer.body["response"]:
        return
    try:
        validate(patched(obj, answer.body))
    except Exception as error:  # every way a patch can fail is a finding
        served.bad_patches.append((body, f"{type(error).__name__}: {error}"[:300]))


EXAMPLES = int(os.environ.get("TRAINHOOK_FUZZ_EXAMPLES", "300"))


def test_every_annotation_the_api_server_can_send_is_answered_with_a_patch_that_applies() -> None:
    """Reviews of real objects carrying any trainhook.io/ keys, valid or not: each is answered
    with a 200 AdmissionReview, its patch applies and the object it makes is valid, and each
    costs under 10 ms and 5 MiB beyond what json.loads needs for its body.
    (TRAINHOOK_FUZZ_EXAMPLES sets how many are drawn.)"""
    served = Served()

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(drawn=annotated_reviews())
    def answer(drawn: tuple[dict[str, Any], bytes]) -> None:
        serve(*drawn, served)

    answer()
    print(served.line())

    assert served.server_errors == []
    assert served.bad_patches == []
    assert served.largest[0] < 5
    slowest = served.slowest[1]
    assert best_milliseconds(lambda: answer_to(slowest, JSON, CONTEXT), within=10) < 10
