"""The chart's Grafana dashboards: a ConfigMap Grafana's sidecar finds, and every query of them
checked by promtool (`promtool test rules`) against series the sweeper's own /metrics exposes.

The input series are the sweeper's exposition, as its collectors produce it for one job, played
over an hour: a query that names a metric, a label or a phase the code does not expose finds
nothing and fails its test. "GPUs by job" joins NVIDIA dcgm-exporter's series to the sweeper's
trainhook_pod_info; its DCGM series are written as dcgm-exporter exposes them (below)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest

from tests.chart.rendering import REPO, render
from webhook.sweeper.job.goodput import Goodput
from webhook.sweeper.job.pods import PodView
from webhook.sweeper.serving.goodput import GoodputFigures
from webhook.sweeper.serving.health import SweeperHealth
from webhook.sweeper.serving.metrics import StragglerFigures
from webhook.sweeper.serving.pod_info import PodInfoFigures

DASHBOARDS = REPO / "charts" / "trainhook" / "dashboards"
VARIABLES = {"$namespace": ".*", "$job": ".*", "$role": ".*"}  # the dashboards' "All"
T0 = datetime(2025, 1, 1, tzinfo=UTC)


def queries(dashboard: str) -> list[str]:
    """Every query of the dashboard, with its variables at "All"."""
    found = []
    for panel in json.loads((DASHBOARDS / dashboard).read_text())["panels"]:
        for target in panel["targets"]:
            query = target["expr"]
            for variable, value in VARIABLES.items():
                query = query.replace(variable, value)
            found.append(query)
    return found


def exposed() -> dict[str, float]:
    """The sweeper's trainhook_* series for one running job that reports its progress."""
    health = SweeperHealth()
    health.job_phase(("ml", "pt"), "Running")
    ledger = Goodput("training", T0 - timedelta(seconds=540), {"pending": 60}, lost_steps=20)
    health.goodput = GoodputFigures(clock=lambda: T0.timestamp())
    health.goodput.seen(("ml", "pt"), ledger, 180)
    registry = CollectorRegistry()
    for collector in health.collectors():
        registry.register(collector)
    registry.register(StragglerFigures(lambda: [(("ml", "pt"), 1)]))  # with --progress-bind
    series = {}
    for line in generate_latest(registry).decode().splitlines():
        if line.startswith("trainhook_") and not re.match(r"\S+_(created|bucket)\{?", line):
            name, value = line.rsplit(" ", 1)
            series[name] = float(value)
    return series


def played(name: str, value: float) -> str:
    """An hour of a series, a sample a minute: training and restarts grow, the rest stay."""
    if 'phase="training"' in name and name.startswith("trainhook_job_phase_seconds"):
        return f"{value:g}+60x60"  # a minute of training each minute
    if name.startswith("trainhook_sweeper_job_restarts_total"):
        return "0+1x60"  # a restart a minute
    return f"{value:g}x60"


# What each query finds after the hour (at 60m), for the job above.
JOB = 'job="pt",namespace="ml"'
EXPECTED: dict[str, list[tuple[str, float]]] = {
    'trainhook_job_goodput_ratio{namespace=~".*", job=~".*"}': [
        # 540 s training, 60 s pending; 20 of the 200 steps reached were lost: 54 s redone
        (f"trainhook_job_goodput_ratio{{{JOB}}}", 0.81)
    ],
    'sum by (phase) (trainhook_job_phase_seconds{namespace=~".*", job=~".*"})': [
        ('{phase="pending"}', 60),
        ('{phase="starting"}', 0),
        ('{phase="training"}', 540 + 3600),
        ('{phase="restarting"}', 0),
        ('{phase="stalled"}', 0),
    ],
    "sum(increase(trainhook_job_phase_seconds{phase!='training',namespace=~'.*',job=~'.*'}[1h]))"
    "by(phase)": [
        (f'{{phase="{phase}"}}', 0) for phase in ("pending", "starting", "restarting", "stalled")
    ],
    'trainhook_job_lost_steps{namespace=~".*", job=~".*"}': [
        (f"trainhook_job_lost_steps{{{JOB}}}", 20)
    ],
    "sum by (phase) (trainhook_sweeper_jobs)": [
        (f'{{phase="{phase}"}}', 1 if phase == "Running" else 0)
        for phase in (
            "Pending",
            "Running",
            "Restarting",
            "Suspended",
            "Succeeded",
            "Failed",
            "Invalid",
        )
    ],
    "sum(increase(trainhook_sweeper_job_restarts_total[1h]))": [("{}", 60)],
    'max by (namespace, job) (trainhook_job_stragglers{namespace=~".*", job=~".*"})': [
        (f"{{{JOB}}}", 1)
    ],
}


def test_the_chart_ships_the_dashboard_for_grafanas_sidecar() -> None:
    assert not [
        c
        for c in render().of_kind("ConfigMap")
        if "grafana_dashboard" in (c["metadata"].get("labels") or {})
    ]
    rendered = render({"metrics": {"grafanaDashboards": {"enabled": True, "labels": {"a": "b"}}}})
    (configmap,) = [
        c
        for c in rendered.of_kind("ConfigMap")
        if (c["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"
    ]
    assert configmap["metadata"]["labels"]["a"] == "b"
    shipped = configmap["data"]["trainhook-training-jobs.json"]
    assert json.loads(shipped) == json.loads((DASHBOARDS / "training-jobs.json").read_text())


def test_every_query_of_the_dashboards_is_tested() -> None:
    assert sorted(path.name for path in DASHBOARDS.glob("*.json")) == [
        "gpus-by-job.json",
        "training-jobs.json",
    ]
    assert sorted(queries("training-jobs.json")) == sorted(EXPECTED)
    assert sorted(queries("gpus-by-job.json")) == sorted(GPU_EXPECTED)


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian package prometheus; `make test` installs it)",
)
def test_promtool_finds_what_each_query_should_on_the_sweepers_own_series(tmp_path: Path) -> None:
    series = exposed()
    assert {"trainhook_job_goodput_ratio", "trainhook_job_lost_steps"} <= {
        name.split("{")[0] for name in series
    }
    input_series = [
        {"series": name, "values": played(name, value)} for name, value in sorted(series.items())
    ]
    assert_promtool_finds(tmp_path, input_series, EXPECTED)


def assert_promtool_finds(
    tmp_path: Path,
    input_series: list[dict[str, str]],
    expected: dict[str, list[tuple[str, float]]],
) -> None:
    """`promtool test rules`: each query, evaluated at 60m on the series, finds what is expected."""
    tests: dict[str, Any] = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series,
                "promql_expr_test": [
                    {
                        "expr": expr,
                        "eval_time": "60m",
                        "exp_samples": [
                            {"labels": labels, "value": value} for labels, value in found
                        ],
                    }
                    for expr, found in expected.items()
                ],
            }
        ],
    }
    path = tmp_path / "dashboard-tests.yaml"
    path.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = subprocess.run(
        ["promtool", "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


# --- "GPUs by job": dcgm-exporter's series joined on the pod to trainhook_pod_info -----------
#
# How dcgm-exporter labels its series, from NVIDIA/dcgm-exporter:
# * etc/default-counters.csv: DCGM_FI_DEV_GPU_UTIL (gauge, "GPU utilization (in %)"),
#   DCGM_FI_DEV_FB_USED (gauge, "Framebuffer memory used (in MiB)"), DCGM_FI_DEV_POWER_USAGE
#   (gauge, "Power draw (in W)") and DCGM_FI_DEV_XID_ERRORS (gauge, "Value of the last XID error
#   encountered"), all in its default set.
# * Every GPU's series carries gpu, UUID, pci_bus_id, device, modelName, Hostname and
#   DCGM_FI_DRIVER_VERSION (its /metrics, as published in its documentation and issues).
# * In Kubernetes mode (DCGM_EXPORTER_KUBERNETES=true, the Helm chart's and GPU Operator's
#   default) internal/pkg/transformation/kubernetes.go asks the kubelet's pod-resources API which
#   container holds each GPU and adds, from const.go, `pod`, `namespace` and `container`
#   (`pod_name`, `pod_namespace`, `container_name` with --use-old-namespace); a GPU no container
#   holds gets none of them.
# * Scraped by a ServiceMonitor without honorLabels, Prometheus renames those three to
#   exported_pod, exported_namespace and exported_container, the target's own taking their place
#   (NVIDIA/dcgm-exporter#85, NVIDIA/gpu-operator#2938): the dashboard needs honorLabels: true on
#   the DCGM scrape (the GPU Operator's dcgmExporter.serviceMonitor.honorLabels), as the chart's
#   PodMonitor has on the sweeper's.
GPU_PODS = [  # (pod, role, rank, node, [(gpu, util %, framebuffer MiB, power W, last XID)])
    ("pt-master-0", "master", "0", "gpu-a", [(0, 90, 30000, 300, 0)]),
    ("pt-worker-0", "worker", "1", "gpu-b", [(0, 80, 20000, 250, 0), (1, 60, 22000, 270, 79)]),
    ("pt-worker-1", "worker", "2", "gpu-c", [(0, 70, 21000, 260, 0), (1, 50, 23000, 240, 0)]),
]
DCGM = {
    "DCGM_FI_DEV_GPU_UTIL": 1,
    "DCGM_FI_DEV_FB_USED": 2,
    "DCGM_FI_DEV_POWER_USAGE": 3,
    "DCGM_FI_DEV_XID_ERRORS": 4,
}
# Every query's join: the pod's job and role, each pod once (two sweeper replicas may name it).
POD_INFO_ALL = (
    "max(trainhook_pod_info{namespace=~'.*',job=~'.*',role=~'.*'})by(namespace,pod,job,role)"
)


def joined(metric: str) -> str:
    return f"{metric}*on(namespace,pod)group_left(job,role){POD_INFO_ALL}"


MASTER = '{job="pt",namespace="ml",role="master"}'
WORKER = '{job="pt",namespace="ml",role="worker"}'
GPU_EXPECTED: dict[str, list[tuple[str, float]]] = {
    f"avg({joined('DCGM_FI_DEV_GPU_UTIL')})by(namespace,job,role)": [
        (MASTER, 90),
        (WORKER, (80 + 60 + 70 + 50) / 4),
    ],
    f"sum({joined('DCGM_FI_DEV_FB_USED')})by(namespace,job,role)": [
        (MASTER, 30000),
        (WORKER, 20000 + 22000 + 21000 + 23000),
    ],
    f"sum({joined('DCGM_FI_DEV_POWER_USAGE')})by(namespace,job,role)": [
        (MASTER, 300),
        (WORKER, 250 + 270 + 260 + 240),
    ],
    f"count({joined('DCGM_FI_DEV_GPU_UTIL')})by(namespace,job,role)": [(MASTER, 1), (WORKER, 4)],
    f"max({joined('DCGM_FI_DEV_XID_ERRORS')})by(namespace,job,role,pod,Hostname,gpu)>0": [
        ('{Hostname="gpu-b",gpu="1",job="pt",namespace="ml",pod="pt-worker-0",role="worker"}', 79)
    ],
}


def pod_info_exposed() -> list[str]:
    """The sweeper's trainhook_pod_info lines for the job's pods, as its collector writes them."""
    figures = PodInfoFigures()
    figures.seen(
        ("ml", "pt"),
        [
            PodView(
                name=name,
                uid=f"uid-{name}",
                owner_kind="StatefulSet",
                owner_name=name.rsplit("-", 1)[0],
                role=role,
                index=int(name.rsplit("-", 1)[1]),
                phase="Running",
                ready=True,
                topology=None,
                training=None,
                terminating=False,
                rank=rank,
            )
            for name, role, rank, _, _ in GPU_PODS
        ],
    )
    registry = CollectorRegistry()
    registry.register(figures)
    return [
        line.rsplit(" ", 1)[0]
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("trainhook_pod_info{")
    ]


def dcgm_series(metric: str, node: str, gpu: int, workload: str) -> str:
    """One GPU's series as dcgm-exporter exposes it, with the scrape's job and instance."""
    return (
        f'{metric}{{gpu="{gpu}",UUID="GPU-{node}-{gpu}",pci_bus_id="00000000:{gpu + 10}:00.0",'
        f'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="{node}",'
        f'DCGM_FI_DRIVER_VERSION="570.124.06",{workload}'
        f'instance="{node}:9400",job="gpu-metrics"}}'
    )


def gpu_input_series() -> list[dict[str, str]]:
    series = []
    # Two sweeper replicas name the pods while a shard's Lease changes hands: the dashboard's
    # queries take each pod once. Prometheus adds the target's instance and container.
    for line in pod_info_exposed():
        for replica in ("10.0.0.5", "10.0.0.6"):
            labels = f'container="sweeper",instance="{replica}:9090",'
            series.append({"series": line.replace("{", "{" + labels, 1), "values": "1x60"})
    for pod_name, _, _, node, gpus in GPU_PODS:
        for gpu, *values in gpus:
            workload = f'container="pytorch",namespace="ml",pod="{pod_name}",'
            for metric, column in DCGM.items():
                name = dcgm_series(metric, node, gpu, workload)
                series.append({"series": name, "values": f"{values[column - 1]}x60"})
    # A GPU no container holds, and one held by a pod of no training job: neither is a job's.
    for metric in DCGM:
        series.append({"series": dcgm_series(metric, "gpu-a", 1, ""), "values": "0x60"})
        other = 'container="server",namespace="serving",pod="llm-0",'
        series.append({"series": dcgm_series(metric, "gpu-d", 0, other), "values": "99x60"})
    return series


def test_the_gpu_dashboard_ships_unless_turned_off() -> None:
    def shipped(values: dict[str, Any]) -> set[str]:
        dashboards = {"grafanaDashboards": {"enabled": True, **values}}
        (configmap,) = [
            c
            for c in render({"metrics": dashboards}).of_kind("ConfigMap")
            if (c["metadata"].get("labels") or {}).get("grafana_dashboard") == "1"
        ]
        data: dict[str, str] = configmap["data"]
        if "trainhook-gpus-by-job.json" in data:
            assert json.loads(data["trainhook-gpus-by-job.json"]) == json.loads(
                (DASHBOARDS / "gpus-by-job.json").read_text()
            )
        return set(data)

    assert shipped({}) == {"trainhook-training-jobs.json", "trainhook-gpus-by-job.json"}
    assert shipped({"gpusByJob": False}) == {"trainhook-training-jobs.json"}


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool is not installed (Debian package prometheus; `make test` installs it)",
)
def test_promtool_finds_each_jobs_gpus_through_the_sweepers_pod_info(tmp_path: Path) -> None:
    assert pod_info_exposed() == [
        'trainhook_pod_info{job="pt",namespace="ml",pod="pt-master-0",rank="0",role="master"}',
        'trainhook_pod_info{job="pt",namespace="ml",pod="pt-worker-0",rank="1",role="worker"}',
        'trainhook_pod_info{job="pt",namespace="ml",pod="pt-worker-1",rank="2",role="worker"}',
    ]
    assert_promtool_finds(tmp_path, gpu_input_series(), GPU_EXPECTED)
