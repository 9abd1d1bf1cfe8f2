"""`trainhook.io/preflight: nccl`: every pod of the job gets the `trainhook-preflight` init
container, last, in its training container's image and shape, with the threshold the job or its
fabric profile sets; what cannot work is refused in one line; the webhook leaves its own output
as it is; a failed run's verdict is what the failure rules' `preflight=` term matches.

The golden render under tests/core/preflight/ is the pods of a PyTorch job (a master and two
workers) with the preflight and a threshold; `python -m tests.core.test_preflight` writes it
again after a deliberate change (then read the diff).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
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
    EXIT_CODE,
    PROGRAM,
    later_attempt,
    preflight_verdict,
)
from webhook.core.fabrics.registry import use_profiles
from webhook.core.fabrics.schema import ProfileError, parse_profiles
from webhook.core.job.failure_rules import Failure, parse_rules
from webhook.core.mutation import pod_patches
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.mutation.pod_mutation import mutate_pod, owner_to_resolve
from webhook.core.render import RenderError, render_all

GOLDEN = Path(__file__).parent / "preflight" / "pytorch.yaml"
PREFLIGHT = contract.PREFLIGHT
MIN_BUSBW = contract.PREFLIGHT_MIN_BUSBW
EVERY_ATTEMPT = contract.PREFLIGHT_EVERY_ATTEMPT


@pytest.fixture(autouse=True)
def reference_profiles() -> Iterator[None]:
    use_profiles({})
    pod_patches.forget()
    yield
    use_profiles({})
    pod_patches.forget()


def job(
    master: dict[str, str], worker: dict[str, str] | None = None, **extra: Any
) -> list[dict[str, Any]]:
    return [
        statefulset(
            "pt-master", "pytorch", role="master", job="pt", annotations=dict(master), **extra
        ),
        statefulset(
            "pt-worker",
            "pytorch",
            role="worker",
            job="pt",
            replicas=2,
            annotations=dict(master if worker is None else worker),
            **extra,
        ),
    ]


def rendered_pods(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [pod.pod for pod in render_all(documents).pods]


def golden_job() -> list[dict[str, Any]]:
    return job({PREFLIGHT: "nccl", MIN_BUSBW: "40", contract.GPUS: "8"})


def refusal(documents: list[dict[str, Any]]) -> str:
    with pytest.raises(RenderError) as error:
        render_all(documents)
    return str(error.value)


def preflight_of(pod: dict[str, Any]) -> dict[str, Any]:
    init = pod["spec"].get("initContainers") or []
    (found,) = [c for c in init if c["name"] == CONTAINER]
    assert init[-1] is found, "the preflight is the last init container"
    return dict(found)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {i["name"]: i.get("value", i.get("valueFrom")) for i in container.get("env") or []}


# --- the init container, as rendered ----------------------------------------------------------


def test_a_preflight_jobs_pods_render_their_golden_init_container() -> None:
    expected = list(yaml.safe_load_all(GOLDEN.read_text()))
    assert rendered_pods(golden_job()) == expected


def test_a_preflight_jobs_pods_validate_against_kubernetes_1_32() -> None:
    for pod in rendered_pods(golden_job()):
        kubernetes_validate.validate(pod, "1.32", strict=True)


def test_the_preflight_runs_like_the_training_container_with_a_port_of_its_own() -> None:
    for pod in rendered_pods(golden_job()):
        (trainer,) = pod["spec"]["containers"]
        preflight = preflight_of(pod)
        assert (preflight["image"], preflight["resources"]) == (
            trainer["image"],
            trainer["resources"],
        )
        assert preflight["resources"]["limits"]["nvidia.com/gpu"] == "8"
        assert preflight["command"] == ["python", "-c", PROGRAM]
        assert preflight["env"][: len(trainer["env"])] == trainer["env"]
        env = env_of(preflight)
        assert (env["MASTER_ADDR"], env["MASTER_PORT"]) == ("pt-master-0.pt.default.svc", "23456")
        assert env["TRAINHOOK_PREFLIGHT_PORT"] == "23457"
        assert env["TRAINHOOK_PREFLIGHT_MIN_BUSBW"] == "40"
        assert env["TRAINHOOK_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
        assert "TRAINHOOK_PREFLIGHT_EVERY_ATTEMPT" not in env
        assert preflight["terminationMessagePolicy"] == "FallbackToLogsOnError"
    ranks = [env_of(preflight_of(pod))["NODE_RANK"] for pod in rendered_pods(golden_job())]
    assert ranks == ["0", "1", "2"]


def test_the_program_the_preflight_runs_is_python() -> None:
    compile(PROGRAM, "<trainhook-preflight>", "exec")
    assert "$(" not in PROGRAM  # the kubelet would expand it


def test_a_job_without_a_preflight_gets_no_init_container() -> None:
    for pod in rendered_pods(job({})):
        assert "initContainers" not in pod["spec"]


def test_the_preflight_comes_after_the_pods_own_init_containers() -> None:
    containers = [
        {"name": "pytorch", "image": "trainer:1"},
    ]
    documents = job({PREFLIGHT: "nccl"}, containers=containers)
    for document in documents:
        spec = document["spec"]["template"]["spec"]
        spec["initContainers"] = [{"name": "fetch-data", "image": "fetch:1"}]
    for pod in rendered_pods(documents):
        assert [c["name"] for c in pod["spec"]["initContainers"]] == ["fetch-data", CONTAINER]


def test_every_attempt_is_said_to_the_preflight() -> None:
    for pod in rendered_pods(job({PREFLIGHT: "nccl", EVERY_ATTEMPT: "true"})):
        env = env_of(preflight_of(pod))
        assert env["TRAINHOOK_PREFLIGHT_EVERY_ATTEMPT"] == "true"
        assert "TRAINHOOK_PREFLIGHT_MIN_BUSBW" not in env  # measured and shown, never failed


def test_the_fabric_profiles_threshold_applies_where_the_job_sets_none() -> None:
    custom = parse_profiles(
        {"lab-ib": {"ncclNet": "IB", "resources": {"rdma/ib": 1}, "preflightMinBusBW": 12.5}},
        "profiles",
    )
    use_profiles(custom)
    annotations = {PREFLIGHT: "nccl", contract.FABRIC: "lab-ib", contract.GPUS: "8"}
    for pod in rendered_pods(job(annotations)):
        assert env_of(preflight_of(pod))["TRAINHOOK_PREFLIGHT_MIN_BUSBW"] == "12.5"
        assert env_of(preflight_of(pod))["NCCL_NET"] == "IB"
    for pod in rendered_pods(job({**annotations, MIN_BUSBW: "30"})):
        assert env_of(preflight_of(pod))["TRAINHOOK_PREFLIGHT_MIN_BUSBW"] == "30"


def test_a_profiles_threshold_that_is_no_bandwidth_is_refused_in_one_line() -> None:
    with pytest.raises(ProfileError) as error:
        parse_profiles({"lab-ib": {"ncclNet": "IB", "preflightMinBusBW": "fast"}}, "profiles")
    assert str(error.value) == (
        "profiles: profile lab-ib: preflightMinBusBW: 'fast' is not a bus bandwidth in GB/s "
        "above 0 and at most 100000, such as 40 or 12.5"
    )


def test_the_training_port_at_the_top_gives_the_preflight_the_port_below() -> None:
    for pod in rendered_pods(job({PREFLIGHT: "nccl", contract.PORT: "65535"})):
        assert env_of(preflight_of(pod))["TRAINHOOK_PREFLIGHT_PORT"] == "65534"


# --- first attempt only -----------------------------------------------------------------------


def restarted_owner(document: dict[str, Any], restarts: int) -> dict[str, Any]:
    owner = copy.deepcopy(document)
    status = {"state": "Running", "restarts": restarts, "startTime": "2026-01-01T00:00:00Z"}
    owner["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    return owner


def test_a_pod_admitted_after_its_job_restarted_gets_no_preflight() -> None:
    documents = job({PREFLIGHT: "nccl"})
    pod = render_all(documents).pods[1].pod
    stored = copy.deepcopy(pod)
    stored["spec"]["initContainers"] = []
    del stored["spec"]["initContainers"]
    assert owner_to_resolve(stored) == ("StatefulSet", "pt-worker")
    first = mutate_pod(stored, "default", owner=restarted_owner(documents[1], 0)).pod
    assert preflight_of(first)["name"] == CONTAINER
    later = mutate_pod(stored, "default", owner=restarted_owner(documents[1], 1)).pod
    assert "initContainers" not in later["spec"]


def test_a_pod_of_a_job_that_runs_it_every_attempt_gets_it_after_a_restart_too() -> None:
    documents = job({PREFLIGHT: "nccl", EVERY_ATTEMPT: "true"})
    pod = copy.deepcopy(render_all(documents).pods[1].pod)
    del pod["spec"]["initContainers"]
    assert owner_to_resolve(pod) is None  # no need to read the job's restarts
    later = mutate_pod(pod, "default", owner=restarted_owner(documents[1], 3)).pod
    assert preflight_of(later)["name"] == CONTAINER


def test_a_restart_of_one_role_counts_as_a_later_attempt() -> None:
    owner = {"metadata": {"annotations": {contract.STATUS: json.dumps({"restartedAt": "t"})}}}
    assert later_attempt(owner)
    assert not later_attempt({"metadata": {"annotations": {contract.STATUS: "{not json"}}})
    assert not later_attempt(None)


def run_program(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {"PATH": os.environ["PATH"], "NODE_RANK": "0", "NNODES": "2"}
    return subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_pod_restarted_in_place_skips_its_preflight_on_a_later_attempt() -> None:
    done = run_program({"TRAINHOOK_ATTEMPT": "2"})
    assert (done.returncode, done.stderr) == (
        0,
        "trainhook-preflight: skipped: attempt 2 of the job; only its first runs the preflight\n",
    )


def test_a_job_of_one_pod_passes_its_preflight_with_nothing_to_measure() -> None:
    done = run_program({"TRAINHOOK_NODE_NAME": "gpu-node-7", "NNODES": "1"})
    assert (done.returncode, done.stderr) == (
        0,
        "trainhook-preflight: passed: node gpu-node-7 rank 0: a job of one pod has no link to "
        "measure\n",
    )


def test_a_preflight_without_peers_fails_with_its_code_naming_its_node() -> None:
    done = run_program(
        {
            "TRAINHOOK_NODE_NAME": "gpu-node-7",
            "MASTER_ADDR": "127.0.0.1",
            "TRAINHOOK_PREFLIGHT_PORT": "1",  # nothing listens there: no rendezvous
            "TRAINHOOK_PREFLIGHT_TIMEOUT_SECONDS": "2",
            "NODE_RANK": "1",
        }
    )
    last = done.stderr.strip().splitlines()[-1]
    assert done.returncode == EXIT_CODE, done.stderr
    assert last.startswith("trainhook-preflight: error: node gpu-node-7 rank 1: "), last
    assert preflight_verdict(done.returncode, last) == "error"


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
            {PREFLIGHT: "nccl,nccl"},
            "trainhook.io/preflight: invalid value 'nccl,nccl': nccl, dcgm, or both "
            "comma-separated (nccl,dcgm)",
        ),
        (
            {PREFLIGHT: "nccl", MIN_BUSBW: "fast"},
            "trainhook.io/preflight-min-busbw: invalid value 'fast': a bus bandwidth in GB/s "
            "above 0 and at most 100000, such as 40 or 12.5",
        ),
        (
            {PREFLIGHT: "nccl", MIN_BUSBW: "0"},
            "trainhook.io/preflight-min-busbw: invalid value '0': a bus bandwidth in GB/s "
            "above 0 and at most 100000, such as 40 or 12.5",
        ),
        (
            {PREFLIGHT: "nccl", MIN_BUSBW: "4e1"},
            "trainhook.io/preflight-min-busbw: invalid value '4e1': a bus bandwidth in GB/s "
            "above 0 and at most 100000, such as 40 or 12.5",
        ),
        (
            {MIN_BUSBW: "40"},
            "trainhook.io/preflight-min-busbw: invalid value '40': read only with "
            "trainhook.io/preflight set: set it too, or remove the threshold",
        ),
        (
            {PREFLIGHT: "nccl", EVERY_ATTEMPT: "always"},
            "trainhook.io/preflight-every-attempt: invalid value 'always': one of true, false",
        ),
        (
            {EVERY_ATTEMPT: "true"},
            "trainhook.io/preflight-every-attempt: invalid value 'true': read only with "
            "trainhook.io/preflight set: set it too, or remove this",
        ),
        (
            {PREFLIGHT: "nccl", contract.ELASTIC: "1:3"},
            "trainhook.io/preflight: invalid value 'nccl': an elastic job "
            "(trainhook.io/elastic) has no world size before its rendezvous, which the nccl "
            "preflight needs",
        ),
    ],
    ids=[
        "unknown",
        "twice",
        "threshold-word",
        "threshold-zero",
        "threshold-exponent",
        "threshold-alone",
        "every-attempt-word",
        "every-attempt-alone",
        "elastic",
    ],
)
def test_what_cannot_work_is_refused_in_one_line(annotations: dict[str, str], line: str) -> None:
    assert refusal(job(annotations)) == line


def test_a_framework_the_preflight_does_not_run_on_yet_is_refused_naming_it() -> None:
    documents = [
        statefulset(
            "tf-worker", "tensorflow", role="worker", job="tf", annotations={PREFLIGHT: "nccl"}
        )
    ]
    assert refusal(documents) == (
        "trainhook.io/preflight: invalid value 'nccl': the nccl preflight runs "
        "torch.distributed, for pytorch jobs; not yet for tensorflow jobs (dcgm runs for any)"
    )


def test_a_preflight_on_one_role_only_is_refused_as_a_disagreement() -> None:
    assert refusal(job({PREFLIGHT: "nccl"}, {})) == (
        "trainhook.io/preflight differs between the roles of job pt: master (StatefulSet "
        "pt-master) 'nccl', worker (StatefulSet pt-worker) unset; set one value on every "
        "workload of the job (every rank joins the same preflight)"
    )


def test_a_container_port_where_the_preflight_meets_is_refused_in_one_line() -> None:
    containers = [{"name": "pytorch", "image": "t:1", "ports": [{"containerPort": 29501}]}]
    documents = job({PREFLIGHT: "nccl", contract.PORT: "29500"}, containers=containers)
    assert refusal(documents) == (
        "trainhook.io/preflight: invalid value 'nccl': its rendezvous takes port 29501, next "
        "to the training port, which container pytorch declares: set trainhook.io/port to a "
        "port whose next one is free"
    )


def test_a_bare_pod_with_a_bad_threshold_is_refused_at_admission() -> None:
    pod = bare_pod("solo", "pytorch", annotations={PREFLIGHT: "nccl", MIN_BUSBW: "-3"})
    with pytest.raises(TrainhookError) as error:
        admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert str(error.value).startswith("trainhook.io/preflight-min-busbw: invalid value '-3': ")


# --- the webhook on its own output ------------------------------------------------------------


def test_admitting_a_preflight_pod_again_changes_nothing() -> None:
    pod = bare_pod("solo", "pytorch", annotations={PREFLIGHT: "nccl", MIN_BUSBW: "40"})
    outcome = admit(Request("Pod", "CREATE", pod, "default"), Found())
    assert outcome is not None and outcome.patch != []
    patched = jsonpatch.apply_patch(copy.deepcopy(pod), outcome.patch)
    assert preflight_of(patched)["name"] == CONTAINER
    pod_patches.forget()
    again = admit(Request("Pod", "CREATE", patched, "default"), Found())
    assert again is not None and (again.patch, again.warnings) == ([], [])


def test_a_preflight_jobs_rendered_pods_admitted_again_change_nothing() -> None:
    for pod in rendered_pods(golden_job()):
        outcome = admit(Request("Pod", "CREATE", copy.deepcopy(pod), "default"), Found())
        assert outcome is not None and (outcome.patch, outcome.warnings) == ([], [])


def test_each_pod_of_a_workload_gets_its_own_rank_in_its_preflight() -> None:
    from tests.core.test_pod_patches import full, pods_of, reused

    pods = pods_of(3, {PREFLIGHT: "nccl"})
    answers = [reused(pod, "default", "") for pod in pods]
    assert answers == [full(pod, "default", "") for pod in pods]
    ranks = set()
    assert pod_patches.counts().reused == 0  # each mutated in full: its env is its own
    for pod, answer in zip(pods, answers, strict=True):
        ops, _ = json.loads(answer)
        patched = jsonpatch.apply_patch(copy.deepcopy(pod), ops)
        ranks.add(env_of(preflight_of(patched))["NODE_RANK"])
    assert len(ranks) == 3


# --- the failure rules' preflight= term -------------------------------------------------------

SLOW = (
    "trainhook-preflight: slow: node gpu-node-7 rank 2: bus bandwidth 3.1 GB/s, below 40 GB/s "
    "(job 3.1 GB/s)"
)
BROKEN = "trainhook-preflight: error: node gpu-node-7 rank 2: DistStoreError: timed out"


def test_a_slow_preflight_is_matched_by_preflight_slow_and_nothing_else_is() -> None:
    (rule,) = parse_rules("preflight=slow -> restart-job exclude-node")
    assert rule.match.matches(Failure(exit_code=97, message=SLOW, preflight="slow"))
    assert not rule.match.matches(Failure(exit_code=97, message=BROKEN, preflight="error"))
    assert not rule.match.matches(Failure(exit_code=97, message="user code exited 97"))


def test_preflight_any_matches_every_verdict() -> None:
    (rule,) = parse_rules("preflight=any -> fail")
    assert rule.match.matches(Failure(preflight="slow"))
    assert rule.match.matches(Failure(preflight="error"))
    assert rule.match.matches(Failure(preflight="gpu"))
    assert not rule.match.matches(Failure(exit_code=1))


def test_a_verdict_is_read_from_the_preflights_exit_code_and_last_line_only() -> None:
    assert preflight_verdict(97, "NCCL INFO ...\n" + SLOW) == "slow"
    assert preflight_verdict(97, BROKEN) == "error"
    assert preflight_verdict(1, SLOW) == ""
    assert preflight_verdict(97, "exited 97 on its own") == ""


def test_an_unknown_preflight_verdict_in_a_rule_is_refused_in_one_line() -> None:
    with pytest.raises(TrainhookError) as error:
        parse_rules("preflight=fast -> fail")
    assert str(error.value) == (
        "trainhook.io/failure-policy: invalid value 'preflight=fast -> fail': rule 1: "
        "preflight=fast: one of slow, error, gpu, any"
    )


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text(yaml.safe_dump_all(rendered_pods(golden_job()), sort_keys=True))
