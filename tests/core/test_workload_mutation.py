"""What a StatefulSet or Indexed Job carries after admission: the stamp and little else."""

import json
from typing import Any

import jsonpatch

from tests.support.builders import indexed_job, statefulset
from webhook.core.mutation.admit import Found, Request, admit


def admitted(obj: dict[str, Any], operation: str = "CREATE", **kwargs: Any) -> dict[str, Any]:
    outcome = admit(Request(obj["kind"], operation, obj, "default"), Found(**kwargs))
    assert outcome is not None
    patched: dict[str, Any] = jsonpatch.apply_patch(obj, outcome.patch)
    return patched


def test_a_statefulset_gets_labels_stamp_service_and_parallel_start_and_nothing_else() -> None:
    master = statefulset("pt-master", "pytorch", role="master", job="pt")
    worker = statefulset(
        "pt-worker",
        "pytorch",
        role="worker",
        job="pt",
        replicas=2,
        annotations={"trainhook.io/gpus": "2", "trainhook.io/backoff-limit": "3"},
    )
    outcome = admit(Request("StatefulSet", "CREATE", worker, "default"), Found([master]))
    assert outcome is not None
    assert outcome.patch == [
        {
            "op": "add",
            "path": "/spec/template/metadata/labels/trainhook.io~1framework",
            "value": "pytorch",
        },
        {
            "op": "add",
            "path": "/spec/template/metadata/labels/trainhook.io~1role",
            "value": "worker",
        },
        {"op": "add", "path": "/spec/template/metadata/labels/trainhook.io~1job", "value": "pt"},
        {
            "op": "add",
            "path": "/spec/template/metadata/annotations",
            "value": {
                "trainhook.io/gpus": "2",
                "trainhook.io/topology": '{"master":1,"worker":2}',
                "trainhook.io/hosts": (
                    '{"master":{"pod":"pt-master","start":0,"service":"pt"},'
                    '"worker":{"pod":"pt-worker","start":0,"service":"pt","nproc":2}}'
                ),
            },
        },
        {"op": "add", "path": "/spec/serviceName", "value": "pt"},
        {"op": "add", "path": "/spec/podManagementPolicy", "value": "Parallel"},
    ]


def test_admitting_the_admitted_statefulset_again_changes_nothing() -> None:
    sts = admitted(statefulset("ddp", "pytorch", replicas=3))
    for operation in ("CREATE", "UPDATE"):
        outcome = admit(Request("StatefulSet", operation, sts, "default"))
        assert outcome is not None and outcome.patch == []


def test_an_api_server_defaulted_ordered_ready_policy_becomes_parallel_on_create() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2)
    sts["spec"]["podManagementPolicy"] = "OrderedReady"
    assert admitted(sts)["spec"]["podManagementPolicy"] == "Parallel"


def test_ordered_start_keeps_ordered_ready() -> None:
    sts = statefulset(
        "ddp", "pytorch", replicas=2, annotations={"trainhook.io/ordered-start": "true"}
    )
    sts["spec"]["podManagementPolicy"] = "OrderedReady"
    assert admitted(sts)["spec"]["podManagementPolicy"] == "OrderedReady"
    raw = statefulset("ddp", "pytorch", annotations={"trainhook.io/ordered-start": "true"})
    assert "podManagementPolicy" not in admitted(raw)["spec"]


def test_an_update_restamps_the_template_but_leaves_immutable_fields_alone() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2)
    sts["spec"]["podManagementPolicy"] = "OrderedReady"
    updated = admitted(sts, operation="UPDATE")
    assert "serviceName" not in updated["spec"]
    assert updated["spec"]["podManagementPolicy"] == "OrderedReady"
    assert updated["spec"]["template"]["metadata"]["annotations"]["trainhook.io/topology"] == (
        '{"worker":2}'
    )


def test_a_user_service_name_is_kept_and_used_in_host_names() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2)
    sts["spec"]["serviceName"] = "trainers"
    result = admitted(sts)
    assert result["spec"]["serviceName"] == "trainers"
    hosts = json.loads(result["spec"]["template"]["metadata"]["annotations"]["trainhook.io/hosts"])
    assert hosts == {"worker": {"pod": "ddp", "start": 0, "service": "trainers"}}


def test_workload_annotations_win_over_the_templates_and_lifecycle_ones_stay_on_the_workload() -> (
    None
):
    sts = statefulset(
        "ddp",
        "pytorch",
        annotations={"trainhook.io/port": "29500", "trainhook.io/ttl-seconds-after-finished": "60"},
    )
    sts["spec"]["template"]["metadata"]["annotations"] = {
        "trainhook.io/port": "1234",
        "trainhook.io/shm-size": "1Gi",
    }
    annotations = admitted(sts)["spec"]["template"]["metadata"]["annotations"]
    assert annotations["trainhook.io/port"] == "29500"
    assert annotations["trainhook.io/shm-size"] == "1Gi"
    assert "trainhook.io/ttl-seconds-after-finished" not in annotations


def test_an_indexed_job_gets_its_subdomain_and_stamp() -> None:
    job = admitted(indexed_job("ernie", "paddle", completions=3))
    template = job["spec"]["template"]
    assert template["spec"]["subdomain"] == "ernie"
    assert template["metadata"]["annotations"]["trainhook.io/hosts"] == (
        '{"worker":{"pod":"ernie","start":0,"service":"ernie"}}'
    )


def test_jobs_are_only_mutated_on_create_and_unlabelled_workloads_never() -> None:
    job = indexed_job("ernie", "paddle", completions=3)
    assert admit(Request("Job", "UPDATE", job, "default")) is None
    plain = statefulset("web", "pytorch")
    del plain["metadata"]["labels"]["trainhook.io/framework"]
    assert admit(Request("StatefulSet", "CREATE", plain, "default")) is None


def test_siblings_of_other_jobs_or_namespaces_do_not_join_the_topology() -> None:
    worker = statefulset("pt-worker", "pytorch", role="worker", job="pt", replicas=2)
    other_job = statefulset("x-master", "pytorch", role="master", job="x")
    other_ns = statefulset("pt-master", "pytorch", role="master", job="pt", namespace="elsewhere")
    result = admitted(worker, siblings=[other_job, other_ns, worker])
    assert result["spec"]["template"]["metadata"]["annotations"]["trainhook.io/topology"] == (
        '{"worker":2}'
    )


def test_a_role_scaled_to_zero_leaves_the_topology() -> None:
    master = statefulset("pt-master", "pytorch", role="master", job="pt", replicas=0)
    worker = statefulset("pt-worker", "pytorch", role="worker", job="pt", replicas=2)
    stamp = admitted(worker, siblings=[master])["spec"]["template"]["metadata"]["annotations"]
    assert stamp["trainhook.io/topology"] == '{"worker":2}'


def test_a_finished_statefulset_scaled_to_zero_keeps_the_stamp_it_ran_with() -> None:
    sts = admitted(statefulset("ddp", "pytorch", replicas=3))
    sts["metadata"]["annotations"] = {"trainhook.io/phase": "Succeeded"}
    sts["spec"]["replicas"] = 0
    outcome = admit(Request("StatefulSet", "UPDATE", sts, "default"))
    assert outcome is not None and outcome.patch == []
    assert sts["spec"]["template"]["metadata"]["annotations"]["trainhook.io/topology"] == (
        '{"worker":3}'
    )


def test_a_suspended_statefulset_scaled_to_zero_keeps_the_stamp_it_resumes_with() -> None:
    sts = admitted(statefulset("ddp", "pytorch", replicas=3))
    sts["metadata"]["annotations"] = {"trainhook.io/suspended-replicas": "3"}
    sts["spec"]["replicas"] = 0
    outcome = admit(Request("StatefulSet", "UPDATE", sts, "default"))
    assert outcome is not None and outcome.patch == []
