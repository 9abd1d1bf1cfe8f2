"""One node's kubelet for a pod of a job that restarts in place, played with real processes.

The pod's containers run as the kubelet runs them: the native sidecar `trainhook-restarter` and
the init container `trainhook-barrier` are the pod spec's own `sh` scripts, the training
container a real training process with the env the kubelet resolves (kubelet.py) when it starts.
The downward API volume's files (`attempt`, `released`) follow the pod's annotations, as the
kubelet keeps them. When the restarter exits with its restart code, its `restartPolicyRules`
(RestartAllContainers) make the kubelet kill every container, the training process included
(SIGKILL, which ends a stopped process too), and run them again from the first init container:
the barrier waits until the attempt is released, then the training starts again. Every status
the kubelet would write (running, waiting at the barrier, the run it killed with 137) is written
to the API emulator, with times from the cluster's (played) clock.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from tests.support.emulator import EmulatorThread
from webhook.core import contract
from webhook.core.job import progress, restart_in_place
from webhook.kube.resources import PODS
from webhook.sweeper.job.state import format_time

from .kubelet import PodStatus, command_line, container_env, field_value


class PlayedNode:
    """`start` lets the kubelet start the pod (until then it is pending, bound to its node);
    `training` is the training container's process of the current run, `runs` how many it had."""

    def __init__(
        self,
        api: EmulatorThread,
        name: str,
        node: str,
        directory: Path,
        command: list[str],
        base_env: Mapping[str, str],
        clock: Callable[[], datetime],
    ) -> None:
        self.api, self.name, self.node, self.directory = api, name, node, directory
        self.command, self.base_env, self.clock = command, dict(base_env), clock
        self.namespace = "ml"
        self.attempt_files = directory / "attempt"
        self.projected = directory / "projected"
        self.attempt_files.mkdir(parents=True)
        self.projected.mkdir()
        self.training: subprocess.Popen[bytes] | None = None
        self.runs = 0
        self.killed: list[int | None] = []  # the exit of each run the restart killed
        self.error: BaseException | None = None
        self._restarter: subprocess.Popen[bytes] | None = None
        self._barrier: subprocess.Popen[bytes] | None = None
        self._restarts = 0
        self._last_run: dict[str, Any] | None = None
        self._allowed = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kubelet-{name}")
        pod = self._pod()
        assert pod is not None
        self.uid = pod["metadata"]["uid"]
        self.status = PodStatus(pod_ip="127.0.0.1", node_name=node, uid=self.uid)
        self._project(pod)
        self.api.merge(self._path(), {"spec": {"nodeName": node}})  # the scheduler binds it
        self.api.merge(self._path(), {"status": {"phase": "Pending"}})

    def __enter__(self) -> PlayedNode:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        for process in (self.training, self._restarter, self._barrier):
            _kill(process)

    def start(self) -> None:
        self._allowed.set()

    # --- the kubelet's loop ----------------------------------------------------------------

    def _run(self) -> None:
        try:
            while not self._stop.wait(0.1):
                pod = self._pod()
                if pod is None:
                    continue
                self._downward_api(pod)
                if not self._allowed.is_set():
                    continue
                if self._restarter is None:
                    self._init(pod, restarted=False)
                elif self._restarter.poll() == restart_in_place.RESTART_EXIT_CODE:
                    self._restart_all_containers(pod)
                if self._barrier is not None and self._barrier.poll() == 0:
                    self._barrier = None
                    self._start_training(pod)
        except BaseException as error:  # the test waiting on the node says what stopped it
            self.error = error

    def _init(self, pod: dict[str, Any], *, restarted: bool) -> None:
        """Run the init containers: the restarter (a sidecar: it keeps running), then the
        barrier; the pod's status says the barrier waits."""
        self._restarter = self._container(pod, restart_in_place.RESTARTER, "restarter")
        self._barrier = self._container(pod, restart_in_place.BARRIER, "barrier")
        training: dict[str, Any] = {
            "name": "pytorch",
            "restartCount": self._restarts,
            "ready": False,
            "state": {"waiting": {"reason": "PodInitializing"}},
        }
        if self._last_run is not None:
            training["lastState"] = {"terminated": self._last_run}
        barrier = {"running": {"startedAt": format_time(self.clock())}}
        self._report("Running" if restarted else "Pending", training, barrier)

    def _restart_all_containers(self, pod: dict[str, Any]) -> None:
        """RestartAllContainers: every container is killed and the pod starts from its first
        init container again, on the same node, with the same name, uid and IP."""
        for process in (self._barrier, self._restarter):
            _kill(process)
        if self.training is not None:
            started = self._last_run["startedAt"] if self._last_run else None
            self.killed.append(_kill(self.training))
            self._last_run = {
                "exitCode": 137,
                "reason": "Error",
                "startedAt": started,
                "finishedAt": format_time(self.clock()),
            }
            self.training = None
            self._restarts += 1
        self._init(pod, restarted=True)

    def _start_training(self, pod: dict[str, Any]) -> None:
        spec = pod["spec"]["containers"][0]
        env = self._env(pod, spec)
        log = (self.directory / f"training-{self.runs}.log").open("wb")
        self.training = subprocess.Popen(
            self.command,
            env={**self.base_env, **env},
            cwd=self.directory,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        self.runs += 1
        started = format_time(self.clock())
        training: dict[str, Any] = {
            "name": "pytorch",
            "restartCount": self._restarts,
            "ready": True,
            "started": True,
            "state": {"running": {"startedAt": started}},
        }
        if self._last_run is not None:
            training["lastState"] = {"terminated": self._last_run}
        self._last_run = {"startedAt": started}
        self._report("Running", training, {"terminated": {"exitCode": 0, "reason": "Completed"}})

    # --- what the kubelet reads and writes --------------------------------------------------

    def _path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/pods/{self.name}"

    def _pod(self) -> dict[str, Any] | None:
        pods = self.api.objects(PODS, self.namespace)
        named = [p for p in pods if p["metadata"]["name"] == self.name]
        return named[0] if named else None

    def _downward_api(self, pod: dict[str, Any]) -> None:
        """The attempt volume's files, rewritten whole (as the kubelet swaps them in)."""
        annotations = pod["metadata"].get("annotations") or {}
        for path, key in (("attempt", contract.ATTEMPT), ("released", contract.RELEASED_ATTEMPT)):
            target = self.attempt_files / path
            value = annotations.get(key, "")
            if not target.exists() or target.read_text() != value:
                staged = self.attempt_files / f".{path}"
                staged.write_text(value)
                staged.replace(target)

    def _project(self, pod: dict[str, Any]) -> None:
        """The progress volume's token (a TokenRequest bound to the pod) and ca.crt."""
        volume = next(v for v in pod["spec"]["volumes"] if v["name"] == "trainhook-progress")
        for source in volume["projected"]["sources"]:
            if "serviceAccountToken" in source:
                wanted = source["serviceAccountToken"]
                answer = self.api.create(
                    f"/api/v1/namespaces/{self.namespace}/serviceaccounts/default/token",
                    {
                        "spec": {
                            "audiences": [wanted["audience"]],
                            "expirationSeconds": wanted["expirationSeconds"],
                            "boundObjectRef": {"kind": "Pod", "name": self.name, "uid": self.uid},
                        }
                    },
                )
                (self.projected / wanted["path"]).write_text(answer["status"]["token"])
            for item in (source.get("downwardAPI") or {}).get("items") or []:
                value = field_value(pod, self.status, item["fieldRef"]["fieldPath"])
                (self.projected / item["path"]).write_text(value)

    def _mounted(self, text: str) -> str:
        """A path in the container, as the test's directory holding that volume."""
        return text.replace(progress.MOUNT_PATH, str(self.projected)).replace(
            restart_in_place.MOUNT_PATH, str(self.attempt_files)
        )

    def _env(self, pod: dict[str, Any], container: Mapping[str, Any]) -> dict[str, str]:
        env = container_env(pod, container, self.status)
        return {name: self._mounted(value) for name, value in env.items()}

    def _container(self, pod: dict[str, Any], name: str, log: str) -> subprocess.Popen[bytes]:
        spec = next(c for c in pod["spec"]["initContainers"] if c["name"] == name)
        argv = [self._mounted(word) for word in command_line(spec, self._env(pod, spec))]
        with (self.directory / f"{log}.log").open("ab") as out:
            return subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def _report(self, phase: str, training: dict[str, Any], barrier: dict[str, Any]) -> None:
        restarter = {
            "name": restart_in_place.RESTARTER,
            "restartCount": 0,
            "state": {"running": {"startedAt": format_time(self.clock())}},
        }
        status = {
            "phase": phase,
            "podIP": self.status.pod_ip,
            "containerStatuses": [training],
            "initContainerStatuses": [
                restarter,
                {"name": restart_in_place.BARRIER, "restartCount": 0, "state": barrier},
            ],
        }
        self.api.merge(self._path(), {"status": status})


def _kill(process: subprocess.Popen[bytes] | None) -> int | None:
    """SIGKILL a container's whole process group; its exit status."""
    if process is None:
        return None
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.killpg(process.pid, signal.SIGKILL)
    return process.wait(timeout=10)
