"""`trainhook.io/fabric`: every training pod of the job gets what its fabric needs, pinned so that
NCCL stops rather than falls back to TCP; what conflicts is refused in one line.

The golden renders under tests/core/fabrics/ are the pods of a PyTorch job (a master and two
workers, 8 GPUs each) with each reference profile; `python -m tests.core.test_fabrics` writes
them again after a deliberate change (then read the diff: each field is traced to its vendor's
page in docs/fabrics.md).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.support.builders import bare_pod, statefulset
from webhook.cli import main
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.fabrics.registry import BUILT_IN, use_profiles
from webhook.core.fabrics.schema import ProfileError, parse_profiles
from webhook.core.mutation import pod_patches
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.render import RenderError, render_all
from webhook.server.launch import use_fabric_profiles

GOLDEN = Path(__file__).parent / "fabrics"
PROFILES = ("aws-efa", "infiniband", "gke-tcpxo")
FABRIC = contract.FABRIC


@pytest.fixture(autouse=True)
def reference_profiles() -> Iterator[None]:
    """Each test starts and ends with the reference profiles alone."""
    use_profiles({})
    pod_patches.forget()
    yield
    use_profiles({})
    pod_patches.forget()


def job(profile: str | None, **extra: str) -> list[dict[str, Any]]:
    annotations = {"trainhook.io/gpus": "8", **extra}
    if profile is not None:
        annotations[FABRIC] = profile
    return [
        statefulset("pt-master", "pytorch", role="master", job="pt", annotations={**annotations}),
        statefulset(
            "pt-worker", "pytorch", role="worker", job="pt", replicas=2, annotations={**annotations}
        ),
    ]


def rendered_pods(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [pod.pod for pod in render_all(documents).pods]


def refusal(documents: list[dict[str, Any]]) -> str:
    with pytest.raises(RenderError) as error:
        render_all(documents)
    return str(error.value)


def training(pod: dict[str, Any]) -> dict[str, Any]:
    (container,) = pod["spec"]["containers"]
    return dict(container)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    items = container.get("env") or []
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in items}


# --- golden renders, valid against the pinned API schema ------------------------------------


@pytest.mark.parametrize("profile", PROFILES)
def test_each_reference_profile_renders_its_golden_pods(profile: str) -> None:
    expected = list(yaml.safe_load_all((GOLDEN / f"{profile}.yaml").read_text()))
    assert rendered_pods(job(profile)) == expected


@pytest.mark.parametrize("profile", PROFILES)
def test_each_reference_profiles_pods_validate_against_kubernetes_1_32(profile: str) -> None:
    for pod in rendered_pods(job(profile)):
        kubernetes_validate.validate(pod, "1.32", strict=True)


@pytest.mark.parametrize("version", ["1.29", "1.37"])
@pytest.mark.parametrize("profile", PROFILES)
def test_each_reference_profiles_pods_validate_from_the_oldest_to_the_newest_kubernetes(
    profile: str, version: str
) -> None:
    for pod in rendered_pods(job(profile)):
        kubernetes_validate.validate(pod, version, strict=True)


EXAMPLES = sorted((Path(__file__).parents[2] / "examples").glob("*.yaml"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_every_pod_of_every_example_job_gets_the_profile_whatever_its_role(example: Path) -> None:
    documents = [doc for doc in yaml.safe_load_all(example.read_text()) if doc]
    for doc in documents:
        labels = doc["metadata"].get("labels") or {}
        if "trainhook.io/framework" in labels:
            annotations = doc["metadata"].setdefault("annotations", {})
            annotations[FABRIC] = "aws-efa"
            if labels["trainhook.io/framework"] == "xgboost":
                annotations["trainhook.io/gpus"] = "1"
    pods = render_all(documents).pods
    assert pods
    for pod in pods:
        assert (pod.env["NCCL_NET"], pod.env["FI_PROVIDER"]) == ("AWS Libfabric", "efa")
        spec = pod.pod["spec"]
        (trainer,) = [c for c in spec["containers"] if env_of(c).get("NCCL_NET")]
        assert trainer["resources"]["limits"]["vpc.amazonaws.com/efa"] == "1"


def test_an_aws_efa_job_pins_the_libfabric_plugin_and_asks_for_an_efa_in_every_pod() -> None:
    for pod in rendered_pods(job("aws-efa")):
        container = training(pod)
        assert env_of(container)["NCCL_NET"] == "AWS Libfabric"
        assert env_of(container)["FI_PROVIDER"] == "efa"
        assert container["resources"] == {
            "limits": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "1"},
            "requests": {"nvidia.com/gpu": "8", "vpc.amazonaws.com/efa": "1"},
        }


def test_an_infiniband_job_pins_ib_verbs_with_the_rdma_device_and_ipc_lock() -> None:
    for pod in rendered_pods(job("infiniband")):
        container = training(pod)
        assert env_of(container)["NCCL_NET"] == "IB"
        assert container["resources"]["limits"]["rdma/rdma_shared_device_a"] == "1"
        assert container["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}


def test_a_gke_tcpxo_job_runs_the_rxdm_daemon_as_a_sidecar_without_the_jobs_env() -> None:
    for pod in rendered_pods(job("gke-tcpxo")):
        (daemon,) = pod["spec"]["initContainers"]
        assert daemon["name"] == "tcpxo-daemon"
        assert daemon["restartPolicy"] == "Always"
        assert [item["name"] for item in daemon["env"]] == [
            "TRAINHOOK_FABRIC",
            "LD_LIBRARY_PATH",
            "HEALTH_CHECK_LOG_FILE",
        ]
        assert env_of(training(pod))["NCCL_NET"] == "FasTrak"
        mounts = {m["name"]: m["mountPath"] for m in training(pod)["volumeMounts"]}
        assert mounts == {
            "tcpxo-nvidia": "/usr/local/nvidia/lib64",
            "tcpxo-aperture-devices": "/dev/aperture_devices",
        }
        assert json.loads(pod["metadata"]["annotations"]["networking.gke.io/interfaces"])[8] == {
            "interfaceName": "eth8",
            "network": "vpc8",
        }


@pytest.mark.parametrize("profile", PROFILES)
def test_every_training_container_of_every_role_gets_every_field_of_the_profile(
    profile: str,
) -> None:
    fields = BUILT_IN[profile]
    pods = rendered_pods(job(profile))
    assert {pod["metadata"]["labels"]["trainhook.io/role"] for pod in pods} == {"master", "worker"}
    for pod in pods:
        container = training(pod)
        env = env_of(container)
        assert {key: env[key] for key in fields.env} == fields.env
        limits = container["resources"]["limits"]
        assert {name: limits[name] for name, _ in fields.resources} == dict(fields.resources)
        added = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
        assert set(fields.capabilities) <= set(added)
        annotations = pod["metadata"]["annotations"]
        assert {key: annotations[key] for key, _ in fields.annotations} == dict(fields.annotations)
        mounts = {m["name"]: m["mountPath"] for m in container.get("volumeMounts", [])}
        for host in fields.host_paths:
            assert {"name": host.name, "hostPath": {"path": host.path}} in pod["spec"]["volumes"]
            if host.mount_path is not None:
                assert mounts[host.name] == host.mount_path
        sidecars = [c["name"] for c in pod["spec"].get("initContainers", [])]
        assert sidecars == [s["name"] for s in fields.sidecars]


def test_a_job_without_a_fabric_gets_none_of_it() -> None:
    for pod in rendered_pods(job(None)):
        assert "NCCL_NET" not in env_of(training(pod))
        assert "initContainers" not in pod["spec"]


# --- the webhook on its own output ------------------------------------------------------------


def admitted(obj: dict[str, Any], kind: str) -> tuple[dict[str, Any], list[Any], list[str]]:
    outcome = admit(Request(kind, "CREATE", obj, "default"), Found())
    assert outcome is not None
    patched = jsonpatch.apply_patch(copy.deepcopy(obj), outcome.patch)
    return patched, outcome.patch, outcome.warnings


@pytest.mark.parametrize("profile", PROFILES)
def test_admitting_a_fabric_pod_again_changes_nothing(profile: str) -> None:
    pod = bare_pod("solo", "pytorch", annotations={FABRIC: profile, "trainhook.io/gpus": "8"})
    patched, first, _ = admitted(pod, "Pod")
    assert first != []
    pod_patches.forget()
    again, second, warnings = admitted(patched, "Pod")
    assert (second, warnings) == ([], [])
    assert again == patched


@pytest.mark.parametrize("profile", PROFILES)
def test_a_fabric_workloads_pods_admitted_twice_change_nothing(profile: str) -> None:
    for pod in rendered_pods(job(profile)):
        stored = copy.deepcopy(pod)
        outcome = admit(Request("Pod", "CREATE", stored, "default"), Found())
        assert outcome is not None
        assert (outcome.patch, outcome.warnings) == ([], [])


@pytest.mark.parametrize("profile", PROFILES)
def test_a_fabric_workloads_later_pods_take_the_first_pods_patch_byte_for_byte(
    profile: str,
) -> None:
    from tests.core.test_pod_patches import full, pods_of, reused

    pods = pods_of(3, {FABRIC: profile, "trainhook.io/gpus": "8"})
    pod_patches.forget()
    answers = [reused(pod, "default", "") for pod in pods]
    assert pod_patches.counts() == pod_patches.Counts(keyed=3, reused=2, full=1, drafted=0)
    assert answers == [full(pod, "default", "") for pod in pods]


# --- refusals, each in one line ---------------------------------------------------------------


def test_an_unknown_profile_is_refused_naming_the_known_ones() -> None:
    assert refusal(job("aws-efx")) == (
        "trainhook.io/fabric: invalid value 'aws-efx': no such fabric profile; the profiles "
        "are aws-efa, gke-tcpxo, infiniband"
    )


def test_an_unknown_profile_is_refused_when_the_statefulset_is_admitted() -> None:
    (master, _) = job("aws-efx")
    with pytest.raises(TrainhookError) as error:
        admit(Request("StatefulSet", "CREATE", master, "default"), Found())
    assert str(error.value) == (
        "trainhook.io/fabric: invalid value 'aws-efx': no such fabric profile; the profiles "
        "are aws-efa, gke-tcpxo, infiniband"
    )


def test_a_user_env_var_the_profile_sets_otherwise_is_refused() -> None:
    documents = job("aws-efa")
    container = documents[1]["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "NCCL_NET", "value": "Socket"}]
    assert refusal(documents) == (
        "trainhook.io/fabric: invalid value 'aws-efa': it sets NCCL_NET='AWS Libfabric', "
        "container pytorch sets 'Socket': remove it, or use a profile with the value you need"
    )


def test_a_user_env_var_from_a_field_ref_is_refused_too() -> None:
    documents = job("infiniband")
    container = documents[0]["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "NCCL_NET", "valueFrom": {"fieldRef": {"fieldPath": "x"}}}]
    assert refusal(documents) == (
        "trainhook.io/fabric: invalid value 'infiniband': it sets NCCL_NET='IB', container "
        "pytorch sets a valueFrom: remove it, or use a profile with the value you need"
    )


def test_a_user_env_var_of_the_same_value_is_kept_without_a_word() -> None:
    documents = job("aws-efa")
    container = documents[1]["spec"]["template"]["spec"]["containers"][0]
    container["env"] = [{"name": "FI_PROVIDER", "value": "efa"}]
    rendering = render_all(documents)
    assert [pod.warnings for pod in rendering.pods] == [[], [], []]
    assert [env_of(training(p.pod))["FI_PROVIDER"] for p in rendering.pods] == ["efa"] * 3


def test_a_fabric_on_one_role_only_is_refused_as_a_disagreement() -> None:
    master, worker = job("aws-efa")
    del worker["metadata"]["annotations"][FABRIC]
    assert refusal([master, worker]) == (
        "trainhook.io/fabric differs between the roles of job pt: master (StatefulSet "
        "pt-master) 'aws-efa', worker (StatefulSet pt-worker) unset; set one value on every "
        "workload of the job (every pod reaches its peers over the same fabric)"
    )


def test_an_xgboost_pod_without_gpus_is_refused() -> None:
    pod = bare_pod("xg", "xgboost", annotations={FABRIC: "aws-efa"})
    with pytest.raises(TrainhookError) as error:
        admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert str(error.value) == (
        "trainhook.io/fabric: invalid value 'aws-efa': XGBoost uses NCCL, which profile aws-efa "
        "carries, only to train on GPUs; training container xgboost asks for none "
        "(trainhook.io/gpus): a CPU job trains over TCP and needs no fabric profile"
    )


def test_an_xgboost_pod_with_gpus_gets_the_profile() -> None:
    pod = bare_pod("xg", "xgboost", annotations={FABRIC: "aws-efa", "trainhook.io/gpus": "1"})
    patched, _, _ = admitted(pod, "Pod")
    assert env_of(training(patched))["NCCL_NET"] == "AWS Libfabric"


def test_mindspore_on_ascend_is_refused() -> None:
    annotations = {FABRIC: "infiniband", "trainhook.io/gpu-resource": "huawei.com/Ascend910"}
    with pytest.raises(RenderError) as error:
        render_all([statefulset("ms", "mindspore", annotations=annotations)])
    assert str(error.value) == (
        "trainhook.io/fabric: invalid value 'infiniband': MindSpore on huawei.com/Ascend910 "
        "communicates with HCCL, not NCCL, which profile infiniband carries; a fabric profile "
        "is for MindSpore on nvidia.com/gpu"
    )


def test_a_pod_annotation_the_profile_sets_otherwise_is_refused() -> None:
    pod = bare_pod(
        "solo",
        "pytorch",
        annotations={FABRIC: "gke-tcpxo", "networking.gke.io/default-interface": "eth1"},
    )
    with pytest.raises(TrainhookError) as error:
        admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert str(error.value) == (
        "trainhook.io/fabric: invalid value 'gke-tcpxo': it sets annotation "
        "networking.gke.io/default-interface='eth0', the pod has 'eth1': remove it, or use a "
        "profile with the value you need"
    )


def test_a_volume_of_a_profiles_name_but_other_content_is_refused() -> None:
    pod = bare_pod("solo", "pytorch", annotations={FABRIC: "gke-tcpxo"})
    pod["spec"]["volumes"] = [{"name": "tcpxo-sys", "emptyDir": {}}]
    with pytest.raises(TrainhookError) as error:
        admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert str(error.value) == (
        "trainhook.io/fabric: invalid value 'gke-tcpxo': it adds volume tcpxo-sys (hostPath "
        "/sys), the pod has another volume of that name: rename the pod's"
    )


def test_a_pod_claim_of_the_profiles_name_from_another_template_is_refused() -> None:
    claims = [{"name": "efa", "resourceClaimTemplateName": "efa-per-gpu"}]
    use_profiles(parse_profiles({"efa-dra": {"ncclNet": "IB", "resourceClaims": claims}}, "f"))
    pod = bare_pod("solo", "pytorch", annotations={FABRIC: "efa-dra"})
    pod["spec"]["resourceClaims"] = [{"name": "efa", "resourceClaimTemplateName": "mine"}]
    with pytest.raises(TrainhookError) as error:
        admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert str(error.value) == (
        "trainhook.io/fabric: invalid value 'efa-dra': it claims efa from ResourceClaimTemplate "
        "efa-per-gpu, the pod's claim efa is {'name': 'efa', 'resourceClaimTemplateName': "
        "'mine'}: rename the pod's claim"
    )


def test_a_profile_variable_trainhook_sets_for_the_job_is_refused() -> None:
    use_profiles(parse_profiles({"odd": {"ncclNet": "IB", "env": {"WORLD_SIZE": "1"}}}, "f"))
    assert refusal(job("odd")) == (
        "trainhook.io/fabric: invalid value 'odd': it sets WORLD_SIZE='1', which Trainhook sets "
        "to '24' for this job: define a profile without it"
    )


# --- what the pod already has --------------------------------------------------------------


def test_the_containers_own_count_of_a_device_is_kept() -> None:
    documents = job("aws-efa")
    for workload in documents:
        container = workload["spec"]["template"]["spec"]["containers"][0]
        container["resources"] = {"limits": {"vpc.amazonaws.com/efa": "32"}}
    for pod in rendered_pods(documents):
        resources = training(pod)["resources"]
        assert resources["limits"]["vpc.amazonaws.com/efa"] == "32"
        assert "vpc.amazonaws.com/efa" not in resources.get("requests", {})


def test_the_pods_own_daemon_of_the_sidecars_name_is_kept_with_a_warning() -> None:
    pod = bare_pod("solo", "pytorch", annotations={FABRIC: "gke-tcpxo"})
    own = {"name": "tcpxo-daemon", "image": "own:1", "restartPolicy": "Always"}
    pod["spec"]["initContainers"] = [own]
    patched, _, warnings = admitted(pod, "Pod")
    assert [c["image"] for c in patched["spec"]["initContainers"]] == ["own:1"]
    assert warnings == [
        "trainhook.io/fabric: the pod's own container tcpxo-daemon is kept in place of profile "
        "gke-tcpxo's"
    ]


# --- the cluster's own profiles --------------------------------------------------------------

CUSTOM = """
efa-dra:
  ncclNet: AWS Libfabric
  env: {FI_PROVIDER: efa}
  resourceClaims:
    - {name: efa, resourceClaimTemplateName: efa-per-gpu}
infiniband:
  ncclNet: IB
  env: {NCCL_IB_HCA: "=mlx5_0,mlx5_1"}
  resources: {rdma/ib: 1}
  capabilities: [IPC_LOCK]
"""


def test_render_applies_a_profile_of_the_clusters_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(CUSTOM)
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump_all(job("efa-dra")))
    code = main(["render", "-o", "yaml", "--fabric-profiles", str(profiles), str(manifest)])
    out, _ = capsys.readouterr()
    assert code == 0
    pods = [doc for doc in yaml.safe_load_all(out) if doc["kind"] == "Pod"]
    assert len(pods) == 3
    for pod in pods:
        kubernetes_validate.validate(pod, "1.32", strict=True)
        assert pod["spec"]["resourceClaims"] == [
            {"name": "efa", "resourceClaimTemplateName": "efa-per-gpu"}
        ]
        assert training(pod)["resources"]["claims"] == [{"name": "efa"}]
        assert env_of(training(pod))["NCCL_NET"] == "AWS Libfabric"


def test_a_clusters_profile_of_a_reference_name_takes_its_place(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(CUSTOM)
    use_fabric_profiles(str(profiles))
    (pod, *_) = rendered_pods(job("infiniband"))
    assert env_of(training(pod))["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert training(pod)["resources"]["limits"] == {"nvidia.com/gpu": "8", "rdma/ib": "1"}


def test_render_refuses_a_profiles_file_it_cannot_use_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text("mine:\n  env: {FI_PROVIDER: efa}\n")
    manifest = tmp_path / "job.yaml"
    manifest.write_text(yaml.safe_dump_all(job("mine")))
    code = main(["render", "--fabric-profiles", str(profiles), str(manifest)])
    _, err = capsys.readouterr()
    assert code == 1
    assert err.splitlines() == [
        f"trainhook render: {profiles}: profile mine: ncclNet: required: the name of the NCCL "
        "network the job must use (NCCL_NET, e.g. IB or AWS Libfabric), which makes NCCL stop "
        "rather than fall back to TCP"
    ]


@pytest.mark.parametrize(
    ("content", "line"),
    [
        ("- aws-efa\n", "f: a mapping of profile names to profiles, not a list"),
        ("Big:\n  ncclNet: IB\n", "f: profile name 'Big': a DNS label (lower-case letters, "
         "digits and '-', at most 63 characters)"),
        ("p:\n  ncclNet: IB\n  resource: {a.io/b: 1}\n", "f: profile p: unknown field "
         "'resource'; the fields are ncclNet, env, resources, resourceClaims, capabilities, "
         "annotations, hostPaths, sidecars, preflightMinBusBW"),
        ("p:\n  ncclNet: IB\n  env: {NCCL_NET: Socket}\n",
         "f: profile p: env: NCCL_NET is the profile's ncclNet; set it there"),
        ("p:\n  ncclNet: IB\n  env: {NCCL_IB_GID_INDEX: 3}\n",
         "f: profile p: env: NCCL_IB_GID_INDEX: 3: a string (quote numbers and booleans)"),
        ("p:\n  ncclNet: IB\n  resources: {rdma/ib: 0}\n",
         "f: profile p: resources: rdma/ib: 0 is not a whole number of devices >= 1"),
        ("p:\n  ncclNet: IB\n  resources: {ib: 1}\n",
         "f: profile p: resources: 'ib' is not an extended resource name such as "
         "vpc.amazonaws.com/efa"),
        ("p:\n  ncclNet: IB\n  capabilities: [ipc_lock]\n",
         "f: profile p: capabilities: 'ipc_lock' is not a Linux capability such as IPC_LOCK"),
        ("p:\n  ncclNet: IB\n  annotations: {trainhook.io/gpus: '8'}\n",
         "f: profile p: annotations: trainhook.io/gpus: trainhook.io/ keys are Trainhook's own"),
        ("p:\n  ncclNet: IB\n  hostPaths: [{name: libs, path: lib}]\n",
         "f: profile p: hostPaths: {'name': 'libs', 'path': 'lib'}: each a distinct name (a DNS "
         "label), the absolute path on the node, and optionally the absolute mountPath in the "
         "training container and readOnly (true or false)"),
        ("p:\n  ncclNet: IB\n  sidecars: [{name: d}]\n",
         "f: profile p: sidecars: d: image: required, the container's image"),
        ("p:\n  ncclNet: IB\n  sidecars: [{name: d, image: i, restartPolicy: Never}]\n",
         "f: profile p: sidecars: d: 'restartPolicy' is not a container field this sidecar may "
         "set (Trainhook runs it as a sidecar)"),
        ("p:\n  ncclNet: IB\n  sidecars: [{name: d, image: i, env: {A: b}}]\n",
         "f: profile p: sidecars: d: env: a list of variables, each with a name"),
        ("p:\n  ncclNet: IB\n  sidecars: [{name: d, image: i, volumeMounts: [{name: x, "
         "mountPath: /x}]}]\n",
         "f: profile p: sidecars: d: volumeMounts: 'x': a sidecar mounts only the profile's "
         "hostPaths (none)"),
    ],
)  # fmt: skip
def test_a_profiles_file_is_refused_in_one_line_naming_profile_field_and_what_is_allowed(
    content: str, line: str
) -> None:
    with pytest.raises(ProfileError) as error:
        parse_profiles(yaml.safe_load(content), "f")
    assert str(error.value) == line


def test_serve_refuses_a_profiles_file_that_is_not_there(tmp_path: Path) -> None:
    missing = tmp_path / "none.yaml"
    with pytest.raises(ProfileError) as error:
        use_fabric_profiles(str(missing))
    assert str(error.value) == f"{missing}: cannot read: No such file or directory"


def test_the_reference_profiles_are_written_in_the_schema_platform_teams_use() -> None:
    from webhook.core.fabrics.reference import REFERENCE

    assert parse_profiles(json.loads(json.dumps(REFERENCE)), "reference") == BUILT_IN


def _write_golden() -> None:
    GOLDEN.mkdir(exist_ok=True)
    use_profiles({})
    for profile in PROFILES:
        pods = rendered_pods(job(profile))
        text = yaml.safe_dump_all(pods, sort_keys=False, width=100)
        (GOLDEN / f"{profile}.yaml").write_text(text)


if __name__ == "__main__":
    _write_golden()
