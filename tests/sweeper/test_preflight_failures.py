"""The sweeper reads a failed `trainhook-preflight` or `trainhook-preflight-dcgm` run as the
preflight's verdict: a `preflight=` failure rule acts on the slow rank's pod, naming its node and
the bandwidth measured, and on the pod whose GPU failed its DCGM diagnostic, naming its node and
the failing test; a training container that exits with the same code is no preflight failure."""

from __future__ import annotations

from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.core.fabrics.preflight import CONTAINER, DCGM_CONTAINER, EXIT_CODE
from webhook.sweeper.decide.policy import Verdict, judge

from .helpers import NOW, state_of, terminated

SLOW = (
    "trainhook-preflight: slow: node gpu-node-7 rank 2: bus bandwidth 3.1 GB/s, below 40 GB/s "
    "(job 3.1 GB/s)"
)
RULE = "preflight=slow -> fail"


def pytorch(preflight: str = "nccl", rule: str = RULE) -> list[dict[str, Any]]:
    annotations = {contract.PREFLIGHT: preflight, contract.FAILURE_POLICY: rule}
    if "nccl" in preflight:
        annotations[contract.PREFLIGHT_MIN_BUSBW] = "40"
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    return stamped(master, worker)


def failed_preflight(
    obj: dict[str, Any], message: str, container: str = CONTAINER
) -> dict[str, Any]:
    """A pod whose preflight init container has exited (the kubelet keeps its log's tail as its
    termination message) and whose training container waits to start."""
    obj["spec"]["initContainers"] = [{"name": container, "image": "trainer:1"}]
    obj["status"]["phase"] = "Pending"
    obj["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "PodInitializing"}}
    obj["status"]["initContainerStatuses"] = [
        {
            "name": container,
            "restartCount": 0,
            "state": {
                "terminated": {
                    "exitCode": EXIT_CODE,
                    "reason": "Error",
                    "message": message,
                    "finishedAt": "2025-01-01T00:00:00Z",
                }
            },
        }
    ]
    return obj


def test_a_rank_that_fails_its_preflight_as_slow_is_acted_on_naming_its_node() -> None:
    workloads = pytorch()
    master, workers = workloads
    slow = failed_preflight(pod(workers, 1), "[W socket.cpp:207] warning\n" + SLOW)
    pods = [pod(master, 0), pod(workers, 0), slow]
    assert judge(state_of("pt", workloads, pods), NOW) == Verdict(
        "Failed",
        "FailurePolicy",
        f"pod pt-worker-1: container pytorch (an init container) exited with code 97: "
        f"[W socket.cpp:207] warning {SLOW}; failure-policy rule 1 ({RULE})",
        f"failure-policy rule 1 ({RULE})",
    )


def test_a_training_container_exiting_97_is_no_preflight_failure() -> None:
    workloads = pytorch()
    master, workers = workloads
    crashed = terminated(pod(workers, 1, restarts=1), EXIT_CODE, message=SLOW, last=True)
    pods = [pod(master, 0), pod(workers, 0), crashed]
    verdict = judge(state_of("pt", workloads, pods), NOW)
    assert verdict is None or RULE not in verdict.message


FAULT = (
    "trainhook-preflight: gpu: node gpu-node-7: dcgmi diag -r 1 exited 226: Memory: Fail - "
    "GPU: 1; GPU 1 Memory test failed: a double-bit ECC error was found"
)
GPU_RULE = "preflight=gpu -> fail"


def test_a_pod_whose_gpu_fails_its_dcgm_diagnostic_is_acted_on_naming_its_node() -> None:
    workloads = pytorch("dcgm", GPU_RULE)
    master, workers = workloads
    faulty = failed_preflight(pod(workers, 0), "| Memory | Fail |\n" + FAULT, DCGM_CONTAINER)
    pods = [pod(master, 0), faulty, pod(workers, 1)]
    assert judge(state_of("pt", workloads, pods), NOW) == Verdict(
        "Failed",
        "FailurePolicy",
        f"pod pt-worker-0: container pytorch (an init container) exited with code 97: "
        f"| Memory | Fail | {FAULT}; failure-policy rule 1 ({GPU_RULE})",
        f"failure-policy rule 1 ({GPU_RULE})",
    )


def test_a_slow_all_reduce_is_no_gpu_fault() -> None:
    workloads = pytorch("nccl,dcgm", GPU_RULE)
    master, workers = workloads
    slow = failed_preflight(pod(workers, 1), SLOW)
    assert judge(state_of("pt", workloads, [pod(master, 0), pod(workers, 0), slow]), NOW) is None
