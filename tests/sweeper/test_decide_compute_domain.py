"""What the sweeper decides about a job's ComputeDomain, from the job's state alone."""

from __future__ import annotations

from typing import Any

from tests.support.stored import NAMESPACE, indexed_job, owned, pod, stamped, statefulset
from tests.sweeper.helpers import NOW, described, of_type
from webhook.core import contract
from webhook.kube.resources import COMPUTE_DOMAINS
from webhook.sweeper.actions import Create, Delete, Patch
from webhook.sweeper.decide import decide
from webhook.sweeper.job.state import read_job_state

NVLINK = {contract.NVLINK_DOMAIN: "true"}
CHANNEL = {"numNodes": 2, "channel": {"resourceClaimTemplate": {"name": "hvd-nvlink"}}}


def job(worker_settings: dict[str, str] = NVLINK) -> list[dict[str, Any]]:
    return stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd"),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2,
                    annotations=worker_settings),
    )  # fmt: skip


def domain(*workloads: dict[str, Any], managed: bool = True) -> dict[str, Any]:
    owners = [{"uid": w["metadata"]["uid"]} for w in workloads]
    return owned("ComputeDomain", "hvd-nvlink", job="hvd", managed=managed, owners=owners,
                 spec=CHANNEL)  # fmt: skip


def decided(workloads: list[dict[str, Any]], *domains: dict[str, Any], served: bool = True) -> Any:
    pods = [pod(w, i) for w in workloads for i in range(w["spec"].get("replicas", 1))]
    state = read_job_state(
        NAMESPACE, "hvd", workloads=workloads, pods=pods,
        compute_domains=domains, compute_domains_served=served,
    )  # fmt: skip
    return decide(state, NOW)


def compute_domain_writes(actions: Any) -> list[Any]:
    return [
        a
        for a in actions
        if isinstance(a, (Create, Patch, Delete)) and a.resource == COMPUTE_DOMAINS
    ]


def test_a_job_whose_workers_ask_gets_one_compute_domain_counting_its_workers() -> None:
    launcher, workers = job()
    (create,) = compute_domain_writes(decided([launcher, workers]).actions)
    assert create.body["spec"] == CHANNEL
    assert [o["name"] for o in create.body["metadata"]["ownerReferences"]] == [
        "hvd-launcher",
        "hvd-worker",
    ]


def test_a_job_that_does_not_ask_gets_none() -> None:
    assert compute_domain_writes(decided(job({})).actions) == []


def test_none_is_made_before_every_role_has_its_workload() -> None:
    (workers,) = stamped(
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2,
                    annotations={**NVLINK, contract.ROLES: "launcher,worker"}),
    )  # fmt: skip
    assert compute_domain_writes(decided([workers]).actions) == []


def test_its_own_is_left_as_it_is() -> None:
    launcher, workers = job()
    made = decided([launcher, workers], domain(launcher, workers))
    assert compute_domain_writes(made.actions) == []


def test_its_own_gets_the_owners_of_a_workload_added_to_the_job_and_no_other_change() -> None:
    launcher, workers = job()
    (patch,) = compute_domain_writes(decided([launcher, workers], domain(workers)).actions)
    assert patch.patch == {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "hvd-launcher",
                 "uid": launcher["metadata"]["uid"]},
                {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "hvd-worker",
                 "uid": workers["metadata"]["uid"]},
            ]
        }
    }  # fmt: skip
    assert patch.resource_version == "30"


def test_one_not_owned_by_the_job_is_said_once_and_never_written() -> None:
    launcher, workers = job()
    made = decided([launcher, workers], domain())
    assert compute_domain_writes(made.actions) == []
    assert "event ForeignComputeDomain on Job ml/hvd-launcher" in described(made.actions)


def test_the_sweepers_own_goes_once_the_job_is_gone_and_someone_elses_stays() -> None:
    launcher, workers = job()
    ours = domain(launcher, workers)
    gone = decide(read_job_state(NAMESPACE, "hvd", compute_domains=[ours]), NOW)
    assert of_type(gone.actions, Delete) == [
        Delete(COMPUTE_DOMAINS, NAMESPACE, "hvd-nvlink", ours["metadata"]["uid"])
    ]
    planted = domain(managed=False)
    left = decide(read_job_state(NAMESPACE, "hvd", compute_domains=[planted]), NOW)
    assert of_type(left.actions, Delete) == []


def test_where_none_is_served_nothing_is_written_and_the_job_waits_saying_why() -> None:
    launcher, workers = job()
    made = decided([launcher, workers], served=False)
    assert compute_domain_writes(made.actions) == []
    assert "event NVLinkDomainUnavailable on Job ml/hvd-launcher" in described(made.actions)
