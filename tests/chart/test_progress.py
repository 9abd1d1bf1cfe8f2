"""progress.enabled: the sweeper's progress endpoint, its Service, TLS and its one permission."""

from __future__ import annotations

from tests.chart.rendering import render, render_error
from tests.chart.test_rbac import bound_subjects, expand, grants

ENABLED = {"progress": {"enabled": True}}


def test_the_sweeper_may_create_tokenreviews_and_nothing_more_for_it() -> None:
    rendered = render(ENABLED)
    role = rendered.named("ClusterRole", "trainhook-sweeper-progress")
    assert grants(role) == expand("authentication.k8s.io", "tokenreviews", "create")
    subjects = bound_subjects(
        rendered, "ClusterRoleBinding", "ClusterRole", "trainhook-sweeper-progress"
    )
    assert subjects == [
        {"kind": "ServiceAccount", "name": "trainhook-sweeper", "namespace": "trainhook"}
    ]


def test_the_endpoint_is_served_by_the_sweeper_behind_its_own_service() -> None:
    rendered = render(ENABLED)
    service = rendered.named("Service", "trainhook-progress")
    assert service["spec"]["ports"] == [
        {"name": "progress", "port": 8444, "targetPort": "progress", "protocol": "TCP"}
    ]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "sweeper"
    sweeper = rendered.container("Deployment", "trainhook-sweeper")
    assert {"name": "progress", "containerPort": 8444, "protocol": "TCP"} in sweeper["ports"]
    assert [a for a in sweeper["args"] if a.startswith("--progress")] == [
        "--progress-bind=0.0.0.0:8444",
        "--progress-cert-file=/var/run/trainhook/progress/tls.crt",
        "--progress-key-file=/var/run/trainhook/progress/tls.key",
        "--progress-write-seconds=10",
    ]


def test_the_sweeper_mounts_the_webhooks_certificate_but_never_the_cas_key() -> None:
    spec = render(ENABLED).named("Deployment", "trainhook-sweeper")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "progress-certs")
    assert volume["secret"]["secretName"] == "trainhook-webhook-tls"
    assert volume["secret"]["items"] == [
        {"key": "tls.crt", "path": "tls.crt"},
        {"key": "tls.key", "path": "tls.key"},
    ]


def test_the_webhook_sends_reporting_pods_to_the_service_with_its_ca() -> None:
    args = render(ENABLED).container("Deployment", "trainhook-webhook")["args"]
    assert [a for a in args if a.startswith("--progress")] == [
        "--progress-url=https://trainhook-progress.trainhook.svc:8444",
        "--progress-ca-file=/var/run/trainhook/certs/ca.crt",
    ]


def test_a_cert_manager_certificate_also_names_the_progress_service() -> None:
    rendered = render({**ENABLED, "certificates": {"mode": "certManager"}})
    certificate = rendered.named("Certificate", "trainhook-webhook")
    assert "trainhook-progress.trainhook.svc" in certificate["spec"]["dnsNames"]
    spec = rendered.named("Deployment", "trainhook-sweeper")["spec"]["template"]["spec"]
    volume = next(v for v in spec["volumes"] if v["name"] == "progress-certs")
    assert volume["secret"]["secretName"] == "trainhook-webhook-tls"


def test_off_by_default() -> None:
    rendered = render()
    assert "trainhook-progress" not in rendered.names("Service")
    args = rendered.container("Deployment", "trainhook-webhook")["args"]
    assert not [a for a in args if a.startswith("--progress")]


def test_without_the_sweeper_it_is_refused() -> None:
    error = render_error({**ENABLED, "sweeper": {"enabled": False}})
    assert (
        "progress.enabled needs sweeper.enabled: the sweeper serves the progress endpoint" in error
    )


def test_a_network_policy_lets_pods_reach_the_progress_port_and_nothing_else_new() -> None:
    peer = [{"ipBlock": {"cidr": "10.0.0.0/24"}}]
    rendered = render({**ENABLED, "networkPolicy": {"enabled": True, "apiServer": peer}})
    sweeper = rendered.named("NetworkPolicy", "trainhook-sweeper")["spec"]
    assert sweeper["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8444}], "from": [{"namespaceSelector": {}}]}
    ]
