"""Starting, rotating certificates and stopping: what happens around the requests."""

from __future__ import annotations

import base64
import datetime
import http.client
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes

from tests.server.test_review import labelled_pod
from tests.support.emulator import emulator, kubeconfig
from tests.support.load import AdmissionLoop
from tests.support.reviews import encoded, review
from tests.support.serving import ROOT, serving
from webhook.certs.material import (
    Issued,
    bundle_pem,
    cert_pem,
    generate,
    key_pem,
    load_certs,
    load_key,
    make_ca,
    make_serving,
    service_identity,
    write_private,
)

ROTATION_SECONDS = 20  # an upper bound on waiting; the loop ends as soon as it sees the change


def ca_of(directory: Path) -> Issued:
    cert = load_certs((directory / "ca.crt").read_bytes(), "ca.crt")[0]
    key = load_key((directory / "ca.key").read_bytes(), "ca.key")
    assert key is not None
    return Issued(cert, key)


def new_serving(ca: Issued) -> Issued:
    now = datetime.datetime.now(datetime.UTC)
    return make_serving(ca, service_identity("trainhook", "trainhook-system", loopback=True), now)


def fingerprint(der: bytes | None) -> str:
    assert der is not None
    from cryptography import x509

    return x509.load_der_x509_certificate(der).fingerprint(hashes.SHA256()).hex()


def install(directory: Path, serving_pair: Issued, *, key_too: bool = True) -> str:
    """Replace the serving pair the way the certificate loop does: each file atomically."""
    write_private(directory / "tls.crt", cert_pem(serving_pair.cert), 0o644)
    if key_too:
        write_private(directory / "tls.key", key_pem(serving_pair.key), 0o600)
    return serving_pair.cert.fingerprint(hashes.SHA256()).hex()


@pytest.fixture
def own_certs(tmp_path: Path) -> Path:
    directory = tmp_path / "certs"
    generate(directory, "trainhook", "trainhook-system")
    return directory


def test_swapped_serving_certificate_is_served_without_restart_or_a_failed_request(
    own_certs: Path, tmp_path: Path
) -> None:
    with serving(own_certs, tmp_path / "serve.log", "--workers=2") as webhook:
        old = fingerprint_of_file(own_certs / "tls.crt")
        with AdmissionLoop(
            webhook, own_certs / "ca.crt", encoded(review(labelled_pod()))
        ).running() as loop:
            loop.settle()
            replacement = new_serving(ca_of(own_certs))
            new = install(own_certs, replacement, key_too=False)
            loop.settle()  # the new certificate next to the old key: still the old pair
            before_key = list(loop.seen)
            write_private(own_certs / "tls.key", key_pem(replacement.key), 0o600)
            loop.wait_for(new)
            loop.settle()
        metrics = webhook.get("/metrics")[1]
        pid = webhook.process.pid

    assert loop.failures == []
    assert set(before_key) == {old}
    assert loop.seen[-1] == new
    assert loop.requests > 60
    assert 'trainhook_certificate_reloads_total{result="loaded"}' in metrics
    assert pid == webhook.process.pid  # the same server throughout


def test_certificate_from_a_new_ca_is_served_without_a_failed_request_while_both_are_trusted(
    own_certs: Path, tmp_path: Path
) -> None:
    old_ca = ca_of(own_certs)
    new_ca = make_ca(datetime.datetime.now(datetime.UTC))
    bundle = tmp_path / "bundle.crt"
    bundle.write_bytes(bundle_pem([new_ca.cert, old_ca.cert]))  # the caBundle during the overlap

    with (
        serving(own_certs, tmp_path / "serve.log", "--workers=2") as webhook,
        AdmissionLoop(webhook, bundle, encoded(review(labelled_pod()))).running() as loop,
    ):
        loop.settle()
        new = install(own_certs, new_serving(new_ca))
        loop.wait_for(new)
        loop.settle()

    assert loop.failures == []
    assert loop.seen[-1] == new


def test_sigterm_lets_an_in_flight_admission_finish_then_exits_cleanly(
    certs: Path, tmp_path: Path
) -> None:
    body = encoded(review(labelled_pod()))
    head = (
        "POST /mutate?timeout=10s HTTP/1.1\r\nHost: trainhook.trainhook-system.svc\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()

    with serving(certs, tmp_path / "serve.log", "--workers=1") as webhook:
        raw = socket.create_connection(("127.0.0.1", webhook.port))
        client = webhook.tls().wrap_socket(raw, server_hostname="127.0.0.1")
        client.sendall(head + body[:100])
        time.sleep(0.5)  # the worker is reading the body now
        webhook.process.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        client.sendall(body[100:])
        response = http.client.HTTPResponse(client)
        response.begin()
        answer = response.read()
        client.close()
        exit_code = webhook.process.wait(timeout=30)

    assert response.status == 200
    assert b'"allowed":true' in answer
    assert exit_code == 0


def test_serve_refuses_to_start_without_a_usable_certificate(tmp_path: Path) -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            "--bind=127.0.0.1:0",
            f"--cert-file={tmp_path / 'tls.crt'}",
            f"--key-file={tmp_path / 'tls.key'}",
            "--no-lookup",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert result.returncode == 2
    assert result.stderr == (
        f"trainhook serve: cannot load the serving certificate: {tmp_path / 'tls.crt'}: "
        "No such file or directory\n"
    )


def fingerprint_of_file(path: Path) -> str:
    return load_certs(path.read_bytes(), path.name)[0].fingerprint(hashes.SHA256()).hex()


def test_self_managed_mode_issues_a_certificate_publishes_its_ca_and_serves_with_it(
    tmp_path: Path,
) -> None:
    config_path = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
    with emulator() as api:
        api.create(
            config_path,
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "trainhook"},
                "webhooks": [{"name": "pods.trainhook.io", "clientConfig": {}}],
            },
        )
        config = kubeconfig(tmp_path / "kubeconfig", api.url)
        with serving(
            tmp_path / "certs",
            tmp_path / "serve.log",
            "--cert-mode=self",
            "--cert-secret=trainhook-certs",
            "--webhook-config=trainhook",
            "--service=trainhook",
            "--namespace=trainhook-system",
            env={"KUBECONFIG": str(config)},
            server_name="trainhook.trainhook-system.svc",  # the name the API server checks
        ) as webhook:
            published = api.read(f"{config_path}/trainhook")["webhooks"][0]["clientConfig"]
            bundle = tmp_path / "bundle.crt"
            bundle.write_bytes(base64.b64decode(published["caBundle"]))
            status, answer, _ = webhook.post(
                encoded(review(labelled_pod())), connection=webhook.connect(ca_file=bundle)
            )
        secret = api.read("/api/v1/namespaces/trainhook-system/secrets/trainhook-certs")

    assert status == 200
    assert answer["response"]["patchType"] == "JSONPatch"
    assert base64.b64decode(secret["data"]["ca.crt"]) == bundle.read_bytes()


def test_self_managed_mode_without_its_settings_refuses_to_start(tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", "http://127.0.0.1:1")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "webhook.cli",
            "serve",
            f"--cert-file={tmp_path / 'tls.crt'}",
            f"--key-file={tmp_path / 'tls.key'}",
            "--no-lookup",
            "--cert-mode=self",
            "--namespace=trainhook-system",
        ],
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=30,
    )

    assert result.returncode == 2
    assert result.stderr == (
        "trainhook serve: cannot set up self-managed certificates: "
        "self-managed certificates need --cert-secret, --webhook-config, --service\n"
    )
