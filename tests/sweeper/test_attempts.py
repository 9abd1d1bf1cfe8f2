"""A whole-job restart starts from nothing: no success, failure or count of an earlier attempt
is carried into the new one, whatever the order of the pods' deaths and the sweeper's writes.

Each test plays a job through a few looks of the sweeper: the decision's writes are applied to
the job's objects (as the API server would), the pods it deletes go, and the StatefulSet
controller's new pods come with a later creation time."""

from __future__ import annotations

import copy
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.actions import Decision, Delete, Emit, Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.job.state import format_time

from .helpers import NOW, state_of

RESTART_JOB = {contract.RESTART_POLICY: "RestartJob"}
Replica = tuple[str, int]


@dataclass(frozen=True)
class Shape:
    """A job of one framework: its roles, its success policy, and two replicas whose success
    does not end the job alone: `first` succeeds in the first attempt, `crashing` crashes."""

    framework: str
    roles: tuple[tuple[str, int], ...]
    policy: str | None
    first: Replica
    crashing: Replica
    # The replicas whose success, beside `first`'s, ends the job: None when `first`'s success
    # matters to no rule but "every pod" ones (the second interleaving then does not apply).
    others: tuple[Replica, ...] | None


W0, W1, W2 = ("worker", 0), ("worker", 1), ("worker", 2)


def every_worker(framework: str) -> Shape:
    """Three workers, each of which must succeed (the framework's rule)."""
    return Shape(framework, (("worker", 3),), None, W0, W2, (W1, W2))


def with_master(framework: str, lead: str = "master", policy: str | None = None) -> Shape:
    """A master (or chief) and two workers: worker 0 succeeds, worker 1 crashes."""
    others = ((lead, 0), W1) if policy == "all" else None
    return Shape(framework, ((lead, 1), ("worker", 2)), policy, W0, W1, others)


SHAPES = [
    every_worker("jax"),
    every_worker("paddle"),
    every_worker("pytorch"),
    every_worker("generic"),
    with_master("pytorch", policy="all"),
    with_master("pytorch"),
    with_master("pytorch", policy="rank0"),
    with_master("tensorflow", "chief"),
    with_master("xgboost"),
    Shape("mindspore", (("scheduler", 1), ("worker", 3)), None, W1, W2, None),
]
EVERY = [shape for shape in SHAPES if shape.others is not None]


def shape_id(shape: Shape) -> str:
    roles = "+".join(f"{role}x{n}" for role, n in shape.roles)
    return f"{shape.framework}-{roles}" + (f"-{shape.policy}" if shape.policy else "")


def at(seconds: int) -> datetime:
    return NOW + timedelta(seconds=seconds)


class Job:
    """A job's StatefulSets and pods, changed by the sweeper's decisions as the API server
    would, and by the test as the kubelet and the StatefulSet controller would."""

    def __init__(self, shape: Shape) -> None:
        settings = dict(RESTART_JOB)
        if shape.policy:
            settings[contract.SUCCESS_POLICY] = shape.policy
        made = [
            statefulset(
                f"j-{role}",
                framework=shape.framework,
                role=role,
                job="j",
                replicas=replicas,
                annotations=settings,
                rv="40",
            )
            for role, replicas in shape.roles
        ]
        self.workloads = {w["metadata"]["name"]: w for w in stamped(*made)}
        self.pods: dict[str, dict[str, Any]] = {}
        self.events: list[Emit] = []
        self.generation = 0
        self.recreate(at(-600))

    def recreate(self, when: datetime) -> None:
        """The StatefulSet controller creates the pods that are missing, at `when`."""
        self.generation += 1
        for workload in self.workloads.values():
            for index in range(workload["spec"]["replicas"]):
                name = f"{workload['metadata']['name']}-{index}"
                if name in self.pods:
                    continue
                obj = pod(workload, index)
                obj["metadata"]["uid"] = str(
                    uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}/{self.generation}")
                )
                obj["metadata"]["creationTimestamp"] = format_time(when)
                self.pods[name] = obj

    def name(self, replica: Replica) -> str:
        return f"j-{replica[0]}-{replica[1]}"

    def ran(self, replica: Replica, code: int, finished: datetime) -> None:
        """The pod's training container ended with `code` at `finished`; Kubernetes restarted it
        (a StatefulSet's pods restart whatever their exit code)."""
        obj = self.pods[self.name(replica)]
        status = obj["status"]["containerStatuses"][0]
        status["restartCount"] += 1
        status["lastState"] = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "finishedAt": format_time(finished),
            }
        }
        status["state"] = {"running": {"startedAt": format_time(finished)}}
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1000)

    def look(self, now: datetime, *, deletes: bool = True) -> Decision:
        """The sweeper looks at the job at `now`; its writes land (the pods it deletes go only
        with `deletes`)."""
        state = state_of("j", list(self.workloads.values()), list(self.pods.values()))
        made = decide(state, now)
        for action in made.actions:
            if isinstance(action, Emit):
                self.events.append(action)
            elif isinstance(action, Patch) and action.resource == STATEFULSETS:
                self._patch(self.workloads[action.name], action.patch)
            elif isinstance(action, Delete) and action.resource == PODS and deletes:
                self.pods.pop(action.name, None)
        return made

    def _patch(self, obj: dict[str, Any], patch: Mapping[str, Any]) -> None:
        annotations = (patch.get("metadata") or {}).get("annotations") or {}
        kept = obj["metadata"]["annotations"]
        for key, value in annotations.items():
            if value is None:
                kept.pop(key, None)
            else:
                kept[key] = value
        if "spec" in patch:
            obj["spec"].update(copy.deepcopy(patch["spec"]))
        obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)

    def status(self) -> dict[str, Any]:
        first = next(iter(self.workloads.values()))
        value: dict[str, Any] = json.loads(first["metadata"]["annotations"][contract.STATUS])
        return value

    def phase(self) -> str | None:
        annotations: dict[str, str] = next(iter(self.workloads.values()))["metadata"]["annotations"]
        return annotations.get(contract.PHASE)

    def restarts(self) -> list[str]:
        return [e.message for e in self.events if e.reason == "Restarting"]


def first_attempt_ends(job: Job, shape: Shape, *, seen_between: bool, deletes: bool) -> None:
    """`first` exits 0 and `crashing` crashes, then the job restarts. `seen_between`: the
    sweeper looks at the job (and records the success) between the two; `deletes`: the
    restart's deletes land in the look that decides it (else the old pods linger a look)."""
    job.look(at(0))
    job.ran(shape.first, 0, at(5))
    if seen_between:
        job.look(at(10))
    job.ran(shape.crashing, 1, at(20))
    made = job.look(at(40), deletes=deletes)
    assert any(isinstance(a, Delete) for a in made.actions), "the job restarts"
    assert len(job.restarts()) == 1
    if not deletes:  # a look while the old pods are still there, then they go
        job.look(at(41))
    job.pods.clear()
    job.recreate(at(42))
    job.look(at(45))
    assert job.status()["state"] == "Running"


ORDERS = [
    pytest.param(True, True, id="success-seen-first"),
    pytest.param(False, True, id="success-seen-with-the-crash"),
    pytest.param(True, False, id="old-pods-linger-a-look"),
]


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize(("seen_between", "deletes"), ORDERS)
def test_a_replica_that_succeeded_before_a_restart_and_crashes_after_it_restarts_the_job_again(
    shape: Shape, seen_between: bool, deletes: bool
) -> None:
    job = Job(shape)
    first_attempt_ends(job, shape, seen_between=seen_between, deletes=deletes)
    job.ran(shape.first, 1, at(60))
    made = job.look(at(80))
    assert job.phase() is None
    assert len(job.restarts()) == 2, "the crash in the new attempt restarts the job"
    assert any(isinstance(a, Delete) for a in made.actions)
    assert job.status()["restarts"] == 2


@pytest.mark.parametrize("shape", EVERY, ids=shape_id)
@pytest.mark.parametrize(("seen_between", "deletes"), ORDERS)
def test_the_others_succeeding_after_a_restart_do_not_end_the_job_while_one_still_trains(
    shape: Shape, seen_between: bool, deletes: bool
) -> None:
    job = Job(shape)
    first_attempt_ends(job, shape, seen_between=seen_between, deletes=deletes)
    for replica in shape.others or ():
        job.ran(replica, 0, at(60))
    made = job.look(at(80))
    assert job.phase() is None, f"{shape.first} still trains in the new attempt"
    assert made.phase == "Running"
    others = shape.others or ()
    recorded = job.workloads[f"j-{others[0][0]}"]["metadata"]["annotations"]
    assert contract.SUCCEEDED in recorded  # the new attempt's successes are recorded
    # and once the first replica succeeds again, the job has
    job.ran(shape.first, 0, at(90))
    job.look(at(100))
    assert job.phase() == "Succeeded"


@pytest.mark.parametrize("shape", EVERY, ids=shape_id)
def test_a_restart_records_no_success_of_the_attempt_it_ends(shape: Shape) -> None:
    job = Job(shape)
    job.look(at(0))
    job.ran(shape.first, 0, at(5))
    job.look(at(10))
    job.ran(shape.crashing, 1, at(20))
    job.look(at(40), deletes=False)
    for workload in job.workloads.values():
        assert contract.SUCCEEDED not in workload["metadata"]["annotations"]


def test_a_success_in_the_second_of_a_restart_that_began_in_it_belongs_to_the_attempt_before():
    # A preemption restarts the job at once (no grace): within the second its pods were
    # created, worker 0 exited 0 and worker 2 was preempted.
    shape = SHAPES[0]
    job = Job(shape)
    job.pods.clear()
    job.recreate(at(0))
    job.ran(shape.first, 0, at(0))
    preempted = job.pods[job.name(shape.crashing)]
    preempted["status"]["conditions"].append(
        {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    )
    made = job.look(at(0) + timedelta(milliseconds=900), deletes=False)
    assert len(job.restarts()) == 1 and job.status()["restartedAt"] == format_time(at(0))
    for workload in job.workloads.values():
        assert contract.SUCCEEDED not in workload["metadata"]["annotations"]
    assert len([a for a in made.actions if isinstance(a, Delete)]) == 3
    job.pods.clear()  # and the new pods come within that same second
    job.recreate(at(0))
    job.look(at(5))
    job.ran(shape.first, 1, at(10))
    job.look(at(30))
    assert len(job.restarts()) == 2, "the crash in the new attempt restarts the job"
