"""MindSpore's own init() and AllReduce from rendered env: scheduler + workers, msrun too.

The scheduler's address reaches MindSpore as an IP: the scheduler's own pod IP (fieldRef), and
for the others the cluster IP of the Service the sweeper creates, through the kubelet's
Service-link variable. Pods get their IPs in reverse order, so ranks that follow the pods'
indexes were not handed out by IP.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.render import RenderedPod, render

from .harness import Cluster, PodsFailed
from .workloads import NAMESPACE, reports, statefulset

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
MS_BIN = ROOT / ".venv-mindspore" / "bin"
CLIENT = str(Path(__file__).with_name("clients") / "ms_allreduce.py")
IMAGE_ENV = {"PATH": f"{MS_BIN}:{os.environ['PATH']}"}  # msrun starts `python`
DEADLINE_S = 180.0


@pytest.fixture(scope="module", autouse=True)
def mindspore_installed() -> None:
    if not (MS_BIN / "python").exists():
        pytest.fail(f"{MS_BIN} is missing: `make e2e` builds it")


def mindspore_job(
    results: Path, workers: int, worker_command: list[str], **kw: Any
) -> list[RenderedPod]:
    return render(
        [
            statefulset(
                "ms-scheduler",
                framework="mindspore",
                job="ms",
                role="scheduler",
                replicas=1,
                command=[str(MS_BIN / "python"), CLIENT, str(results)],
            ),
            statefulset(
                "ms-worker",
                framework="mindspore",
                job="ms",
                role="worker",
                replicas=workers,
                command=worker_command,
                **kw,
            ),
        ]
    )


def add_scheduler_service(cluster: Cluster) -> None:
    """The Service the sweeper creates for the job, from the same declaration."""
    declare = FRAMEWORKS["mindspore"].services
    assert declare is not None
    [service] = declare("ms", ["scheduler", "worker"], FRAMEWORKS["mindspore"].port)
    cluster.add_service(service.name, service.selector, service.port)


def workers_of(cluster: Cluster) -> list[str]:
    return [name for name in cluster.pods if name.startswith("ms-worker")]


def test_a_scheduler_and_three_workers_form_the_cluster_and_rank_workers_by_index(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    pods = mindspore_job(results, 3, [str(MS_BIN / "python"), CLIENT, str(results)])

    with Cluster(tmp_path, NAMESPACE) as cluster:
        cluster.add_pods(pod.pod for pod in reversed(pods))
        add_scheduler_service(cluster)
        cluster.start(cluster.pods, "mindspore", image_env=IMAGE_ENV)
        cluster.wait(workers_of(cluster), DEADLINE_S)

    found = reports(results)
    assert [(r["rank"], r["host"]) for r in found] == [(i, f"ms-worker-{i}") for i in range(3)]
    assert {(r["size"], r["sum"]) for r in found} == {(3, 1 + 2 + 3)}


def test_msrun_in_two_worker_pods_of_two_processes_each_forms_one_cluster_of_four(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    msrun = [
        str(MS_BIN / "msrun"),
        "--worker_num=$(MS_WORKER_NUM)",
        "--local_worker_num=2",
        "--master_addr=$(MS_SCHED_HOST)",
        "--master_port=$(MS_SCHED_PORT)",
        "--node_rank=$(TRAINHOOK_ROLE_INDEX)",
        "--join=True",
        "--log_dir=msrun-logs",
        CLIENT,
        str(results),
    ]
    pods = mindspore_job(results, 2, msrun, annotations={contract.NPROC_PER_NODE: "2"})
    assert {pod.env["MS_WORKER_NUM"] for pod in pods} == {"4"}

    with Cluster(tmp_path, NAMESPACE) as cluster:
        cluster.add_pods(pod.pod for pod in reversed(pods))
        add_scheduler_service(cluster)
        cluster.start(cluster.pods, "mindspore", image_env=IMAGE_ENV)
        cluster.wait(workers_of(cluster), DEADLINE_S)

    found = reports(results)
    hosts = ["ms-worker-0", "ms-worker-0", "ms-worker-1", "ms-worker-1"]
    assert [(r["rank"], r["host"]) for r in found] == list(enumerate(hosts))
    assert {(r["size"], r["sum"]) for r in found} == {(4, 1 + 2 + 3 + 4)}


def test_a_worker_started_before_the_service_exists_fails_and_joins_once_restarted(
    tmp_path: Path,
) -> None:
    results = tmp_path / "results"
    results.mkdir()
    pods = mindspore_job(results, 1, [str(MS_BIN / "python"), CLIENT, str(results)])

    with Cluster(tmp_path, NAMESPACE) as cluster:
        cluster.add_pods(pod.pod for pod in pods)
        # MindSpore retries the unparsable address until its topology timeout, then exits.
        impatient = {**IMAGE_ENV, "MS_TOPO_TIMEOUT": "5"}
        cluster.start(["ms-worker-0"], "mindspore", image_env=impatient)
        with pytest.raises(PodsFailed) as caught:
            cluster.wait(["ms-worker-0"], DEADLINE_S)
        assert "Parse ip failed, result: 0, url: $(MS_MS_SCHEDULER_SERVICE_HOST):2222" in str(
            caught.value
        )
        add_scheduler_service(cluster)
        cluster.start(["ms-scheduler-0", "ms-worker-0"], "mindspore", image_env=IMAGE_ENV)
        cluster.wait(["ms-worker-0"], DEADLINE_S)

    assert [(r["rank"], r["size"], r["sum"]) for r in reports(results)] == [(0, 1, 1)]
