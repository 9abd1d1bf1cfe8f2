"""Small builders for the manifests users write, and the pods the controllers would make of them."""

from __future__ import annotations

from typing import Any

from webhook.core.render import RenderedPod, render


def statefulset(
    name: str,
    framework: str,
    *,
    role: str | None = None,
    job: str | None = None,
    replicas: int = 1,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    namespace: str = "default",
    image: str = "trainer:1",
    created: str | None = None,
    service_name: str | None = None,
    labelled_template: bool = False,
    selector: bool = True,
) -> dict[str, Any]:
    """A StatefulSet as a user writes it; `labelled_template` repeats the trainhook.io/ labels
    on the pod template, as many manifests do."""
    labels = {"trainhook.io/framework": framework}
    if role:
        labels["trainhook.io/role"] = role
    if job:
        labels["trainhook.io/job"] = job
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        metadata["annotations"] = annotations
    if created is not None:
        metadata["creationTimestamp"] = created
    template: dict[str, Any] = {
        "spec": {"containers": containers or [{"name": framework, "image": image}]}
    }
    spec: dict[str, Any] = {"replicas": replicas}
    if service_name is not None:
        spec["serviceName"] = service_name
    if selector:
        spec["selector"] = {"matchLabels": {"app": name}}
        template_labels = {"app": name, **(labels if labelled_template else {})}
        template = {"metadata": {"labels": template_labels}, **template}
    spec["template"] = template
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": metadata, "spec": spec}


def indexed_job(
    name: str, framework: str, *, completions: int, role: str | None = None, job: str | None = None
) -> dict[str, Any]:
    labels = {"trainhook.io/framework": framework}
    if role:
        labels["trainhook.io/role"] = role
    if job:
        labels["trainhook.io/job"] = job
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "completionMode": "Indexed",
            "completions": completions,
            "parallelism": completions,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": framework, "image": "trainer:1"}],
                }
            },
        },
    }


def bare_pod(
    name: str,
    framework: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Pod the user labels directly, with no controller behind it."""
    metadata: dict[str, Any] = {
        "name": name,
        "labels": {"trainhook.io/framework": framework, **(labels or {})},
    }
    if annotations:
        metadata["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": [{"name": framework, "image": "trainer:1"}]},
    }


def mpi_job(nproc_per_worker: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """A Horovod-style job: one launcher and two workers running `nproc_per_worker` each."""
    return (
        statefulset("hv-launcher", "mpi", role="launcher", job="hv"),
        statefulset(
            "hv-worker",
            "mpi",
            role="worker",
            job="hv",
            replicas=2,
            annotations={"trainhook.io/nproc-per-node": str(nproc_per_worker)},
        ),
    )


def pods(*documents: dict[str, Any]) -> dict[str, RenderedPod]:
    """The rendered pods of a job, by pod name."""
    return {pod.name: pod for pod in render(list(documents))}


def env(*documents: dict[str, Any]) -> dict[str, dict[str, str]]:
    """The training container's env of every rendered pod, by pod name."""
    return {name: pod.env for name, pod in pods(*documents).items()}


# Operators' jobs, as `trainhook migrate` reads them.

OPERATOR_CONTAINER = {"name": "pytorch", "image": "train:1"}


def template(**spec: Any) -> dict[str, Any]:
    """A replica's pod template of one container, with `spec` fields beside it."""
    return {"spec": {"containers": [dict(OPERATOR_CONTAINER)], **spec}}


def pytorchjob(spec: dict[str, Any] | None = None, **replicas: dict[str, Any]) -> dict[str, Any]:
    """A PyTorchJob `pt` in `ml`: a master and two workers unless replica specs are given."""
    replica_specs = replicas or {
        "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template()},
        "Worker": {"replicas": 2, "restartPolicy": "OnFailure", "template": template()},
    }
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "pt", "namespace": "ml"},
        "spec": {"pytorchReplicaSpecs": replica_specs, **(spec or {})},
    }


def paddle_operator(**spec: Any) -> dict[str, Any]:
    """A paddle-operator PaddleJob `pd` of two workers, with `spec` fields beside them."""
    worker = {"replicas": 2, "template": template()}
    return {
        "apiVersion": "batch.paddlepaddle.org/v1",
        "kind": "PaddleJob",
        "metadata": {"name": "pd"},
        "spec": {"worker": worker, **spec},
    }
