"""Pods of a gang-scheduled job: what each scheduler needs on them, and one gang for all roles."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
import pytest

from tests.schemas import kueue_gate, kueue_group_problems
from tests.support.builders import bare_pod, indexed_job, pods, statefulset
from webhook.core.errors import TrainhookError
from webhook.core.mutation.admit import Found, Policy, Request, admit
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import expand, render_all

KUEUE = {"trainhook.io/scheduler": "kueue", "trainhook.io/queue": "team-a"}
ROLE_HASH = "kueue.x-k8s.io/role-hash"


def job(annotations: dict[str, str], worker_annotations: dict[str, str] | None = None) -> list[Any]:
    """A PyTorch job: a master StatefulSet and an Indexed Job of two workers."""
    master = statefulset("pt-master", "pytorch", role="master", job="pt", annotations=annotations)
    workers = indexed_job("pt-worker", "pytorch", role="worker", job="pt", completions=2)
    workers["metadata"]["annotations"] = dict(
        annotations if worker_annotations is None else worker_annotations
    )
    return [master, workers]


def controller_pods(documents: list[Any]) -> list[dict[str, Any]]:
    """The pods the StatefulSet and Job controllers create, before any webhook sees them."""
    created = []
    for document in documents:
        workload = mutate_workload(document, "CREATE", "default", documents).workload
        created.extend(expand(workload, "default"))
    return created


def trainhook(pod: dict[str, Any], warnings: list[str] | None = None) -> dict[str, Any]:
    """Trainhook's webhook on a pod at creation: its patch applied as the API server does."""
    outcome = admit(Request("Pod", "CREATE", pod, "default"))
    assert outcome is not None
    if warnings is not None:
        warnings.extend(outcome.warnings)
    patched: dict[str, Any] = jsonpatch.apply_patch(pod, outcome.patch)
    return patched


def kueue(pod: dict[str, Any], default_queue: bool = False) -> dict[str, Any]:
    """Kueue's pod webhook (v0.19 PodWebhook.Default) on a pod: a pod with a queue label (or,
    in a namespace with a LocalQueue named "default", any pod) is suspended: Kueue's label,
    finalizer and scheduling gate, each added once, and its role hash."""
    pod = copy.deepcopy(pod)
    labels = pod["metadata"].setdefault("labels", {})
    if "kueue.x-k8s.io/queue-name" not in labels:
        if not default_queue:
            return pod
        labels["kueue.x-k8s.io/queue-name"] = "default"
    labels["kueue.x-k8s.io/managed"] = "true"
    finalizers = pod["metadata"].setdefault("finalizers", [])
    if "kueue.x-k8s.io/managed" not in finalizers:
        finalizers.append("kueue.x-k8s.io/managed")
    gates = pod["spec"].setdefault("schedulingGates", [])
    if {"name": "kueue.x-k8s.io/admission"} not in gates:
        gates.append({"name": "kueue.x-k8s.io/admission"})
    pod["metadata"].setdefault("annotations", {})[ROLE_HASH] = "a1b2c3d4"
    return pod


def without_role_hash(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["annotations"].pop(ROLE_HASH, None)
    return pod


# --- Volcano and coscheduling: the scheduler and the PodGroup on every pod --------------------


def test_volcano_pods_of_every_role_point_at_the_job_podgroup() -> None:
    rendered = pods(*job({"trainhook.io/scheduler": "volcano"}))
    assert {
        name: (
            pod.pod["spec"]["schedulerName"],
            pod.pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"],
            pod.pod["metadata"]["annotations"]["volcano.sh/task-spec"],
        )
        for name, pod in rendered.items()
    } == {
        "pt-master-0": ("volcano", "pt", "master"),
        "pt-worker-0": ("volcano", "pt", "worker"),
        "pt-worker-1": ("volcano", "pt", "worker"),
    }


def test_coscheduling_pods_run_on_the_plugin_scheduler_in_the_job_podgroup() -> None:
    rendered = pods(*job({"trainhook.io/scheduler": "coscheduling"}))
    for pod in rendered.values():
        assert pod.pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert pod.pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "pt"


def test_the_coscheduling_scheduler_name_is_the_one_the_webhook_is_given() -> None:
    documents = job({"trainhook.io/scheduler": "coscheduling"})
    rendering = render_all(documents, coscheduling_scheduler="sp-coscheduler")
    assert {pod.pod["spec"]["schedulerName"] for pod in rendering.pods} == {"sp-coscheduler"}
    [pod] = controller_pods(documents)[:1]
    outcome = admit(
        Request("Pod", "CREATE", pod, "default"),
        policy=Policy(coscheduling_scheduler="sp-coscheduler"),
    )
    assert outcome is not None
    assert {"op": "add", "path": "/spec/schedulerName", "value": "sp-coscheduler"} in (
        outcome.patch
    )


def test_a_scheduler_name_the_user_set_is_kept_with_a_warning() -> None:
    master = statefulset("solo", "pytorch", annotations={"trainhook.io/scheduler": "coscheduling"})
    master["spec"]["template"]["spec"]["schedulerName"] = "my-scheduler"
    [pod] = render_all([master]).pods
    assert pod.pod["spec"]["schedulerName"] == "my-scheduler"
    assert pod.warnings == ["schedulerName my-scheduler was set by the user and is kept"]


# --- Kueue: one pod group for the whole job ---------------------------------------------------


def test_every_pod_of_a_kueue_job_joins_one_group_counting_every_role() -> None:
    rendered = pods(*job(KUEUE))
    for pod in rendered.values():
        metadata = pod.pod["metadata"]
        assert {k: v for k, v in metadata["labels"].items() if k.startswith("kueue.x-k8s.io/")} == {
            "kueue.x-k8s.io/queue-name": "team-a",
            "kueue.x-k8s.io/pod-group-name": "pt",
            "kueue.x-k8s.io/managed": "true",
        }
        assert metadata["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
        assert metadata["finalizers"] == ["kueue.x-k8s.io/managed"]
        assert pod.pod["spec"]["schedulingGates"] == [{"name": kueue_gate()}]
        assert "schedulerName" not in pod.pod["spec"]
    assert kueue_group_problems([pod.pod for pod in rendered.values()]) == []


@pytest.mark.parametrize("default_queue", [False, True], ids=["no-default-queue", "default-queue"])
def test_kueue_and_trainhook_webhooks_give_the_same_pod_in_either_order(
    default_queue: bool,
) -> None:
    for created in controller_pods(job(KUEUE)):
        trainhook_first = kueue(trainhook(created), default_queue)
        # Kueue's webhook does not ask to be reinvoked: what it skipped first stays skipped.
        kueue_first = trainhook(kueue(created, default_queue))
        assert without_role_hash(kueue_first) == without_role_hash(trainhook_first)
        assert kueue_first["spec"]["schedulingGates"] == [{"name": "kueue.x-k8s.io/admission"}]
        assert kueue_first["metadata"]["finalizers"] == ["kueue.x-k8s.io/managed"]


def test_trainhook_reinvoked_after_kueue_changes_nothing_and_keeps_kueues_gate() -> None:
    for created in controller_pods(job(KUEUE)):
        both = kueue(trainhook(created))
        outcome = admit(Request("Pod", "CREATE", both, "default"))
        assert outcome is not None
        assert outcome.patch == []


def test_a_gate_someone_else_put_first_stays_first_and_kueues_follows() -> None:
    created = controller_pods(job(KUEUE))[0]
    created["spec"]["schedulingGates"] = [{"name": "example.com/quota-check"}]
    mutated = trainhook(created)
    assert mutated["spec"]["schedulingGates"] == [
        {"name": "example.com/quota-check"},
        {"name": "kueue.x-k8s.io/admission"},
    ]


def test_a_queue_label_the_user_set_gives_way_to_the_jobs_queue_with_a_warning() -> None:
    created = controller_pods(job(KUEUE))[0]
    created["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "other"
    warnings: list[str] = []
    mutated = trainhook(created, warnings)
    assert mutated["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a"
    assert warnings == [
        "label kueue.x-k8s.io/queue-name other is replaced by trainhook.io/queue team-a: every "
        "pod of a job waits in one queue"
    ]


def test_a_pod_already_bound_to_a_node_is_not_gated() -> None:
    created = controller_pods(job(KUEUE))[0]
    created["spec"]["nodeName"] = "node-1"
    mutated = trainhook(created)
    assert "schedulingGates" not in mutated["spec"]


def test_bare_pods_of_a_kueue_job_form_the_group_their_stamp_counts() -> None:
    members = [
        bare_pod(
            f"hv-{i}",
            "mpi",
            labels={"trainhook.io/job": "hv", "trainhook.io/role": role, "trainhook.io/index": "0"},
            annotations={
                **KUEUE,
                "trainhook.io/topology": '{"launcher":1,"worker":1}',
            },
        )
        for i, role in enumerate(("launcher", "worker"))
    ]
    mutated = [trainhook(member) for member in members]
    assert kueue_group_problems(mutated) == []


# --- one gang per job: the scheduler, queue and timeout are job-wide -------------------------


def refusal(documents: list[Any]) -> str:
    with pytest.raises(TrainhookError) as caught:
        admit(Request("StatefulSet", "CREATE", documents[0], "default"), Found(documents))
    return str(caught.value)


def test_a_scheduler_on_one_role_only_is_refused_naming_both_workloads() -> None:
    assert refusal(job({"trainhook.io/scheduler": "volcano"}, worker_annotations={})) == (
        "trainhook.io/scheduler: job 'pt' is one gang, so every role must say the same: "
        "'volcano' on StatefulSet pt-master but not set on Job pt-worker"
    )


def test_roles_waiting_in_different_queues_are_refused() -> None:
    documents = job(KUEUE, worker_annotations={**KUEUE, "trainhook.io/queue": "team-b"})
    assert refusal(documents) == (
        "trainhook.io/queue: job 'pt' is one gang, so every role must say the same: "
        "'team-a' on StatefulSet pt-master but 'team-b' on Job pt-worker"
    )


def test_roles_with_different_schedule_timeouts_are_refused() -> None:
    gang = {"trainhook.io/scheduler": "coscheduling", "trainhook.io/schedule-timeout-seconds": "60"}
    documents = job(gang, worker_annotations={"trainhook.io/scheduler": "coscheduling"})
    assert refusal(documents) == (
        "trainhook.io/schedule-timeout-seconds: job 'pt' is one gang, so every role must say the "
        "same: '60' on StatefulSet pt-master but not set on Job pt-worker"
    )


def test_a_queue_on_one_role_of_a_job_without_a_scheduler_is_refused_in_one_line() -> None:
    """A queue means nothing without a scheduler: it is refused, not silently ignored."""
    documents = job({}, worker_annotations={"trainhook.io/queue": "team-b"})
    assert refusal(documents) == (
        "trainhook.io/queue: invalid value 'team-b': a queue is read only with "
        "trainhook.io/scheduler set (one of volcano, coscheduling, kueue, kubernetes, "
        "kai): set the scheduler too, or remove the queue"
    )


def test_roles_with_different_gang_minimums_are_refused() -> None:
    gang = {"trainhook.io/scheduler": "volcano", "trainhook.io/min-available": "2"}
    documents = job(gang, worker_annotations={"trainhook.io/scheduler": "volcano"})
    assert refusal(documents) == (
        "trainhook.io/min-available: job 'pt' is one gang, so every role must say the "
        "same: '2' on StatefulSet pt-master but not set on Job pt-worker"
    )


def test_roles_kept_by_different_kai_topologies_are_refused() -> None:
    kai = {
        "trainhook.io/scheduler": "kai",
        "trainhook.io/placement-topology": "cloud.example.com/rack",
    }
    documents = job(
        {**kai, "trainhook.io/kai-topology": "racks"},
        worker_annotations={**kai, "trainhook.io/kai-topology": "blocks"},
    )
    assert refusal(documents) == (
        "trainhook.io/kai-topology: job 'pt' is placed as one, so every role must say the "
        "same: 'racks' on StatefulSet pt-master but 'blocks' on Job pt-worker"
    )
