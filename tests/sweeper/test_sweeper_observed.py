"""The sweeper against the API emulator: a whole-job restart end to end, and what it exposes
on /healthz, /readyz and /metrics."""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import EVENTS, PODS, STATEFULSETS
from webhook.sweeper.serving.health import STALLED_AFTER, SweeperHealth
from webhook.sweeper.serving.metrics import SweeperMetrics

from .test_sweeper_api import annotations_on, create_pytorch_job, names


def crash(kube, obj, code=1):
    status = {
        "containerStatuses": [
            {
                "name": "pytorch",
                "restartCount": 1,
                "state": {"running": {}},
                "lastState": {
                    "terminated": {
                        "exitCode": code,
                        "reason": "OOMKilled" if code == 137 else "Error",
                        "finishedAt": "2025-01-01T00:00:00Z",
                    }
                },
            }
        ]
    }
    kube.patch(PODS, "ml", obj["metadata"]["name"], {"status": status})


def status_of(emulator, name="pt-master"):
    raw = annotations_on(emulator, STATEFULSETS, name).get(contract.STATUS)
    return json.loads(raw) if raw else {}


def test_restart_job_deletes_every_pod_of_the_job_once_and_records_the_restart(emulator, kube):
    settings = {contract.RESTART_POLICY: "RestartJob", contract.BACKOFF_LIMIT: "3"}
    _, _, pods = create_pytorch_job(kube, settings)
    with sweeping(kube) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        crash(kube, pods[2], 137)
        eventually(lambda: names(emulator, PODS) == [], what="every pod deleted")
        eventually(lambda: status_of(emulator, "pt-worker").get("restarts") == 1, what="count")
    status = status_of(emulator)
    assert (status["state"], status["reason"], status["restarts"]) == (
        "Restarting",
        "OOMKilled",
        1,
    )
    assert (
        status["message"] == "pod pt-worker-1: container pytorch exited with code 137 (OOMKilled)"
    )
    restarts = [e for e in emulator.objects(EVENTS, "ml") if e["reason"] == "Restarting"]
    assert [(e["type"], e["involvedObject"]["name"]) for e in restarts] == [
        ("Warning", "pt-master")
    ]
    assert sweeper.actions.count("delete Pod ml/pt-worker-1") == 1


def get(url):
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_the_sweeper_serves_health_readiness_and_its_metrics(emulator, kube):
    create_pytorch_job(kube, {})
    with sweeping(kube) as running:
        sweeper = running.sweeper
        metrics = SweeperMetrics(sweeper.elector.is_leader, sweeper.health)
        host, port = metrics.serve("127.0.0.1:0")
        base = f"http://{host}:{port}"
        try:
            eventually(lambda: get(f"{base}/readyz") == (200, "ok\n"), what="ready")
            assert get(f"{base}/healthz") == (200, "ok\n")
            eventually(
                lambda: 'trainhook_sweeper_jobs{phase="Running"} 1.0' in get(f"{base}/metrics")[1],
                what="the job counted as Running",
            )
            text = get(f"{base}/metrics")[1]
            assert "trainhook_sweeper_leader 1.0" in text
            assert re.search(r"^trainhook_sweeper_queue_depth \d+\.0$", text, re.M)
            reconciles = r"^trainhook_sweeper_reconcile_duration_seconds_count [1-9]"
            assert re.search(reconciles, text, re.M)
            assert "trainhook_sweeper_job_restarts_total 0.0" in text
            assert get(f"{base}/nothing")[0] == 404
        finally:
            metrics.stop()


def test_a_sweeper_whose_loop_stalls_is_reported_unhealthy():
    now = [100.0]
    health = SweeperHealth(clock=lambda: now[0])
    metrics = SweeperMetrics(lambda: False, health)
    host, port = metrics.serve("127.0.0.1:0")
    base = f"http://{host}:{port}"
    try:
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (503, "caches not synced yet\n")
        now[0] += STALLED_AFTER + 1
        assert get(f"{base}/healthz") == (503, "reconcile loop stalled\n")
    finally:
        metrics.stop()
