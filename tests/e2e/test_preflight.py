"""trainhook.io/preflight for real: the init container the webhook renders, run by each pod of a
3-pod PyTorch job (torch.distributed over gloo, on CPU) in its own network namespace.

A slow link on one pod (a token bucket of 5 MB/s on its `eth0`, `tc qdisc add dev eth0 root tbf
rate 40mbit ...`, in that pod's own network namespace) makes exactly that rank fail its
preflight, with the documented exit code and a last line (its termination message: the kubelet
keeps a failed container's log tail) naming its node and the bandwidth it measured; the same job
without the slow link passes. The sweeper, given that termination message, fails the job under
`preflight=slow -> fail` naming the pod and its node. (`netem delay`/`loss` would do as well
where the kernel has sch_netem; this machine's kernel has tbf but not netem.)

The threshold sits between what the slow link carries and what the others carry on a loaded
2-core machine, each by a wide margin: about 0.005 GB/s against 0.15 to 0.4 GB/s (gloo, 4 MiB).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.stored import pod
from tests.sweeper.helpers import NOW, state_of
from tests.sweeper.test_preflight_failures import RULE, failed_preflight, pytorch
from webhook.core import contract
from webhook.core.fabrics.preflight import CONTAINER, EXIT_CODE, preflight_verdict
from webhook.core.job.failure_rules import Failure, parse_rules
from webhook.core.render import render_all
from webhook.sweeper.decide.policy import judge

from .harness import Cluster
from .workloads import NAMESPACE, statefulset

pytestmark = pytest.mark.e2e

# A link of 5 MB/s out of the slow pod: its data, and its acknowledgements of what it receives.
SLOW_LINK = ["tbf", "rate", "40mbit", "burst", "16kb", "latency", "100ms"]
MIN_BUSBW_GBPS = "0.02"  # 20 MB/s
DEADLINE_S = 240.0
IMAGE_PATH = f"{Path(sys.executable).parent}:{os.environ['PATH']}"  # the image's python


@pytest.fixture(scope="module", autouse=True)
def torch_installed() -> None:
    if importlib.util.find_spec("torch") is None:
        pytest.fail("torch is not installed: `make e2e` installs torch==2.13.0 before these tests")


def preflight_pods(job: str) -> list[dict[str, Any]]:
    """A master and two workers with the preflight, each bound to a node of its own."""
    annotations = {contract.PREFLIGHT: "nccl", contract.PREFLIGHT_MIN_BUSBW: MIN_BUSBW_GBPS}
    documents = [
        statefulset(
            f"{job}-master",
            framework="pytorch",
            job=job,
            role="master",
            replicas=1,
            command=["python", "-c", "pass"],
            annotations=annotations,
        ),
        statefulset(
            f"{job}-worker",
            framework="pytorch",
            job=job,
            role="worker",
            replicas=2,
            command=["python", "-c", "pass"],
            annotations=annotations,
        ),
    ]
    pods = [rendered.pod for rendered in render_all(documents).pods]
    for i, manifest in enumerate(pods):
        manifest["spec"]["nodeName"] = f"node-{i}"  # as the scheduler binds it
    return pods


def run_preflight(tmp_path: Path, job: str, slow: int | None) -> dict[str, tuple[int, str]]:
    """Every pod's preflight exit code and log, with a delay on pod `slow`'s link."""
    pods = preflight_pods(job)
    with Cluster(tmp_path, NAMESPACE) as cluster:
        cluster.add_pods(pods)
        if slow is not None:
            netns = list(cluster.pods.values())[slow].netns
            shape = ["tc", "qdisc", "add", "dev", "eth0", "root", *SLOW_LINK]
            subprocess.run(["ip", "netns", "exec", netns, *shape], check=True)
        cluster.start(cluster.pods, CONTAINER, image_env={"PATH": IMAGE_PATH})
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            processes = [pod.process for pod in cluster.pods.values()]
            if all(p is not None and p.poll() is not None for p in processes):
                break
            time.sleep(0.2)
        exits = cluster.exits()
    return {e.name: (e.returncode if e.returncode is not None else -1, e.log) for e in exits}


def termination_message(log: str) -> str:
    """What the kubelet keeps of a failed container's log (FallbackToLogsOnError): its last 80
    lines, at most 2048 bytes."""
    return "\n".join(log.splitlines()[-80:])[-2048:]


def last_line(log: str) -> str:
    """What the kubelet keeps of a failed container's log as its termination message
    (FallbackToLogsOnError): its tail, of which the last line."""
    return log.strip().splitlines()[-1] if log.strip() else ""


def test_a_job_without_a_slow_link_passes_its_preflight(tmp_path: Path) -> None:
    exits = run_preflight(tmp_path, "fast", slow=None)
    assert {name: code for name, (code, _) in exits.items()} == {
        "fast-master-0": 0,
        "fast-worker-0": 0,
        "fast-worker-1": 0,
    }, exits
    for name, (_, log) in exits.items():
        assert last_line(log).startswith("trainhook-preflight: passed: node node-"), (name, log)


def test_the_rank_behind_a_slow_link_alone_fails_naming_its_node_and_bandwidth(
    tmp_path: Path,
) -> None:
    exits = run_preflight(tmp_path, "slow", slow=2)
    codes = {name: code for name, (code, _) in exits.items()}
    assert codes == {"slow-master-0": 0, "slow-worker-0": 0, "slow-worker-1": EXIT_CODE}, exits
    message = last_line(exits["slow-worker-1"][1])
    assert message.startswith("trainhook-preflight: slow: node node-2 rank 2: bus bandwidth "), (
        message
    )
    assert f"GB/s, below {MIN_BUSBW_GBPS} GB/s (job " in message
    measured = float(message.split("bus bandwidth ")[1].split(" GB/s")[0])
    assert 0 < measured < float(MIN_BUSBW_GBPS)
    # The sweeper reads that run as the preflight's, and a rule on it acts for that pod alone.
    (rule,) = parse_rules("preflight=slow -> restart-job exclude-node")
    verdicts = {
        name: preflight_verdict(code, last_line(log)) for name, (code, log) in exits.items()
    }
    assert verdicts == {"slow-master-0": "", "slow-worker-0": "", "slow-worker-1": "slow"}
    failure = Failure(role="worker", exit_code=EXIT_CODE, message=message, preflight="slow")
    assert rule.match.matches(failure)
    # The sweeper, seeing that run as the slow pod's status, acts on that pod naming its node.
    workloads = pytorch()
    master, workers = workloads
    slow = failed_preflight(pod(workers, 1), termination_message(exits["slow-worker-1"][1]))
    verdict = judge(state_of("pt", workloads, [pod(master, 0), pod(workers, 0), slow]), NOW)
    assert verdict is not None and verdict.reason == "FailurePolicy", verdict
    assert verdict.message.startswith(
        "pod pt-worker-1: container pytorch (an init container) exited with code 97: "
    )
    assert "trainhook-preflight: slow: node node-2 rank 2: bus bandwidth " in verdict.message
    assert verdict.message.endswith(f"; failure-policy rule 1 ({RULE})")
