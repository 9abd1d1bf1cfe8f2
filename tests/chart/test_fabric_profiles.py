"""webhook.fabricProfiles: the cluster's fabric profiles, in a ConfigMap the webhook reads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from tests.chart.rendering import NEWEST_KUBERNETES, render, render_error, validate_strictly
from webhook.core.fabrics.schema import parse_profiles

PROFILES = {
    "efa-p5": {
        "ncclNet": "AWS Libfabric",
        "env": {"FI_PROVIDER": "efa", "NCCL_IB_GID_INDEX": "3"},
        "resources": {"vpc.amazonaws.com/efa": 32},
    },
    "infiniband": {
        "ncclNet": "IB",
        "resources": {"rdma/ib": "1"},
        "capabilities": ["IPC_LOCK"],
        "resourceClaims": [{"name": "ib", "resourceClaimTemplateName": "ib-all"}],
    },
}
VALUES = {"webhook": {"fabricProfiles": PROFILES}}
MOUNTED = "/etc/trainhook/fabric-profiles/profiles.yaml"


def test_without_profiles_the_webhook_has_no_configmap_flag_or_mount() -> None:
    rendered = render()
    assert "trainhook-webhook-fabric-profiles" not in rendered.names("ConfigMap")
    container = rendered.container("Deployment", "trainhook-webhook")
    assert not [a for a in container["args"] if a.startswith("--fabric-profiles")]
    assert "fabric-profiles" not in {m["name"] for m in container["volumeMounts"]}


def test_the_configmap_holds_the_profiles_as_the_webhook_reads_them() -> None:
    configmap = render(VALUES).named("ConfigMap", "trainhook-webhook-fabric-profiles")
    data = yaml.safe_load(configmap["data"]["profiles.yaml"])
    assert data == PROFILES
    assert sorted(parse_profiles(data, "profiles.yaml")) == ["efa-p5", "infiniband"]


def test_the_webhook_reads_the_mounted_file_at_start() -> None:
    rendered = render(VALUES)
    container = rendered.container("Deployment", "trainhook-webhook")
    assert f"--fabric-profiles={MOUNTED}" in container["args"]
    assert {
        "name": "fabric-profiles",
        "mountPath": "/etc/trainhook/fabric-profiles",
        "readOnly": True,
    } in container["volumeMounts"]
    spec = rendered.named("Deployment", "trainhook-webhook")["spec"]["template"]["spec"]
    assert {
        "name": "fabric-profiles",
        "configMap": {"name": "trainhook-webhook-fabric-profiles"},
    } in spec["volumes"]


def test_a_change_of_the_profiles_rolls_the_webhooks_pods() -> None:
    def checksum(values: Mapping[str, Any]) -> str:
        deployment = render(values).named("Deployment", "trainhook-webhook")
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/fabric-profiles"])

    changed = {"webhook": {"fabricProfiles": {**PROFILES, "extra": {"ncclNet": "IB"}}}}
    assert checksum(VALUES) != checksum(changed)


def test_the_rendered_objects_validate_for_the_newest_kubernetes() -> None:
    rendered = render(VALUES, kube_version=NEWEST_KUBERNETES)
    validate_strictly(rendered.named("ConfigMap", "trainhook-webhook-fabric-profiles"), "1.37")
    validate_strictly(rendered.named("Deployment", "trainhook-webhook"), "1.37")


def test_helm_refuses_a_profile_without_its_nccl_network() -> None:
    error = render_error({"webhook": {"fabricProfiles": {"mine": {"env": {"A": "b"}}}}})
    assert "- webhook.fabricProfiles.mine: ncclNet is required" in error.splitlines()


def test_helm_refuses_a_profile_field_the_webhook_does_not_know() -> None:
    error = render_error({"webhook": {"fabricProfiles": {"mine": {"ncclNet": "IB", "envs": {}}}}})
    assert "- webhook.fabricProfiles.mine: Additional property envs is not allowed" in (
        error.splitlines()
    )
