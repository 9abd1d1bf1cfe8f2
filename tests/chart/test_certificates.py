"""The three certificate modes: who makes the certificate, and where the webhook reads it."""

from __future__ import annotations

import datetime
import re
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509 import DNSName
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import PolicyBuilder, Store

from tests.chart.rendering import CA_BUNDLE, Document, Rendered, render, render_error

CERT_DIR = "/var/run/trainhook/certs"


def volume(rendered: Rendered, name: str) -> Document:
    volumes: list[Document] = rendered.named("Deployment", "trainhook-webhook")["spec"]["template"][
        "spec"
    ]["volumes"]
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


def test_cert_manager_mode_chains_self_signed_issuer_ca_certificate_ca_issuer_and_serving() -> None:
    rendered = render({"certificates": {"mode": "certManager"}})
    issuers = {i["metadata"]["name"]: i["spec"] for i in rendered.of_kind("Issuer")}
    certificates = {c["metadata"]["name"]: c["spec"] for c in rendered.of_kind("Certificate")}
    assert issuers == {
        "trainhook-selfsigned": {"selfSigned": {}},
        "trainhook-ca": {"ca": {"secretName": "trainhook-ca"}},
    }
    ca = certificates.pop("trainhook-ca")
    # The self-signed Issuer signs only the CA...
    assert ca["issuerRef"] == {
        "name": "trainhook-selfsigned",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert ca["isCA"] is True
    assert ca["secretName"] == "trainhook-ca"
    assert ca["usages"] == ["cert sign", "crl sign", "digital signature"]
    # ...which is long-lived and keeps its key when renewed...
    assert (ca["duration"], ca["renewBefore"]) == ("87600h", "2160h")
    assert ca["privateKey"] == {"algorithm": "ECDSA", "size": 256, "rotationPolicy": "Never"}
    # ...and the CA Issuer made from it signs the serving certificate, with a new key each time.
    (certificate,) = certificates.values()
    assert certificate["issuerRef"] == {
        "name": "trainhook-ca",
        "kind": "Issuer",
        "group": "cert-manager.io",
    }
    assert certificate["privateKey"]["rotationPolicy"] == "Always"
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


def test_serving_certificates_signed_before_and_after_a_ca_renewal_verify_against_either_ca() -> (
    None
):
    """cert-manager's renewal, played from the rendered specs: the API server may still hold the
    old CA while the webhook serves a certificate from the renewed one, and the other way round."""
    rendered = render({"certificates": {"mode": "certManager"}})
    ca_spec = rendered.named("Certificate", "trainhook-ca")["spec"]
    serving_spec = rendered.named("Certificate", "trainhook-webhook")["spec"]
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    first_ca = issue_ca(ca_spec, ca_key, start)
    renewal = first_ca.not_valid_after_utc - go_duration(ca_spec["renewBefore"])
    if ca_spec["privateKey"]["rotationPolicy"] != "Never":
        ca_key = ec.generate_private_key(ec.SECP256R1())
    renewed_ca = issue_ca(ca_spec, ca_key, renewal)
    served_before = issue_serving(serving_spec, first_ca, ca_key, renewal - HOUR)
    served_after = issue_serving(serving_spec, renewed_ca, ca_key, renewal + MINUTE)
    host = "trainhook-webhook.trainhook.svc"
    for served, bundle in ((served_before, renewed_ca), (served_after, first_ca)):
        verifier = (
            PolicyBuilder()
            .store(Store([bundle]))
            .time(renewal + 2 * MINUTE)
            .build_server_verifier(DNSName(host))
        )
        chain = verifier.verify(served, [])
        assert chain[0] == served


HOUR = datetime.timedelta(hours=1)
MINUTE = datetime.timedelta(minutes=1)


def go_duration(text: str) -> datetime.timedelta:
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    parts = re.findall(r"([0-9.]+)(ms|h|m|s)", text)
    assert "".join(n + u for n, u in parts) == text, text
    return datetime.timedelta(seconds=sum(float(n) * units[u] for n, u in parts))


def issue_ca(
    spec: dict[str, Any], key: ec.EllipticCurvePrivateKey, now: datetime.datetime
) -> x509.Certificate:
    """A self-signed CA certificate as cert-manager's selfSigned issuer makes it."""
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, spec["commonName"])])
    identifier = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + go_duration(spec["duration"]))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .add_extension(identifier, critical=False)
        .sign(key, hashes.SHA256())
    )


def issue_serving(
    spec: dict[str, Any],
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    now: datetime.datetime,
) -> x509.Certificate:
    """A serving certificate as cert-manager's CA issuer signs it (never beyond the CA)."""
    key = ec.generate_private_key(ec.SECP256R1())
    ca_identifier = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(min(now + go_duration(spec["duration"]), ca.not_valid_after_utc))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in spec["dnsNames"]]),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_identifier),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )


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
    configuration = rendered.one("MutatingWebhookConfiguration")
    # The caBundle is the given issuer's CA, which cert-manager puts in the Secret's ca.crt.
    assert configuration["metadata"]["annotations"] == {
        "cert-manager.io/inject-ca-from": "trainhook/trainhook-webhook"
    }
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
