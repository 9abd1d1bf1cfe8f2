"""`trainhook.io/nvlink-domain`: every pod of a role that sets it claims an IMEX channel of the
job's ComputeDomain `<job>-nvlink`, in the pod and in its training container; nothing twice.

The golden render tests/core/fabrics/nvlink-domain.yaml is an MPI job whose workers ask for the
domain and whose launcher does not, as in NVIDIA's own MPI example for ComputeDomains;
`python -m tests.core.test_nvlink_domain` writes it again after a deliberate change.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.support.builders import bare_pod, indexed_job, statefulset
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.mutation import pod_patches
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.render import RenderError, render_all

GOLDEN = Path(__file__).parent / "fabrics" / "nvlink-domain.yaml"
NVLINK = contract.NVLINK_DOMAIN


def mpi_job(
    workers: dict[str, str], launcher: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    first = indexed_job("hvd-launcher", "mpi", completions=1, role="launcher", job="hvd")
    if launcher:
        first["metadata"]["annotations"] = launcher
    rest = statefulset(
        "hvd-worker",
        "mpi",
        role="worker",
        job="hvd",
        replicas=2,
        annotations={"trainhook.io/gpus": "4", **workers},
    )
    return [first, rest]


def rendered_pods(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [pod.pod for pod in render_all(documents).pods]


def refusal(documents: list[dict[str, Any]]) -> str:
    with pytest.raises(RenderError) as error:
        render_all(documents)
    return str(error.value)


def test_the_golden_render_of_an_mpi_job_whose_workers_share_an_nvlink_domain() -> None:
    expected = list(yaml.safe_load_all(GOLDEN.read_text()))
    assert rendered_pods(mpi_job({NVLINK: "true"})) == expected


@pytest.mark.parametrize("version", ["1.32", "1.37"])
def test_the_pods_with_the_channel_claim_validate_against_kubernetes(version: str) -> None:
    for pod in rendered_pods(mpi_job({NVLINK: "true"})):
        kubernetes_validate.validate(pod, version, strict=True)


def test_each_worker_claims_the_jobs_channel_and_the_launcher_none() -> None:
    launcher, *workers = rendered_pods(mpi_job({NVLINK: "true"}))
    assert "resourceClaims" not in launcher["spec"]
    assert "claims" not in launcher["spec"]["containers"][0].get("resources", {})
    for pod in workers:
        assert pod["spec"]["resourceClaims"] == [
            {"name": "nvlink-channel", "resourceClaimTemplateName": "hvd-nvlink"}
        ]
        (container,) = pod["spec"]["containers"]
        assert container["resources"]["claims"] == [{"name": "nvlink-channel"}]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_render_shows_the_compute_domain_the_sweeper_makes_valid_against_the_drivers_crd() -> None:
    from tests.schemas import custom_resource_problems

    (domain,) = render_all(mpi_job({NVLINK: "true"})).compute_domains
    assert domain == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomain",
        "metadata": {
            "name": "hvd-nvlink",
            "namespace": "default",
            "labels": {"trainhook.io/job": "hvd"},
        },
        "spec": {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "hvd-nvlink"}}},
    }
    assert custom_resource_problems(domain) == []


def test_false_or_unset_adds_no_claim() -> None:
    for settings in ({}, {NVLINK: "false"}):
        for pod in rendered_pods(mpi_job(settings)):
            assert "resourceClaims" not in pod["spec"]
        assert render_all(mpi_job(settings)).compute_domains == []


def test_a_fabric_profile_and_the_nvlink_domain_give_one_pod_both_claims() -> None:
    from webhook.core.fabrics.registry import use_profiles
    from webhook.core.fabrics.schema import parse_profiles

    profile = {
        "ncclNet": "IB",
        "resourceClaims": [{"name": "rdma", "resourceClaimTemplateName": "ib"}],
    }
    use_profiles(parse_profiles({"ib-dra": profile}, "profiles.yaml"))
    try:
        fabric = {contract.FABRIC: "ib-dra"}
        pods = rendered_pods(mpi_job({NVLINK: "true", **fabric}, launcher=fabric))
    finally:
        use_profiles({})
    for pod in pods[1:]:
        assert pod["spec"]["resourceClaims"] == [
            {"name": "rdma", "resourceClaimTemplateName": "ib"},
            {"name": "nvlink-channel", "resourceClaimTemplateName": "hvd-nvlink"},
        ]
        assert pod["spec"]["containers"][0]["resources"]["claims"] == [
            {"name": "rdma"},
            {"name": "nvlink-channel"},
        ]


# --- the webhook on its own output ------------------------------------------------------------


def admitted(obj: dict[str, Any]) -> tuple[dict[str, Any], list[Any], list[str]]:
    outcome = admit(Request("Pod", "CREATE", obj, "default"), Found())
    assert outcome is not None
    return jsonpatch.apply_patch(copy.deepcopy(obj), outcome.patch), outcome.patch, outcome.warnings


def test_a_pod_with_the_channel_claim_admitted_again_changes_nothing() -> None:
    pod = bare_pod("solo", "pytorch", annotations={NVLINK: "true", "trainhook.io/gpus": "8"})
    patched, _, _ = admitted(pod)
    assert patched["spec"]["resourceClaims"] == [
        {"name": "nvlink-channel", "resourceClaimTemplateName": "solo-nvlink"}
    ]
    assert patched["spec"]["schedulingGates"] == [{"name": contract.WAITING_FOR_OWNED_OBJECTS}]
    pod_patches.forget()
    again, second, warnings = admitted(patched)
    assert (second, warnings) == ([], [])
    assert again == patched


def test_the_workers_pods_admitted_twice_change_nothing() -> None:
    for pod in rendered_pods(mpi_job({NVLINK: "true"})):
        outcome = admit(Request("Pod", "CREATE", copy.deepcopy(pod), "default"), Found())
        assert outcome is not None
        assert (outcome.patch, outcome.warnings) == ([], [])


def test_a_pod_that_already_claims_the_channel_itself_is_kept_as_written() -> None:
    pod = bare_pod("solo", "pytorch", annotations={NVLINK: "true"})
    pod["spec"]["resourceClaims"] = [
        {"name": "nvlink-channel", "resourceClaimTemplateName": "solo-nvlink"}
    ]
    pod["spec"]["containers"][0]["resources"] = {"claims": [{"name": "nvlink-channel"}]}
    patched, _, _ = admitted(pod)
    assert patched["spec"]["resourceClaims"] == pod["spec"]["resourceClaims"]
    assert patched["spec"]["containers"][0]["resources"]["claims"] == [{"name": "nvlink-channel"}]


# --- refusals, each one line ------------------------------------------------------------------


def test_a_value_other_than_true_or_false_is_refused_when_the_statefulset_is_admitted() -> None:
    _, workers = mpi_job({NVLINK: "yes"})
    with pytest.raises(TrainhookError) as error:
        admit(Request("StatefulSet", "CREATE", workers, "default"), Found())
    assert str(error.value) == "trainhook.io/nvlink-domain: invalid value 'yes': one of true, false"


def test_a_value_other_than_true_or_false_is_refused_by_render() -> None:
    assert refusal(mpi_job({NVLINK: "on"})) == (
        "trainhook.io/nvlink-domain: invalid value 'on': one of true, false"
    )


def test_a_pod_claim_of_the_channels_name_from_another_template_is_refused() -> None:
    pod = bare_pod("solo", "pytorch", annotations={NVLINK: "true"})
    pod["spec"]["resourceClaims"] = [{"name": "nvlink-channel", "resourceClaimTemplateName": "x"}]
    with pytest.raises(TrainhookError) as error:
        admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert str(error.value) == (
        "trainhook.io/nvlink-domain: invalid value 'true': the job's IMEX channel is claim "
        "nvlink-channel from ResourceClaimTemplate solo-nvlink, the pod's claim nvlink-channel "
        "is {'name': 'nvlink-channel', 'resourceClaimTemplateName': 'x'}: rename the pod's claim"
    )


def _write_golden() -> None:
    pods = rendered_pods(mpi_job({NVLINK: "true"}))
    GOLDEN.write_text(yaml.safe_dump_all(pods, sort_keys=False, width=100))


if __name__ == "__main__":
    _write_golden()
