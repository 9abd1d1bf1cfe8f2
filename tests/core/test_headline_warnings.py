"""The headline path warns: a labelled workload whose pods would wait for each other for good
is admitted with one line saying why, and what to do."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from tests.support.builders import bare_pod, indexed_job, statefulset
from webhook.core import contract
from webhook.core.mutation.admit import Outcome, Request, admit

ORDERED_READY = (
    "podManagementPolicy OrderedReady: later pods wait for rank 0 to be Ready, rank 0 for them; "
    "recreate it with Parallel"
)


def existing(policy: str = "OrderedReady", **kwargs: Any) -> dict[str, Any]:
    """A StatefulSet created before Trainhook, as the API server keeps it (its defaults filled
    in), not labelled yet."""
    sts = statefulset("my-training", "pytorch", replicas=3, service_name="my-training", **kwargs)
    del sts["metadata"]["labels"][contract.FRAMEWORK]
    sts["spec"]["podManagementPolicy"] = policy
    return sts


def labelled(old: dict[str, Any]) -> Outcome:
    """The answer to `kubectl label statefulset my-training trainhook.io/framework=pytorch`."""
    new = copy.deepcopy(old)
    new["metadata"]["labels"][contract.FRAMEWORK] = "pytorch"
    outcome = admit(Request("StatefulSet", "UPDATE", new, "default", old=old, username="alice"))
    assert outcome is not None
    return outcome


def test_labelling_an_existing_ordered_ready_statefulset_warns_why_and_the_way_out() -> None:
    outcome = labelled(existing())
    assert outcome.warnings == [ORDERED_READY]
    assert len(ORDERED_READY) <= 120  # what kubectl and Argo CD show whole
    # The field is immutable: the answer does not try to change it.
    assert not [op for op in outcome.patch if op["path"] == "/spec/podManagementPolicy"]


def test_a_labelled_statefulset_that_starts_in_parallel_or_asks_for_order_is_not_warned() -> None:
    assert labelled(existing("Parallel")).warnings == []
    ordered = existing(annotations={contract.ORDERED_START: "true"})
    assert labelled(ordered).warnings == []


def test_a_created_statefulset_is_made_parallel_and_not_warned() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2)
    sts["spec"]["podManagementPolicy"] = "OrderedReady"  # the API server's default
    outcome = admit(Request("StatefulSet", "CREATE", sts, "default"))
    assert outcome is not None and outcome.warnings == []
    assert jsonpatch.apply_patch(sts, outcome.patch)["spec"]["podManagementPolicy"] == "Parallel"


def test_every_later_update_of_the_trapped_statefulset_warns_the_same_and_changes_nothing() -> None:
    old = existing()
    new = copy.deepcopy(old)
    new["metadata"]["labels"][contract.FRAMEWORK] = "pytorch"
    stored = jsonpatch.apply_patch(new, labelled(old).patch)
    again = admit(Request("StatefulSet", "UPDATE", stored, "default", old=stored))
    assert again is not None
    assert (again.patch, again.warnings) == ([], [ORDERED_READY])


def test_a_service_name_other_than_the_jobs_headless_service_is_kept_with_a_warning() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2, service_name="trainers")
    outcome = admit(Request("StatefulSet", "CREATE", sts, "default"))
    assert outcome is not None
    assert outcome.warnings == [
        "serviceName trainers is kept: host names end in it, but Trainhook makes only the job's "
        "headless Service ddp"
    ]


def test_an_indexed_jobs_own_subdomain_is_kept_with_a_warning() -> None:
    job = indexed_job("ernie", "paddle", completions=2)
    job["spec"]["template"]["spec"]["subdomain"] = "paddle-hosts"
    outcome = admit(Request("Job", "CREATE", job, "default"))
    assert outcome is not None
    assert outcome.warnings == [
        "subdomain paddle-hosts is kept: host names end in it, but Trainhook makes only the job's "
        "headless Service ernie"
    ]


def test_a_service_name_that_is_the_jobs_own_is_not_warned() -> None:
    sts = statefulset("pt-worker", "pytorch", job="pt", replicas=2, service_name="pt")
    outcome = admit(Request("StatefulSet", "CREATE", sts, "default"))
    assert outcome is not None and outcome.warnings == []


def test_labelling_an_existing_statefulset_under_its_own_service_gives_both_warnings() -> None:
    old = existing(job="llm")
    old["metadata"]["labels"].pop(contract.FRAMEWORK, None)
    assert labelled(old).warnings == [
        ORDERED_READY,
        "serviceName my-training is kept: host names end in it, but Trainhook makes only the "
        "job's headless Service llm",
    ]


def test_a_bare_pods_own_subdomain_is_kept_with_a_warning_naming_the_jobs_service() -> None:
    pod = bare_pod(
        "bare-0",
        "pytorch",
        labels={contract.INDEX: "0", contract.JOB: "bare"},
        annotations={contract.TOPOLOGY: '{"worker":2}'},
    )
    pod["spec"]["subdomain"] = "trainers"
    outcome = admit(Request("Pod", "CREATE", pod, "ml"))
    assert outcome is not None
    assert outcome.warnings == [
        "subdomain trainers is kept, but the pod's peers reach it under the job's headless "
        "Service bare"
    ]
    del pod["spec"]["subdomain"]
    outcome = admit(Request("Pod", "CREATE", pod, "ml"))
    assert outcome is not None and outcome.warnings == []
    assert jsonpatch.apply_patch(pod, outcome.patch)["spec"]["subdomain"] == "bare"
