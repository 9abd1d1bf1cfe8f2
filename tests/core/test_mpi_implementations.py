"""MPI jobs per implementation: the hostfile each MPI reads, its variables, Horovod's discovery
script, and where the SSH keys go for root and non-root containers."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.builders import mpi_job, pods, statefulset
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.frameworks import mpi
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import RenderError, render, table


def implementation_job(implementation: str | None, **extra: str) -> list[dict[str, Any]]:
    launcher, worker = mpi_job(nproc_per_worker=2)
    for workload in (launcher, worker):
        annotations = workload["metadata"].setdefault("annotations", {})
        if implementation is not None:
            annotations[contract.MPI_IMPLEMENTATION] = implementation
        annotations.update(extra)
    return [launcher, worker]


def framework_vars(values: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in values.items() if not k.startswith(("TRAINHOOK_", "PYTHON"))}


def test_mpich_reads_hydras_host_colon_slots_hostfile_through_hydra_host_file() -> None:
    rendered = pods(*implementation_job("MPICH"))
    launcher = rendered["hv-launcher-0"]
    assert launcher.pod["metadata"]["annotations"][contract.HOSTFILE] == (
        "hv-worker-0.hv.default.svc:2\nhv-worker-1.hv.default.svc:2\n"
    )
    assert framework_vars(rendered["hv-worker-1"].env) == {
        "K_MPI_JOB_ROLE": "worker",
        "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
        "HYDRA_LAUNCHER_EXTRA_ARGS": "-o ConnectionAttempts=10",
        "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10",
    }


def test_intel_mpi_reads_the_hydra_hostfile_and_its_slots_per_host() -> None:
    rendered = pods(*implementation_job("Intel"))
    assert rendered["hv-launcher-0"].pod["metadata"]["annotations"][contract.HOSTFILE] == (
        "hv-worker-0.hv.default.svc:2\nhv-worker-1.hv.default.svc:2\n"
    )
    assert framework_vars(rendered["hv-worker-0"].env) == {
        "K_MPI_JOB_ROLE": "worker",
        "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
        "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
        "I_MPI_PERHOST": "2",
    }


@pytest.mark.parametrize("implementation", [None, "OpenMPI"])
def test_open_mpi_is_the_default_with_host_slots_lines(implementation: str | None) -> None:
    rendered = pods(*implementation_job(implementation))
    launcher = rendered["hv-launcher-0"]
    assert launcher.pod["metadata"]["annotations"][contract.HOSTFILE] == (
        "hv-worker-0.hv.default.svc slots=2\nhv-worker-1.hv.default.svc slots=2\n"
    )
    assert "HYDRA_HOST_FILE" not in launcher.env
    assert launcher.env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert "dnsConfig" not in launcher.pod["spec"]


@pytest.mark.parametrize("implementation", ["Intel", "MPICH"])
def test_hydra_pods_search_the_job_service_so_proxies_reach_the_launcher_by_hostname(
    implementation: str,
) -> None:
    for pod in pods(*implementation_job(implementation)).values():
        assert pod.pod["spec"]["dnsConfig"] == {"searches": ["hv.default.svc.cluster.local"]}


def test_roles_that_disagree_on_the_implementation_are_refused_in_one_line() -> None:
    launcher, worker = implementation_job(None)
    launcher["metadata"]["annotations"][contract.MPI_IMPLEMENTATION] = "MPICH"
    with pytest.raises(RenderError) as refused:
        render([launcher, worker])
    assert str(refused.value).endswith(
        "trainhook.io/mpi-implementation differs between the roles of job hv: launcher "
        "(StatefulSet hv-launcher) 'MPICH', worker (StatefulSet hv-worker) 'OpenMPI'; set one "
        "value on every workload of the job (the launcher's hostfile is written for one MPI, "
        "which every pod runs)"
    )


@pytest.mark.parametrize(
    ("framework", "value", "line"),
    [
        (
            "mpi",
            "openmpi",
            "trainhook.io/mpi-implementation: invalid value 'openmpi': one of OpenMPI, Intel, "
            "MPICH",
        ),
        (
            "pytorch",
            "MPICH",
            "trainhook.io/mpi-implementation: invalid value 'MPICH': read by mpi jobs only, "
            "not pytorch",
        ),
    ],
)
def test_an_unknown_implementation_or_one_on_another_framework_is_refused(
    framework: str, value: str, line: str
) -> None:
    workload = statefulset("x", framework, annotations={contract.MPI_IMPLEMENTATION: value})
    with pytest.raises(RenderError) as refused:
        render([workload])
    assert str(refused.value).endswith(line)


def test_the_launcher_gets_horovods_discovery_script_next_to_the_hostfile() -> None:
    launcher = pods(*implementation_job(None))["hv-launcher-0"]
    volume = next(v for v in launcher.pod["spec"]["volumes"] if v["name"] == mpi.HOSTFILE_VOLUME)
    assert volume["downwardAPI"]["items"] == [
        {
            "path": "hostfile",
            "fieldRef": {"fieldPath": "metadata.annotations['trainhook.io/hostfile']"},
        },
        {
            "path": "discover_hosts.sh",
            "fieldRef": {"fieldPath": "metadata.annotations['trainhook.io/discover-hosts']"},
            "mode": 0o555,
        },
    ]
    assert launcher.files == ("/etc/mpi/hostfile", "/etc/mpi/discover_hosts.sh")


@pytest.mark.parametrize("implementation", ["OpenMPI", "MPICH"])
def test_discover_hosts_prints_host_colon_slots_per_worker_as_horovod_reads_it(
    implementation: str, tmp_path: Path
) -> None:
    launcher = pods(*implementation_job(implementation))["hv-launcher-0"]
    annotations = launcher.pod["metadata"]["annotations"]
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(annotations[contract.HOSTFILE])
    script = tmp_path / "discover_hosts.sh"
    script.write_text(
        annotations[contract.DISCOVER_HOSTS].replace(contract.MPI_HOSTFILE_PATH, str(hostfile))
    )
    script.chmod(0o555)
    printed = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout
    assert printed == "hv-worker-0.hv.default.svc:2\nhv-worker-1.hv.default.svc:2\n"


def test_a_large_jobs_launcher_takes_hostfile_and_script_from_the_peers_configmap(
    tmp_path: Path,
) -> None:
    launcher, worker = implementation_job("MPICH")
    worker["spec"]["replicas"] = 80
    rendered = render([launcher, worker])
    first = rendered[0]
    assert first.peers is not None
    volume = next(v for v in first.pod["spec"]["volumes"] if v["name"] == mpi.HOSTFILE_VOLUME)
    assert volume["configMap"] == {
        "name": first.peers.name,
        "items": [
            {"key": "hostfile.hydra", "path": "hostfile"},
            {"key": "discover_hosts.sh", "path": "discover_hosts.sh", "mode": 0o555},
        ],
    }
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(first.peers.data["hostfile.hydra"])
    script = tmp_path / "discover_hosts.sh"
    script.write_text(
        first.peers.data["discover_hosts.sh"].replace(contract.MPI_HOSTFILE_PATH, str(hostfile))
    )
    script.chmod(0o555)
    printed = subprocess.run([str(script)], capture_output=True, text=True, check=True).stdout
    lines = printed.splitlines()
    assert len(lines) == 80
    assert lines[0] == "hv-worker-0.hv.default.svc:2"
    assert lines[79] == "hv-worker-79.hv.default.svc:2"
    assert first.peers.data["hostfile"].splitlines()[79] == "hv-worker-79.hv.default.svc slots=2"


def ssh_volume(pod: dict[str, Any]) -> dict[str, Any]:
    volume: dict[str, Any] = next(v for v in pod["spec"]["volumes"] if v["name"] == mpi.SSH_VOLUME)
    return volume


def ssh_mounts(pod: dict[str, Any]) -> list[str]:
    return [
        m["mountPath"]
        for m in pod["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == mpi.SSH_VOLUME
    ]


def with_user(workloads: list[dict[str, Any]], **context: Any) -> list[dict[str, Any]]:
    for workload in workloads:
        workload["spec"]["template"]["spec"]["securityContext"] = dict(context)
    return workloads


def test_root_containers_get_their_keys_at_root_ssh_readable_by_root_alone() -> None:
    for pod in pods(*implementation_job(None)).values():
        assert ssh_volume(pod.pod)["secret"] == {"secretName": "hv-ssh", "defaultMode": 0o600}
        assert ssh_mounts(pod.pod) == ["/root/.ssh"]
        assert "securityContext" not in pod.pod["spec"]


def test_a_non_root_user_gets_the_keys_in_its_home_readable_by_its_group_alone() -> None:
    workloads = with_user(
        implementation_job(None, **{contract.SSH_AUTH_MOUNT_PATH: "/home/mpiuser/.ssh"}),
        runAsUser=1000,
    )
    for pod in pods(*workloads).values():
        assert ssh_volume(pod.pod)["secret"] == {"secretName": "hv-ssh", "defaultMode": 0o440}
        assert ssh_mounts(pod.pod) == ["/home/mpiuser/.ssh"]
        assert pod.pod["spec"]["securityContext"] == {
            "runAsUser": 1000,
            "fsGroup": 1000,
            "fsGroupChangePolicy": "OnRootMismatch",
        }


def test_a_non_root_users_own_fs_group_and_group_are_kept() -> None:
    workloads = with_user(
        implementation_job(None, **{contract.SSH_AUTH_MOUNT_PATH: "/home/mpiuser/.ssh/"}),
        runAsUser=1000,
        runAsGroup=2000,
        fsGroup=3000,
    )
    pod = pods(*workloads)["hv-worker-0"].pod
    assert pod["spec"]["securityContext"] == {
        "runAsUser": 1000,
        "runAsGroup": 2000,
        "fsGroup": 3000,
    }
    assert ssh_mounts(pod) == ["/home/mpiuser/.ssh"]


def test_a_non_root_user_without_the_mount_path_is_refused_in_one_line() -> None:
    with pytest.raises(RenderError) as refused:
        render(with_user(implementation_job(None), runAsUser=1000))
    assert str(refused.value).endswith(
        "trainhook.io/ssh-auth-mount-path: not set, but container mpi runs as user 1000 "
        "(securityContext.runAsUser), who cannot read the job's SSH keys at /root/.ssh: set it "
        "to that user's ~/.ssh, e.g. /home/mpiuser/.ssh"
    )


def test_run_as_non_root_without_a_user_id_needs_the_user_named() -> None:
    workloads = with_user(
        implementation_job(None, **{contract.SSH_AUTH_MOUNT_PATH: "/home/mpiuser/.ssh"}),
        runAsNonRoot=True,
    )
    with pytest.raises(RenderError) as refused:
        render(workloads)
    assert "set securityContext.runAsUser (or the pod's fsGroup)" in str(refused.value)


def test_a_container_running_as_root_under_a_non_root_pod_keeps_root_keys() -> None:
    launcher, worker = with_user(implementation_job(None), runAsUser=1000)
    for workload in (launcher, worker):
        workload["spec"]["template"]["spec"]["containers"][0]["securityContext"] = {"runAsUser": 0}
    pod = pods(launcher, worker)["hv-worker-0"].pod
    assert ssh_mounts(pod) == ["/root/.ssh"]
    assert ssh_volume(pod)["secret"]["defaultMode"] == 0o600


@pytest.mark.parametrize("value", ["home/mpiuser/.ssh", "/home/../root/.ssh", "/", "/a:b"])
def test_a_mount_path_that_is_not_a_plain_absolute_path_is_refused(value: str) -> None:
    workloads = implementation_job(None, **{contract.SSH_AUTH_MOUNT_PATH: value})
    with pytest.raises(RenderError) as refused:
        render(workloads)
    assert f"trainhook.io/ssh-auth-mount-path: invalid value {value!r}: an absolute" in str(
        refused.value
    )


def test_render_names_the_implementation_and_the_files_of_the_launcher() -> None:
    shown = table(render(implementation_job("MPICH")))
    assert shown.splitlines()[:2] == [
        "job hv (mpi, MPICH, namespace default, 3 pods)",
        "files (launcher): /etc/mpi/hostfile, /etc/mpi/discover_hosts.sh",
    ]


def test_a_non_root_statefulset_without_the_mount_path_is_refused_before_any_pod() -> None:
    launcher, _ = with_user(implementation_job(None), runAsUser=1000)
    with pytest.raises(TrainhookError) as refused:
        mutate_workload(launcher, "CREATE", "default")
    assert str(refused.value).startswith(
        "trainhook.io/ssh-auth-mount-path: not set, but container mpi runs as user 1000"
    )
