"""A straggler is never a kill: a rank the job's workloads record as a straggler restarts
nothing and is said once per flagging; a `straggler` rule has the next whole-job restart another
failure causes keep the pods off its node, recreating in place only the pods on it."""

from __future__ import annotations

import json
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.actions import Decision, Delete, Emit
from webhook.sweeper.decide import decide
from webhook.sweeper.report.describe import JobObjects, describe
from webhook.sweeper.report.status import format_table, job_rows

from .helpers import NOW, of_type, state_of, status_of, terminated
from .test_in_place import pod_patches, ranked

RULES = "straggler -> restart-job exclude-node"
STRAGGLERS = (
    '{"count":1,"ranks":3,"threshold":1.5,"flagged":[{"pod":"pt-worker-1","node":"gpu-3",'
    '"rank":2,"ratio":1.8,"since":"2025-01-01T00:58:00Z"}]}'
)


def pytorch(policy: str | None = RULES, flagged: str | None = STRAGGLERS, **settings: str) -> Any:
    annotations = {
        contract.REPORT_PROGRESS: "true",
        contract.STRAGGLER_THRESHOLD: "1.5",
        **({contract.FAILURE_POLICY: policy} if policy else {}),
        **settings,
    }
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    workloads = stamped(master, worker)
    for workload in workloads:
        if flagged is not None:
            workload["metadata"]["annotations"][contract.STRAGGLERS] = flagged
    return workloads


def on(obj: dict[str, Any], node: str) -> dict[str, Any]:
    obj["spec"]["nodeName"] = node
    return obj


def running(workloads: Any, *, in_place: bool = False, crash: bool = False) -> list[Any]:
    master, workers = workloads
    shaped = ranked if in_place else (lambda obj: obj)
    crashed = pod(workers, 0, restarts=1)
    if crash:
        crashed = terminated(crashed, 1, message="NCCL error", last=True)
    return [
        on(shaped(pod(master, 0)), "gpu-1"),
        on(shaped(crashed), "gpu-2"),
        on(shaped(pod(workers, 1)), "gpu-3"),
    ]


def deciding(workloads: Any, pods: Any) -> Decision:
    return decide(state_of("pt", workloads, pods), NOW)


def emitted(made: Decision, reason: str) -> list[Emit]:
    return [e for e in of_type(made.actions, Emit) if e.reason == reason]


def test_a_straggler_alone_restarts_nothing_and_is_said_once_per_flagging() -> None:
    workloads = pytorch(**{contract.RESTART_POLICY: "RestartJob"})
    made = deciding(workloads, running(workloads))
    assert not of_type(made.actions, Delete) and not emitted(made, "Restarting")
    (event,) = emitted(made, "Straggler")
    assert (event.type, event.involved.name, event.message) == (
        "Warning",
        "pt-master",
        "rank 2 (pod pt-worker-1 on node gpu-3, 1.8x) is a straggler: its steps take over 1.5x "
        "the other ranks' median; nothing is restarted for it; the job's next whole-job "
        f"restart keeps its pods off node gpu-3 (failure-policy rule 1 ({RULES}))",
    )
    again = emitted(deciding(workloads, running(workloads)), "Straggler")
    assert [e.name for e in again] == [event.name]  # the same Event: recorded once
    later = STRAGGLERS.replace("00:58:00", "00:59:30")
    flagged_again = emitted(deciding(pytorch(flagged=later), running(workloads)), "Straggler")
    assert [e.name for e in flagged_again] != [event.name]


def test_without_a_rule_the_event_says_nothing_is_done() -> None:
    workloads = pytorch(policy=None)
    (event,) = emitted(deciding(workloads, running(workloads)), "Straggler")
    assert event.message == (
        "rank 2 (pod pt-worker-1 on node gpu-3, 1.8x) is a straggler: its steps take over 1.5x "
        "the other ranks' median; nothing is restarted for it"
    )


def test_the_next_restart_another_failure_causes_keeps_the_pods_off_the_stragglers_node() -> None:
    workloads = pytorch(**{contract.RESTART_POLICY: "RestartJob"})
    made = deciding(workloads, running(workloads, crash=True))
    (event,) = emitted(made, "Restarting")
    assert event.message == (
        "restarting all 3 pod(s) of the job together (restart 1): pod pt-worker-0: container "
        "pytorch exited with code 1: NCCL error; trainhook.io/restart-policy RestartJob rule 2 "
        "(* -> restart-job); straggler node gpu-3 excluded (rank 2, 1.8x): the pods keep off "
        "it (1 of at most 8)"
    )
    assert [d.name for d in of_type(made.actions, Delete)] == [
        "pt-master-0",
        "pt-worker-0",
        "pt-worker-1",
    ]
    for workload in ("pt-master", "pt-worker"):
        assert status_of(made.actions, workload)["excludedNodes"] == ["gpu-3"]


def test_in_place_only_the_stragglers_pod_is_recreated_the_others_keep_theirs() -> None:
    workloads = pytorch(
        "straggler -> restart-in-place exclude-node",
        **{contract.RESTART_POLICY: "RestartJobInPlace"},
    )
    made = deciding(workloads, running(workloads, in_place=True, crash=True))
    assert [d.name for d in of_type(made.actions, Delete)] == ["pt-worker-1"]
    assert set(pod_patches(made.actions)) == {"pt-master-0", "pt-worker-0"}  # in place
    (event,) = emitted(made, "Restarting")
    assert event.message.endswith(
        "; straggler node gpu-3 excluded (rank 2, 1.8x): its pods are recreated elsewhere "
        "(1 of at most 8)"
    )
    assert status_of(made.actions)["excludedNodes"] == ["gpu-3"]


def test_without_a_straggler_rule_a_restart_excludes_no_stragglers_node() -> None:
    workloads = pytorch(policy=None, **{contract.RESTART_POLICY: "RestartJob"})
    made = deciding(workloads, running(workloads, crash=True))
    assert "straggler" not in emitted(made, "Restarting")[0].message
    assert "excludedNodes" not in status_of(made.actions)


def test_a_flag_whose_pod_has_left_its_node_excludes_nothing() -> None:
    workloads = pytorch(**{contract.RESTART_POLICY: "RestartJob"})
    pods = running(workloads, crash=True)
    on(pods[2], "gpu-9")  # pt-worker-1 recreated elsewhere since it was flagged
    made = deciding(workloads, pods)
    assert "excludedNodes" not in status_of(made.actions)
    assert not emitted(made, "Straggler")


def test_a_job_without_a_threshold_reads_no_flag() -> None:
    workloads = pytorch(**{contract.RESTART_POLICY: "RestartJob"})
    for workload in workloads:
        del workload["metadata"]["annotations"][contract.STRAGGLER_THRESHOLD]
    made = deciding(workloads, running(workloads, crash=True))
    assert "excludedNodes" not in status_of(made.actions)
    assert not emitted(made, "Straggler")


def test_a_kueue_job_leaves_its_stragglers_nodes_to_kueue() -> None:
    workloads = pytorch(**{contract.RESTART_POLICY: "RestartJob", contract.SCHEDULER: "kueue"})
    made = deciding(workloads, running(workloads, crash=True))
    assert "excludedNodes" not in status_of(made.actions)
    (event,) = emitted(made, "Straggler")
    assert event.message.endswith("nothing is restarted for it")


def test_describe_and_status_name_the_stragglers() -> None:
    workloads = pytorch()
    pods = running(workloads)
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, ()), NOW)
    assert (
        "Stragglers:   1 of 3 ranks over 1.5x the others' median step time: rank 2 (pod "
        "pt-worker-1 on node gpu-3, 1.8x)"
    ) in text.splitlines()
    table = format_table(job_rows(workloads, pods, NOW), with_namespace=False).splitlines()
    header, row = table[0], table[1]
    at = header.index("STRAGGLERS")
    assert row[at:].split("   ")[0] == "rank 2"
    calm = pytorch(flagged=None)
    assert "STRAGGLERS" not in format_table(job_rows(calm, pods, NOW), with_namespace=False)
    record = json.loads(STRAGGLERS)
    assert record["flagged"][0]["pod"] == "pt-worker-1"
