"""The optional ServiceMonitor scrapes the webhook's /metrics over its HTTPS Service port."""

from __future__ import annotations

from tests.chart.rendering import CA_BUNDLE, render

ENABLED = {"metrics": {"serviceMonitor": {"enabled": True}}}


def test_no_service_monitor_unless_enabled() -> None:
    assert render().of_kind("ServiceMonitor") == []


def test_service_monitor_scrapes_the_webhook_service_https_port() -> None:
    rendered = render(
        {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}}
    )
    monitor = rendered.one("ServiceMonitor")
    service = rendered.one("Service")
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    assert (
        monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    )
    assert monitor["spec"]["namespaceSelector"] == {"matchNames": ["trainhook"]}
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] == service["spec"]["ports"][0]["name"]
    assert (endpoint["scheme"], endpoint["path"]) == ("https", "/metrics")
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("30s", "10s")


def test_with_cert_manager_the_scrape_verifies_the_certificate_with_its_ca() -> None:
    rendered = render({**ENABLED, "certificates": {"mode": "certManager"}})
    endpoint = rendered.one("ServiceMonitor")["spec"]["endpoints"][0]
    assert endpoint["tlsConfig"] == {
        "serverName": "trainhook-webhook.trainhook.svc",
        "ca": {
            "secret": {
                "name": rendered.named("Certificate", "trainhook-webhook")["spec"]["secretName"],
                "key": "ca.crt",
            }
        },
    }


def test_in_the_other_modes_the_scrape_skips_verification_unless_told_otherwise() -> None:
    assert render(ENABLED).one("ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"] == {
        "insecureSkipVerify": True
    }
    values = {
        "metrics": {
            "serviceMonitor": {
                "enabled": True,
                "tlsConfig": {"ca": {"configMap": {"name": "ca", "key": "ca.crt"}}},
            }
        },
        "certificates": {"mode": "secret", "secret": {"name": "tls", "caBundle": CA_BUNDLE}},
    }
    assert render(values).one("ServiceMonitor")["spec"]["endpoints"][0]["tlsConfig"] == {
        "ca": {"configMap": {"name": "ca", "key": "ca.crt"}}
    }


def test_metrics_are_written_where_the_webhook_process_looks_for_them() -> None:
    container = render().container("Deployment", "trainhook-webhook")
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert env["PROMETHEUS_MULTIPROC_DIR"] in mounts


def test_the_sweeper_is_probed_on_its_metrics_port_and_scraped_by_a_pod_monitor() -> None:
    rendered = render(ENABLED)
    deployment = rendered.named("Deployment", "trainhook-sweeper")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert "--metrics-bind=0.0.0.0:9090" in container["args"]
    assert container["ports"] == [{"name": "metrics", "containerPort": 9090, "protocol": "TCP"}]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    monitor = rendered.one("PodMonitor")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= labels.items()
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == ("metrics", "/metrics")
    # trainhook_pod_info{namespace,pod,job} and the jobs' series keep their own labels.
    assert endpoint["honorLabels"] is True
    assert render({**ENABLED, "sweeper": {"enabled": False}}).of_kind("PodMonitor") == []
    quiet = render({**ENABLED, "sweeper": {"metricsPort": 0}})
    assert quiet.of_kind("PodMonitor") == []
    assert "livenessProbe" not in quiet.container("Deployment", "trainhook-sweeper")
