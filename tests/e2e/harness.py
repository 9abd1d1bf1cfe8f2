"""Run rendered pods as local processes that reach each other by their cluster DNS names.

Each pod becomes one process tree with exactly the env Trainhook rendered for its training
container (plus PATH), its own hostname, and a private /etc/hosts that maps every host name
in the job's env to the loopback: `unshare --mount --uts` and a bind mount, so the machine's
own /etc/hosts is never touched. Needs root (CI runs as root).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

HOST_LIST_VAR = re.compile(r"TRAINHOOK_[A-Z0-9_]+_HOSTS")
HOST_VARS = ("MASTER_ADDR", "PET_MASTER_ADDR")
ENDPOINT_VARS = ("PET_RDZV_ENDPOINT",)

# Bind the hosts file over /etc/hosts and take the pod's hostname, then become the container.
POD_SHELL = 'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"'


class Rendered(Protocol):
    """What the harness needs of `webhook.core.render.RenderedPod`."""

    @property
    def pod(self) -> dict[str, Any]: ...

    @property
    def env(self) -> dict[str, str]: ...


@dataclass(frozen=True)
class PodExit:
    name: str
    returncode: int | None  # None: killed at the deadline
    log: str


class PodsFailed(AssertionError):
    """A pod exited non-zero or the job outlived its deadline; carries every pod's log."""


def free_port() -> int:
    """A TCP port free on the loopback right now, so parallel runs do not collide."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def host_names(env: Mapping[str, str]) -> set[str]:
    """Every host name a pod's env tells it to reach."""
    names = {env[var] for var in HOST_VARS if var in env}
    names.update(env[var].rsplit(":", 1)[0] for var in ENDPOINT_VARS if var in env)
    for var, value in env.items():
        if HOST_LIST_VAR.fullmatch(var):
            names.update(host for host in value.split(",") if host)
    return names


def pod_hostname(pod: Mapping[str, Any]) -> str:
    """The hostname Kubernetes gives the pod: spec.hostname, else the pod's name."""
    hostname: str = pod.get("spec", {}).get("hostname") or pod["metadata"]["name"]
    return hostname


def training_container(pod: Mapping[str, Any], name: str) -> dict[str, Any]:
    for container in pod["spec"]["containers"]:
        if container["name"] == name:
            found: dict[str, Any] = container
            return found
    raise AssertionError(f"pod {pod['metadata']['name']} has no container {name!r}")


def hosts_file_text(pods: Iterable[Rendered]) -> str:
    """An /etc/hosts mapping every pod hostname and every host named in any env to 127.0.0.1."""
    names: set[str] = {"localhost"}
    for rendered in pods:
        names.add(pod_hostname(rendered.pod))
        names.update(host_names(rendered.env))
    return "".join(f"127.0.0.1\t{name}\n" for name in sorted(names))


def run_pods(
    pods: Sequence[Rendered], *, container: str, workdir: Path, timeout: float
) -> list[PodExit]:
    """Start every pod's training container at once and wait for all of them.

    Raises PodsFailed, after killing every process group still running, when a pod exits
    non-zero or the deadline passes.
    """
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        raise AssertionError("running pods needs root and util-linux `unshare`")
    hosts_file = workdir / "hosts"
    hosts_file.write_text(hosts_file_text(pods))
    hosts = str(hosts_file)
    logs = workdir / "logs"
    logs.mkdir()

    started: list[tuple[str, subprocess.Popen[bytes], Path]] = []
    try:
        for rendered in pods:
            name = pod_hostname(rendered.pod)
            spec = training_container(rendered.pod, container)
            argv = [*spec.get("command", []), *spec.get("args", [])]
            log = logs / f"{name}.log"
            with log.open("wb") as out:
                process = subprocess.Popen(
                    [unshare, "--mount", "--uts", "sh", "-c", POD_SHELL, "sh", hosts, name, *argv],
                    env={**rendered.env, "PATH": os.environ["PATH"]},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            started.append((name, process, log))
        failure = wait_all(started, deadline=time.monotonic() + timeout)
    finally:
        for _name, process, _log in started:
            kill_group(process)
    exits = [PodExit(name, process.returncode, log.read_text()) for name, process, log in started]
    if failure:
        raise PodsFailed(failure + "\n" + "\n".join(describe(pod_exit) for pod_exit in exits))
    return exits


def wait_all(started: Sequence[tuple[str, subprocess.Popen[bytes], Path]], deadline: float) -> str:
    """Wait until every process exits; the first failure or the deadline ends the wait early."""
    while time.monotonic() < deadline:
        codes = {name: process.poll() for name, process, _log in started}
        failed = [name for name, code in codes.items() if code not in (None, 0)]
        if failed:
            return f"pod {failed[0]} exited {codes[failed[0]]}"
        if all(code == 0 for code in codes.values()):
            return ""
        time.sleep(0.1)
    running = [name for name, process, _log in started if process.poll() is None]
    return f"pods still running after the deadline: {', '.join(running)}"


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """Kill the pod's whole process tree (torchrun's workers too), even after its leader exits."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=10)


def describe(pod_exit: PodExit) -> str:
    return f"--- {pod_exit.name} (exit {pod_exit.returncode}) ---\n{pod_exit.log[-3000:]}"
