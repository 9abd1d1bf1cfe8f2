"""A job's cluster side played against the API emulator, its pods admitted by the real webhook:
the StatefulSet controller (creates each missing pod of the StatefulSets of the namespace, up to
their replicas, and sends it to the webhook as the API server does before storing the patched
pod), the scheduler (binds it to a node) and the kubelet (runs it, Ready, and on request reports
that its training container exited with a given code). Used by `make demo`."""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tests.support.played_cluster import NAMESPACE, PlayedCluster, Write, now
from tests.support.reviews import patched, review
from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.render import expand
from webhook.kube.client import Kube
from webhook.kube.resources import PODS, STATEFULSETS

Admit = Callable[[dict[str, Any]], Mapping[str, Any]]  # an AdmissionReview -> the answer


class PlayedJob(PlayedCluster):
    """`admit` sends a review to the webhook (from this thread only); `exit` asks the kubelet
    to report an exit; `error` is what stopped the played components, if anything did."""

    def __init__(
        self,
        emulator: Any,
        kube: Kube,
        admit: Admit,
        interval: float = 0.05,
        per_step: int | None = None,
    ) -> None:
        super().__init__(emulator, kube, [], interval)
        self.admit = admit
        self.per_step = per_step  # the most pods the controller creates a step: its client's rate
        self._templates: dict[tuple[str, Any], list[dict[str, Any]]] = {}
        self.error: Exception | None = None
        self._exits: dict[str, int] = {}  # pod uid -> the exit code its kubelet is to report
        self._lock = threading.Lock()

    def __enter__(self) -> PlayedJob:
        super().__enter__()
        return self

    def exit(self, names: Iterable[str], code: int) -> None:
        """Have the training container of each pod named (as it is now) exit with `code`."""
        uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in self._pods()}
        with self._lock:
            self._exits.update({uids[name]: code for name in names})

    def run(self) -> None:
        try:
            super().run()
        except Exception as error:  # the demo waiting on it says what stopped it
            self.error = error

    def step(self, pods: dict[str, dict[str, Any]]) -> list[Write]:
        writes: list[Write] = []
        created = 0
        for workload in self.emulator.objects(STATEFULSETS, NAMESPACE):
            prefix = workload["metadata"]["name"] + "-"
            if sum(name.startswith(prefix) for name in pods) >= workload["spec"]["replicas"]:
                continue  # none missing: the workload's pods are not expanded again
            for made in self._expanded(workload):
                if made["metadata"]["name"] not in pods and created != self.per_step:
                    raw = copy.deepcopy(made)
                    writes.append(
                        ("create", raw["metadata"]["name"], self._admitted(workload, raw))
                    )
                    self.writes["create pod (StatefulSet controller)"] += 1
                    created += 1
        for obj in pods.values():
            writes += self._schedule_and_run(obj)
            writes += self._exited(obj)
        return writes

    def _expanded(self, workload: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The pods of `workload` as its controller makes them, expanded once per version."""
        key = (workload["metadata"]["name"], workload["metadata"].get("resourceVersion"))
        if key not in self._templates:
            self._templates[key] = expand(dict(workload), NAMESPACE)
        return self._templates[key]

    def _pods(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = self.emulator.objects(PODS, NAMESPACE)
        return found

    def _admitted(self, workload: Mapping[str, Any], raw: dict[str, Any]) -> dict[str, Any]:
        metadata = workload["metadata"]
        raw["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "StatefulSet",
                "name": metadata["name"],
                "uid": metadata["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        answer = self.admit(review(raw, namespace=NAMESPACE))["response"]
        if not answer["allowed"]:
            name = raw["metadata"]["name"]
            raise RuntimeError(f"the webhook refused pod {name}: {answer['status']['message']}")
        pod = patched(raw, {"response": answer})
        pod["status"] = {"phase": "Pending"}
        return pod

    def _schedule_and_run(self, obj: dict[str, Any]) -> list[Write]:
        name, spec = obj["metadata"]["name"], obj["spec"]
        if spec.get("schedulingGates"):
            return []  # the scheduler leaves a gated pod alone
        if not spec.get("nodeName"):
            self._nodes += 1
            self.writes["bind pod (scheduler)"] += 1
            return [("patch", name, {"spec": {"nodeName": f"node-{self._nodes}"}})]
        if obj["status"].get("phase") != "Pending":
            return []
        since = now()
        done = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": since}}
        status = {
            "phase": "Running",
            "startTime": since,
            "conditions": _conditions(since, ready=True),
            "initContainerStatuses": [
                {"name": c["name"], "image": c["image"], "ready": True, "restartCount": 0}
                | {"state": done}
                for c in spec.get("initContainers") or []
            ],
            "containerStatuses": [
                {"name": c["name"], "image": c["image"], "ready": True, "started": True}
                | {"restartCount": 0, "state": {"running": {"startedAt": since}}}
                for c in spec["containers"]
            ],
        }
        self.writes["pod status (kubelet)"] += 1
        return [("patch", name, {"status": status})]

    def _exited(self, obj: dict[str, Any]) -> list[Write]:
        uid = obj["metadata"]["uid"]
        statuses = obj["status"].get("containerStatuses") or []
        names = [s["name"] for s in statuses]
        framework = FRAMEWORKS[obj["metadata"]["labels"][contract.FRAMEWORK]]
        training = names.index(framework.container) if framework.container in names else 0
        running = statuses[training]["state"].get("running") if statuses else None
        if running is None:  # its exit is reported once it runs
            return []
        with self._lock:
            code = self._exits.pop(uid, None)
        if code is None:
            return []
        ended = now()
        statuses[training] |= {
            "ready": False,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": code,
                    "reason": "Completed" if code == 0 else "Error",
                    "startedAt": running["startedAt"],
                    "finishedAt": ended,
                }
            },
        }
        status = {"conditions": _conditions(ended, ready=False), "containerStatuses": statuses}
        self.writes["pod status (kubelet)"] += 1
        return [("patch", obj["metadata"]["name"], {"status": status})]


def _conditions(since: str, *, ready: bool) -> list[dict[str, Any]]:
    """A pod's conditions as the kubelet reports them: scheduled and initialized, and ready or
    not."""
    return [
        {
            "type": kind,
            "status": "True" if ready or kind in ("PodScheduled", "Initialized") else "False",
            "lastTransitionTime": since,
        }
        for kind in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
