"""The MutatingWebhookConfiguration: what reaches the webhook, and how the API server calls it."""

from __future__ import annotations

from tests.chart.rendering import CA_BUNDLE, NEWEST_KUBERNETES, render
from webhook.core.contract import FRAMEWORK

NOT_NODES = {
    "name": "not-node",
    "expression": "!request.userInfo.username.startsWith('system:node:')",
}


def test_only_objects_labelled_with_a_framework_reach_the_webhook() -> None:
    hook = render().webhook_hook()
    assert hook["objectSelector"] == {
        "matchExpressions": [{"key": FRAMEWORK, "operator": "Exists"}]
    }


def test_kube_system_and_the_release_namespace_are_never_served() -> None:
    hook = render(namespace="ml-infra").webhook_hook()
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "ml-infra"],
            }
        ]
    }


def test_a_release_in_kube_system_excludes_it_once() -> None:
    hook = render(namespace="kube-system").webhook_hook()
    assert hook["namespaceSelector"]["matchExpressions"][0]["values"] == ["kube-system"]


def test_api_server_calls_the_webhook_service_with_v1_reviews_and_the_documented_policies() -> None:
    rendered = render()
    hook = rendered.webhook_hook()
    service = rendered.one("Service")
    assert hook["name"] == "mutate.trainhook.io"
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["reinvocationPolicy"] == "IfNeeded"
    assert hook["timeoutSeconds"] == 5
    assert hook["failurePolicy"] == "Fail"
    assert hook["clientConfig"]["service"] == {
        "name": service["metadata"]["name"],
        "namespace": "trainhook",
        "path": "/mutate",
        "port": service["spec"]["ports"][0]["port"],
    }


def test_pods_statefulsets_and_jobs_are_sent_on_create_and_update() -> None:
    rules = render().webhook_hook()["rules"]
    sent = {
        (group, resource): rule["operations"]
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert sent == {
        ("", "pods"): ["CREATE", "UPDATE"],
        ("apps", "statefulsets"): ["CREATE", "UPDATE"],
        ("batch", "jobs"): ["CREATE", "UPDATE"],
    }
    assert {rule["scope"] for rule in rules} == {"Namespaced"}
    assert {version for rule in rules for version in rule["apiVersions"]} == {"v1"}


def test_every_policy_of_the_configuration_is_configurable() -> None:
    hook = render(
        {
            "webhookConfiguration": {
                "failurePolicy": "Ignore",
                "timeoutSeconds": 10,
                "matchPolicy": "Exact",
                "reinvocationPolicy": "Never",
                "sideEffects": "NoneOnDryRun",
                "rules": [
                    {
                        "apiGroups": [""],
                        "apiVersions": ["v1"],
                        "operations": ["CREATE"],
                        "resources": ["pods"],
                    }
                ],
            }
        }
    ).webhook_hook()
    assert (hook["failurePolicy"], hook["timeoutSeconds"], hook["matchPolicy"]) == (
        "Ignore",
        10,
        "Exact",
    )
    assert (hook["reinvocationPolicy"], hook["sideEffects"]) == ("Never", "NoneOnDryRun")
    assert [rule["resources"] for rule in hook["rules"]] == [["pods"]]


def test_extra_selectors_narrow_but_never_drop_the_framework_label_or_the_exclusions() -> None:
    hook = render(
        {
            "webhookConfiguration": {
                "objectSelector": {
                    "matchLabels": {"team": "ml"},
                    "matchExpressions": [{"key": "trainhook.io/skip", "operator": "DoesNotExist"}],
                },
                "namespaceSelector": {
                    "excludeNamespaces": ["kube-system", "monitoring"],
                    "matchLabels": {"trainhook.io/enabled": "true"},
                    "matchExpressions": [
                        {"key": "tier", "operator": "NotIn", "values": ["system"]}
                    ],
                },
            }
        }
    ).webhook_hook()
    assert hook["objectSelector"] == {
        "matchLabels": {"team": "ml"},
        "matchExpressions": [
            {"key": FRAMEWORK, "operator": "Exists"},
            {"key": "trainhook.io/skip", "operator": "DoesNotExist"},
        ],
    }
    assert hook["namespaceSelector"] == {
        "matchLabels": {"trainhook.io/enabled": "true"},
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": ["kube-system", "monitoring", "trainhook"],
            },
            {"key": "tier", "operator": "NotIn", "values": ["system"]},
        ],
    }


def test_match_conditions_are_rendered_on_kubernetes_1_28_and_later() -> None:
    values = {"webhookConfiguration": {"matchConditions": [NOT_NODES]}}
    for version in ("1.28.0", "1.29.0", NEWEST_KUBERNETES):
        assert render(values, kube_version=version).webhook_hook()["matchConditions"] == [NOT_NODES]


def test_match_conditions_are_left_out_before_kubernetes_1_28() -> None:
    values = {"webhookConfiguration": {"matchConditions": [NOT_NODES]}}
    assert "matchConditions" not in render(values, kube_version="1.27.3").webhook_hook()


def test_no_match_conditions_unless_some_are_configured() -> None:
    assert "matchConditions" not in render(kube_version=NEWEST_KUBERNETES).webhook_hook()


def test_labels_and_annotations_of_the_configuration_are_configurable() -> None:
    configuration = render(
        {
            "webhookConfiguration": {
                "labels": {"team": "ml-platform", "app.kubernetes.io/name": "not-trainhook"},
                "annotations": {"example.com/owner": "ml-platform"},
            }
        }
    ).one("MutatingWebhookConfiguration")
    labels = configuration["metadata"]["labels"]
    assert labels["team"] == "ml-platform"
    assert labels["app.kubernetes.io/name"] == "trainhook"  # the chart's own labels win
    assert configuration["metadata"]["annotations"] == {"example.com/owner": "ml-platform"}


def test_self_managed_certificates_leave_the_ca_bundle_to_the_webhook() -> None:
    configuration = render().one("MutatingWebhookConfiguration")
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]
    assert "annotations" not in configuration["metadata"]


def test_cert_manager_injects_the_ca_bundle_from_the_charts_own_ca_certificate() -> None:
    rendered = render({"certificates": {"mode": "certManager"}})
    configuration = rendered.one("MutatingWebhookConfiguration")
    ca = rendered.named("Certificate", "trainhook-ca")
    assert ca["spec"]["isCA"] is True
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "trainhook/trainhook-ca"
    }
    assert "caBundle" not in configuration["webhooks"][0]["clientConfig"]


def test_an_existing_secret_comes_with_the_ca_bundle_given_in_values() -> None:
    values = {
        "certificates": {
            "mode": "secret",
            "secret": {"name": "trainhook-tls", "caBundle": CA_BUNDLE},
        }
    }
    configuration = render(values).one("MutatingWebhookConfiguration")
    assert configuration["webhooks"][0]["clientConfig"]["caBundle"] == CA_BUNDLE
    assert "annotations" not in configuration["metadata"]
