"""`trainhook serve` settings: flags, the environment variables behind them, and bad values."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serving import ROOT
from webhook.cli.serve import add_arguments

ENVIRONMENT = {
    "TRAINHOOK_BIND": "127.0.0.1:9443",
    "TRAINHOOK_CERT_FILE": "/tls/tls.crt",
    "TRAINHOOK_KEY_FILE": "/tls/tls.key",
    "TRAINHOOK_WORKERS": "4",
    "TRAINHOOK_CLUSTER_DOMAIN": "cluster.local",
    "TRAINHOOK_COSCHEDULING_SCHEDULER_NAME": "scheduler-plugins-scheduler-v2",
    "TRAINHOOK_LOG_LEVEL": "WARNING",
    "TRAINHOOK_LOOKUP": "false",
    "TRAINHOOK_CERT_MODE": "self",
    "TRAINHOOK_CERT_SECRET": "trainhook-ca",
    "TRAINHOOK_WEBHOOK_CONFIG": "trainhook",
    "TRAINHOOK_SERVICE": "trainhook-webhook",
    "TRAINHOOK_NAMESPACE": "trainhook",
    "TRAINHOOK_SWEEPER_USERNAME": "system:serviceaccount:trainhook:trainhook-sweeper",
    "TRAINHOOK_PROGRESS_URL": "https://trainhook-progress.trainhook.svc:8444",
    "TRAINHOOK_PROGRESS_CA_FILE": "/tls/ca.crt",
    "TRAINHOOK_FABRIC_PROFILES": "/etc/trainhook/fabric-profiles/profiles.yaml",
}


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="trainhook serve")
    add_arguments(parser)
    return parser.parse_args(argv)


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENVIRONMENT:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_defaults_without_flags_or_environment(clean_environment: pytest.MonkeyPatch) -> None:
    assert vars(parse()) == {
        "bind": "0.0.0.0:8443",
        "cert_file": "certs/tls.crt",
        "key_file": "certs/tls.key",
        "workers": 2,
        "cluster_domain": "",
        "coscheduling_scheduler_name": "scheduler-plugins-scheduler",
        "log_level": "info",
        "lookup": True,
        "lookup_namespaces": None,
        "cert_mode": "files",
        "cert_secret": "",
        "webhook_config": "",
        "service": "",
        "namespace": "",
        "sweeper_username": "",
        "progress_url": "",
        "progress_ca_file": "",
        "fabric_profiles": "",
    }


def test_every_setting_comes_from_its_environment_variable(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    for name, value in ENVIRONMENT.items():
        clean_environment.setenv(name, value)

    assert vars(parse()) == {
        "bind": "127.0.0.1:9443",
        "cert_file": "/tls/tls.crt",
        "key_file": "/tls/tls.key",
        "workers": 4,
        "cluster_domain": "cluster.local",
        "coscheduling_scheduler_name": "scheduler-plugins-scheduler-v2",
        "log_level": "warning",
        "lookup": False,
        "lookup_namespaces": None,  # read from TRAINHOOK_LOOKUP_NAMESPACES when run
        "cert_mode": "self",
        "cert_secret": "trainhook-ca",
        "webhook_config": "trainhook",
        "service": "trainhook-webhook",
        "namespace": "trainhook",
        "sweeper_username": "system:serviceaccount:trainhook:trainhook-sweeper",
        "progress_url": "https://trainhook-progress.trainhook.svc:8444",
        "progress_ca_file": "/tls/ca.crt",
        "fabric_profiles": "/etc/trainhook/fabric-profiles/profiles.yaml",
    }


def test_lookup_namespaces_repeat_or_come_as_a_comma_list(
    clean_environment: pytest.MonkeyPatch,
) -> None:
    from webhook.cli.serve import _namespaces

    flags = parse("--lookup-namespace=ml", "--lookup-namespace=vision")
    assert _namespaces(flags.lookup_namespaces) == ("ml", "vision")
    clean_environment.setenv("TRAINHOOK_LOOKUP_NAMESPACES", "ml, vision")
    assert _namespaces(parse().lookup_namespaces) == ("ml", "vision")
    clean_environment.delenv("TRAINHOOK_LOOKUP_NAMESPACES")
    assert _namespaces(parse().lookup_namespaces) == ()


def test_a_flag_wins_over_its_environment_variable(clean_environment: pytest.MonkeyPatch) -> None:
    clean_environment.setenv("TRAINHOOK_WORKERS", "4")
    clean_environment.setenv("TRAINHOOK_LOOKUP", "false")

    args = parse("--workers=3", "--lookup")

    assert (args.workers, args.lookup) == (3, True)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--workers=0"], "argument --workers: '0' is not a whole number >= 1"),
        (
            ["--log-level=loud"],
            "argument --log-level: invalid value 'loud': one of debug, info, warning, error",
        ),
        (
            ["--coscheduling-scheduler-name=Coscheduler_1"],
            "argument --coscheduling-scheduler-name: invalid value 'Coscheduler_1': a scheduler "
            "name (a DNS-1123 subdomain, e.g. scheduler-plugins-scheduler)",
        ),
        (
            ["--cert-mode=vault"],
            "argument --cert-mode: invalid choice: 'vault' (choose from 'files', 'self')",
        ),
    ],
)
def test_bad_flag_is_refused_with_the_allowed_values(
    clean_environment: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    with pytest.raises(SystemExit) as stop:
        parse(*argv)

    assert stop.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"trainhook serve: error: {message}"


def test_lookup_variable_that_is_not_a_boolean_is_refused(
    clean_environment: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    clean_environment.setenv("TRAINHOOK_LOOKUP", "sometimes")

    with pytest.raises(SystemExit) as stop:
        parse()

    assert stop.value.code == 2
    assert capsys.readouterr().err == (
        "trainhook serve: TRAINHOOK_LOOKUP='sometimes' is not a boolean (true or false)\n"
    )


def test_lookup_without_an_api_server_to_read_refuses_to_start(certs: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            "--bind=127.0.0.1:0",
            f"--cert-file={certs / 'tls.crt'}",
            f"--key-file={certs / 'tls.key'}",
            "--lookup",
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "KUBECONFIG": str(tmp_path / "none")},
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert result.returncode == 2
    assert result.stderr.startswith(
        "trainhook serve: --lookup reads sibling workloads from the API server, but no API server "
        "is configured ("
    )
    assert result.stderr.endswith("; run in the cluster, set KUBECONFIG, or pass --no-lookup\n")


def test_the_progress_endpoint_needs_https_and_a_readable_pem_ca(tmp_path: Path) -> None:
    from webhook.server.launch import _SetupError, progress_endpoint

    assert progress_endpoint("", "") is None
    ca = tmp_path / "ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
    endpoint = progress_endpoint("https://p.trainhook.svc:8444", str(ca))
    assert endpoint is not None and endpoint.ca == ca.read_text()
    for url, ca_file, message in (
        (
            "http://p:8444",
            str(ca),
            "--progress-url 'http://p:8444': an https:// URL, with --progress-ca-file, is allowed",
        ),
        (
            "https://p:8444",
            str(tmp_path / "none"),
            f"--progress-ca-file {tmp_path}/none: No such file or directory",
        ),
        ("https://p:8444", str(tmp_path), f"--progress-ca-file {tmp_path}: Is a directory"),
    ):
        with pytest.raises(_SetupError) as refused:
            progress_endpoint(url, ca_file)
        assert str(refused.value) == message
