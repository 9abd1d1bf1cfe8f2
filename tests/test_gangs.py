"""Every example, of every framework, under each gang scheduler: one gang its scheduler accepts.

Each labelled workload of an example is given `trainhook.io/scheduler` (and a queue, and for
coscheduling a timeout); the rendered pods and the PodGroup are then checked against the
schedulers' own schemas (tests/schemas) and against each other: every role in the same gang,
the gang as large as the job.
"""

from __future__ import annotations

import copy
import functools
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.schemas import custom_resource_problems, kueue_group_problems
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.render import RenderError, Rendering, render_all
from webhook.core.shape.pods import identify
from webhook.kube.resources import COSCHEDULING_PODGROUPS, PODGROUPS
from webhook.sweeper.actions import Create
from webhook.sweeper.decide import decide
from webhook.sweeper.job.state import read_job_state

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
EXAMPLE_FILES = sorted(path.name for path in EXAMPLES.glob("*.yaml"))
SCHEDULERS = ("volcano", "coscheduling", "kueue", "kubernetes", "kai")
# Pods that name a Kubernetes PodGroup validate against the release that has the field.
POD_RELEASE = {"kubernetes": "1.37"}
GANG_KEYS = (
    "trainhook.io/scheduler",
    "trainhook.io/queue",
    "trainhook.io/schedule-timeout-seconds",
    "trainhook.io/placement-topology",
    "trainhook.io/placement",
    "trainhook.io/placement-tier",
    "trainhook.io/kai-topology",
)
RACK = "cloud.example.com/rack"

GENERIC_JOB = [
    {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": f"sim-{role}",
            "labels": {
                "trainhook.io/framework": "generic",
                "trainhook.io/job": "sim",
                "trainhook.io/role": role,
            },
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": f"sim-{role}"}},
            "template": {
                "metadata": {"labels": {"app": f"sim-{role}"}},
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "image": "sim:1",
                            "resources": {"requests": {"cpu": "2", "memory": "1Gi"}},
                        }
                    ]
                },
            },
        },
    }
    for role, replicas in (("coordinator", 1), ("solver", 3))
]


def documents_of(example: str) -> list[Any]:
    if example == "generic":
        return copy.deepcopy(GENERIC_JOB)
    with open(EXAMPLES / example) as manifest:
        return [document for document in yaml.safe_load_all(manifest) if document]


def under(scheduler: str | None, documents: list[Any], placed: bool = False) -> list[Any]:
    """The documents with every labelled workload and bare pod gang-scheduled by `scheduler`
    (None: the default scheduler), kept within one rack when `placed`."""
    for document in documents:
        if "trainhook.io/framework" not in (document["metadata"].get("labels") or {}):
            continue
        annotations = document["metadata"].setdefault("annotations", {})
        for key in GANG_KEYS:
            annotations.pop(key, None)
            template = document.get("spec", {}).get("template", {}).get("metadata", {})
            (template.get("annotations") or {}).pop(key, None)
        if placed:
            annotations["trainhook.io/placement-topology"] = RACK
            if scheduler == "volcano":
                annotations["trainhook.io/placement-tier"] = "2"
            if scheduler == "kai":
                annotations["trainhook.io/kai-topology"] = "cluster-topology"
        if scheduler is None:
            continue
        annotations["trainhook.io/scheduler"] = scheduler
        annotations["trainhook.io/queue"] = "research"
        if scheduler == "coscheduling":
            annotations["trainhook.io/schedule-timeout-seconds"] = "900"
    return documents


@functools.cache
def rendering(example: str, scheduler: str | None, placed: bool = False) -> Rendering:
    return render_all(under(scheduler, documents_of(example), placed))


CASES = [
    (example, scheduler) for example in [*EXAMPLE_FILES, "generic"] for scheduler in SCHEDULERS
]


def test_the_cases_cover_every_framework() -> None:
    frameworks = {rendering(example, "volcano").pods[0].framework.name for example, _ in CASES}
    assert frameworks == set(FRAMEWORKS)


@pytest.mark.parametrize(("example", "scheduler"), CASES)
def test_every_pod_is_in_one_gang_with_every_role_and_valid_for_kubernetes(
    example: str, scheduler: str
) -> None:
    pods = rendering(example, scheduler).pods
    [job] = {pod.job for pod in pods}
    for pod in pods:
        kubernetes_validate.validate(pod.pod, POD_RELEASE.get(scheduler, "1.29"), strict=True)
    metadata = [pod.pod["metadata"] for pod in pods]
    names = {pod.pod["spec"].get("schedulerName") for pod in pods}
    if scheduler == "volcano":
        assert names == {"volcano"}
        assert {m["annotations"]["scheduling.k8s.io/group-name"] for m in metadata} == {job}
    elif scheduler == "coscheduling":
        assert names == {"scheduler-plugins-scheduler"}
        assert {m["labels"]["scheduling.x-k8s.io/pod-group"] for m in metadata} == {job}
    elif scheduler == "kai":
        assert names == {"kai-scheduler"}
        assert {m["annotations"]["pod-group-name"] for m in metadata} == {job}
        assert {m["annotations"]["kai.scheduler/skip-podgrouper"] for m in metadata} == {"true"}
        assert {m["labels"]["kai.scheduler/queue"] for m in metadata} == {"research"}
    elif scheduler == "kubernetes":
        assert names == {None}  # Kubernetes' own scheduler
        assert {p.pod["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {job}
    else:
        assert names == {None}
        assert kueue_group_problems(pod.pod for pod in pods) == []
        assert {m["labels"]["kueue.x-k8s.io/pod-group-name"] for m in metadata} == {job}


@pytest.mark.parametrize(("example", "scheduler"), CASES)
def test_the_podgroup_counts_every_pod_and_its_scheduler_accepts_it(
    example: str, scheduler: str
) -> None:
    result = rendering(example, scheduler)
    if scheduler == "kueue":
        assert result.podgroups == []  # Kueue's group is the pods' labels
        return
    [podgroup] = result.podgroups
    api = {
        "volcano": PODGROUPS.api_version,
        "coscheduling": COSCHEDULING_PODGROUPS.api_version,
        "kubernetes": "scheduling.k8s.io/v1beta1",
        "kai": "scheduling.run.ai/v2alpha2",
    }[scheduler]
    assert podgroup["apiVersion"] == api
    assert podgroup["metadata"]["name"] == result.pods[0].job
    if scheduler == "kubernetes":
        assert podgroup["spec"]["schedulingPolicy"] == {"gang": {"minCount": len(result.pods)}}
    else:
        assert podgroup["spec"]["minMember"] == len(result.pods)
    assert custom_resource_problems(podgroup) == []


@pytest.mark.parametrize("placed", [False, True], ids=["anywhere", "one-rack"])
@pytest.mark.parametrize(("example", "scheduler"), [case for case in CASES if case[1] != "kueue"])
def test_the_sweeper_creates_the_podgroup_render_shows(
    example: str, scheduler: str, placed: bool
) -> None:
    result = rendering(example, scheduler, placed)
    [podgroup] = result.podgroups
    workloads = [
        {**w, "metadata": {**w["metadata"], "uid": f"uid-{w['metadata']['name']}"}}
        for w in result.workloads
    ]
    bare = [pod.pod for pod in result.pods if identify(pod.pod).owner_kind == "Pod"]
    namespace = podgroup["metadata"]["namespace"]
    state = read_job_state(
        namespace,
        podgroup["metadata"]["name"],
        workloads=workloads,
        pods=bare,
        kubernetes_podgroup_api=podgroup["apiVersion"] if scheduler == "kubernetes" else None,
    )
    [create] = [
        action
        for action in decide(state, datetime.now(UTC)).actions
        if isinstance(action, Create) and action.body["kind"] == "PodGroup"
    ]
    assert create.body["spec"] == podgroup["spec"]
    assert custom_resource_problems(create.body) == []


def sweeper_podgroup(result: Rendering, scheduler: str) -> dict[str, Any]:
    """The PodGroup the sweeper creates for the rendered job's workloads."""
    podgroup = result.podgroups[0]
    workloads = [
        {**w, "metadata": {**w["metadata"], "uid": f"uid-{w['metadata']['name']}"}}
        for w in result.workloads
    ]
    state = read_job_state(
        podgroup["metadata"]["namespace"],
        podgroup["metadata"]["name"],
        workloads=workloads,
        kubernetes_podgroup_api=podgroup["apiVersion"] if scheduler == "kubernetes" else None,
    )
    [create] = [
        action
        for action in decide(state, datetime.now(UTC)).actions
        if isinstance(action, Create) and action.body["kind"] == "PodGroup"
    ]
    return dict(create.body)


def with_min_available(scheduler: str, value: str) -> list[Any]:
    documents = under(scheduler, documents_of("generic"))
    for document in documents:
        document["metadata"]["annotations"]["trainhook.io/min-available"] = value
    return documents


@pytest.mark.parametrize("scheduler", [s for s in SCHEDULERS if s != "kueue"])
def test_a_gangs_minimum_of_pods_is_in_the_podgroup_render_shows_and_the_sweeper_creates(
    scheduler: str,
) -> None:
    # A coordinator and 3 solvers (2 CPUs, 1Gi each) may start once 2 pods can run.
    result = render_all(with_min_available(scheduler, "2"))
    [podgroup] = result.podgroups
    spec = podgroup["spec"]
    if scheduler == "kubernetes":
        assert spec["schedulingPolicy"] == {"gang": {"minCount": 2}}
    else:
        assert spec["minMember"] == 2
    if scheduler in ("volcano", "coscheduling"):
        assert spec["minResources"] == {"cpu": "4", "memory": "2Gi"}
    assert custom_resource_problems(podgroup) == []
    created = sweeper_podgroup(result, scheduler)
    assert created["spec"] == spec


def test_a_gangs_minimum_above_its_pods_or_under_kueue_is_refused_in_one_line() -> None:
    with pytest.raises(RenderError) as larger:
        render_all(with_min_available("volcano", "5"))
    assert str(larger.value) == (
        "trainhook.io/min-available: invalid value '5': at most the 4 pod(s) of job 'sim': "
        "a gang of more would never be placed"
    )
    with pytest.raises(RenderError) as kueue:
        render_all(with_min_available("kueue", "2"))
    assert str(kueue.value) == (
        "trainhook.io/min-available: invalid value '2': trainhook.io/scheduler kueue admits a "
        "pod group whole, with no minimum; a gang's minimum is read with one of volcano, "
        "coscheduling, kubernetes, kai"
    )


PLACED_CASES = [
    (example, scheduler)
    for example in [*EXAMPLE_FILES, "generic"]
    for scheduler in (*SCHEDULERS, None)
]


def job_affinity(job: str) -> list[dict[str, Any]]:
    return [{"labelSelector": {"matchLabels": {"trainhook.io/job": job}}, "topologyKey": RACK}]


@pytest.mark.parametrize(("example", "scheduler"), PLACED_CASES)
def test_a_job_kept_in_one_rack_gets_what_its_scheduler_reads(
    example: str, scheduler: str | None
) -> None:
    result = rendering(example, scheduler, placed=True)
    [job] = {pod.job for pod in result.pods}
    for pod in result.pods:
        kubernetes_validate.validate(pod.pod, POD_RELEASE.get(scheduler or "", "1.29"), strict=True)
    affinities = [pod.pod["spec"].get("affinity") for pod in result.pods]
    annotations = [pod.pod["metadata"]["annotations"] for pod in result.pods]
    if scheduler == "volcano":
        assert affinities == [None] * len(result.pods)
        [podgroup] = result.podgroups
        assert podgroup["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 2}
        assert custom_resource_problems(podgroup) == []
    elif scheduler == "kai":
        assert affinities == [None] * len(result.pods)
        [podgroup] = result.podgroups
        assert podgroup["spec"]["topologyConstraint"] == {
            "topology": "cluster-topology",
            "requiredTopologyLevel": RACK,
        }
        assert custom_resource_problems(podgroup) == []
    elif scheduler == "kubernetes":
        assert affinities == [None] * len(result.pods)
        [podgroup] = result.podgroups
        assert podgroup["spec"]["schedulingConstraints"] == {"topology": [{"key": RACK}]}
        assert custom_resource_problems(podgroup) == []
    elif scheduler == "kueue":
        assert affinities == [None] * len(result.pods)
        assert kueue_group_problems(pod.pod for pod in result.pods) == []
        for pod, annotation in zip(result.pods, annotations, strict=True):
            assert annotation["kueue.x-k8s.io/podset-required-topology"] == RACK
            assert "kueue.x-k8s.io/podset-preferred-topology" not in annotation
            # Kueue ranks the pods of a role (its PodSet) by the label the annotation names.
            index_label = annotation["kueue.x-k8s.io/pod-group-pod-index-label"]
            assert pod.pod["metadata"]["labels"][index_label] == str(pod.index)
    else:
        for pod, affinity in zip(result.pods, affinities, strict=True):
            terms = affinity["podAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
            assert terms == job_affinity(job)
            assert pod.pod["metadata"]["labels"]["trainhook.io/job"] == job
            assert not any(key.startswith("kueue.") for key in pod.pod["metadata"]["annotations"])


def test_a_preferred_placement_is_soft_for_volcano_preferred_for_affinity_and_kueue() -> None:
    def render(scheduler: str | None) -> Rendering:
        documents = under(scheduler, documents_of("generic"), placed=True)
        for document in documents:
            document["metadata"]["annotations"]["trainhook.io/placement"] = "preferred"
        return render_all(documents)

    [podgroup] = render("volcano").podgroups
    assert podgroup["spec"]["networkTopology"] == {"mode": "soft", "highestTierAllowed": 2}
    [podgroup] = render("kai").podgroups
    assert podgroup["spec"]["topologyConstraint"] == {
        "topology": "cluster-topology",
        "preferredTopologyLevel": RACK,
    }
    [podgroup] = render("kubernetes").podgroups
    assert "schedulingConstraints" not in podgroup["spec"]  # the API has no preferred form
    for pod in render("kueue").pods:
        annotations = pod.pod["metadata"]["annotations"]
        assert annotations["kueue.x-k8s.io/podset-preferred-topology"] == RACK
        assert "kueue.x-k8s.io/podset-required-topology" not in annotations
    for scheduler in ("coscheduling", "kubernetes", None):
        for pod in render(scheduler).pods:
            assert pod.pod["spec"]["affinity"]["podAffinity"] == {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "podAffinityTerm": job_affinity("sim")[0]}
                ]
            }


# The three examples that are about gang scheduling, as written, value for value.


def rendered_example(example: str) -> Rendering:
    return render_all(documents_of(example))


def test_the_volcano_example_renders_its_podgroup_in_the_research_queue() -> None:
    assert rendered_example("paddle-collective-volcano.yaml").podgroups == [
        {
            "apiVersion": "scheduling.volcano.sh/v1beta1",
            "kind": "PodGroup",
            "metadata": {"name": "resnet50-gang", "namespace": "default"},
            "spec": {
                "minMember": 2,
                "minResources": {"cpu": "32", "memory": "128Gi", "nvidia.com/gpu": "4"},
                "queue": "research",
            },
        }
    ]


def test_the_coscheduling_example_renders_a_podgroup_of_four_pods_of_eight_gpus() -> None:
    result = rendered_example("pytorch-coscheduling.yaml")
    assert result.podgroups == [
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "llama-ft", "namespace": "default"},
            "spec": {
                "minMember": 4,
                "minResources": {"cpu": "128", "memory": "1Ti", "nvidia.com/gpu": "32"},
                "scheduleTimeoutSeconds": 600,
            },
        }
    ]
    for pod in result.pods:
        assert pod.pod["spec"]["schedulerName"] == "scheduler-plugins-scheduler"
        assert pod.pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == "llama-ft"


def test_the_kueue_example_puts_launcher_and_workers_in_one_group_of_three() -> None:
    result = rendered_example("mpi-kueue.yaml")
    assert result.podgroups == []
    for pod in result.pods:
        metadata = pod.pod["metadata"]
        kueue_labels = {k: v for k, v in metadata["labels"].items() if k.startswith("kueue.")}
        assert (pod.name, kueue_labels) == (
            pod.name,
            {
                "kueue.x-k8s.io/queue-name": "team-a",
                "kueue.x-k8s.io/pod-group-name": "horovod-queued",
                "kueue.x-k8s.io/managed": "true",
            },
        )
        assert metadata["annotations"]["kueue.x-k8s.io/pod-group-total-count"] == "3"
        # Kueue's gate, then the one the sweeper lifts once the job's SSH keys are proven its own.
        assert pod.pod["spec"]["schedulingGates"] == [
            {"name": "kueue.x-k8s.io/admission"},
            {"name": "trainhook.io/waiting-for-owned-objects"},
        ]
    assert [pod.name for pod in result.pods] == [
        "horovod-queued-launcher-0",
        "horovod-queued-worker-0",
        "horovod-queued-worker-1",
    ]
