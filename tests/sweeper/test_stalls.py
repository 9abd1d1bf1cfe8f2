"""Hangs caught: a job that reports no new step for its trainhook.io/stall-timeout while every
pod runs has stalled, and its failure rules route the stall. The clock is played: the stall
fires once, never while a pod is pending or the job is suspended, and a new step, a restart or a
rank's new run starts the timer again."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import Report, summary
from webhook.sweeper.actions import Decision, Delete, Emit
from webhook.sweeper.decide import decide
from webhook.sweeper.job.state import format_time

from .helpers import NOW, of_type, state_of, status_of
from .test_in_place import pod_patches, ranked

RULES = "stalled -> restart-in-place max=3"
REPORTED = NOW - timedelta(minutes=11)  # step 450 first reported then
STARTED = NOW - timedelta(minutes=30)  # the ranks' training containers started then


def pytorch(policy: str = RULES, **settings: str) -> list[dict[str, Any]]:
    annotations = {
        contract.STALL_TIMEOUT: "10m",
        contract.FAILURE_POLICY: policy,
        contract.REPORT_PROGRESS: "true",
        **settings,
    }
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations, rv="41")
    worker = statefulset(
        "pt-worker", role="worker", job="pt", replicas=2, annotations=annotations, rv="42"
    )
    workloads = stamped(master, worker)
    reported(workloads, 450, REPORTED)
    return workloads


def reported(workloads: list[dict[str, Any]], step: int, since: datetime) -> None:
    """The job's last progress report, as the progress endpoint writes it on the job."""
    value = {"step": step, "updated": format_time(NOW), "stepSince": format_time(since)}
    for workload in workloads:
        workload["metadata"]["annotations"][contract.PROGRESS] = json.dumps(value)


def recorded(workloads: list[dict[str, Any]], status: dict[str, Any]) -> None:
    for workload in workloads:
        workload["metadata"]["annotations"][contract.STATUS] = json.dumps(status)


def running(
    workloads: list[dict[str, Any]], started: datetime = STARTED, **waiting: Any
) -> list[dict[str, Any]]:
    master, workers = workloads
    pods = [
        ranked(pod(master, 0), **waiting),
        *(ranked(pod(workers, i), **waiting) for i in (0, 1)),
    ]
    for obj in pods:
        state = obj["status"]["containerStatuses"][0]["state"]
        if "running" in state:
            state["running"]["startedAt"] = format_time(started)
    return pods


def at(
    workloads: list[dict[str, Any]], pods: list[dict[str, Any]], now: datetime = NOW
) -> Decision:
    return decide(state_of("pt", workloads, pods), now)


def restarts(made: Decision) -> list[Emit]:
    return [e for e in of_type(made.actions, Emit) if e.reason == "Restarting"]


def test_no_new_step_for_the_timeout_while_every_pod_runs_restarts_the_job_in_place() -> None:
    workloads = pytorch()
    made = at(workloads, running(workloads))
    (event,) = restarts(made)
    assert event.message == (
        "restarting all 3 pod(s) of the job in place (attempt 1) (restart 1): no new step for "
        "10m (trainhook.io/stall-timeout): step 450 last "
        f"reported, the timer started at {format_time(REPORTED)}; failure-policy rule 1 "
        f"({RULES})"
    )
    status = status_of(made.actions)
    assert (status["reason"], status["cause"], status["fired"]) == (
        "Stalled",
        f"stalled/{format_time(REPORTED)}",
        {"policy/1": 1},
    )
    assert set(pod_patches(made.actions)) == {"pt-master-0", "pt-worker-0", "pt-worker-1"}


def test_a_stall_fires_once_and_the_timer_starts_again_at_the_release() -> None:
    workloads = pytorch()
    status = status_of(at(workloads, running(workloads)).actions)
    recorded(workloads, status)
    # every rank is back at its barrier: the restart is under way, nothing more fires
    back = running(workloads, attempt=1, waiting_since=NOW)
    assert not restarts(at(workloads, back, NOW + timedelta(seconds=20)))
    released = NOW + timedelta(seconds=30)
    recorded(workloads, {**status, "releasedAt": format_time(released)})
    again = running(workloads, started=released, attempt=1, released=1)
    for minutes in (1, 5, 9):
        assert not restarts(at(workloads, again, released + timedelta(minutes=minutes)))
    made = at(workloads, again, released + timedelta(minutes=5))
    assert made.recheck_at == released + timedelta(minutes=10)  # looked at again when it is due
    later = restarts(at(workloads, again, released + timedelta(minutes=10, seconds=1)))
    assert [e.message.split("(attempt ")[1][:1] for e in later] == ["2"]


def test_the_timer_stands_still_while_a_pod_is_pending() -> None:
    workloads = pytorch()
    pods = running(workloads)
    pods[2]["status"]["phase"] = "Pending"
    pods[2]["status"]["containerStatuses"][0]["state"] = {
        "waiting": {"reason": "ContainerCreating"}
    }
    for minutes in (0, 30, 120):
        made = at(workloads, pods, NOW + timedelta(minutes=minutes))
        assert not restarts(made) and not of_type(made.actions, Delete)
    # once it runs, the timer counts from its start, not from the step's old report
    began = NOW + timedelta(minutes=120)
    pods = running(workloads)
    pods[2]["status"]["containerStatuses"][0]["state"] = {
        "running": {"startedAt": format_time(began)}
    }
    assert not restarts(at(workloads, pods, began + timedelta(minutes=9)))
    assert restarts(at(workloads, pods, began + timedelta(minutes=10)))


def test_a_suspended_job_never_stalls() -> None:
    workloads = pytorch(**{contract.SUSPEND: "true"})
    made = at(workloads, running(workloads), NOW + timedelta(hours=3))
    assert made.phase == "Suspended" and not restarts(made)


def test_a_new_step_starts_the_timer_again_and_no_report_yet_judges_nothing() -> None:
    workloads = pytorch()
    reported(workloads, 451, NOW - timedelta(minutes=2))
    made = at(workloads, running(workloads))
    assert not restarts(made)
    assert made.recheck_at == NOW + timedelta(minutes=8)
    for workload in workloads:
        del workload["metadata"]["annotations"][contract.PROGRESS]
    assert not restarts(at(workloads, running(workloads), NOW + timedelta(days=1)))


def test_without_a_rule_for_it_a_stall_follows_the_restart_policy() -> None:
    workloads = pytorch("reason=OOMKilled -> fail", **{contract.RESTART_POLICY: "RestartJob"})
    made = at(workloads, running(workloads))
    (event,) = restarts(made)
    assert event.message.startswith("restarting all 3 pod(s) of the job together (restart 1): ")
    assert "no new step for 10m" in event.message
    assert [d.name for d in of_type(made.actions, Delete)] == [
        "pt-master-0",
        "pt-worker-0",
        "pt-worker-1",
    ]
    # the default (OnFailure) retries: nothing is restarted, the stall is not acted on
    plain = pytorch("reason=OOMKilled -> fail")
    assert not restarts(at(plain, running(plain)))


def test_a_stall_a_rule_fails_names_it() -> None:
    workloads = pytorch("stalled -> fail")
    made = at(workloads, running(workloads))
    status = status_of(made.actions)
    assert (status["state"], status["reason"]) == ("Failed", "FailurePolicy")
    assert status["message"].startswith("no new step for 10m (trainhook.io/stall-timeout)")


def test_reports_that_repeat_the_step_keep_when_it_was_first_reported() -> None:
    def step(n: int) -> Report:
        return Report(metrics=(("currentStep", str(n)),))

    first = summary(step(450), NOW - timedelta(minutes=5))
    again = summary(step(450), NOW, first)
    newer = summary(step(451), NOW, again)
    assert first["stepSince"] == again["stepSince"] == format_time(NOW - timedelta(minutes=5))
    assert newer["stepSince"] == format_time(NOW)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {contract.STALL_TIMEOUT: "20m"},
            "trainhook.io/stall-timeout: invalid value '20m': the step comes from the job's "
            'progress reports: set trainhook.io/report-progress: "true" too, or remove the '
            "timeout",
        ),
        (
            {contract.STALL_TIMEOUT: "10", contract.REPORT_PROGRESS: "true"},
            "trainhook.io/stall-timeout: invalid value '10': a duration like 90s, 30m or 1h30m, "
            "from 1m to 7d",
        ),
        (
            {contract.STALL_TIMEOUT: "30s", contract.REPORT_PROGRESS: "true"},
            "trainhook.io/stall-timeout: invalid value '30s': a duration like 90s, 30m or "
            "1h30m, from 1m to 7d",
        ),
        (
            {contract.FAILURE_POLICY: "stalled role=worker -> restart-job"},
            "trainhook.io/failure-policy: invalid value 'stalled role=worker -> restart-job': "
            "rule 1: stalled is the whole job's, a term alone: its action one of fail, "
            "restart-job, restart-job-free, restart-in-place, retry, ignore",
        ),
    ],
)
def test_a_bad_stall_setting_is_refused_in_one_line(
    annotations: dict[str, str], message: str
) -> None:
    from tests.core.test_failure_rules import refusal

    refused = refusal(annotations)
    assert "\n" not in refused
    assert refused == message or refused.startswith(message)


def test_a_duration_is_read_largest_unit_first() -> None:
    from webhook.core.job.progress import seconds_of

    assert [seconds_of(t) for t in ("90s", "30m", "1h30m", "2d", "1m1h", "m", "5", "")] == [
        90,
        1800,
        5400,
        172800,
        None,
        None,
        None,
        None,
    ]
    with pytest.raises(TrainhookError):
        from webhook.core.job.progress import stall_timeout

        stall_timeout("8d")
