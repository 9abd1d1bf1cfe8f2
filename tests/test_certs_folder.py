"""The top-level certs/ folder: the development recipe writes there, git never takes what it
writes, and the cert-manager examples match the Service the chart makes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml
from cryptography import x509

from tests.chart.rendering import render

REPO = Path(__file__).resolve().parents[1]
CERTS = REPO / "certs"


def test_certs_generate_writes_into_certs_by_default(tmp_path: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "certs", "generate", "--service", "trainhook",
         "--namespace", "trainhook"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    written = sorted(Path(line).name for line in made.stdout.split())
    assert written == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    for name in written:
        assert (tmp_path / "certs" / name).exists()
    assert oct((tmp_path / "certs" / "tls.key").stat().st_mode & 0o777) == "0o600"


def test_git_ignores_generated_keys_and_certificates_but_not_the_folders_docs() -> None:
    generated = ["certs/ca.key", "certs/tls.key", "certs/ca.crt", "certs/tls.crt"]
    ignored = subprocess.run(
        ["git", "check-ignore", *generated], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert ignored.stdout.split() == generated
    kept = ["certs/README.md", *(f"certs/cert-manager/{p.name}" for p in CERTS.glob("*/*.yaml"))]
    not_ignored = subprocess.run(
        ["git", "check-ignore", *kept], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert not_ignored.stdout == "" and len(kept) == 3


def test_the_example_certificate_is_for_the_charts_service_and_issued_by_the_example_issuer() -> (
    None
):
    issuer = yaml.safe_load((CERTS / "cert-manager" / "cluster-issuer.yaml").read_text())
    certificate = yaml.safe_load((CERTS / "cert-manager" / "webhook-certificate.yaml").read_text())
    rendered = render(
        {
            "clusterDomain": "cluster.local",
            "certificates": {
                "mode": "certManager",
                "certManager": {"issuerRef": {"name": "trainhook-ca", "kind": "ClusterIssuer"}},
            },
        }
    )
    charts = rendered.named("Certificate", "trainhook-webhook")["spec"]
    assert certificate["spec"]["dnsNames"] == charts["dnsNames"]
    assert certificate["spec"]["issuerRef"] == charts["issuerRef"]
    assert certificate["spec"]["usages"] == charts["usages"]
    assert certificate["metadata"]["namespace"] == "trainhook"
    assert (issuer["kind"], issuer["metadata"]["name"]) == ("ClusterIssuer", "trainhook-ca")
    service = rendered.named("Service", "trainhook-webhook")["metadata"]
    assert f"{service['name']}.{service['namespace']}.svc" in certificate["spec"]["dnsNames"]


def test_the_readme_recipe_makes_a_certificate_for_the_names_it_lists(tmp_path: Path) -> None:
    readme = (CERTS / "README.md").read_text()
    recipe = "trainhook certs generate --service trainhook --namespace trainhook"
    assert recipe in readme
    subprocess.run(
        [sys.executable, "-m", "webhook.cli", *recipe.split()[1:]],
        cwd=tmp_path, check=True, capture_output=True, env={**os.environ},
    )  # fmt: skip
    served = x509.load_pem_x509_certificate((tmp_path / "certs" / "tls.crt").read_bytes())
    names = served.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    listed = [n for n in names.get_values_for_type(x509.DNSName)]
    for name in listed:
        assert f"`{name}`" in readme
