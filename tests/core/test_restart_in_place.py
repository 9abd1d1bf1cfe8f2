"""The pods' side of an in-place restart: what the webhook adds to a StatefulSet's template, and
the restarter and barrier scripts run for real by `sh` against files like the downward API's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.support.builders import indexed_job, statefulset
from webhook.core import contract
from webhook.core.job.restart_in_place import (
    ATTEMPT_ENV,
    BARRIER,
    BARRIER_SCRIPT,
    MOUNT_PATH,
    RESTART_EXIT_CODE,
    RESTARTER,
    RESTARTER_SCRIPT,
    VOLUME,
)
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import render_all

IN_PLACE = {contract.RESTART_POLICY: "RestartJobInPlace"}


def template_of(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = obj["spec"]["template"]["spec"]
    return spec


def in_place_job(annotations: dict[str, str]) -> dict[str, Any]:
    obj = statefulset("pt", "pytorch", role="worker", job="pt", replicas=2, annotations=annotations)
    template_of(obj)["initContainers"] = [{"name": "fetch-data", "image": "tools", "args": ["x"]}]
    return obj


def test_a_job_restarted_in_place_gets_a_restarter_the_users_init_containers_then_a_barrier() -> (
    None
):
    original = in_place_job(IN_PLACE)
    spec = template_of(mutate_workload(original, "CREATE", "default").workload)
    assert [c["name"] for c in spec["initContainers"]] == [RESTARTER, "fetch-data", BARRIER]
    restarter, _, barrier = spec["initContainers"]
    assert (restarter["image"], barrier["image"]) == (spec["containers"][0]["image"],) * 2
    assert restarter["restartPolicy"] == "Always"
    assert restarter["restartPolicyRules"] == [
        {
            "action": "RestartAllContainers",
            "exitCodes": {"operator": "In", "values": [RESTART_EXIT_CODE]},
        }
    ]
    assert "restartPolicy" not in barrier
    (volume,) = [v for v in spec["volumes"] if v["name"] == VOLUME]
    assert volume["downwardAPI"]["items"] == [
        {
            "path": "attempt",
            "fieldRef": {"fieldPath": "metadata.annotations['trainhook.io/attempt']"},
        },
        {
            "path": "released",
            "fieldRef": {"fieldPath": "metadata.annotations['trainhook.io/released-attempt']"},
        },
    ]
    trainer = spec["containers"][0]
    assert {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True} in trainer["volumeMounts"]
    assert {
        "name": ATTEMPT_ENV,
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['trainhook.io/attempt']"}},
    } in trainer["env"]
    assert "initContainers" in template_of(original)  # the admitted object is left as it was
    assert len(template_of(original)["initContainers"]) == 1


def test_the_helpers_run_with_the_training_containers_image_and_security_context() -> None:
    obj = in_place_job(IN_PLACE)
    restricted = {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    trainer = template_of(obj)["containers"][0]
    trainer.update(securityContext=restricted, imagePullPolicy="IfNotPresent")
    spec = template_of(mutate_workload(obj, "CREATE", "default").workload)
    for helper in (spec["initContainers"][0], spec["initContainers"][-1]):
        assert (helper["image"], helper["imagePullPolicy"], helper["securityContext"]) == (
            trainer["image"],
            "IfNotPresent",
            restricted,
        )


def test_a_rule_that_restarts_in_place_adds_the_same_and_the_pods_are_valid_kubernetes_136() -> (
    None
):
    obj = in_place_job({contract.FAILURE_POLICY: 'message~"NCCL" -> restart-in-place max=5'})
    rendering = render_all([obj])
    for rendered in rendering.pods:
        names = [c["name"] for c in rendered.pod["spec"]["initContainers"]]
        assert names == [RESTARTER, "fetch-data", BARRIER]
        kubernetes_validate.validate(rendered.pod, "1.36", strict=True)


def test_a_job_that_stops_restarting_in_place_loses_the_plumbing_on_update() -> None:
    old = mutate_workload(in_place_job(IN_PLACE), "CREATE", "default").workload
    updated = {**old, "metadata": {**old["metadata"], "annotations": {}}}
    spec = template_of(mutate_workload(updated, "UPDATE", "default", old=old).workload)
    assert [c["name"] for c in spec["initContainers"]] == ["fetch-data"]
    assert not [v for v in spec.get("volumes") or [] if v["name"] == VOLUME]
    assert ATTEMPT_ENV not in [e["name"] for e in spec["containers"][0].get("env") or []]


def test_indexed_jobs_are_recreated_and_get_no_plumbing() -> None:
    job = indexed_job("pt", "pytorch", completions=2, role="worker", job="pt")
    job["metadata"]["annotations"] = dict(IN_PLACE)
    spec = template_of(mutate_workload(job, "CREATE", "default").workload)
    assert "initContainers" not in spec


SH = shutil.which("sh")


def scripted(script: str, folder: Path) -> list[str]:
    assert SH is not None
    return [SH, "-c", script.replace(MOUNT_PATH, str(folder))]


@pytest.mark.skipif(SH is None, reason="needs sh")
def test_the_restarter_exits_for_a_restart_when_the_attempt_changes(tmp_path: Path) -> None:
    (tmp_path / "attempt").write_text("")  # no restart yet: the annotation is not there
    restarter = subprocess.Popen(scripted(RESTARTER_SCRIPT, tmp_path))
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            restarter.wait(timeout=2.5)  # the attempt has not changed: it keeps watching
        (tmp_path / "attempt").write_text("1")
        assert restarter.wait(timeout=10) == RESTART_EXIT_CODE
    finally:
        restarter.kill()
        restarter.wait()


@pytest.mark.skipif(SH is None, reason="needs sh")
def test_the_barrier_waits_until_its_attempt_is_released(tmp_path: Path) -> None:
    (tmp_path / "attempt").write_text("")
    (tmp_path / "released").write_text("")
    fresh = subprocess.run(scripted(BARRIER_SCRIPT, tmp_path), timeout=10, check=False)
    assert fresh.returncode == 0  # a new pod passes at once
    (tmp_path / "attempt").write_text("2")
    (tmp_path / "released").write_text("1")
    barrier = subprocess.Popen(scripted(BARRIER_SCRIPT, tmp_path))
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            barrier.wait(timeout=2.5)  # attempt 2 is not released yet
        (tmp_path / "released").write_text("2")
        assert barrier.wait(timeout=10) == 0
    finally:
        barrier.kill()
        barrier.wait()
