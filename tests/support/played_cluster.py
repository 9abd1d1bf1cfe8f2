"""The parts of a cluster the API emulator does not run, played against it from a thread: the
StatefulSet controller (creates missing pods), the scheduler (binds them to a node) and the
kubelet (runs them, and restarts every container of a pod whose in-place attempt changed, its
barrier waiting until the attempt is released). Every write it makes is counted."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime
from typing import Any

from tests.support.stored import pod
from webhook.core import contract
from webhook.core.job.restart_in_place import BARRIER, RESTARTER
from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import PODS
from webhook.sweeper.job.state import format_time

NAMESPACE = "ml"


def now() -> str:
    return format_time(datetime.now(UTC))


def in_place_pod(owner: dict[str, Any], index: int, node: str | None) -> dict[str, Any]:
    """Pod `index` of a StatefulSet whose job restarts in place, as the webhook makes it."""
    obj = pod(owner, index, phase="Pending" if node is None else "Running")
    obj["metadata"]["creationTimestamp"] = now()
    if node is not None:
        obj["spec"]["nodeName"] = node
    obj["spec"]["initContainers"] = [
        {"name": RESTARTER, "image": "trainer:1", "restartPolicy": "Always"},
        {"name": BARRIER, "image": "trainer:1"},
    ]
    obj["status"]["initContainerStatuses"] = [
        {"name": RESTARTER, "restartCount": 0, "state": {"running": {}}},
        {"name": BARRIER, "restartCount": 0, "state": {"terminated": {"exitCode": 0}}},
    ]
    if node is None:
        obj["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "Pending"}}
    return obj


Write = tuple[str, str, dict[str, Any]]  # ("create" | "patch", pod name, body or patch)


class PlayedCluster:
    """`held`: pods whose kubelet is slow to restart them; `restarted`: the attempt each pod's
    containers last restarted for; `writes`: the API writes made, by who. `step` decides what
    the played components write on seeing the pods; `run` applies that to the emulator."""

    def __init__(
        self,
        emulator: Any,
        kube: Kube | None,
        workloads: list[dict[str, Any]],
        interval: float = 0.02,
    ) -> None:
        self.emulator, self.kube, self.workloads = emulator, kube, workloads
        self.interval = interval
        self.held: set[str] = set()
        self.restarted: dict[str, int] = {}
        self.writes: Counter[str] = Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, name="played-cluster")
        self._nodes = 0

    def __enter__(self) -> PlayedCluster:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=30)

    def run(self) -> None:
        assert self.kube is not None
        while not self.stop.wait(self.interval):
            pods = {p["metadata"]["name"]: p for p in self.emulator.objects(PODS, NAMESPACE)}
            for verb, name, body in self.step(pods):
                if self.stop.is_set():
                    return
                if verb == "create":
                    self.kube.create(PODS, NAMESPACE, body)
                    continue
                try:
                    self.kube.patch(PODS, NAMESPACE, name, body)
                except ApiError as error:
                    # Deleted (by the sweeper's restart) since the pods were listed: a kubelet's
                    # status write for a deleted pod fails too, and the next round sees it gone.
                    if error.status != 404:
                        raise

    def step(self, pods: dict[str, dict[str, Any]]) -> list[Write]:
        writes = self._controller(pods)
        for obj in pods.values():
            writes += self._schedule_and_run(obj)
            writes += self._restart_in_place(obj)
        return writes

    def _controller(self, pods: dict[str, dict[str, Any]]) -> list[Write]:
        writes: list[Write] = []
        for workload in self.workloads:
            name = workload["metadata"]["name"]
            for index in range(workload["spec"]["replicas"]):
                if f"{name}-{index}" not in pods:
                    writes.append(
                        ("create", f"{name}-{index}", in_place_pod(workload, index, None))
                    )
                    self.writes["create pod (StatefulSet controller)"] += 1
        return writes

    def _schedule_and_run(self, obj: dict[str, Any]) -> list[Write]:
        name = obj["metadata"]["name"]
        if not obj["spec"].get("nodeName"):
            self._nodes += 1
            self.writes["bind pod (scheduler)"] += 1
            return [("patch", name, {"spec": {"nodeName": f"node-{self._nodes}"}})]
        if obj["status"].get("phase") == "Pending":
            training = {"name": "pytorch", "restartCount": 0, "state": {"running": {}}}
            self.writes["pod status (kubelet)"] += 1
            status = {"phase": "Running", "containerStatuses": [training]}
            return [("patch", name, {"status": status})]
        return []

    def _restart_in_place(self, obj: dict[str, Any]) -> list[Write]:
        name = obj["metadata"]["name"]
        annotations = obj["metadata"].get("annotations") or {}
        wanted = int(annotations.get(contract.ATTEMPT) or 0)
        released = int(annotations.get(contract.RELEASED_ATTEMPT) or 0)
        status = obj["status"]
        if not status.get("containerStatuses") or len(status.get("initContainerStatuses")) < 2:
            return []
        training = status["containerStatuses"][0]
        if wanted > self.restarted.get(name, 0) and name not in self.held:
            self.restarted[name] = wanted
            killed = {"exitCode": 137, "reason": "Error", "finishedAt": now()}
            training = {
                **training,
                "restartCount": training["restartCount"] + 1,
                "state": {"waiting": {"reason": "PodInitializing"}},
                "lastState": {"terminated": killed},
            }
            waiting = {"running": {"startedAt": now()}}
            return [self.report(name, training, {"name": BARRIER, "state": waiting})]
        if released >= wanted > 0 and "running" in status["initContainerStatuses"][1]["state"]:
            done = {"terminated": {"exitCode": 0}}
            running = {**training, "state": {"running": {"startedAt": now()}}}
            return [self.report(name, running, {"name": BARRIER, "state": done})]
        return []

    def report(self, name: str, training: dict[str, Any], barrier: dict[str, Any]) -> Write:
        """The kubelet's status write for a pod: its training container and barrier."""
        restarter = {"name": RESTARTER, "restartCount": 0, "state": {"running": {}}}
        barrier = {"restartCount": 0, **barrier}
        status = {"containerStatuses": [training], "initContainerStatuses": [restarter, barrier]}
        self.writes["pod status (kubelet)"] += 1
        return ("patch", name, {"status": status})
