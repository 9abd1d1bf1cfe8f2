"""The worst reviews a tenant can send cost the webhook little, and each gets a one-line 4xx.

Measured in-process through the server's handler: time and the peak of Python's allocations
(tracemalloc) for the whole review, body parsing included.
"""

from __future__ import annotations

import base64
import functools
import json
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from tests.support import costly
from tests.support.reviews import (
    best_milliseconds,
    cost_past_decoding,
    encoded,
    is_review,
    is_status,
    review,
)
from webhook.core import contract
from webhook.core.mutation import pod_patches
from webhook.server.admission import MAX_BODY_BYTES, Answer, Context
from webhook.server.admission import review as answer_to

MILLISECONDS = 10
MEBIBYTES = 5
MANY_DIGITS = "9" * 5000


def pod(
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    spec: Any = None,
    **metadata: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": "ml",
            "labels": {contract.FRAMEWORK: "pytorch", **(labels or {})},
            "annotations": annotations or {},
            **metadata,
        },
        "spec": spec if spec is not None else {"containers": [{"name": "pytorch", "image": "t"}]},
    }


def stamped(hosts: object, topology: str = '{"worker":10000}') -> dict[str, Any]:
    """A bare pod with a forged stamp, as any tenant allowed to create pods can send."""
    return pod(
        labels={contract.INDEX: "0", contract.ROLE: "worker"},
        annotations={contract.TOPOLOGY: topology, contract.HOSTS: json.dumps(hosts)},
    )


def measured(document: dict[str, Any]) -> tuple[Answer, float, float]:
    """The answer, its CPU ms (`best_milliseconds`) and the peak allocation in MiB."""
    body = encoded(document)
    answer = answer_to(body, "application/json", Context())
    milliseconds = best_milliseconds(
        lambda: answer_to(body, "application/json", Context()), MILLISECONDS
    )
    tracemalloc.start()
    try:
        answer_to(body, "application/json", Context())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return answer, milliseconds, peak / 2**20


def beyond_decoding(document: dict[str, Any]) -> tuple[Answer, float, float]:
    """The answer, and what the review costs past decoding its body (CPU ms, as
    `cost_past_decoding` measures it, and MiB at the peak): decoding is bounded by the body,
    which the API server caps at 3 MiB."""
    body = encoded(document)
    return answer_to(body, "application/json", Context()), *cost_past_decoding(
        body, within=MILLISECONDS
    )


def many_containers(count: int, field: str) -> dict[str, Any]:
    """A bare labelled pod with `count` more containers in `field`, near the API server's
    largest body (3 MiB): a tenant allowed to create pods can send it."""
    spec: dict[str, Any] = {"containers": [{"name": "pytorch", "image": "trainer:1"}]}
    spec.setdefault(field, []).extend(
        {"name": f"c{i}", "image": "registry.example.com/" + "i" * 100} for i in range(count)
    )
    return pod(spec=spec)


def test_a_pod_of_15000_sidecars_admits_within_10_ms_and_5_mib_past_decoding() -> None:
    document = many_containers(15000, "containers")
    assert 2 * 2**20 < len(encoded(review(document))) < MAX_BODY_BYTES

    answer, milliseconds, mebibytes = beyond_decoding(review(document))

    assert is_review(answer.body) and answer.body["response"]["allowed"] is True
    patch = json.loads(base64.b64decode(answer.body["response"]["patch"]))
    assert {op["path"].split("/")[3] for op in patch if op["path"].startswith("/spec/con")} == {"0"}
    assert milliseconds < MILLISECONDS
    assert mebibytes < MEBIBYTES


# Run in a fresh interpreter: the peak of Python's allocations while the webhook answers a body,
# and while `json.loads` reads the same body, each from what was allocated before it.
_PEAKS = """
import gc, json, sys, tracemalloc
from pathlib import Path
from webhook.server.admission import Context, review

body = Path(sys.argv[1]).read_bytes()

def peak(run):
    gc.collect()
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()

print(peak(lambda: json.loads(body)), peak(lambda: review(body, "application/json", Context())))
"""


def peaks_in_a_fresh_interpreter(body: bytes, tmp_path: Path) -> tuple[float, float]:
    """The peak MiB of `json.loads(body)` and of the webhook's answer to `body`, decoding
    included."""
    saved = tmp_path / "review.json"
    saved.write_bytes(body)
    measured = subprocess.run(
        [sys.executable, "-c", _PEAKS, str(saved)],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    reading, answering = measured.stdout.split()
    return float(reading), float(answering)


def test_a_pod_of_15000_sidecars_takes_within_5_mib_of_what_json_loads_needs(
    tmp_path: Path,
) -> None:
    body = encoded(review(many_containers(15000, "containers")))
    assert 2 * 2**20 < len(body) < MAX_BODY_BYTES

    reading, answering = peaks_in_a_fresh_interpreter(body, tmp_path)

    assert answering - reading < MEBIBYTES, (reading, answering)


def test_a_pod_of_15000_init_containers_is_refused_within_10_ms_and_5_mib_past_decoding() -> None:
    answer, milliseconds, mebibytes = beyond_decoding(
        review(many_containers(15000, "initContainers"))
    )

    assert message_of(answer) == (
        403,
        "spec.initContainers: a training pod has at most 16 init containers (each gets the "
        "job's env); this one has 15000",
    )
    assert milliseconds < MILLISECONDS
    assert mebibytes < MEBIBYTES


def message_of(answer: Answer) -> tuple[int, str]:
    body = answer.body
    if is_review(body):
        status = body["response"]["status"]
        return status["code"], status["message"]
    assert is_status(body), body
    return body["code"], body["message"]


WORST: list[tuple[str, dict[str, Any], int, str]] = [
    (
        "a 20,000-character pod prefix over 10,000 replicas",
        stamped({"worker": {"pod": "a" * 20000}}),
        400,
        'trainhook.io/hosts: invalid value \'{"worker": {"pod": "'
        + "a" * 39
        + "... (20023 characters): each role maps to pod (a DNS-1123 label), start (0 to "
        "2147483647), service (a DNS-1035 label), nproc (1 to 2147483647) and port (1 to 65535)",
    ),
    (
        "a start of 4,000 digits",
        stamped({"worker": {"pod": "a", "start": int("9" * 4000)}}, '{"worker":9000}'),
        400,
        'trainhook.io/hosts: invalid value \'{"worker": {"pod": "a", "start": 999999999999'
        "99999999999999... (4035 characters): each role maps to pod (a DNS-1123 label), start "
        "(0 to 2147483647), service (a DNS-1035 label), nproc (1 to 2147483647) and port "
        "(1 to 65535)",
    ),
    (
        "two billion replicas",
        stamped({}, '{"worker":2000000000}'),
        403,
        "job trainer has 2000000000 pods; Trainhook supports up to 10000 per job (one "
        "ConfigMap lists its peers)",
    ),
    (
        "10,000 pods named at the longest a hostname allows",
        stamped({"worker": {"pod": "a" * 57, "service": "s" * 63}}),
        403,
        "job trainer: the host names of its 10000 pods take 1350000 bytes, more than one "
        "ConfigMap holds (1032192); use fewer replicas or shorter names",
    ),
    (
        "a stamp nested 2,000 deep",
        pod(
            labels={contract.INDEX: "0"},
            annotations={contract.TOPOLOGY: "[" * 2000 + "]" * 2000},
        ),
        400,
        "trainhook.io/topology: invalid value '"
        + "[" * 59
        + '... (4000 characters): a JSON object such as {"master":1,"worker":3}',
    ),
    (
        "a port of 5,000 digits",
        pod(annotations={contract.PORT: MANY_DIGITS}),
        400,
        "trainhook.io/port: invalid value '999999999999999999999999999999999999999999999999999"
        "99999999... (5000 characters): an integer from 1 to 65535",
    ),
    (
        "a GPU count of 5,000 digits",
        pod(annotations={contract.GPUS: MANY_DIGITS}),
        400,
        "trainhook.io/gpus: invalid value '999999999999999999999999999999999999999999999999999"
        "99999999... (5000 characters): a whole number, 0 or more",
    ),
    (
        "an index of 5,000 digits",
        pod(labels={contract.INDEX: MANY_DIGITS}, annotations={contract.TOPOLOGY: '{"worker":2}'}),
        400,
        "trainhook.io/index: invalid value '999999999999999999999999999999999999999999999999999"
        "99999999... (5000 characters): a whole number from 0 to 2147483647",
    ),
    (
        "a completion index of 5,000 digits",
        pod(annotations={contract.JOB_COMPLETION_INDEX: MANY_DIGITS}),
        400,
        "batch.kubernetes.io/job-completion-index: invalid value '999999999999999999999999999999"
        "99999999999999999999999999999... (5000 characters): a whole number from 0 to 2147483647",
    ),
    (
        "superscript digits in elastic",
        pod(annotations={contract.ELASTIC: "²:³"}),
        400,
        "trainhook.io/elastic: invalid value '²:³': min:max nodes, whole numbers with 1 <= min "
        "<= max, e.g. 2:4",
    ),
    (
        "a newline in a pod prefix",
        stamped({"worker": {"pod": "a\nb"}}, '{"worker":2}'),
        400,
        'trainhook.io/hosts: invalid value \'{"worker": {"pod": "a\\\\nb"}}\': each role maps '
        "to pod (a DNS-1123 label), start (0 to 2147483647), service (a DNS-1035 label), "
        "nproc (1 to 2147483647) and port (1 to 65535)",
    ),
    (
        "a role name that is no env name",
        pod(
            labels={contract.FRAMEWORK: "generic", contract.INDEX: "0", contract.ROLE: "worker"},
            annotations={contract.TOPOLOGY: '{"worker":1,"a=b":1}'},
        ),
        400,
        "trainhook.io/topology: invalid value '{\"worker\":1,\"a=b\":1}': role 'a=b' must be a "
        "DNS-1035 label (<= 63)",
    ),
]


@pytest.mark.parametrize(
    ("document", "status", "message"),
    [case[1:] for case in WORST],
    ids=[case[0] for case in WORST],
)
def test_the_worst_reviews_cost_under_10_ms_and_5_mib_and_get_one_line(
    document: dict[str, Any], status: int, message: str
) -> None:
    answer, milliseconds, mebibytes = measured(review(document))

    assert message_of(answer) == (status, message)
    assert "\n" not in message
    assert milliseconds < MILLISECONDS
    assert mebibytes < MEBIBYTES


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (
            pod(spec={"containers": [None]}),
            "request.object.spec.containers[0] must be an object, got null",
        ),
        (
            pod(spec={"containers": [{"name": "pytorch", "env": [None]}]}),
            "request.object.spec.containers[0].env[0] must be an object, got null",
        ),
        (
            pod(
                annotations={contract.SHM_SIZE: "1Gi"},
                spec={"containers": [{"name": "pytorch"}], "volumes": [None]},
            ),
            "request.object.spec.volumes[0] must be an object, got null",
        ),
        (
            pod(ownerReferences=[None]),
            "request.object.metadata.ownerReferences[0] must be an object, got null",
        ),
        ({**pod(), "spec": None}, "request.object.spec must be an object, got null"),
    ],
    ids=["null container", "null env item", "null volume", "null owner reference", "spec null"],
)
def test_null_where_an_object_belongs_gets_a_422_naming_the_field(
    document: dict[str, Any], message: str
) -> None:
    answer = answer_to(encoded(review(document)), "application/json", Context())

    assert is_status(answer.body), answer.body
    assert (answer.status, answer.body["message"]) == (422, message)


def test_a_denial_naming_a_value_with_newlines_is_one_line() -> None:
    document = pod(labels={contract.INDEX: "0"}, annotations={contract.TOPOLOGY: '{"worker":1}'})
    document["spec"]["hostname"] = "evil\nline"

    code, message = message_of(answer_to(encoded(review(document)), "application/json", Context()))

    assert code == 403
    assert message == (
        "pod hostname evil line does not match trainer-worker-0, the name its peers use for "
        "worker 0 of job trainer"
    )


# What tests/support/costly.py found over budget at the API server's largest body, before the
# webhook read only the training container's user, checked lengths before patterns, quoted only
# what a message shows, read env and volume names in C and left crowded pods unkeyed.
FOUND_OVER_BUDGET = [
    ("mpi-horovod.yaml StatefulSet", "containers", "CREATE"),
    ("mpi-horovod.yaml StatefulSet", "containers", "UPDATE"),
    ("mpi-horovod.yaml StatefulSet", "spread", "CREATE"),
    ("mpi-horovod.yaml pod", "containers", "CREATE"),
    ("mpi-horovod.yaml pod", "env", "CREATE"),
    ("mpi-horovod.yaml pod", "env_shadowing", "CREATE"),
    ("mpi-horovod.yaml pod", "env_from", "CREATE"),
    ("mpi-horovod.yaml pod", "volumes", "CREATE"),
    ("mpi-horovod.yaml pod", "volumes", "UPDATE"),
    ("mpi-horovod.yaml StatefulSet", "volumes", "CREATE"),
    ("mpi-horovod.yaml pod", "mounts", "CREATE"),
    ("mpi-horovod.yaml pod", "trainhook_labels", "CREATE"),
    ("mpi-horovod.yaml StatefulSet", contract.GPU_RESOURCE, "CREATE"),
    ("mpi-horovod.yaml StatefulSet", contract.GPU_RESOURCE, "UPDATE"),
    ("mpi-horovod.yaml StatefulSet", contract.ROLES, "CREATE"),
    ("mpi-horovod.yaml StatefulSet", contract.PLACEMENT_TOPOLOGY, "CREATE"),
    ("mpi-horovod.yaml pod", contract.PLACEMENT_TOPOLOGY, "CREATE"),
    ("mpi-horovod.yaml pod", contract.CONTAINER, "CREATE"),
    ("mpi-horovod.yaml pod", contract.QUEUE, "CREATE"),
]


@functools.cache
def admitted_seeds() -> dict[str, dict[str, Any]]:
    return dict(costly.seeds())


@pytest.mark.parametrize(
    ("seed", "family", "operation"),
    FOUND_OVER_BUDGET,
    ids=[f"{seed} {family} {operation}" for seed, family, operation in FOUND_OVER_BUDGET],
)
def test_what_the_search_found_over_budget_admits_within_10_ms_and_5_mib(
    seed: str, family: str, operation: str
) -> None:
    grow = getattr(costly, family, None) or costly.long_value(family)
    update = operation == "UPDATE"
    obj = admitted_seeds()[seed]
    document = costly._document(
        costly.grown(obj, [grow], costly.largest(obj, [grow], update)), update
    )
    assert costly.LIMIT - 8192 < len(encoded(document)) <= costly.LIMIT

    answer, milliseconds, mebibytes = beyond_decoding(document)

    assert milliseconds < MILLISECONDS
    assert mebibytes < MEBIBYTES
    if family == "mounts":
        count = len(costly._training(document["request"]["object"])["volumeMounts"])
        assert message_of(answer) == (
            403,
            "spec.containers[0].volumeMounts: a container Trainhook equips has at most 1024 "
            f"volume mounts; container mpi has {count}",
        )
    elif family == "volumes" and operation == "CREATE":
        count = len(costly._spec(document["request"]["object"])["volumes"])
        assert message_of(answer) == (
            403,
            "spec.volumes: a training pod has at most 1024 volumes (each volume Trainhook adds "
            f"is looked for among them); this one has {count}",
        )
    elif family.startswith(contract.PREFIX) or family == "trainhook_labels":
        code, message = message_of(answer)
        key = family if family.startswith(contract.PREFIX) else f"{contract.PREFIX}rol-0"
        assert (code, message.split(":")[0]) == (400, key)
        assert len(message) < 600 and "\n" not in message
    else:
        assert is_review(answer.body) and answer.body["response"]["allowed"] is True
        # The answer grows with what the webhook adds, not with what the object holds.
        assert len(answer.body["response"].get("patch", "")) < 64 * 1024


def test_an_mpi_sidecar_running_as_another_user_needs_no_ssh_mount_path() -> None:
    """Only the training container mounts the job's keys: whoever a sidecar runs as is no
    reason to refuse the workload."""
    containers: list[dict[str, Any]] = [
        {"name": "mpi", "image": "t"},
        {"name": "log-shipper", "image": "s", "securityContext": {"runAsUser": 1000}},
    ]
    workload = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "hvd", "namespace": "ml", "labels": {contract.FRAMEWORK: "mpi"}},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "hvd"}},
            "template": {
                "metadata": {"labels": {"app": "hvd"}},
                "spec": {"containers": containers},
            },
        },
    }
    answer = answer_to(encoded(review(workload)), "application/json", Context())
    assert is_review(answer.body) and answer.body["response"]["allowed"] is True
    containers[0]["securityContext"] = {"runAsUser": 1000}
    code, message = message_of(answer_to(encoded(review(workload)), "application/json", Context()))
    assert (code, message) == (
        403,
        "trainhook.io/ssh-auth-mount-path: not set, but container mpi runs as user 1000 "
        "(securityContext.runAsUser), who cannot read the job's SSH keys at /root/.ssh: set it "
        "to that user's ~/.ssh, e.g. /home/mpiuser/.ssh",
    )


def test_a_pod_just_small_enough_to_share_its_patch_is_keyed_within_5_mib() -> None:
    """Below MAX_SHARED_BYTES a pod is keyed for the patch its siblings share: encoding it
    takes several times its size, which the bound keeps under the budget."""
    seed = admitted_seeds()["pytorch.yaml pod"]
    grow = costly.long_value(contract.FAILURE_POLICY)
    document = costly._document(
        costly.grown(seed, [grow], pod_patches.MAX_SHARED_BYTES - 2048), False
    )
    assert (
        pod_patches.MAX_SHARED_BYTES - 4096 < len(encoded(document)) <= pod_patches.MAX_SHARED_BYTES
    )

    milliseconds, mebibytes = cost_past_decoding(encoded(document), within=MILLISECONDS)

    assert mebibytes < MEBIBYTES
    assert milliseconds < MILLISECONDS
