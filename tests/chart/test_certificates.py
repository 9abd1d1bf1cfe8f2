"""The three certificate modes: who makes the certificate, and where the webhook reads it."""

from __future__ import annotations

from tests.chart.rendering import CA_BUNDLE, render, render_error

CERT_DIR = "/var/run/trainhook/certs"


def volume(rendered, name: str) -> dict:
    volumes = rendered.named("Deployment", "trainhook-webhook")["spec"]["template"]["spec"][
        "volumes"
    ]
    return next(v for v in volumes if v["name"] == name)


def test_self_mode_renders_no_certificate_and_lets_the_webhook_issue_one() -> None:
    rendered = render()
    assert rendered.of_kind("Secret") == []
    assert rendered.of_kind("Certificate") == []
    assert rendered.of_kind("Issuer") == []
    args = rendered.container("Deployment", "trainhook-webhook")["args"]
    assert args[args.index("--cert-mode=self") :] == [
        "--cert-mode=self",
        "--cert-secret=trainhook-webhook-tls",
        "--webhook-config=trainhook",
        "--service=trainhook-webhook",
    ]
    assert rendered.one("MutatingWebhookConfiguration")["metadata"]["name"] == "trainhook"
    assert volume(rendered, "certs") == {
        "name": "certs",
        "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"},
    }


def test_self_mode_writes_and_serves_the_certificate_from_the_memory_volume() -> None:
    container = render().container("Deployment", "trainhook-webhook")
    assert f"--cert-file={CERT_DIR}/tls.crt" in container["args"]
    assert f"--key-file={CERT_DIR}/tls.key" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "certs")
    assert mount == {"name": "certs", "mountPath": CERT_DIR}


def test_cert_manager_mode_issues_a_certificate_for_the_service_from_a_self_signed_issuer() -> None:
    rendered = render({"certificates": {"mode": "certManager"}})
    issuer = rendered.one("Issuer")
    certificate = rendered.one("Certificate")["spec"]
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["issuerRef"] == {
        "name": issuer["metadata"]["name"],
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert certificate["dnsNames"] == [
        "trainhook-webhook",
        "trainhook-webhook.trainhook",
        "trainhook-webhook.trainhook.svc",
    ]
    assert certificate["usages"] == ["server auth", "digital signature"]
    assert (certificate["duration"], certificate["renewBefore"]) == ("8760h", "720h")
    assert volume(rendered, "certs") == {
        "name": "certs",
        "secret": {"secretName": certificate["secretName"], "defaultMode": 0o440},
    }


def test_cert_manager_mode_can_use_an_existing_cluster_issuer() -> None:
    rendered = render(
        {
            "certificates": {
                "mode": "certManager",
                "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
            },
            "clusterDomain": "cluster.local",
        }
    )
    assert rendered.of_kind("Issuer") == []
    certificate = rendered.one("Certificate")["spec"]
    assert certificate["issuerRef"] == {
        "name": "corp-ca",
        "kind": "ClusterIssuer",
        "group": "cert-manager.io",
    }
    assert certificate["dnsNames"][-1] == "trainhook-webhook.trainhook.svc.cluster.local"


def test_file_modes_serve_the_mounted_secret_read_only() -> None:
    values = {
        "certificates": {"mode": "secret", "secret": {"name": "corp-tls", "caBundle": CA_BUNDLE}}
    }
    rendered = render(values)
    container = rendered.container("Deployment", "trainhook-webhook")
    assert "--cert-mode=files" in container["args"]
    assert not [arg for arg in container["args"] if arg.startswith(("--cert-secret", "--service"))]
    assert f"--cert-file={CERT_DIR}/tls.crt" in container["args"]
    mount = next(m for m in container["volumeMounts"] if m["name"] == "certs")
    assert mount == {"name": "certs", "mountPath": CERT_DIR, "readOnly": True}
    assert volume(rendered, "certs")["secret"]["secretName"] == "corp-tls"
    assert rendered.of_kind("Certificate") == []


def test_secret_mode_without_a_secret_or_ca_bundle_is_refused_with_the_missing_keys_named() -> None:
    error = render_error({"certificates": {"mode": "secret"}})
    assert "certificates.secret.name: String length must be greater than or equal to 1" in error
    assert "certificates.secret.caBundle: String length must be greater than or equal to 1" in error


def test_an_unknown_certificate_mode_is_refused_with_the_allowed_ones() -> None:
    error = render_error({"certificates": {"mode": "vault"}})
    assert "certificates.mode: certificates.mode must be one of the following" in error
    assert '"self", "certManager", "secret"' in error


def test_an_issuer_ref_without_a_name_is_refused() -> None:
    error = render_error(
        {"certificates": {"certManager": {"issuerRef": {"kind": "ClusterIssuer"}}}}
    )
    assert "certificates.certManager.issuerRef" in error
