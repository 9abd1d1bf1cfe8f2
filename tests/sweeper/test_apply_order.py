"""Any apply order gives the pods `render` shows: the workloads of a job created one by one, in
every order, against the emulator, with the webhook's admission, the StatefulSet and Job
controllers, a kubelet that starts only ungated pods, and the sweeper.

What must hold for every order: no pod ever starts with a world other than the whole job's, the
job says it waits for its roles while one is missing, and in the end every pod has what render
shows for the complete folder.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from tests.support import builders
from tests.support.emulator import EmulatorThread
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.admit import Found, Request, admit
from webhook.core.render import expand, render, training_env
from webhook.kube.client import Kube
from webhook.kube.resources import JOBS, PODS, STATEFULSETS

from .live import sweeping

NAMESPACE = "ml"

# Per framework, its roles as (role, kind, replicas), and whether the job names its roles: where
# each role could run alone (a PyTorch master), only trainhook.io/roles says another is coming.
JOBS_UNDER_TEST: dict[str, tuple[tuple[tuple[str, str, int], ...], bool]] = {
    "mpi": ((("launcher", "Job", 1), ("worker", "StatefulSet", 2)), False),
    "pytorch": ((("master", "StatefulSet", 1), ("worker", "StatefulSet", 2)), True),
    "tensorflow": (
        (("chief", "Job", 1), ("ps", "StatefulSet", 1), ("worker", "StatefulSet", 2)),
        True,
    ),
    "paddle": ((("ps", "StatefulSet", 1), ("worker", "Job", 2)), True),
    "mindspore": ((("scheduler", "Job", 1), ("worker", "StatefulSet", 2)), False),
    "xgboost": ((("master", "StatefulSet", 1), ("worker", "StatefulSet", 2)), True),
    "jax": ((("worker", "Job", 2),), False),
}


def workload(
    framework: str, job: str, role: str, kind: str, replicas: int, named: bool
) -> dict[str, Any]:
    """One role of the job as a user writes it."""
    name = f"{job}-{role}"
    annotations = {contract.ROLES: ",".join(r for r, _, _ in JOBS_UNDER_TEST[framework][0])}
    containers = [{"name": framework, "image": "trainer:1"}]
    if kind == "Job":
        obj = builders.indexed_job(name, framework, role=role, job=job, completions=replicas)
        obj["spec"]["template"]["spec"]["containers"] = containers
    else:
        obj = builders.statefulset(
            name, framework, role=role, job=job, replicas=replicas, containers=containers
        )
    obj["metadata"]["namespace"] = NAMESPACE
    if named:
        obj["metadata"].setdefault("annotations", {}).update(annotations)
    return obj


@dataclass
class Cluster:
    """The parts of a cluster the sweeper does not play: admission, two controllers, a kubelet."""

    kube: Kube
    emulator: EmulatorThread
    started: dict[tuple[str, int], list[dict[str, str]]] = field(default_factory=dict)
    names: itertools.count[int] = field(default_factory=itertools.count)

    def apply(self, obj: Mapping[str, Any]) -> None:
        """`kubectl apply` of a new workload: the webhook mutates it, seeing its siblings."""
        resource = STATEFULSETS if obj["kind"] == "StatefulSet" else JOBS
        siblings = [*self.list(STATEFULSETS), *self.list(JOBS)]
        request = Request(obj["kind"], "CREATE", obj, NAMESPACE)
        outcome = admit(request, Found(siblings=siblings))
        assert outcome is not None
        self.kube.create(resource, NAMESPACE, jsonpatch.apply_patch(obj, outcome.patch))

    def list(self, resource: Any) -> list[dict[str, Any]]:
        return self.kube.list(resource, NAMESPACE)[0]

    def step(self) -> None:
        """One pass of the StatefulSet and Job controllers and of the kubelet (every half
        second: the emulator slows with every request it keeps)."""
        time.sleep(0.5)
        self.emulator.forget_requests()
        pods = self.list(PODS)
        live = {(self.owner(p), self.index(p)) for p in pods}
        for sts in self.list(STATEFULSETS):
            self.create_missing(sts, live)
        for job in self.list(JOBS):
            if not job["spec"].get("suspend"):
                self.create_missing(job, live)
                if not (job.get("status") or {}).get("startTime"):
                    active = len(expand(job, NAMESPACE))
                    status = {"startTime": "2026-01-01T00:00:00Z", "active": active}
                    self.kube.patch(JOBS, NAMESPACE, job["metadata"]["name"], {"status": status})
        for pod in pods:
            self.run(pod)

    def create_missing(self, owner: dict[str, Any], live: set[tuple[str, int]]) -> None:
        name = owner["metadata"]["name"]
        for position, pod in enumerate(expand(owner, NAMESPACE)):
            if (name, position) in live:
                continue
            if owner["kind"] == "Job":  # the Job controller's names end in a random suffix
                pod["metadata"]["name"] = f"{pod['metadata']['name']}-{next(self.names)}"
            pod["metadata"]["ownerReferences"] = [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": name,
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ]
            outcome = admit(Request("Pod", "CREATE", pod, NAMESPACE))
            assert outcome is not None
            self.kube.create(PODS, NAMESPACE, jsonpatch.apply_patch(pod, outcome.patch))

    def run(self, pod: dict[str, Any]) -> None:
        """The kubelet: a pod the scheduler may place starts, and its env is what it ran with."""
        if pod["spec"].get("schedulingGates") or (pod.get("status") or {}).get("phase"):
            return
        status = {
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [
                {"name": c["name"], "restartCount": 0, "state": {"running": {}}, "ready": True}
                for c in pod["spec"]["containers"]
            ],
        }
        self.kube.patch(PODS, NAMESPACE, pod["metadata"]["name"], {"status": status})
        key = (self.owner(pod), self.index(pod))
        self.started.setdefault(key, []).append(training_env(pod))

    @staticmethod
    def owner(pod: Mapping[str, Any]) -> str:
        return str(pod["metadata"]["ownerReferences"][0]["name"])

    @staticmethod
    def index(pod: Mapping[str, Any]) -> int:
        return int(pod["metadata"]["labels"][contract.ROLE_INDEX])

    def running(self) -> dict[tuple[str, int], dict[str, str]]:
        return {
            (self.owner(p), self.index(p)): training_env(p)
            for p in self.list(PODS)
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        }


def rendered(workloads: list[dict[str, Any]]) -> dict[tuple[str, int], dict[str, str]]:
    """What render shows for the complete folder, per (workload, index in its role)."""
    found = {}
    for pod in render(workloads):
        labels = pod.pod["metadata"]["labels"]
        owner = labels.get(contract.JOB_NAME) or pod.pod["metadata"]["name"].rsplit("-", 1)[0]
        found[(owner, pod.index)] = training_env(pod.pod)
    return found


def status_of(cluster: Cluster, name: str) -> dict[str, Any]:
    for resource in (STATEFULSETS, JOBS):
        for obj in cluster.list(resource):
            if obj["metadata"]["name"] == name:
                raw = (obj["metadata"].get("annotations") or {}).get(contract.STATUS)
                return json.loads(raw) if raw else {}
    return {}


def test_every_apply_order_of_every_framework_starts_pods_only_with_the_whole_job(
    emulator: EmulatorThread, kube: Kube
) -> None:
    jobs: dict[str, list[dict[str, Any]]] = {}  # job name -> its workloads in apply order
    for framework, (roles, named) in JOBS_UNDER_TEST.items():
        for number, order in enumerate(itertools.permutations(roles)):
            job = f"{framework[:3]}{number}"
            jobs[job] = [workload(framework, job, *spec, named) for spec in order]
    cluster = Cluster(kube, emulator)
    with sweeping(kube):
        for step in range(max(len(w) for w in jobs.values())):
            for workloads in jobs.values():
                if step < len(workloads):
                    cluster.apply(copy.deepcopy(workloads[step]))
            waiting = [job for job, workloads in jobs.items() if step + 1 < len(workloads)]

            def everyone_waits(waiting: list[str] = waiting) -> bool:
                cluster.step()
                return all(
                    status_of(cluster, jobs[job][0]["metadata"]["name"]).get("reason")
                    == "WaitingForRoles"
                    for job in waiting
                )

            eventually(everyone_waits, timeout=60, what=f"jobs {waiting} say they wait")
        wanted: dict[tuple[str, int], dict[str, str]] = {}
        for workloads in jobs.values():
            wanted |= rendered(workloads)

        def all_running_as_rendered() -> bool:
            cluster.step()
            return cluster.running() == wanted

        try:
            eventually(all_running_as_rendered, timeout=120, what="every pod runs as rendered")
        except AssertionError:
            running = cluster.running()
            assert {k for k in wanted if running.get(k) != wanted[k]} == set()
            raise
    partial = {
        key: envs for key, envs in cluster.started.items() if any(e != wanted[key] for e in envs)
    }
    assert partial == {}, "pods started with a partial world"
