"""NOTES.txt: how to opt a workload in, and a warning for every setting that is not HA."""

from __future__ import annotations

from typing import Any

from tests.chart.rendering import CHART, run_helm

NON_HA_WARNINGS = [
    "webhook.replicas is 1: while that pod restarts or its node drains, labelled workloads"
    " cannot be created (failurePolicy Fail).",
    "webhook.podDisruptionBudget.enabled is false: a node drain may evict every webhook pod"
    " at once.",
    "webhook.topologySpread.enabled is false: all webhook pods may land on one node and fail"
    " together.",
    "sweeper.replicas is 1: while it restarts, new jobs wait for their headless Service.",
]


def notes(values: dict[str, Any] | None = None) -> str:
    # Helm 4 renders NOTES.txt in a client-only dry run, without a cluster.
    result = run_helm(
        ["install", "trainhook", str(CHART), "--namespace", "trainhook", "--dry-run=client"],
        values,
        major="4",
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.split("NOTES:\n", 1)[1]


def test_notes_show_how_to_label_an_existing_statefulset() -> None:
    text = notes()
    assert "kubectl label statefulset my-training trainhook.io/framework=pytorch" in text
    assert "every namespace except kube-system, trainhook." in text
    assert "helm test trainhook --namespace trainhook" in text


def test_default_install_is_highly_available_and_has_no_warnings() -> None:
    assert "WARNINGS" not in notes()


def test_every_non_ha_setting_gets_its_own_warning() -> None:
    text = notes(
        {
            "webhook": {
                "replicas": 1,
                "podDisruptionBudget": {"enabled": False},
                "topologySpread": {"enabled": False},
            },
            "sweeper": {"replicas": 1},
        }
    )
    warnings = [
        line.removeprefix("  - ") for line in text.split("WARNINGS\n", 1)[1].splitlines() if line
    ]
    assert warnings == NON_HA_WARNINGS


def test_failure_policy_ignore_and_a_disabled_sweeper_are_warned_about() -> None:
    text = notes(
        {"webhookConfiguration": {"failurePolicy": "Ignore"}, "sweeper": {"enabled": False}}
    )
    assert (
        "failurePolicy is Ignore: while the webhook is unavailable, labelled pods start without"
        in text
    )
    assert "sweeper.enabled is false: nothing creates the jobs' headless Services" in text
