"""`trainhook status` and `trainhook describe` name the failure rule that fired; describe lists
the job's rules and the restarts that did not count."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.report.describe import JobObjects, describe
from webhook.sweeper.report.status import format_table, job_rows

NOW = datetime(2025, 1, 1, 2, 0, 0, tzinfo=UTC)
POLICY = 'reason=OOMKilled -> fail\nmessage~"NCCL*timed out" -> restart-job max=3'


def restarted_job() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    annotations = {contract.FAILURE_POLICY: POLICY, contract.RESTART_POLICY: "RestartJob"}
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=annotations),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=annotations),
    )
    status = {
        "state": "Running",
        "reason": "Running",
        "message": "",
        "restarts": 1,
        "startTime": "2025-01-01T00:00:00Z",
        "restartedAt": "2025-01-01T01:00:00Z",
        "cause": "abcd1234/1",
        "rule": 'failure-policy rule 2 (message~"NCCL*timed out" -> restart-job max=3)',
        "fired": {"policy/2": 1},
        "disruptions": {"preemption": 2, "drain": 1},
    }
    for workload in (master, workers):
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    return [master, workers], [pod(master, 0), pod(workers, 0), pod(workers, 1)]


def test_status_shows_the_rule_that_fired_in_a_rule_column() -> None:
    workloads, pods = restarted_job()
    rows = job_rows(workloads, pods, NOW)
    header, row = format_table(rows, with_namespace=False).splitlines()
    assert header.split() == [
        "JOB",
        "FRAMEWORK",
        "ROLES",
        "PHASE",
        "REASON",
        "RULE",
        "RESTARTS",
        "PROGRESS",
        "ETA",
        "CHECKPOINT",
        "START",
        "AGE",
        "FINISHED",
    ]
    rule = header.index("RULE")
    assert row[rule : header.index("RESTARTS")].rstrip() == "failure-policy rule 2"


def test_describe_lists_the_rules_the_one_that_fired_and_the_restarts_not_counted() -> None:
    workloads, pods = restarted_job()
    text = describe(JobObjects("ml", "pt", tuple(workloads), tuple(pods), None, None, ()), NOW)
    lines = text.splitlines()
    start = lines.index("Failure rules (first match wins):")
    assert lines[start : start + 7] == [
        "Failure rules (first match wins):",
        "  1. reason=OOMKilled -> fail",
        '  2. message~"NCCL*timed out" -> restart-job max=3',
        "  3. disrupted=any -> restart-job-free   [trainhook.io/restart-policy RestartJob]",
        "  4. * -> restart-job   [trainhook.io/restart-policy RestartJob]",
        'Rule fired:   failure-policy rule 2 (message~"NCCL*timed out" -> restart-job max=3)',
        "Not counted:  drain 1, preemption 2 (restarts after pods were stopped from outside)",
    ]
