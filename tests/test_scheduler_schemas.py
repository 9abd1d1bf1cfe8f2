"""The vendored scheduler schemas accept what their projects document and refuse what they refuse.

The samples are the schedulers' own (Kueue's docs example pod group, the PodGroups their READMEs
show), so a check that accepted nothing or everything would show here first.
"""

from __future__ import annotations

from typing import Any

from tests.schemas import (
    custom_resource_problems,
    kueue_gate,
    kueue_group_problems,
    kueue_pod_problems,
)


def volcano_podgroup(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": spec,
    }


def coscheduling_podgroup(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": "ml"},
        "spec": spec,
    }


def kueue_pod(name: str, group: str = "sample-group", total: str = "2") -> dict[str, Any]:
    """A pod of Kueue's own docs example (site/static/examples/pods-kueue/kueue-pod-group.yaml)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"sample-{name}-",
            "labels": {
                "kueue.x-k8s.io/queue-name": "user-queue",
                "kueue.x-k8s.io/pod-group-name": group,
            },
            "annotations": {"kueue.x-k8s.io/pod-group-total-count": total},
        },
        "spec": {"restartPolicy": "Never", "containers": [{"name": "sleep", "image": "busybox"}]},
    }


def test_a_volcano_podgroup_with_queue_resources_and_priority_is_accepted() -> None:
    podgroup = volcano_podgroup(
        minMember=3,
        queue="research",
        minResources={"cpu": "6", "memory": "12Gi", "nvidia.com/gpu": 3},
        priorityClassName="high",
    )
    assert custom_resource_problems(podgroup) == []


def test_volcano_refuses_a_negative_min_member_an_unknown_field_and_a_bad_quantity() -> None:
    podgroup = volcano_podgroup(minMember=-1, minResources={"cpu": "lots"}, minMembers=3)
    problems = custom_resource_problems(podgroup)
    assert [problem.split(" does not match ")[0] for problem in problems] == [
        "spec.minMember: -1 is less than the minimum of 0",
        "spec.minResources.cpu: 'lots'",
        "spec: Additional properties are not allowed ('minMembers' was unexpected)",
    ]


def test_a_coscheduling_podgroup_with_timeout_and_resources_is_accepted() -> None:
    podgroup = coscheduling_podgroup(
        minMember=2, minResources={"cpu": "2", "memory": "1Gi"}, scheduleTimeoutSeconds=60
    )
    assert custom_resource_problems(podgroup) == []


def test_coscheduling_refuses_a_zero_min_member_and_a_volcano_only_field() -> None:
    podgroup = coscheduling_podgroup(minMember=0, queue="default")
    assert custom_resource_problems(podgroup) == [
        "spec.minMember: 0 is less than the minimum of 1",
        "spec: Additional properties are not allowed ('queue' was unexpected)",
    ]


def test_a_podgroup_of_an_unserved_version_or_with_a_bad_name_is_refused() -> None:
    wrong_version = coscheduling_podgroup(minMember=1) | {"apiVersion": "scheduling.x-k8s.io/v1"}
    assert custom_resource_problems(wrong_version) == [
        "no vendored CRD serves apiVersion 'scheduling.x-k8s.io/v1' kind 'PodGroup'"
    ]
    bad_name = volcano_podgroup(minMember=1)
    bad_name["metadata"]["name"] = "Train_1"
    assert custom_resource_problems(bad_name) == [
        "metadata.name: 'Train_1' is not a DNS-1123 subdomain"
    ]


def test_kueues_docs_example_pod_group_is_one_group_of_two() -> None:
    assert kueue_group_problems([kueue_pod("leader"), kueue_pod("worker")]) == []


def test_kueue_refuses_a_group_without_its_count_or_with_an_uppercase_name() -> None:
    uncounted = kueue_pod("leader")
    del uncounted["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"]
    assert kueue_pod_problems(uncounted) == [
        "metadata.annotations: 'kueue.x-k8s.io/pod-group-total-count' is a required property"
    ]
    assert kueue_pod_problems(kueue_pod("leader", group="Sample", total="0")) == [
        "metadata.annotations.kueue.x-k8s.io/pod-group-total-count: '0' does not match "
        "'^\\\\+?0*[1-9][0-9]{0,17}$'",
        "metadata.labels.kueue.x-k8s.io/pod-group-name: 'Sample' does not match "
        "'^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$'",
    ]


def test_pods_that_split_or_miscount_a_kueue_group_are_not_one_group() -> None:
    assert kueue_group_problems([kueue_pod("a"), kueue_pod("b", group="other")]) == [
        "kueue.x-k8s.io/pod-group-name: the pods disagree: ['other', 'sample-group']"
    ]
    assert kueue_group_problems([kueue_pod("a", total="3"), kueue_pod("b", total="3")]) == [
        "kueue.x-k8s.io/pod-group-total-count: 3 counted, 2 pods in the group"
    ]


def test_kueues_admission_gate_is_the_one_its_docs_name() -> None:
    assert kueue_gate() == "kueue.x-k8s.io/admission"


def test_kai_accepts_its_documented_external_podgroup_and_refuses_an_empty_gang() -> None:
    podgroup: dict[str, Any] = {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {"name": "post-training-pipeline", "namespace": "default"},
        "spec": {
            "minMember": 5,
            "queue": "default-queue",
            "priorityClassName": "normal",
            "topologyConstraint": {
                "topology": "cluster-topology",
                "requiredTopologyLevel": "topology.kubernetes.io/zone",
            },
        },
    }
    assert custom_resource_problems(podgroup) == []
    podgroup["spec"]["minMember"] = 0
    podgroup["spec"]["minResources"] = {"cpu": "1"}
    problems = custom_resource_problems(podgroup)
    assert [problem.split(" ")[0] for problem in problems] == ["spec.minMember:", "spec:"]


def test_volcano_accepts_a_network_topology_by_tier_number_or_name_and_refuses_a_third_mode() -> (
    None
):
    for highest in ({"highestTierAllowed": 2}, {"highestTierName": "rack"}):
        podgroup = volcano_podgroup(minMember=2, networkTopology={"mode": "hard", **highest})
        assert custom_resource_problems(podgroup) == []
    podgroup = volcano_podgroup(minMember=2, networkTopology={"mode": "strict"})
    [problem] = custom_resource_problems(podgroup)
    assert problem.startswith("spec.networkTopology.mode: 'strict' is not one of")


def test_kueue_takes_one_topology_request_per_pod_each_a_label_key() -> None:
    pod = kueue_pod("a")
    pod["metadata"]["annotations"] |= {
        "kueue.x-k8s.io/podset-required-topology": "cloud.example.com/rack",
        "kueue.x-k8s.io/pod-group-pod-index-label": "trainhook.io/role-index",
    }
    assert kueue_pod_problems(pod) == []
    pod["metadata"]["annotations"]["kueue.x-k8s.io/podset-preferred-topology"] = "rack block"
    problems = kueue_pod_problems(pod)
    assert sorted(p.split(":")[0] for p in problems) == [
        "metadata.annotations",
        "metadata.annotations.kueue.x-k8s.io/podset-preferred-topology",
    ]
