"""Multi-role jobs: sibling workloads read at admission, from a store and from an emulated API."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import builders
from tests.support.emulator import EmulatorThread as Emulator
from tests.support.emulator import emulator, kubeconfig
from tests.support.reviews import (
    EmulatedApi,
    StoredWorkloads,
    admit_job,
    encoded,
    example_documents,
    patched,
    pods_of,
    review,
    validate,
)
from tests.support.serving import Webhook, serving
from webhook.core import contract
from webhook.core.render import render
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to

JSON = "application/json"
STATEFULSETS = "/apis/apps/v1/namespaces/{ns}/statefulsets"


def role(name: str, role: str, replicas: int, job: str = "pt") -> dict[str, Any]:
    return builders.statefulset(
        name,
        "pytorch",
        role=role,
        job=job,
        replicas=replicas,
        namespace="ml",
        labelled_template=True,
    )


MASTER = role("pt-master", "master", 1)
WORKER = role("pt-worker", "worker", 3)


class Unreachable:
    """The lookup as it answers while the API server cannot be reached."""

    def siblings(self, namespace: str, job: str, *, exclude: tuple[str, str] | None = None) -> None:
        return None

    def get(self, namespace: str, kind: str, name: str) -> None:
        return None

    def cached(self, namespace: str, kind: str, name: str) -> None:
        return None


class Counting(StoredWorkloads):
    def __init__(self) -> None:
        super().__init__()
        self.reads = 0

    def siblings(
        self, namespace: str, job: str, *, exclude: tuple[str, str] | None = None
    ) -> list[dict[str, Any]]:
        self.reads += 1
        return super().siblings(namespace, job, exclude=exclude)

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        self.reads += 1
        return super().get(namespace, kind, name)


def topology(workload: dict[str, Any]) -> dict[str, int]:
    stamped: dict[str, int] = json.loads(
        workload["spec"]["template"]["metadata"]["annotations"][contract.TOPOLOGY]
    )
    return stamped


def admitted(obj: dict[str, Any], context: Context, **kw: Any) -> tuple[dict[str, Any], Any]:
    answer = answer_to(encoded(review(obj, namespace="ml", **kw)), JSON, context)
    assert answer.status == 200
    return patched(obj, answer.body), answer


def test_workload_stamp_counts_the_roles_of_its_stored_siblings() -> None:
    stored = StoredWorkloads()
    stored.store(admitted(MASTER, Context(lookup=stored))[0])

    worker, answer = admitted(WORKER, Context(lookup=stored))

    assert topology(worker) == {"master": 1, "worker": 3}
    assert "warnings" not in answer.body["response"]


def test_unreachable_api_admits_with_the_roles_known_so_far_and_a_warning() -> None:
    worker, answer = admitted(WORKER, Context(lookup=Unreachable()))

    assert topology(worker) == {"worker": 3}
    assert answer.body["response"]["warnings"] == [
        "API unreachable: job pt admitted with the roles known so far"
    ]
    assert answer.record.lookup_unavailable is True


def test_pod_without_a_stamp_is_resolved_through_its_owner_and_the_owners_siblings() -> None:
    stored = StoredWorkloads()
    stored.store(MASTER)  # created before the webhook was installed: no stamps
    stored.store(WORKER)
    pod = pods_of(WORKER)[2]
    assert contract.TOPOLOGY not in pod["metadata"]["annotations"]

    mutated, _ = admitted(pod, Context(lookup=stored))

    validate(mutated)
    env = {e["name"]: e["value"] for e in mutated["spec"]["containers"][0]["env"]}
    assert (env["WORLD_SIZE"], env["RANK"]) == ("4", "3")


def test_pod_whose_owner_cannot_be_read_is_refused_rather_than_given_a_wrong_world_size() -> None:
    pod = pods_of(WORKER)[0]

    _, answer = admitted(pod, Context(lookup=Unreachable()))

    assert answer.body["response"]["allowed"] is False
    assert answer.body["response"]["status"]["code"] == 403


@pytest.mark.parametrize(
    "document",
    [
        pytest.param(review({**MASTER, "metadata": {"name": "plain"}}), id="unlabelled"),
        pytest.param(review(pods_of(MASTER)[0], operation="UPDATE"), id="pod-update"),
        pytest.param(review(None, kind="StatefulSet", operation="DELETE", old=MASTER), id="delete"),
        pytest.param(review(pods_of(admitted(MASTER, Context())[0])[0]), id="stamped-pod"),
    ],
)
def test_admissions_that_need_no_siblings_read_nothing(document: dict[str, Any]) -> None:
    lookup = Counting()

    answer_to(encoded(document), JSON, Context(lookup=lookup))

    assert lookup.reads == 0


# --- through the real server, against a Kubernetes API emulator -----------------------------


@pytest.fixture
def api() -> Iterator[Emulator]:
    with emulator() as running:
        yield running


def send(webhook: Webhook, obj: dict[str, Any], **kw: Any) -> dict[str, Any]:
    status, answer, _ = webhook.post(encoded(review(obj, namespace="ml", **kw)))
    assert status == 200
    return answer


def test_served_workload_finds_its_sibling_through_the_watched_api(
    api: Emulator, certs: Path, tmp_path: Path
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", api.url)
    with serving(
        certs, tmp_path / "serve.log", "--lookup", env={"KUBECONFIG": str(config)}
    ) as hook:
        master = patched(MASTER, send(hook, MASTER))
        api.create(STATEFULSETS.format(ns="ml"), master)  # stored, as the API server would

        answer = send(hook, WORKER)
        worker = patched(WORKER, answer)
        pod = pods_of(worker)[1]
        pod_answer = send(hook, pod)

    assert topology(worker) == {"master": 1, "worker": 3}
    assert "warnings" not in answer["response"]
    mutated = patched(pod, pod_answer)
    validate(mutated)
    env = {e["name"]: e["value"] for e in mutated["spec"]["containers"][0]["env"]}
    assert (env["WORLD_SIZE"], env["RANK"], env["MASTER_ADDR"]) == (
        "4",
        "2",
        "pt-master-0.pt.ml.svc",
    )


def test_served_pod_without_a_stamp_is_resolved_through_the_api(
    api: Emulator, certs: Path, tmp_path: Path
) -> None:
    api.create(STATEFULSETS.format(ns="ml"), MASTER)  # from before the webhook: no stamps
    api.create(STATEFULSETS.format(ns="ml"), WORKER)
    config = kubeconfig(tmp_path / "kubeconfig", api.url)
    with serving(
        certs, tmp_path / "serve.log", "--lookup", env={"KUBECONFIG": str(config)}
    ) as hook:
        pod = pods_of(MASTER)[0]
        answer = send(hook, pod)

    env = {e["name"]: e["value"] for e in patched(pod, answer)["spec"]["containers"][0]["env"]}
    assert (env["WORLD_SIZE"], env["RANK"]) == ("4", "0")


def test_server_that_cannot_reach_the_api_is_alive_not_ready_and_admits_with_a_warning(
    certs: Path, tmp_path: Path
) -> None:
    import socket

    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed.getsockname()[1]}")
        with serving(
            certs,
            tmp_path / "serve.log",
            "--lookup",
            env={"KUBECONFIG": str(config)},
            ready_path="/healthz",
        ) as hook:
            readiness = hook.get("/readyz")
            answer = send(hook, WORKER)

    assert readiness == (503, "not ready: the sibling cache has not synced yet\n")
    assert answer["response"]["allowed"] is True
    assert answer["response"]["warnings"] == [
        "API unreachable: job pt admitted with the roles known so far"
    ]
    assert topology(patched(WORKER, answer)) == {"worker": 3}


def pod_name(pod: dict[str, Any]) -> str:
    return str(pod["metadata"]["name"])


def test_every_example_served_with_lookup_gets_the_pods_trainhook_render_makes_offline(
    api: Emulator, certs: Path, tmp_path: Path
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", api.url)
    api.serve("scheduling.k8s.io/v1beta1/podgroups", "PodGroup")  # for the Kubernetes gang
    served: dict[str, list[dict[str, Any]]] = {}
    with serving(
        certs, tmp_path / "serve.log", "--lookup", env={"KUBECONFIG": str(config)}
    ) as hook:
        connection = hook.connect()

        def send(document: dict[str, Any]) -> dict[str, Any]:
            status, answer, _ = hook.post(encoded(document), connection=connection)
            assert status == 200
            assert answer["response"]["allowed"] is True, answer["response"]
            return answer

        for name, documents in example_documents():
            admitted = admit_job(documents, send, EmulatedApi(api))
            served[name] = [patched(pod, answer) for pod, answer in admitted.pods]
        connection.close()

    for name, documents in example_documents():
        for pod in served[name]:
            validate(pod)
        offline = sorted((rendered.pod for rendered in render(documents)), key=pod_name)
        assert sorted(served[name], key=pod_name) == offline, name


def test_served_pod_of_a_statefulset_labelled_on_its_template_only_gets_one_line_not_a_500(
    api: Emulator, certs: Path, tmp_path: Path
) -> None:
    workload = role("pt-worker", "worker", 2)
    workload["metadata"]["labels"] = {}  # the Kubeflow habit: labels on the pod template only
    api.create(STATEFULSETS.format(ns="ml"), workload)
    config = kubeconfig(tmp_path / "kubeconfig", api.url)
    with serving(
        certs, tmp_path / "serve.log", "--lookup", env={"KUBECONFIG": str(config)}
    ) as hook:
        status, answer, _ = hook.post(encoded(review(pods_of(workload)[1], namespace="ml")))

    assert status == 200
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"] == {
        "code": 403,
        "message": "StatefulSet pt-worker: the trainhook.io/ labels are on its pod template only; "
        "put them on the StatefulSet itself (its metadata.labels), where Trainhook reads the job",
    }


def test_a_cluster_without_kubernetes_podgroups_refuses_a_kubernetes_gang_in_one_line(
    api: Emulator, certs: Path, tmp_path: Path
) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", api.url)
    job = builders.statefulset("pt", "pytorch", annotations={contract.SCHEDULER: "kubernetes"})
    with serving(
        certs, tmp_path / "serve.log", "--lookup", env={"KUBECONFIG": str(config)}
    ) as hook:
        refused = send(hook, job)["response"]
        volcano = builders.statefulset("pv", "pytorch", annotations={contract.SCHEDULER: "volcano"})
        admitted = send(hook, volcano)["response"]
    assert refused["allowed"] is False
    assert refused["status"]["message"].startswith(
        "trainhook.io/scheduler: kubernetes: this cluster serves no PodGroup of scheduling.k8s.io"
    )
    assert admitted["allowed"] is True
