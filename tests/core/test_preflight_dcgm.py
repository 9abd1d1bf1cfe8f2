"""`trainhook.io/preflight: dcgm` (or `nccl,dcgm`): every pod of the job gets the
`trainhook-preflight-dcgm` init container, in its training container's image with its GPUs, which
runs the image's `dcgmi diag` at the job's level; a pod it cannot run on is refused in one line;
the webhook leaves its own output as it is; the script, run here for real with a fake `dcgmi` on
its PATH (and with none), exits 97 naming the node and the failing test, which the failure rules'
`preflight=gpu` term matches.

The golden render under tests/core/preflight/ is the pods of a TensorFlow job (a chief and two
workers, 8 GPUs each) with the DCGM preflight at level 2; `python -m tests.core.test_preflight_dcgm`
writes it again after a deliberate change (then read the diff).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
import yaml

from tests.support.builders import bare_pod, statefulset
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.fabrics.preflight import (
    CONTAINER,
    DCGM_CONTAINER,
    DCGM_SCRIPT,
    EXIT_CODE,
    preflight_verdict,
)
from webhook.core.fabrics.registry import use_profiles
from webhook.core.job.failure_rules import Failure, parse_rules
from webhook.core.mutation import pod_patches
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.render import RenderError, render_all

GOLDEN = Path(__file__).parent / "preflight" / "dcgm.yaml"
PREFLIGHT = contract.PREFLIGHT
LEVEL = contract.PREFLIGHT_DCGM_LEVEL
GPUS = contract.GPUS


@pytest.fixture(autouse=True)
def reference_profiles() -> Iterator[None]:
    use_profiles({})
    pod_patches.forget()
    yield
    use_profiles({})
    pod_patches.forget()


def tf_job(annotations: dict[str, str], **extra: Any) -> list[dict[str, Any]]:
    return [
        statefulset(
            "tf-chief", "tensorflow", role="chief", job="tf", annotations=dict(annotations), **extra
        ),
        statefulset(
            "tf-worker",
            "tensorflow",
            role="worker",
            job="tf",
            replicas=2,
            annotations=dict(annotations),
            **extra,
        ),
    ]


def pt_job(annotations: dict[str, str], **extra: Any) -> list[dict[str, Any]]:
    return [
        statefulset(
            "pt-master", "pytorch", role="master", job="pt", annotations=dict(annotations), **extra
        ),
        statefulset(
            "pt-worker",
            "pytorch",
            role="worker",
            job="pt",
            replicas=2,
            annotations=dict(annotations),
            **extra,
        ),
    ]


def golden_job() -> list[dict[str, Any]]:
    return tf_job({PREFLIGHT: "dcgm", LEVEL: "2", GPUS: "8"})


def rendered_pods(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [pod.pod for pod in render_all(documents).pods]


def refusal(documents: list[dict[str, Any]]) -> str:
    with pytest.raises(RenderError) as error:
        render_all(documents)
    return str(error.value)


def init_names(pod: dict[str, Any]) -> list[str]:
    return [c["name"] for c in pod["spec"].get("initContainers") or []]


def dcgm_of(pod: dict[str, Any]) -> dict[str, Any]:
    (found,) = [c for c in pod["spec"]["initContainers"] if c["name"] == DCGM_CONTAINER]
    return dict(found)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {i["name"]: i.get("value", i.get("valueFrom")) for i in container.get("env") or []}


# --- the init container, as rendered ----------------------------------------------------------


def test_a_dcgm_preflight_jobs_pods_render_their_golden_init_container() -> None:
    expected = list(yaml.safe_load_all(GOLDEN.read_text()))
    assert rendered_pods(golden_job()) == expected


def test_a_dcgm_preflight_jobs_pods_validate_against_kubernetes_1_32() -> None:
    for pod in rendered_pods(golden_job()):
        kubernetes_validate.validate(pod, "1.32", strict=True)


def test_the_dcgm_preflight_runs_the_diagnostic_in_the_training_image_with_its_gpus() -> None:
    for pod in rendered_pods(golden_job()):
        (trainer,) = pod["spec"]["containers"]
        dcgm = dcgm_of(pod)
        assert init_names(pod) == [DCGM_CONTAINER]
        assert (dcgm["image"], dcgm["resources"]) == (trainer["image"], trainer["resources"])
        assert dcgm["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert dcgm["command"] == ["sh", "-c", DCGM_SCRIPT]
        assert dcgm["env"][: len(trainer["env"])] == trainer["env"]
        env = env_of(dcgm)
        assert env["TRAINHOOK_PREFLIGHT_DCGM_LEVEL"] == "2"
        assert env["TRAINHOOK_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert dcgm["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_the_dcgm_level_is_1_when_the_job_sets_none() -> None:
    for pod in rendered_pods(tf_job({PREFLIGHT: "dcgm", GPUS: "1"})):
        assert env_of(dcgm_of(pod))["TRAINHOOK_PREFLIGHT_DCGM_LEVEL"] == "1"


def test_both_preflights_run_the_diagnostic_first_then_the_all_reduce() -> None:
    for value in ("nccl,dcgm", "dcgm,nccl"):
        pods = rendered_pods(pt_job({PREFLIGHT: value, GPUS: "8", LEVEL: "3"}))
        for pod in pods:
            assert init_names(pod) == [DCGM_CONTAINER, CONTAINER]
            assert env_of(dcgm_of(pod))["TRAINHOOK_PREFLIGHT_DCGM_LEVEL"] == "3"


def test_an_elastic_pytorch_job_runs_the_dcgm_preflight() -> None:
    pods = rendered_pods(pt_job({PREFLIGHT: "dcgm", GPUS: "1", contract.ELASTIC: "1:3"}))
    assert [init_names(pod) for pod in pods] == [[DCGM_CONTAINER]] * 3


def test_every_attempt_is_said_to_the_dcgm_preflight() -> None:
    annotations = {PREFLIGHT: "dcgm", GPUS: "1", contract.PREFLIGHT_EVERY_ATTEMPT: "true"}
    for pod in rendered_pods(tf_job(annotations)):
        assert env_of(dcgm_of(pod))["TRAINHOOK_PREFLIGHT_EVERY_ATTEMPT"] == "true"


def test_a_pod_admitted_after_its_job_restarted_gets_no_dcgm_preflight() -> None:
    documents = tf_job({PREFLIGHT: "dcgm", GPUS: "1"})
    stored = copy.deepcopy(render_all(documents).pods[1].pod)
    del stored["spec"]["initContainers"]
    owner = copy.deepcopy(documents[1])
    status = {"state": "Running", "restarts": 1, "startTime": "2026-01-01T00:00:00Z"}
    owner["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    assert "initContainers" not in mutate_pod(stored, "default", owner=owner).pod["spec"]
    owner["metadata"]["annotations"][contract.STATUS] = json.dumps({**status, "restarts": 0})
    assert init_names(mutate_pod(stored, "default", owner=owner).pod) == [DCGM_CONTAINER]


# --- refusals, each in one line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "line"),
    [
        (
            {PREFLIGHT: "ib-write-bw"},
            "trainhook.io/preflight: invalid value 'ib-write-bw': nccl, dcgm, or both "
            "comma-separated (nccl,dcgm)",
        ),
        (
            {PREFLIGHT: "dcgm,dcgm", GPUS: "1"},
            "trainhook.io/preflight: invalid value 'dcgm,dcgm': nccl, dcgm, or both "
            "comma-separated (nccl,dcgm)",
        ),
        (
            {PREFLIGHT: "nccl, dcgm", GPUS: "1"},
            "trainhook.io/preflight: invalid value 'nccl, dcgm': nccl, dcgm, or both "
            "comma-separated (nccl,dcgm)",
        ),
        (
            {PREFLIGHT: "dcgm", LEVEL: "5", GPUS: "1"},
            "trainhook.io/preflight-dcgm-level: invalid value '5': a DCGM diagnostic run level: "
            "1 (seconds), 2 (about 2 minutes), 3 (about 15 minutes) or 4 (longer)",
        ),
        (
            {PREFLIGHT: "dcgm", LEVEL: "long", GPUS: "1"},
            "trainhook.io/preflight-dcgm-level: invalid value 'long': a DCGM diagnostic run "
            "level: 1 (seconds), 2 (about 2 minutes), 3 (about 15 minutes) or 4 (longer)",
        ),
        (
            {PREFLIGHT: "nccl", LEVEL: "2", GPUS: "1"},
            "trainhook.io/preflight-dcgm-level: invalid value '2': read only with dcgm in "
            "trainhook.io/preflight: add it, or remove the level",
        ),
        (
            {LEVEL: "2", GPUS: "1"},
            "trainhook.io/preflight-dcgm-level: invalid value '2': read only with dcgm in "
            "trainhook.io/preflight: add it, or remove the level",
        ),
        (
            {PREFLIGHT: "dcgm", contract.PREFLIGHT_MIN_BUSBW: "40", GPUS: "1"},
            "trainhook.io/preflight-min-busbw: invalid value '40': the threshold of the nccl "
            "preflight, which trainhook.io/preflight does not list: add nccl, or remove the "
            "threshold",
        ),
        (
            {PREFLIGHT: "dcgm"},
            "trainhook.io/preflight: invalid value 'dcgm': the DCGM diagnostic runs on the "
            "pod's GPUs, and container pytorch has none: set trainhook.io/gpus or a "
            "nvidia.com/gpu limit, or remove dcgm",
        ),
        (
            {PREFLIGHT: "nccl,dcgm", GPUS: "0"},
            "trainhook.io/preflight: invalid value 'nccl,dcgm': the DCGM diagnostic runs on the "
            "pod's GPUs, and container pytorch has none: set trainhook.io/gpus or a "
            "nvidia.com/gpu limit, or remove dcgm",
        ),
        (
            {PREFLIGHT: "nccl,dcgm", GPUS: "1", contract.ELASTIC: "1:3"},
            "trainhook.io/preflight: invalid value 'nccl,dcgm': an elastic job "
            "(trainhook.io/elastic) has no world size before its rendezvous, which the nccl "
            "preflight needs",
        ),
    ],
    ids=[
        "unknown",
        "twice",
        "spaced",
        "level-5",
        "level-word",
        "level-without-dcgm",
        "level-alone",
        "threshold-without-nccl",
        "no-gpu",
        "zero-gpus",
        "elastic-with-nccl",
    ],
)
def test_what_the_dcgm_preflight_cannot_do_is_refused_in_one_line(
    annotations: dict[str, str], line: str
) -> None:
    assert refusal(pt_job(annotations)) == line


def test_both_preflights_on_a_framework_without_torch_are_refused_for_the_nccl_one() -> None:
    assert refusal(tf_job({PREFLIGHT: "nccl,dcgm", GPUS: "1"})) == (
        "trainhook.io/preflight: invalid value 'nccl,dcgm': the nccl preflight runs "
        "torch.distributed, for pytorch jobs; not yet for tensorflow jobs (dcgm runs for any)"
    )


def test_a_dcgm_preflight_pod_on_the_nodes_network_is_refused_in_one_line() -> None:
    documents = tf_job({PREFLIGHT: "dcgm", GPUS: "1"})
    for document in documents:
        document["spec"]["template"]["spec"]["hostNetwork"] = True
    assert refusal(documents) == (
        "trainhook.io/preflight: invalid value 'dcgm': a pod on the node's network "
        "(hostNetwork) would reach the node's DCGM host engine, which tests every GPU of the "
        "node: remove hostNetwork, or remove dcgm"
    )


def test_a_gpu_limit_of_its_own_is_enough_for_the_dcgm_preflight() -> None:
    containers = [
        {"name": "tensorflow", "image": "t:1", "resources": {"limits": {"nvidia.com/gpu": "2"}}}
    ]
    for pod in rendered_pods(tf_job({PREFLIGHT: "dcgm"}, containers=containers)):
        assert dcgm_of(pod)["resources"] == {"limits": {"nvidia.com/gpu": "2"}}


def test_a_bare_pod_without_a_gpu_is_refused_at_admission() -> None:
    pod = bare_pod("solo", "pytorch", annotations={PREFLIGHT: "dcgm"})
    with pytest.raises(TrainhookError) as error:
        admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert str(error.value) == (
        "trainhook.io/preflight: invalid value 'dcgm': the DCGM diagnostic runs on the pod's "
        "GPUs, and container pytorch has none: set trainhook.io/gpus or a nvidia.com/gpu "
        "limit, or remove dcgm"
    )


# --- the webhook on its own output ------------------------------------------------------------


def test_admitting_a_dcgm_preflight_pod_again_changes_nothing() -> None:
    pod = bare_pod("solo", "pytorch", annotations={PREFLIGHT: "nccl,dcgm", GPUS: "8"})
    outcome = admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert outcome is not None and outcome.patch != []
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), outcome.patch)
    assert init_names(patched) == [DCGM_CONTAINER, CONTAINER]
    pod_patches.forget()
    again = admit(Request("Pod", "CREATE", patched, "default"), Found())
    assert again is not None and (again.patch, again.warnings) == ([], [])


def test_a_dcgm_preflight_jobs_rendered_pods_admitted_again_change_nothing() -> None:
    for pod in rendered_pods(golden_job()):
        outcome = admit(Request("Pod", "CREATE", copy.deepcopy(pod), "default"), Found())
        assert outcome is not None and (outcome.patch, outcome.warnings) == ([], [])


# --- the script, run for real -----------------------------------------------------------------

TABLE = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
+-----  Deployment  --------+------------------------------------------------+
| Software                  | Pass                                           |
+-----  Hardware  ----------+------------------------------------------------+
| Memory                    | Pass - GPU: 0                                  |
|                           | Fail - GPU: 1                                  |
| Error                     | GPU 1 Memory test failed: a double-bit ECC     |
|                           | error was found                                |
+-----  Stress  ------------+------------------------------------------------+
| Targeted Stress           | Pass - All                                     |
+---------------------------+------------------------------------------------+
"""
SHELLS = ("dash", "bash")
TOOLS = ("grep", "tail", "tr", "cut", "cat")  # what the script and the fake dcgmi run


def image_path(tmp_path: Path, dcgmi: str | None) -> str:
    """A PATH of the tools a shell image has, and of a `dcgmi` that prints what it was asked
    and `dcgmi`'s own output, then exits as told; none when `dcgmi` is None."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        found = shutil.which(tool)
        assert found is not None, tool
        (bin_dir / tool).symlink_to(found)
    if dcgmi is not None:
        (tmp_path / "output").write_text(dcgmi.partition("\n")[2])
        fake = bin_dir / "dcgmi"
        code = dcgmi.partition("\n")[0]
        fake.write_text(f'#!/bin/sh\necho "dcgmi $*"\ncat {tmp_path / "output"}\nexit {code}\n')
        fake.chmod(0o755)
    return str(bin_dir)


def run_script(
    shell: str, tmp_path: Path, dcgmi: str | None, **env: str
) -> subprocess.CompletedProcess[str]:
    found = shutil.which(shell)
    if found is None:
        pytest.fail(f"{shell} is not installed: the image's sh may be it")
    base = {"PATH": image_path(tmp_path, dcgmi), "TRAINHOOK_NODE_NAME": "gpu-node-7"}
    return subprocess.run(
        [found, "-c", DCGM_SCRIPT],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def last_line(done: subprocess.CompletedProcess[str]) -> str:
    return done.stderr.rstrip("\n").splitlines()[-1]


@pytest.mark.parametrize("shell", SHELLS)
def test_a_passing_diagnostic_lets_the_pod_start(shell: str, tmp_path: Path) -> None:
    done = run_script(shell, tmp_path, "0\nSuccessfully ran diagnostic for group.\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == "dcgmi diag -r 1"
    assert last_line(done) == "trainhook-preflight: passed: node gpu-node-7: dcgmi diag -r 1"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_failed_diagnostic_exits_97_naming_the_node_and_the_failing_test(
    shell: str, tmp_path: Path
) -> None:
    done = run_script(shell, tmp_path, "226\n" + TABLE, TRAINHOOK_PREFLIGHT_DCGM_LEVEL="2")
    assert done.returncode == EXIT_CODE, done.stderr
    assert done.stderr.splitlines()[0] == "dcgmi diag -r 2"
    assert last_line(done) == (
        "trainhook-preflight: gpu: node gpu-node-7: dcgmi diag -r 2 exited 226: Memory: Fail - "
        "GPU: 1; GPU 1 Memory test failed: a double-bit ECC error was found"
    )
    assert preflight_verdict(done.returncode, done.stderr) == "gpu"


@pytest.mark.parametrize("shell", SHELLS)
def test_a_fault_that_calls_for_isolation_is_a_gpu_verdict_too(shell: str, tmp_path: Path) -> None:
    done = run_script(shell, tmp_path, "205\n" + TABLE)
    assert (done.returncode, preflight_verdict(done.returncode, last_line(done))) == (97, "gpu")


@pytest.mark.parametrize("shell", SHELLS)
def test_a_diagnostic_that_could_not_run_is_an_error_with_dcgmis_last_words(
    shell: str, tmp_path: Path
) -> None:
    said = "Error: Unable to start an embedded host engine. Host engine connection invalid.\n"
    done = run_script(shell, tmp_path, "241\n" + said)
    assert done.returncode == EXIT_CODE, done.stderr
    assert last_line(done) == (
        "trainhook-preflight: error: node gpu-node-7: dcgmi diag -r 1 exited 241: dcgmi diag "
        "-r 1 Error: Unable to start an embedded host engine. Host engine connection invalid."
    )
    assert preflight_verdict(done.returncode, done.stderr) == "error"


@pytest.mark.parametrize("shell", SHELLS)
def test_an_image_without_dcgmi_fails_its_preflight_saying_so(shell: str, tmp_path: Path) -> None:
    done = run_script(shell, tmp_path, None)
    assert (done.returncode, done.stderr) == (
        EXIT_CODE,
        "trainhook-preflight: error: node gpu-node-7: the image has no dcgmi on its PATH to run "
        "the DCGM diagnostic\n",
    )


@pytest.mark.parametrize("shell", SHELLS)
def test_a_pod_restarted_in_place_skips_its_dcgm_preflight(shell: str, tmp_path: Path) -> None:
    done = run_script(shell, tmp_path, "226\n" + TABLE, TRAINHOOK_ATTEMPT="2")
    assert (done.returncode, done.stderr) == (
        0,
        "trainhook-preflight: skipped: attempt 2 of the job; only its first runs the preflight\n",
    )
    again = run_script(
        shell,
        tmp_path / "every",
        "0\n",
        TRAINHOOK_ATTEMPT="2",
        TRAINHOOK_PREFLIGHT_EVERY_ATTEMPT="true",
    )
    assert last_line(again) == "trainhook-preflight: passed: node gpu-node-7: dcgmi diag -r 1"


def test_the_script_holds_nothing_the_kubelet_would_expand() -> None:
    assert "$(" not in DCGM_SCRIPT and "$$" not in DCGM_SCRIPT
    subprocess.run(["dash", "-n", "-c", DCGM_SCRIPT], check=True, env=dict(os.environ))


# --- the failure rules' preflight= term -------------------------------------------------------

FAULT = (
    "trainhook-preflight: gpu: node gpu-node-7: dcgmi diag -r 2 exited 226: Memory: Fail - "
    "GPU: 1; GPU 1 Memory test failed: a double-bit ECC error was found"
)


def test_a_failed_diagnostic_is_matched_by_preflight_gpu_and_by_any() -> None:
    (gpu,) = parse_rules("preflight=gpu -> restart-job exclude-node")
    (slow,) = parse_rules("preflight=slow -> fail")
    (either,) = parse_rules("preflight=any -> fail")
    failure = Failure(exit_code=97, message=FAULT, preflight=preflight_verdict(97, FAULT))
    assert failure.preflight == "gpu"
    assert gpu.match.matches(failure) and either.match.matches(failure)
    assert not slow.match.matches(failure)
    assert not gpu.match.matches(Failure(exit_code=97, preflight="slow"))


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(yaml.safe_dump_all(rendered_pods(golden_job()), sort_keys=True))
