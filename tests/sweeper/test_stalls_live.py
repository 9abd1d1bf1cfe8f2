"""A hang end to end: a sweeper against the API emulator, the job's last progress report
naming a step an hour old while every pod runs; the test plays the kubelet."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from tests.support.stored import pod, stamped, statefulset
from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.sweeper.job.state import format_time

from .test_failure_rules_live import events, status_of
from .test_sweeper_api import names


def test_a_job_whose_step_has_not_moved_for_its_stall_timeout_is_restarted(emulator, kube):
    settings = {
        contract.REPORT_PROGRESS: "true",
        contract.STALL_TIMEOUT: "5m",
        contract.FAILURE_POLICY: "stalled -> restart-job max=3",
    }
    master, workers = stamped(
        statefulset("pt-master", role="master", job="pt", annotations=settings),
        statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=settings),
    )
    since = format_time(datetime.now(UTC) - timedelta(hours=1))
    report = json.dumps({"step": 450, "updated": since, "stepSince": since})
    for workload in (master, workers):
        workload["metadata"]["annotations"][contract.PROGRESS] = report
    master = kube.create(STATEFULSETS, "ml", master)
    workers = kube.create(STATEFULSETS, "ml", workers)
    for obj in (pod(master, 0), pod(workers, 0), pod(workers, 1)):
        kube.create(PODS, "ml", obj)
    with sweeping(kube):
        eventually(lambda: names(emulator, PODS) == [], what="the stalled job's pods deleted")
        eventually(lambda: status_of(emulator).get("reason") == "Stalled", what="the cause")
    (event,) = events(emulator, "Restarting")
    assert event["message"] == (
        "restarting all 3 pod(s) of the job together (restart 1): no new step for 5m "
        f"(trainhook.io/stall-timeout): step 450 last reported, the timer started at {since}; "
        "failure-policy rule 1 (stalled -> restart-job max=3)"
    )
    assert status_of(emulator)["fired"] == {"policy/1": 1}
