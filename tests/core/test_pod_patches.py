"""A job's later pods take their patch from its first pod's: the answer is the one a full
mutation gives, byte for byte, for every generated job and whatever order its pods come in."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.core.strategies import Obj, PodRealism, TrainingJob, controller_pods, training_jobs
from tests.support.builders import indexed_job, statefulset
from webhook.core import contract, jsoncodec
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import ProgressEndpoint
from webhook.core.mutation import pod_patches
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.patch import diff


def full(pod: Obj, namespace: str, cluster_domain: str) -> bytes:
    """The answer of a full mutation: the patch and warnings, or the refusal."""
    try:
        mutation = mutate_pod(pod, namespace, cluster_domain=cluster_domain)
    except TrainhookError as error:
        return f"refused: {error}".encode()
    return jsoncodec.dumps([diff(pod, mutation.pod), mutation.warnings])


def reused(pod: Obj, namespace: str, cluster_domain: str) -> bytes:
    try:
        patch, warnings = pod_patches.pod_patch(pod, namespace, cluster_domain=cluster_domain)
    except TrainhookError as error:
        return f"refused: {error}".encode()
    return jsoncodec.dumps([patch, warnings])


def with_own_token_volume(pod: Obj, suffix: str) -> Obj:
    """The pod with its service-account token volume named as the API server names it, per pod."""
    pod = copy.deepcopy(pod)
    spec = pod["spec"]
    name = pod_patches.TOKEN_VOLUME_PREFIX + suffix
    renamed = {
        volume.get("name")
        for volume in spec.get("volumes") or []
        if volume.get("projected") is not None
    }
    for volume in spec.get("volumes") or []:
        if volume.get("name") in renamed:
            volume["name"] = name
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            for mount in container.get("volumeMounts") or []:
                if mount.get("name") in renamed:
                    mount["name"] = name
    return pod


def job_pods(job: TrainingJob) -> list[Obj]:
    pods = []
    for workload in job.workloads:
        stored = mutate_workload(workload, "CREATE", job.namespace, job.workloads).workload
        pods += controller_pods(copy.deepcopy(stored), job.namespace, job.realism)
    return [with_own_token_volume(pod, f"{i:05x}") for i, pod in enumerate(pods)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(training_jobs, st.randoms(use_true_random=False))
def test_every_pod_gets_the_answer_of_a_full_mutation_whichever_pod_came_first(
    job: TrainingJob, random: Any
) -> None:
    try:
        pods = job_pods(job)
    except TrainhookError:
        return  # a job whose workloads are refused has no pods
    random.shuffle(pods)
    pod_patches.forget()
    for pod in pods:
        expected = full(pod, job.namespace, job.cluster_domain)
        assert reused(pod, job.namespace, job.cluster_domain) == expected
        assert reused(pod, job.namespace, job.cluster_domain) == expected  # kept, filled again


REALISTIC = PodRealism(owner_reference=True, generate_name=True, defaults=True)


def pods_of(
    replicas: int,
    annotations: dict[str, str] | None = None,
    env: list[Obj] | None = None,
) -> list[Obj]:
    containers = [{"name": "pytorch", "image": "trainer:1", "env": env}] if env else None
    workload = statefulset(
        "llm-worker",
        "pytorch",
        role="worker",
        job="llm",
        replicas=replicas,
        annotations=annotations,
        containers=containers,
    )
    stored = mutate_workload(workload, "CREATE", "default", [workload]).workload
    return [
        with_own_token_volume(pod, f"{i:05x}")
        for i, pod in enumerate(controller_pods(stored, "default", REALISTIC))
    ]


def test_a_pod_whose_spec_differs_from_the_kept_one_gets_its_own_patch() -> None:
    first, second = pods_of(2)
    pod_patches.forget()
    reused(first, "default", "")
    second["spec"]["containers"][0]["env"] = [{"name": "RANK", "value": "7"}]

    patch, warnings = pod_patches.pod_patch(second, "default")

    assert jsoncodec.dumps([patch, warnings]) == full(second, "default", "")
    assert warnings == ["env RANK in container pytorch was set by the user and is kept"]


def test_a_later_pod_gets_the_first_pods_patch_with_its_own_rank_and_env_put_in() -> None:
    first, second = pods_of(2, env=[{"name": "DATA_DIR", "value": "/data"}])
    pod_patches.forget()
    reused(first, "default", "")

    patch, warnings = pod_patches.pod_patch(second, "default")

    assert pod_patches.counts() == pod_patches.Counts(keyed=2, reused=1, full=1, drafted=0)
    assert jsoncodec.dumps([patch, warnings]) == full(second, "default", "")
    labels = {op["path"]: op["value"] for op in patch if op["path"].startswith("/metadata/labels")}
    assert labels == {
        "/metadata/labels/trainhook.io~1rank": "1",
        "/metadata/labels/trainhook.io~1role-index": "1",
    }
    [env] = [op["value"] for op in patch if op["path"] == "/spec/containers/0/env"]
    by_name = {item["name"]: item.get("value") for item in env}
    assert (by_name["RANK"], by_name["TRAINHOOK_RANK"], by_name["DATA_DIR"]) == ("1", "1", "/data")
    assert env[-1] == {"name": "DATA_DIR", "value": "/data"}


@pytest.mark.parametrize("first_rank", [0, 1, 2])
def test_env_the_user_set_on_every_pod_is_warned_of_for_each_pod_whose_value_differs(
    first_rank: int,
) -> None:
    pods = pods_of(3, env=[{"name": "RANK", "value": "1"}])
    pod_patches.forget()

    answers = {
        rank: reused(pods[rank], "default", "")
        for rank in (first_rank, *(r for r in range(3) if r != first_rank))
    }

    assert pod_patches.counts() == pod_patches.Counts(keyed=3, reused=2, full=1, drafted=2)
    assert answers == {rank: full(pod, "default", "") for rank, pod in enumerate(pods)}
    kept = "env RANK in container pytorch was set by the user and is kept"
    warned = {rank for rank, answer in answers.items() if kept in jsoncodec.loads(answer)[1]}
    assert warned == {0, 2}


def indexed_job_pods(completions: int) -> list[Obj]:
    workload = indexed_job("ernie", "paddle", completions=completions)
    stored = mutate_workload(workload, "CREATE", "default", [workload]).workload
    return [
        with_own_token_volume(pod, f"{i:05x}")
        for i, pod in enumerate(controller_pods(stored, "default", REALISTIC))
    ]


@pytest.mark.parametrize("made_by", ["StatefulSet", "Indexed Job"])
def test_a_workloads_later_pods_are_not_mutated_in_full(made_by: str) -> None:
    pods = pods_of(4) if made_by == "StatefulSet" else indexed_job_pods(4)
    pod_patches.forget()

    first = reused(pods[0], "default", "")
    after_first = pod_patches.counts()
    later = [reused(pod, "default", "") for pod in pods[1:]]

    assert after_first == pod_patches.Counts(keyed=1, reused=0, full=1, drafted=0)
    assert pod_patches.counts() == pod_patches.Counts(keyed=4, reused=3, full=1, drafted=0)
    assert [first, *later] == [full(pod, "default", "") for pod in pods]
    assert len({first, *later}) == 4


def test_a_crowded_pod_is_mutated_in_full_and_never_keyed() -> None:
    pods = pods_of(2)
    sidecars = [
        {"name": f"side-{n}", "image": "s:1"} for n in range(pod_patches.MAX_SHARED_CONTAINERS)
    ]
    for pod in pods:
        pod["spec"]["containers"] += copy.deepcopy(sidecars)
    pod_patches.forget()

    answers = [reused(pod, "default", "") for pod in pods]

    assert pod_patches.counts() == pod_patches.Counts(keyed=0, reused=0, full=2, drafted=0)
    assert answers == [full(pod, "default", "") for pod in pods]


def test_kept_patches_are_bounded() -> None:
    pod_patches.forget()
    for replicas in range(1, pod_patches.MAX_KEPT + 20):
        pod = pods_of(1, {contract.SHM_SIZE: f"{replicas}Mi"})[0]
        pod_patches.pod_patch(pod, "default")

    assert pod_patches.kept_count() == pod_patches.MAX_KEPT


def test_a_pod_that_reports_progress_is_mutated_in_full_with_its_endpoint() -> None:
    endpoint = ProgressEndpoint("https://trainhook.trainhook-system.svc:8443", "CA PEM")
    pods = pods_of(3, {contract.REPORT_PROGRESS: "true"})
    expected = [
        jsoncodec.dumps([diff(pod, m.pod), m.warnings])
        for pod in pods
        for m in [mutate_pod(pod, "default", progress=endpoint)]
    ]
    pod_patches.forget()
    answers = []
    for pod in pods:
        patch, warnings = pod_patches.pod_patch(pod, "default", progress=endpoint)
        answers.append(jsoncodec.dumps([patch, warnings]))

    assert answers == expected
    assert pod_patches.counts() == pod_patches.Counts(keyed=3, reused=0, full=3, drafted=0)
    assert b"trainhook.trainhook-system.svc:8443" in answers[1]
