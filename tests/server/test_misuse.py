"""Ordinary mistakes get one clear line, the same from the webhook and from `trainhook render`."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support import builders
from tests.support.reviews import StoredWorkloads, encoded, is_review, pods_of, review
from webhook.cli import main
from webhook.core import contract
from webhook.core.render import RenderError, render_all
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to

JSON = "application/json"


def statefulset(
    name: str,
    *,
    role: str = "worker",
    replicas: int = 1,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A role of PyTorch job `pt` in namespace ml; `labels` replaces the workload's own."""
    workload = builders.statefulset(
        name, "pytorch", role=role, job="pt", replicas=replicas, annotations=annotations,
        namespace="ml",
    )  # fmt: skip
    if labels is not None:
        workload["metadata"]["labels"] = labels
    return workload


def template_only() -> dict[str, Any]:
    """The Kubeflow habit: the labels on the pod template, none on the StatefulSet."""
    workload = statefulset("pt-worker", replicas=2, labels={})
    workload["spec"]["template"]["metadata"]["labels"] |= {
        contract.FRAMEWORK: "pytorch",
        contract.JOB: "pt",
    }
    return workload


def deployment() -> dict[str, Any]:
    labels = {"app": "web", contract.FRAMEWORK: "pytorch"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "ml"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
            },
        },
    }


def deployment_pod() -> dict[str, Any]:
    """A pod of that Deployment as its ReplicaSet creates it."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": "web-7d9f8c6b5-",
            "namespace": "ml",
            "labels": {
                "app": "web",
                contract.FRAMEWORK: "pytorch",
                "pod-template-hash": "7d9f8c6b5",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7d9f8c6b5",
                    "uid": "8d3c1f0e-0000-4000-8000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
    }


def denied(obj: dict[str, Any], stored: Sequence[dict[str, Any]] = ()) -> tuple[int, str]:
    """The webhook's answer (with lookup on, the API holding `stored`): its code and line."""
    lookup = StoredWorkloads()
    for workload in stored:
        lookup.store(workload)
    answer = answer_to(encoded(review(obj, namespace="ml")), JSON, Context(lookup=lookup))
    assert answer.status == 200
    assert is_review(answer.body), answer.body
    response = answer.body["response"]
    assert response["allowed"] is False, response
    return response["status"]["code"], response["status"]["message"]


def rendered(*documents: dict[str, Any]) -> str:
    with pytest.raises(RenderError) as caught:
        render_all(list(documents))
    return str(caught.value)


TEMPLATE_ONLY = (
    "StatefulSet pt-worker: the trainhook.io/ labels are on its pod template only; put them on "
    "the StatefulSet itself (its metadata.labels), where Trainhook reads the job"
)


def test_labels_on_the_pod_template_only_are_one_403_line_not_a_500() -> None:
    workload = template_only()
    pod = pods_of(workload)[1]

    assert denied(pod, stored=[workload]) == (403, TEMPLATE_ONLY)
    assert rendered(workload) == TEMPLATE_ONLY


def test_a_labelled_deployments_pods_are_refused_naming_the_deployment() -> None:
    line = (
        "Deployment web: Trainhook runs labelled StatefulSets, Indexed Jobs and bare Pods; a "
        "Deployment's pods have no stable names or indexes to find their peers by: use a "
        "StatefulSet"
    )
    assert denied(deployment_pod()) == (403, line)
    assert rendered(deployment()) == line


def test_a_labelled_replicaset_is_refused_in_render_as_its_pods_are_by_the_webhook() -> None:
    replicaset = {**deployment(), "kind": "ReplicaSet", "metadata": {"name": "web-rs"}}
    pod = deployment_pod()
    pod["metadata"]["ownerReferences"][0]["name"] = "web-rs"
    line = (
        "ReplicaSet web-rs: Trainhook runs labelled StatefulSets, Indexed Jobs and bare Pods; a "
        "ReplicaSet's pods have no stable names or indexes to find their peers by: use a "
        "StatefulSet"
    )
    assert denied(pod) == (403, line)
    assert rendered(replicaset) == line


def test_a_second_pytorch_master_is_refused_as_the_training_operator_does() -> None:
    master = statefulset("pt-master", role="master", replicas=2)
    line = (
        "StatefulSet pt-master: trainhook.io/role master has 2 replicas; a pytorch job has one "
        "master, which the other pods connect to: run the others as workers"
    )
    assert denied(master) == (403, line)
    assert rendered(master) == line


@pytest.mark.parametrize(
    ("where", "key", "line"),
    [
        (
            "annotations",
            "trainhook.io/gpu",
            "trainhook.io/gpu: unknown annotation (value '2'); did you mean trainhook.io/gpus?",
        ),
        (
            "template annotations",
            "trainhook.io/sheduler",
            "trainhook.io/sheduler: unknown annotation (value '2'); did you mean "
            "trainhook.io/scheduler?",
        ),
        (
            "labels",
            "trainhook.io/rol",
            "trainhook.io/rol: unknown label (value '2'); did you mean trainhook.io/role?",
        ),
        (
            "annotations",
            "trainhook.io/job",
            "trainhook.io/job: unknown annotation (value '2'); trainhook.io/job is a label, not "
            "an annotation",
        ),
    ],
)
def test_an_unknown_trainhook_key_is_refused_with_the_nearest_known_one(
    where: str, key: str, line: str
) -> None:
    workload = statefulset("pt-worker")
    target = {
        "annotations": workload["metadata"],
        "labels": workload["metadata"],
        "template annotations": workload["spec"]["template"]["metadata"],
    }[where]
    target.setdefault(where.split()[-1], {})[key] = "2"

    assert denied(workload) == (400, line)
    assert rendered(workload) == line


def test_an_unknown_key_on_a_pod_is_refused_too() -> None:
    pod = pods_of(render_all([statefulset("pt-worker")]).workloads[0])[0]
    pod["metadata"]["annotations"]["trainhook.io/nproc"] = "4"

    assert denied(pod) == (
        400,
        "trainhook.io/nproc: unknown annotation (value '4'); did you mean "
        "trainhook.io/nproc-per-node?",
    )


def test_a_queue_without_a_scheduler_is_refused() -> None:
    workload = statefulset("pt-worker", annotations={"trainhook.io/queue": "research"})
    line = (
        "trainhook.io/queue: invalid value 'research': a queue is read only with "
        "trainhook.io/scheduler set (one of volcano, coscheduling, kueue, kubernetes, "
        "kai): set the scheduler too, or remove the queue"
    )
    assert denied(workload) == (400, line)
    assert rendered(workload) == line


@pytest.mark.parametrize(
    ("annotations", "line"),
    [
        (
            {"trainhook.io/min-available": "2"},
            "trainhook.io/min-available: invalid value '2': the gang's minimum is read only with "
            "trainhook.io/scheduler set (one of volcano, coscheduling, kubernetes, kai): set the "
            "scheduler too, or remove it",
        ),
        (
            {"trainhook.io/min-available": "2", "trainhook.io/scheduler": "kueue"},
            "trainhook.io/min-available: invalid value '2': trainhook.io/scheduler kueue admits a "
            "pod group whole, with no minimum; a gang's minimum is read with one of volcano, "
            "coscheduling, kubernetes, kai",
        ),
        (
            {"trainhook.io/min-available": "0", "trainhook.io/scheduler": "volcano"},
            "trainhook.io/min-available: invalid value '0': a whole number of pods from 1 to "
            "2147483647",
        ),
    ],
)
def test_a_gang_minimum_no_gang_can_take_is_refused(annotations: dict[str, str], line: str) -> None:
    workload = statefulset("pt-worker", annotations=annotations)
    assert denied(workload) == (400, line)
    assert rendered(workload) == line


def test_render_shows_bare_pods_without_a_namespace_in_the_default_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "pods.yaml"
    path.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: solo\n"
        "  labels: {trainhook.io/framework: pytorch}\n"
        "spec: {containers: [{name: pytorch, image: trainer}]}\n"
    )

    assert main(["render", str(path)]) == 0

    assert capsys.readouterr().out.splitlines()[0] == (
        "job solo (pytorch, namespace default, 1 pod)"
    )


def test_render_names_the_file_and_document_before_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    import yaml

    path.write_text(yaml.safe_dump(copy.deepcopy(template_only())))

    assert main(["render", str(path)]) == 1

    assert capsys.readouterr().err == (
        f"trainhook render: {path} document 1 (StatefulSet pt-worker): {TEMPLATE_ONLY}\n"
    )
