"""Creating a job's workloads one by one against the emulator, as `kubectl apply` of a folder or
a controller would, and checking that every pod ends up with what `render` shows.

`Cluster` plays the parts of a cluster the sweeper does not: the webhook's admission, the
StatefulSet and Job controllers, and a kubelet that starts only ungated pods, recording the env
each pod started with. Each workload lives in its own namespace's view: a job's siblings are the
workloads of its namespace, so the same job can be applied in several orders at once, one
namespace per order.
"""

from __future__ import annotations

import copy
import itertools
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpatch

from tests.support.emulator import EmulatorThread
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.render import expand, render, training_env
from webhook.kube.client import Kube
from webhook.kube.resources import JOBS, PODS, STATEFULSETS

# A pod by (namespace, its StatefulSet or Job, its index in that workload)
PodKey = tuple[str, str, int]


def namespace_of(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"].get("namespace") or "default")


@dataclass
class Cluster:
    """The parts of a cluster the sweeper does not play: admission, two controllers, a kubelet."""

    kube: Kube
    emulator: EmulatorThread
    started: dict[PodKey, list[dict[str, str]]] = field(default_factory=dict)
    names: itertools.count[int] = field(default_factory=itertools.count)

    def __post_init__(self) -> None:
        # Hundreds of jobs' requests: kmock would scan every one kept on each new request.
        self.emulator.emulator.keep_requests = False

    def apply(self, obj: Mapping[str, Any]) -> None:
        """`kubectl apply` of a new workload: the webhook mutates it, seeing its siblings."""
        namespace = namespace_of(obj)
        resource = STATEFULSETS if obj["kind"] == "StatefulSet" else JOBS
        siblings = [*self.list(STATEFULSETS, namespace), *self.list(JOBS, namespace)]
        request = Request(obj["kind"], "CREATE", dict(obj), namespace)
        outcome = admit(request, Found(siblings=siblings))
        assert outcome is not None
        self.kube.create(resource, namespace, jsonpatch.apply_patch(obj, outcome.patch))

    def list(self, resource: Any, namespace: str | None = None) -> list[dict[str, Any]]:
        """The objects of `namespace`, or of every namespace."""
        return self.kube.list(resource, namespace)[0]

    def step(self) -> None:
        """One pass of the StatefulSet and Job controllers and of the kubelet, every half
        second."""
        time.sleep(0.5)
        pods = self.list(PODS)
        live = {self.key(p) for p in pods}
        for sts in self.list(STATEFULSETS):
            self.create_missing(sts, live)
        for job in self.list(JOBS):
            if not job["spec"].get("suspend"):
                self.create_missing(job, live)
                if not (job.get("status") or {}).get("startTime"):
                    active = len(expand(job, namespace_of(job)))
                    status = {"startTime": "2026-01-01T00:00:00Z", "active": active}
                    self.kube.patch(
                        JOBS, namespace_of(job), job["metadata"]["name"], {"status": status}
                    )
        for pod in pods:
            self.run(pod)

    def create_missing(self, owner: dict[str, Any], live: set[PodKey]) -> None:
        name = owner["metadata"]["name"]
        namespace = namespace_of(owner)
        for position, pod in enumerate(expand(owner, namespace)):
            if (namespace, name, position) in live:
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
            outcome = admit(Request("Pod", "CREATE", pod, namespace))
            assert outcome is not None
            self.kube.create(PODS, namespace, jsonpatch.apply_patch(pod, outcome.patch))

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
        self.kube.patch(PODS, namespace_of(pod), pod["metadata"]["name"], {"status": status})
        self.started.setdefault(self.key(pod), []).append(training_env(pod))

    @staticmethod
    def key(pod: Mapping[str, Any]) -> PodKey:
        owner = str(pod["metadata"]["ownerReferences"][0]["name"])
        return (namespace_of(pod), owner, int(pod["metadata"]["labels"][contract.ROLE_INDEX]))

    def running(self) -> dict[PodKey, dict[str, str]]:
        return {
            self.key(p): training_env(p)
            for p in self.list(PODS)
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        }

    def status_of(self, workload: Mapping[str, Any]) -> dict[str, Any]:
        """The job state the sweeper wrote on `workload`."""
        return self.statuses().get(_key(workload), {})

    def statuses(self) -> dict[tuple[str, str], dict[str, Any]]:
        """The job state the sweeper wrote on each workload, by (namespace, name): two lists
        for every job at once, as the emulator slows with each request."""
        found: dict[tuple[str, str], dict[str, Any]] = {}
        for resource in (STATEFULSETS, JOBS):
            for obj in self.list(resource):
                raw = (obj["metadata"].get("annotations") or {}).get(contract.STATUS)
                found[(namespace_of(obj), obj["metadata"]["name"])] = json.loads(raw) if raw else {}
        return found


def rendered(workloads: Sequence[Mapping[str, Any]]) -> dict[PodKey, dict[str, str]]:
    """What render shows for the complete folder, per pod."""
    found = {}
    for pod in render(workloads):
        labels = pod.pod["metadata"]["labels"]
        owner = labels.get(contract.JOB_NAME) or pod.pod["metadata"]["name"].rsplit("-", 1)[0]
        found[(namespace_of(pod.pod), owner, pod.index)] = training_env(pod.pod)
    return found


def _key(workload: Mapping[str, Any]) -> tuple[str, str]:
    return namespace_of(workload), workload["metadata"]["name"]


def apply_one_by_one(cluster: Cluster, jobs: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """Creates the workloads of every job in the order given, all jobs in step, with the sweeper
    running (the caller's); asserts that every job with a workload still to come says it waits
    for its roles, that every pod in the end runs with what render shows for its whole job, and
    that no pod ever started with anything else."""
    for step in range(max(len(w) for w in jobs.values())):
        for workloads in jobs.values():
            if step < len(workloads):
                cluster.apply(copy.deepcopy(workloads[step]))
        waiting = [job for job, workloads in jobs.items() if step + 1 < len(workloads)]

        def not_waiting(waiting: list[str] = waiting) -> list[str]:
            statuses = cluster.statuses()
            return [
                job
                for job in waiting
                if statuses.get(_key(jobs[job][0]), {}).get("reason") != "WaitingForRoles"
            ]

        def everyone_waits() -> bool:
            cluster.step()
            return not not_waiting()

        try:
            eventually(everyone_waits, timeout=60, what=f"jobs {waiting} say they wait")
        except AssertionError:
            late = not_waiting()
            assert late == [], f"after {step + 1} workload(s), not waiting for roles: {late}"
            raise
    wanted: dict[PodKey, dict[str, str]] = {}
    for workloads in jobs.values():
        wanted |= rendered(workloads)

    def all_running_as_rendered() -> bool:
        cluster.step()
        return cluster.running() == wanted

    try:
        eventually(all_running_as_rendered, timeout=120, what="every pod runs as rendered")
    except AssertionError:
        running = cluster.running()
        wrong = sorted(k for k in wanted if running.get(k) != wanted[k])
        assert wrong == [], f"not running as rendered: {wrong}"
        raise
    partial = {
        key: envs for key, envs in cluster.started.items() if any(e != wanted[key] for e in envs)
    }
    assert partial == {}, f"pods started with a partial world: {partial}"
