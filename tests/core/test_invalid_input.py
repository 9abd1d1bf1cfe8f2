"""Every invalid trainhook.io/ label and annotation is refused with a message naming it."""

import re
from typing import Any

import pytest

from tests.support.builders import indexed_job, statefulset
from webhook.core.errors import TrainhookError
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.job.workload import read_role
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.values import DNS_LABEL


def refusal(obj: dict[str, Any], kind: str = "StatefulSet", **kwargs: Any) -> TrainhookError:
    with pytest.raises(TrainhookError) as caught:
        admit(Request(kind, "CREATE", obj, "default"), Found(**kwargs))
    return caught.value


def annotated(key: str, value: str, framework: str = "pytorch") -> dict[str, Any]:
    return statefulset("t", framework, annotations={f"trainhook.io/{key}": value})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("port", "http", "trainhook.io/port: invalid value 'http': an integer from 1 to 65535"),
        ("port", "70000", "trainhook.io/port: invalid value '70000': an integer from 1 to 65535"),
        ("port", "0", "trainhook.io/port: invalid value '0': an integer from 1 to 65535"),
        ("gpus", "-1", "trainhook.io/gpus: invalid value '-1': a whole number, 0 or more"),
        ("gpus", "two", "trainhook.io/gpus: invalid value 'two': a whole number, 0 or more"),
        (
            "gpu-resource",
            "gpu",
            "trainhook.io/gpu-resource: invalid value 'gpu': an extended resource name such as "
            "nvidia.com/gpu or huawei.com/Ascend910",
        ),
        (
            "gpu-resource",
            "kubernetes.io/gpu",
            "trainhook.io/gpu-resource: invalid value 'kubernetes.io/gpu': an extended resource "
            "name such as nvidia.com/gpu or huawei.com/Ascend910",
        ),
        (
            "shm-size",
            "lots",
            "trainhook.io/shm-size: invalid value 'lots': a positive Kubernetes quantity such as "
            "1Gi or 512Mi",
        ),
        (
            "shm-size",
            "0Gi",
            "trainhook.io/shm-size: invalid value '0Gi': a positive Kubernetes quantity such as "
            "1Gi or 512Mi",
        ),
        (
            "scheduler",
            "yunikorn",
            "trainhook.io/scheduler: invalid value 'yunikorn': one of volcano, coscheduling, "
            "kueue, kubernetes, kai",
        ),
        (
            "schedule-timeout-seconds",
            "10m",
            "trainhook.io/schedule-timeout-seconds: invalid value '10m': a whole number of seconds "
            "from 1 to 2147483647",
        ),
        (
            "schedule-timeout-seconds",
            "0",
            "trainhook.io/schedule-timeout-seconds: invalid value '0': a whole number of seconds "
            "from 1 to 2147483647",
        ),
        (
            "container",
            "Main_Container",
            "trainhook.io/container: invalid value 'Main_Container': a container name "
            "(a DNS-1123 label)",
        ),
        (
            "nproc-per-node",
            "0",
            "trainhook.io/nproc-per-node: invalid value '0': a whole number >= 1, or auto",
        ),
        (
            "elastic",
            "4:2",
            "trainhook.io/elastic: invalid value '4:2': min:max nodes, whole numbers with "
            "1 <= min <= max, e.g. 2:4",
        ),
        (
            "elastic",
            "3",
            "trainhook.io/elastic: invalid value '3': min:max nodes, whole numbers with "
            "1 <= min <= max, e.g. 2:4",
        ),
        (
            "queue",
            "Team A",
            "trainhook.io/queue: invalid value 'Team A': a Volcano or KAI queue, or Kueue "
            "LocalQueue, name (a DNS-1123 label)",
        ),
        (
            "ordered-start",
            "yes",
            "trainhook.io/ordered-start: invalid value 'yes': one of true, false",
        ),
        (
            "success-policy",
            "majority",
            "trainhook.io/success-policy: invalid value 'majority': one of all, rank0, any-worker, "
            "role=<role>",
        ),
        (
            "clean-pod-policy",
            "all",
            "trainhook.io/clean-pod-policy: invalid value 'all': one of All, Running, None",
        ),
        (
            "backoff-limit",
            "-3",
            "trainhook.io/backoff-limit: invalid value '-3': a whole number >= 0",
        ),
        (
            "restart-policy",
            "Always",
            "trainhook.io/restart-policy: invalid value 'Always': one of OnFailure, ExitCode, "
            "Never, RestartJob, RestartJobInPlace",
        ),
        (
            "ttl-seconds-after-finished",
            "1h",
            "trainhook.io/ttl-seconds-after-finished: invalid value '1h': a whole number of "
            "seconds >= 0",
        ),
        (
            "max-restarts",
            "-1",
            "trainhook.io/max-restarts: invalid value '-1': a whole number >= 0",
        ),
        (
            "active-deadline-seconds",
            "0",
            "trainhook.io/active-deadline-seconds: invalid value '0': a whole number of "
            "seconds >= 1",
        ),
    ],
)
def test_an_invalid_annotation_is_refused_naming_key_value_and_what_is_allowed(
    key: str, value: str, message: str
) -> None:
    error = refusal(annotated(key, value))
    assert (str(error), error.status_code) == (message, 400)


def test_elastic_is_refused_for_frameworks_other_than_pytorch() -> None:
    assert str(refusal(annotated("elastic", "1:2", framework="jax"))) == (
        "trainhook.io/elastic: invalid value '1:2': elastic training is not available for jax jobs"
    )


def test_max_restarts_is_refused_for_frameworks_other_than_pytorch() -> None:
    assert str(refusal(annotated("max-restarts", "3", framework="tensorflow"))) == (
        "trainhook.io/max-restarts: invalid value '3': torchrun restarts are not available for "
        "tensorflow jobs"
    )


def test_an_unknown_framework_is_refused_with_the_list_of_frameworks() -> None:
    assert str(refusal(statefulset("t", "caffe"))) == (
        "trainhook.io/framework: invalid value 'caffe': one of pytorch, tensorflow, paddle, "
        "mindspore, mpi, xgboost, jax, generic"
    )


def test_a_role_the_framework_does_not_have_is_refused() -> None:
    assert str(refusal(statefulset("t", "pytorch", role="chief"))) == (
        "trainhook.io/role: invalid value 'chief': pytorch roles are master, worker"
    )


def test_a_generic_role_must_be_a_dns_label() -> None:
    assert str(refusal(statefulset("t", "generic", role="Param_Server"))) == (
        "trainhook.io/role: invalid value 'Param_Server': a DNS-1035 label"
    )


@pytest.mark.parametrize(
    ("framework", "role"),
    [(f.name, role) for f in FRAMEWORKS.values() for role in f.roles],
)
def test_every_role_a_framework_names_is_a_dns_label_so_it_is_admitted_without_a_check(
    framework: str, role: str
) -> None:
    assert DNS_LABEL.match(role) and len(role) <= 63
    assert read_role({"trainhook.io/role": role}, FRAMEWORKS[framework]) == role


def test_a_job_name_that_cannot_name_a_service_is_refused() -> None:
    assert str(refusal(statefulset("t", "pytorch", job="My.Job"))) == (
        "trainhook.io/job: invalid value 'My.Job': a DNS-1035 label: lower-case letters, digits "
        "and '-', at most 63"
    )


def test_a_workload_name_that_cannot_be_the_default_job_asks_for_the_job_label() -> None:
    assert str(refusal(statefulset("train.v2", "pytorch"))) == (
        "trainhook.io/job: invalid value None: the job name defaults to the workload name "
        "'train.v2', which is not a DNS-1035 label (it names the headless Service): set the label"
    )


def test_a_job_that_is_not_indexed_is_refused_as_a_policy() -> None:
    job = indexed_job("j", "paddle", completions=2)
    del job["spec"]["completionMode"]
    error = refusal(job, kind="Job")
    assert (str(error), error.status_code) == (
        "Job j: a training job needs spec.completionMode: Indexed, so each pod gets a stable "
        "index (found NonIndexed)",
        403,
    )


def test_an_indexed_job_that_would_not_run_every_rank_at_once_is_refused() -> None:
    job = indexed_job("j", "paddle", completions=3)
    job["spec"]["parallelism"] = 1
    assert str(refusal(job, kind="Job")) == (
        "Job j: spec.parallelism (1) must equal spec.completions (3) so that every rank runs "
        "at once"
    )


def test_two_workloads_playing_one_role_are_refused() -> None:
    first = statefulset("a", "pytorch", role="worker", job="pt")
    second = statefulset("b", "pytorch", role="worker", job="pt")
    error = refusal(first, siblings=[second])
    assert (str(error), error.status_code) == (
        "trainhook.io/role: role 'worker' of job 'pt' is played by both StatefulSet a and "
        "StatefulSet b; give each its own role",
        403,
    )


def test_a_job_mixing_frameworks_is_refused() -> None:
    first = statefulset("a", "pytorch", role="master", job="pt")
    second = statefulset("b", "tensorflow", role="worker", job="pt")
    assert str(refusal(first, siblings=[second])) == (
        "trainhook.io/framework: job 'pt' mixes frameworks 'pytorch' (StatefulSet a) and "
        "'tensorflow' (StatefulSet b)"
    )


def test_a_container_annotation_naming_no_container_lists_the_containers() -> None:
    from webhook.core.render import RenderError, render

    sts = statefulset(
        "t",
        "pytorch",
        annotations={"trainhook.io/container": "trainer"},
        containers=[{"name": "main", "image": "x"}, {"name": "sidecar", "image": "y"}],
    )
    with pytest.raises(
        RenderError,
        match=re.escape(
            "trainhook.io/container: invalid value 'trainer': "
            "no such container; the pod has main, sidecar"
        ),
    ):
        render([sts])


def test_a_gpus_annotation_contradicting_the_container_gpu_limit_is_refused_naming_both() -> None:
    containers = [{"name": "pytorch", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 2}}}]
    error = refusal(
        statefulset("ddp", "pytorch", containers=containers, annotations={"trainhook.io/gpus": "4"})
    )
    assert (str(error), error.status_code) == (
        "trainhook.io/gpus 4 contradicts the nvidia.com/gpu limit 2 of container pytorch; "
        "set one of them, or both to the same count",
        403,
    )


def test_a_gpu_limit_that_is_not_a_whole_number_is_refused_naming_the_container() -> None:
    containers = [
        {"name": "pytorch", "image": "t", "resources": {"limits": {"nvidia.com/gpu": "1.5"}}}
    ]
    error = refusal(statefulset("ddp", "pytorch", containers=containers))
    assert str(error) == (
        "resources.limits[nvidia.com/gpu]: invalid value '1.5': "
        "container pytorch: a whole number of GPUs"
    )


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {"trainhook.io/placement-topology": "rack block"},
            "trainhook.io/placement-topology: invalid value 'rack block': a node label key such "
            "as topology.kubernetes.io/zone or cloud.example.com/rack",
        ),
        (
            {"trainhook.io/placement": "preferred"},
            "trainhook.io/placement: invalid value 'preferred': read only with "
            "trainhook.io/placement-topology set (the node label key of the domain the job is "
            "kept within): set it too, or remove the placement",
        ),
        (
            {
                "trainhook.io/placement-topology": "cloud.example.com/rack",
                "trainhook.io/placement": "strict",
            },
            "trainhook.io/placement: invalid value 'strict': one of required, preferred",
        ),
        (
            {
                "trainhook.io/placement-topology": "cloud.example.com/rack",
                "trainhook.io/placement-tier": "2",
            },
            "trainhook.io/placement-tier: invalid value '2': read only with "
            "trainhook.io/scheduler: volcano and trainhook.io/placement-topology set: Volcano "
            "alone places by HyperNode tier",
        ),
        (
            {
                "trainhook.io/scheduler": "volcano",
                "trainhook.io/placement-topology": "cloud.example.com/rack",
            },
            "trainhook.io/placement-topology: invalid value 'cloud.example.com/rack': Volcano "
            "places a job by HyperNode tier, not by node label: add trainhook.io/placement-tier "
            "with the tier (a number from 1, or the tier's name) whose HyperNodes group the "
            "nodes by this label",
        ),
        (
            {
                "trainhook.io/scheduler": "volcano",
                "trainhook.io/placement-topology": "cloud.example.com/rack",
                "trainhook.io/placement-tier": "0",
            },
            "trainhook.io/placement-tier: invalid value '0': a tier from 1, or a tier name",
        ),
        (
            {
                "trainhook.io/scheduler": "volcano",
                "trainhook.io/placement-topology": "cloud.example.com/rack",
                "trainhook.io/placement-tier": "Rack_A",
            },
            "trainhook.io/placement-tier: invalid value 'Rack_A': a HyperNode tier: a whole "
            "number from 1, or a tier name (a DNS-1123 subdomain)",
        ),
    ],
)
def test_a_placement_that_cannot_be_honoured_is_refused_in_one_line(
    annotations: dict[str, str], message: str
) -> None:
    refused = refusal(statefulset("t", "pytorch", annotations=annotations))

    assert str(refused) == message


def test_a_kai_placement_names_the_topology_object_and_only_kai_reads_it() -> None:
    rack = {"trainhook.io/placement-topology": "cloud.example.com/rack"}
    refused = refusal(
        statefulset("t", "pytorch", annotations={"trainhook.io/scheduler": "kai", **rack})
    )
    assert str(refused) == (
        "trainhook.io/placement-topology: invalid value 'cloud.example.com/rack': KAI places a "
        "job by the levels of a Topology object: add trainhook.io/kai-topology with the name of "
        "the Topology that has this label as a level"
    )
    topology = {"trainhook.io/kai-topology": "cluster-topology"}
    refused = refusal(statefulset("t", "pytorch", annotations={**rack, **topology}))
    assert str(refused) == (
        "trainhook.io/kai-topology: invalid value 'cluster-topology': read only with "
        "trainhook.io/scheduler: kai and trainhook.io/placement-topology set"
    )
