"""trainhook.io/compat: Volcano's and paddle-operator's variables and files, exactly as their own
controllers write them (volcano-sh/volcano pkg/controllers/job/plugins/{svc,env,mpi},
PaddleFlow/paddle-operator controllers/paddlejob_helper.go), on Trainhook's host names."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.builders import mpi_job, pods, statefulset
from webhook.core import contract
from webhook.core.compat import volcano
from webhook.core.render import RenderError, render, table

VOLCANO = {contract.COMPAT: "volcano"}
PADDLE_OPERATOR = {contract.COMPAT: "paddle-operator"}


def compat_job(*workloads: dict[str, Any], compat: dict[str, str]) -> list[dict[str, Any]]:
    for workload in workloads:
        workload["metadata"].setdefault("annotations", {}).update(compat)
    return list(workloads)


def test_volcano_svc_and_env_plugins_variables_for_every_task() -> None:
    rendered = pods(
        *compat_job(
            statefulset("tf-ps", "tensorflow", role="ps", job="tf"),
            statefulset("tf-worker", "tensorflow", role="worker", job="tf", replicas=2),
            compat=VOLCANO,
        )
    )
    env = rendered["tf-worker-1"].env
    assert {k: v for k, v in env.items() if k.startswith(("VC_", "VK_"))} == {
        "VC_PS_HOSTS": "tf-ps-0.tf.default.svc",
        "VC_PS_NUM": "1",
        "VC_WORKER_HOSTS": "tf-worker-0.tf.default.svc,tf-worker-1.tf.default.svc",
        "VC_WORKER_NUM": "2",
        "VK_TASK_INDEX": "1",
        "VC_TASK_INDEX": "1",
    }
    assert "MPI_HOST" not in env


def test_volcano_host_files_are_one_host_per_line_under_etc_volcano() -> None:
    rendered = pods(
        *compat_job(
            statefulset("g-param-server", "generic", role="ps", job="g", replicas=2),
            statefulset("g-worker", "generic", role="worker", job="g"),
            compat=VOLCANO,
        )
    )
    pod = rendered["g-worker-0"]
    annotations = pod.pod["metadata"]["annotations"]
    assert annotations["volcano.trainhook.io/ps"] == (
        "g-param-server-0.g.default.svc\ng-param-server-1.g.default.svc"
    )
    assert annotations["volcano.trainhook.io/worker"] == "g-worker-0.g.default.svc"
    # Named after the task, as Volcano names its pods <job>-<task>-<i>, whatever the role.
    assert pod.files == ("/etc/volcano/param_server.host", "/etc/volcano/worker.host")
    assert pod.env["VC_PARAM_SERVER_HOSTS"] == (
        "g-param-server-0.g.default.svc,g-param-server-1.g.default.svc"
    )


def test_volcano_mpi_plugin_gives_the_launcher_the_workers_in_mpi_host() -> None:
    rendered = pods(*compat_job(*mpi_job(nproc_per_worker=1), compat=VOLCANO))
    assert rendered["hv-launcher-0"].env["MPI_HOST"] == (
        "hv-worker-0.hv.default.svc,hv-worker-1.hv.default.svc"
    )
    assert "MPI_HOST" not in rendered["hv-worker-0"].env


def test_a_large_volcano_job_reads_its_lists_and_host_files_from_the_peers_configmap() -> None:
    launcher, worker = compat_job(*mpi_job(nproc_per_worker=1), compat=VOLCANO)
    worker["spec"]["replicas"] = 70
    rendered = {pod.name: pod for pod in render([launcher, worker])}
    first = rendered["hv-launcher-0"]
    assert first.peers is not None
    assert first.env["VC_WORKER_HOSTS_FILE"] == "/etc/trainhook/TRAINHOOK_WORKER_HOSTS"
    assert first.env["MPI_HOST_FILE"] == "/etc/trainhook/TRAINHOOK_WORKER_HOSTS"
    assert first.env["VC_WORKER_NUM"] == "70"
    assert "VC_WORKER_HOSTS" not in first.env
    lines = first.peers.data["worker.host"].split("\n")
    assert len(lines) == 70
    assert lines[69] == "hv-worker-69.hv.default.svc"
    volume = next(v for v in first.pod["spec"]["volumes"] if v["name"] == volcano.HOSTS_VOLUME)
    assert volume["configMap"] == {
        "name": first.peers.name,
        "items": [
            {"key": "launcher.host", "path": "launcher.host"},
            {"key": "worker.host", "path": "worker.host"},
        ],
    }
    # The worker's pods name the same ConfigMap, which holds what both need.
    assert rendered["hv-worker-3"].peers == first.peers
    assert not any(k.startswith("volcano.") for k in first.pod["metadata"]["annotations"])


def test_paddle_operator_collective_pods_get_its_role_trainers_and_ports_variables() -> None:
    rendered = pods(
        *compat_job(
            statefulset("resnet-worker", "paddle", job="resnet", replicas=2),
            compat=PADDLE_OPERATOR,
        )
    )
    env = rendered["resnet-worker-1"].env
    assert env["PADDLE_TRAINER_ID"] == "1"
    assert env["TRAINING_ROLE"] == "TRAINER"
    assert env["PADDLE_TRAINING_ROLE"] == "TRAINER"
    assert env["TRAINER_PORTS_NUM"] == "20"
    assert env["PADDLE_TRAINERS"] == (
        "resnet-worker-0.resnet.default.svc,resnet-worker-1.resnet.default.svc"
    )
    assert env["PADDLE_TRAINERS_NUM"] == "2"
    assert env["POD_IP"] == "resnet-worker-1.resnet.default.svc"
    assert "PADDLE_WITH_GLOO" not in env


def test_paddle_operator_ps_pods_get_their_index_and_the_gloo_rendezvous() -> None:
    rendered = pods(
        *compat_job(
            statefulset("wd-ps", "paddle", role="ps", job="wd", replicas=2),
            statefulset("wd-worker", "paddle", role="worker", job="wd", replicas=2),
            compat=PADDLE_OPERATOR,
        )
    )
    server = rendered["wd-ps-1"].env
    assert server["PADDLE_TRAINER_ID"] == "1"
    assert server["TRAINING_ROLE"] == "PSERVER"
    assert {k: v for k, v in server.items() if "GLOO" in k} == {
        "PADDLE_WITH_GLOO": "1",
        "PADDLE_GLOO_RENDEZVOUS": "3",
        "PADDLE_GLOO_HTTP_ENDPOINT": "wd-ps-0.wd.default.svc:36561",
    }
    assert rendered["wd-worker-0"].env["PADDLE_GLOO_HTTP_ENDPOINT"] == (
        "wd-ps-0.wd.default.svc:36561"
    )


def test_paddle_operator_compat_on_another_framework_is_refused_in_one_line() -> None:
    with pytest.raises(RenderError) as refused:
        render([statefulset("t", "pytorch", annotations=PADDLE_OPERATOR)])
    assert str(refused.value).endswith(
        "trainhook.io/compat: invalid value 'paddle-operator': paddle-operator is for paddle "
        "jobs, not pytorch"
    )


def test_an_unknown_compat_is_refused_with_what_is_allowed() -> None:
    with pytest.raises(RenderError) as refused:
        render([statefulset("t", "pytorch", annotations={contract.COMPAT: "kubeflow"})])
    assert str(refused.value).endswith(
        "trainhook.io/compat: invalid value 'kubeflow': one of volcano, paddle-operator"
    )


def test_roles_that_disagree_on_compat_are_refused() -> None:
    launcher, worker = mpi_job(nproc_per_worker=1)
    launcher["metadata"]["annotations"] = dict(VOLCANO)
    with pytest.raises(RenderError) as refused:
        render([launcher, worker])
    assert "trainhook.io/compat differs between the roles of job hv: launcher (StatefulSet " in (
        str(refused.value)
    )


def test_render_names_the_compat_layer_its_variables_and_files() -> None:
    shown = table(render(compat_job(*mpi_job(nproc_per_worker=1), compat=VOLCANO)))
    assert shown.splitlines() == [
        "job hv (mpi, OpenMPI, compat volcano, namespace default, 3 pods)",
        "files (launcher): /etc/mpi/hostfile, /etc/mpi/discover_hosts.sh, "
        "/etc/volcano/launcher.host, /etc/volcano/worker.host",
        "files (worker): /etc/volcano/launcher.host, /etc/volcano/worker.host",
        "POD            ROLE      INDEX  POD_RANK  K_MPI_JOB_ROLE  VK_TASK_INDEX",
        "hv-launcher-0  launcher  0      0         launcher        0",
        "hv-worker-0    worker    0      1         worker          0",
        "hv-worker-1    worker    1      2         worker          1",
    ]


def test_a_second_pass_over_compat_pods_changes_nothing() -> None:
    for pod in render(compat_job(*mpi_job(nproc_per_worker=1), compat=VOLCANO)):
        again = render([pod.pod])[0]
        assert again.pod == pod.pod
