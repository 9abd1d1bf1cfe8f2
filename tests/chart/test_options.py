"""Chart options platform teams expect: what each renders, in the objects Kubernetes runs."""

from __future__ import annotations

from tests.chart.pod_security import restricted_violations
from tests.chart.rendering import (
    COMBINATIONS,
    NEWEST_KUBERNETES,
    Document,
    Rendered,
    render,
    render_error,
    validate_strictly,
)

SCOPED = COMBINATIONS["scoped-and-observed"]


def pod(rendered: Rendered, name: str) -> Document:
    spec: Document = rendered.named("Deployment", name)["spec"]["template"]["spec"]
    return spec


def test_one_namespace_list_scopes_the_webhook_and_the_sweeper_together() -> None:
    rendered = render(SCOPED)
    selector = rendered.webhook_hook()["namespaceSelector"]["matchExpressions"]
    assert {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["ml", "vision"]} in (
        selector
    )
    args = rendered.container("Deployment", "trainhook-sweeper")["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=ml",
        "--namespace=vision",
    ]


def test_listing_the_release_namespace_is_refused_in_one_line() -> None:
    error = render_error({"namespaces": ["ml", "trainhook"]})
    assert (
        'namespaces: "trainhook" is the release namespace, which the webhook never serves; '
        "list only the namespaces of training jobs"
    ) in error


def test_host_network_serves_on_the_node_port_and_says_what_it_costs() -> None:
    rendered = render({"webhook": {"hostNetwork": {"enabled": True, "port": 10300}}})
    spec = pod(rendered, "trainhook-webhook")
    assert spec["hostNetwork"] is True
    assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
    container = spec["containers"][0]
    assert "--bind=0.0.0.0:10300" in container["args"]
    assert container["ports"] == [{"name": "https", "containerPort": 10300, "protocol": "TCP"}]
    # The one rule of the restricted level it breaks (NOTES warns about it).
    assert restricted_violations(spec) == ["hostNetwork must be unset or false"]
    validate_strictly(rendered.named("Deployment", "trainhook-webhook"), NEWEST_KUBERNETES)
    service = rendered.named("Service", "trainhook-webhook")["spec"]["ports"][0]
    assert service["targetPort"] == "https"


def test_network_policy_admits_only_the_api_server_the_helm_test_and_listed_peers() -> None:
    rendered = render(SCOPED)
    webhook = rendered.named("NetworkPolicy", "trainhook-webhook")["spec"]
    assert webhook["policyTypes"] == ["Ingress"]
    (rule,) = webhook["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 8443}]
    assert rule["from"] == [
        {"ipBlock": {"cidr": "10.0.0.0/24"}},
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "trainhook",
                    "app.kubernetes.io/instance": "trainhook",
                    "app.kubernetes.io/component": "test",
                }
            }
        },
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
    ]
    test_labels = rendered.named("Pod", "trainhook-test")["metadata"]["labels"]
    assert rule["from"][1]["podSelector"]["matchLabels"].items() <= test_labels.items()
    sweeper = rendered.named("NetworkPolicy", "trainhook-sweeper")["spec"]
    assert sweeper["policyTypes"] == ["Ingress"]
    assert sweeper["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 9090}], "from": [rule["from"][2]]}
    ]
    closed = render({"networkPolicy": {"enabled": True, "apiServer": rule["from"][:1]}})
    assert "ingress" not in closed.named("NetworkPolicy", "trainhook-sweeper")["spec"]
    assert render().of_kind("NetworkPolicy") == []


def test_network_policy_without_the_api_servers_addresses_is_refused() -> None:
    error = render_error({"networkPolicy": {"enabled": True}})
    assert "networkPolicy.apiServer: Array must have at least 1 items" in error


def test_prometheus_rule_carries_the_alerts_the_serving_guide_recommends() -> None:
    rule = render(SCOPED).one("PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prometheus"
    (group,) = rule["spec"]["groups"]
    alerts = {r["alert"]: " ".join(r["expr"].split()) for r in group["rules"]}
    where = 'namespace="trainhook",service="trainhook-webhook"'
    assert alerts == {
        "TrainhookCertificateExpiresSoon": (
            f"min(trainhook_certificate_expiry_timestamp_seconds{{{where}}}) - time() < 7 * 86400"
        ),
        "TrainhookInternalErrors": (
            f'sum(increase( trainhook_admission_errors_total{{{where},reason="internal"}}[10m] '
            ")) > 0"
        ),
        "TrainhookLookupUnavailable": (
            f"sum(increase( trainhook_lookup_unavailable_total{{{where}}}[10m] )) > 0"
        ),
    }
    assert all(r["labels"] == {"severity": "warning"} for r in group["rules"])


def test_sweeper_has_a_disruption_budget_like_the_webhook() -> None:
    budget = render(SCOPED).named("PodDisruptionBudget", "trainhook-sweeper")["spec"]
    assert budget == {
        "maxUnavailable": "50%",
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "trainhook",
                "app.kubernetes.io/instance": "trainhook",
                "app.kubernetes.io/component": "sweeper",
            }
        },
    }
    assert "trainhook-sweeper" not in render(
        {"sweeper": {"podDisruptionBudget": {"enabled": False}}}
    ).names("PodDisruptionBudget")


def test_service_accounts_take_annotations_or_an_existing_account() -> None:
    rendered = render(SCOPED)
    account = rendered.named("ServiceAccount", "trainhook-webhook")
    assert account["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/trainhook"
    }
    assert "platform-sweeper" not in rendered.names("ServiceAccount")
    assert "trainhook-sweeper" not in rendered.names("ServiceAccount")
    assert pod(rendered, "trainhook-sweeper")["serviceAccountName"] == "platform-sweeper"
    for binding in rendered.of_kind("RoleBinding"):
        if binding["metadata"]["name"].startswith("trainhook-sweeper"):
            assert binding["subjects"][0]["name"] == "platform-sweeper"


def test_rbac_create_false_renders_no_role_and_no_binding_at_all() -> None:
    rendered = render(COMBINATIONS["no-rbac"])
    for kind in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"):
        assert rendered.of_kind(kind) == [], kind
    assert pod(rendered, "trainhook-webhook")["serviceAccountName"] == "platform-webhook"


def test_extra_args_env_volumes_and_probe_timing_reach_the_containers() -> None:
    rendered = render(SCOPED)
    webhook = rendered.container("Deployment", "trainhook-webhook")
    assert webhook["args"][-1] == "--log-level=debug"
    assert webhook["env"][-1] == {"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}
    assert webhook["volumeMounts"][-1] == {"name": "corp-ca", "mountPath": "/etc/corp-ca"}
    assert pod(rendered, "trainhook-webhook")["volumes"][-1] == {
        "name": "corp-ca",
        "configMap": {"name": "corp-ca"},
    }
    assert webhook["readinessProbe"] == {
        "httpGet": {"scheme": "HTTPS", "path": "/readyz", "port": "https"},
        "initialDelaySeconds": 0,
        "periodSeconds": 2,
        "timeoutSeconds": 3,
        "failureThreshold": 3,
    }
    assert webhook["livenessProbe"]["initialDelaySeconds"] == 30
    assert webhook["livenessProbe"]["httpGet"]["path"] == "/healthz"
    sweeper = rendered.container("Deployment", "trainhook-sweeper")
    assert sweeper["env"][-1] == {"name": "TZ", "value": "UTC"}
    assert sweeper["volumeMounts"][-1] == {"name": "scratch", "mountPath": "/scratch"}


def test_image_registry_prefixes_the_repository() -> None:
    for _, spec in render(SCOPED).pod_specs():
        assert spec["containers"][0]["image"] == "registry.example.com:5000/ml/trainhook:0.1.0"
    assert (
        render({"image": {"registry": ""}}).container("Deployment", "trainhook-webhook")["image"]
        == "trainhook/trainhook:0.1.0"
    )


def test_sweeper_serves_metrics_on_its_port_unless_it_is_zero() -> None:
    container = render().container("Deployment", "trainhook-sweeper")
    assert "--metrics-bind=0.0.0.0:9090" in container["args"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    off = render({"sweeper": {"metricsPort": 0}}).container("Deployment", "trainhook-sweeper")
    assert "ports" not in off
    assert not [a for a in off["args"] if a.startswith("--metrics-bind")]
