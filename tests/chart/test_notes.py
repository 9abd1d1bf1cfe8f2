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


def served_lines(text: str) -> list[str]:
    keys = ("Served:", "Swept:", "Sibling lookup:", "Certificates:", "The webhook listens")
    return [line for line in text.splitlines() if line.startswith(keys)]


def test_notes_say_where_the_webhook_serves_and_sweeps_by_default() -> None:
    assert served_lines(notes()) == [
        "Served: objects labelled trainhook.io/framework, in every namespace except kube-system,"
        " trainhook.",
        "Swept: the same namespaces; the sweeper's permissions are cluster-wide (a ClusterRole).",
        "Sibling lookup: the webhook reads labelled StatefulSets and Jobs of every namespace"
        " (read-only).",
        "Certificates: self - the webhook writes its CA bundle into the configuration when it"
        " starts.",
    ]


def test_notes_follow_a_namespace_list_the_host_network_and_the_certificate_chain() -> None:
    text = notes(
        {
            "namespaces": ["ml", "vision"],
            "webhook": {"hostNetwork": {"enabled": True}},
            "certificates": {"mode": "certManager"},
        }
    )
    assert served_lines(text) == [
        "Served: objects labelled trainhook.io/framework, in namespaces ml, vision.",
        "Swept: the same namespaces; the sweeper's permissions are a Role in each of them.",
        "Sibling lookup: the webhook reads labelled StatefulSets and Jobs of the same namespaces"
        " (read-only).",
        "The webhook listens on port 10260 of its nodes' network (webhook.hostNetwork).",
        "Certificates: certManager - cert-manager issues Certificate trainhook-webhook from the CA"
        " trainhook-ca and injects that CA as the bundle.",
    ]
    assert "a labelled Pod created as a dry run in namespace ml," in text
    assert "webhook.hostNetwork is on: the webhook pods need the baseline Pod Security level" in (
        text
    )


def test_notes_without_a_sweeper_rbac_or_helm_test_say_so() -> None:
    text = notes(
        {
            "sweeper": {"enabled": False},
            "webhook": {"lookup": False},
            "rbac": {"create": False},
            "helmTest": {"enabled": False},
            "certificates": {
                "mode": "certManager",
                "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
            },
        }
    )
    lines = served_lines(text)
    assert "Swept: nowhere (sweeper.enabled is false)." in text
    assert not [line for line in lines if line.startswith("Sibling lookup:")]
    assert lines[-1] == (
        "Certificates: certManager - cert-manager issues Certificate trainhook-webhook from"
        " ClusterIssuer corp-ca and injects its CA bundle."
    )
    assert "helm test" not in text
    assert "rbac.create is false: grant the webhook and sweeper ServiceAccounts the rules" in text
