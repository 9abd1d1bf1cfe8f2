"""Rotation end to end: `trainhook serve` (gunicorn, TLS) serves the files that the
self-managed certificate loop renews, while a client that trusts the caBundle published in
the MutatingWebhookConfiguration (as the API server does) sends admissions back to back."""

from __future__ import annotations

import base64
import datetime
import http.client
import itertools
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from tests.support.emulator import EmulatorThread as Emulator
from tests.support.emulator import emulator
from tests.support.reviews import encoded, review
from tests.support.serving import Webhook, serving
from webhook.certs.material import RenewalPolicy, write_private
from webhook.certs.selfmanaged import SelfManagedCertificates, SelfManagedSettings

NS = "trainhook-system"
CONFIG_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/trainhook"
SECOND = datetime.timedelta(seconds=1)
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
       "spec": {"containers": [{"name": "c", "image": "busybox"}]}}  # fmt: skip


class ApiServerSide:
    """What the API server does with the webhook: follow the configuration's caBundle, and send
    admissions over one kept-alive connection and over a fresh connection each time."""

    def __init__(self, api: Emulator, webhook: Webhook, bundle_file: Path) -> None:
        self.api = api
        self.webhook = webhook
        self.bundle_file = bundle_file
        self.failures: list[str] = []
        self.served: list[str] = []  # each certificate fresh connections were served, in turn
        self.issuers: list[str] = []  # the CAs that signed them, in turn
        self.bundles: list[int] = []  # how many CAs each published caBundle held
        self.requests = 0
        self._stop = threading.Event()

    def follow_bundle(self) -> None:
        current = b""
        while not self._stop.is_set():
            encoded_bundle = self.api.read(CONFIG_PATH)["webhooks"][0]["clientConfig"]["caBundle"]
            bundle = base64.b64decode(encoded_bundle)
            if bundle != current:
                write_private(self.bundle_file, bundle, 0o644)
                current = bundle
                self.bundles.append(len(x509.load_pem_x509_certificates(bundle)))
            self._stop.wait(0.05)

    def connect(self) -> http.client.HTTPSConnection:
        context = ssl.create_default_context(cafile=str(self.bundle_file))
        return http.client.HTTPSConnection("127.0.0.1", self.webhook.port, context=context)

    def admit(self, connection: http.client.HTTPSConnection) -> None:
        try:
            status, answer, _ = self.webhook.post(encoded(review(POD)), connection=connection)
            if status != 200 or answer["response"]["allowed"] is not True:
                self.failures.append(f"{status}: {answer}")
        except (OSError, http.client.HTTPException) as error:
            self.failures.append(repr(error))
            connection.close()
        self.requests += 1

    def send(self) -> None:
        kept_alive = self.connect()
        while not self._stop.is_set():
            fresh = self.connect()
            self.admit(fresh)
            self.admit(kept_alive)
            if isinstance(fresh.sock, ssl.SSLSocket):
                der = fresh.sock.getpeercert(binary_form=True)
                assert der is not None
                cert = x509.load_der_x509_certificate(der)
                for seen, value in (
                    (self.served, cert.fingerprint(hashes.SHA256()).hex()),
                    (self.issuers, cert.issuer.rfc4514_string()),
                ):
                    if not seen or seen[-1] != value:
                        seen.append(value)
            fresh.close()
        kept_alive.close()

    @contextmanager
    def running(self) -> Iterator[ApiServerSide]:
        threads = [threading.Thread(target=t, daemon=True) for t in (self.follow_bundle, self.send)]
        threads[0].start()
        time.sleep(0.2)
        threads[1].start()
        try:
            yield self
        finally:
            self._stop.set()
            for thread in threads:
                thread.join(20)


@pytest.fixture
def api() -> Iterator[Emulator]:
    with emulator() as running:
        running.create(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": "trainhook"},
                "webhooks": [{"name": "pods.trainhook.io", "clientConfig": {}}],
            },
        )
        yield running


@contextmanager
def self_managed(api: Emulator, directory: Path, policy: RenewalPolicy) -> Iterator[None]:
    settings = SelfManagedSettings(
        namespace=NS,
        secret="trainhook-certs",
        webhook_config="trainhook",
        service="trainhook",
        directory=directory,
        policy=policy,
        loopback=True,
        resync_seconds=0.5,
        retry_seconds=(0.05, 0.2),
    )
    manager = SelfManagedCertificates(settings, api.api())
    manager.start()
    try:
        yield
    finally:
        manager.stop()


def client_loop_while_rotating(
    api: Emulator, tmp_path: Path, policy: RenewalPolicy, seconds: float
) -> ApiServerSide:
    """A 2-worker `trainhook serve` on self-managed certificates renewed by `policy`, admitting
    requests from a client that follows the caBundle, for `seconds`."""
    with (
        self_managed(api, tmp_path / "certs", policy),
        serving(tmp_path / "certs", tmp_path / "serve.log", "--workers=2") as webhook,
    ):
        client = ApiServerSide(api, webhook, tmp_path / "bundle.crt")
        with client.running():
            time.sleep(seconds)
    return client


def test_serving_certificate_renewed_every_second_and_a_half_costs_no_request(
    api: Emulator, tmp_path: Path
) -> None:
    policy = RenewalPolicy(  # renewed with 3 s of its 4.5 s left: room for a slow machine
        serving_lifetime=4.5 * SECOND,
        renew_fraction=2 / 3,
        ca_overlap=datetime.timedelta(days=30),
        handover=0.5 * SECOND,
        backdate=datetime.timedelta(0),
    )
    client = client_loop_while_rotating(api, tmp_path, policy, seconds=5)

    assert client.failures == []
    assert client.requests > 50
    assert len(client.served) >= 3  # renewed at least twice
    assert len(client.issuers) == 1  # by the same CA
    assert client.bundles == [1]


def test_ca_rotating_every_three_seconds_costs_no_request_to_a_client_that_follows_the_bundle(
    api: Emulator, tmp_path: Path
) -> None:
    """A CA lives 8 s and is joined by the next one when 5 s are left; each new CA signs the
    serving certificate 1.5 s after it entered the bundle, and leaves the bundle on expiry."""
    policy = RenewalPolicy(
        ca_lifetime=8 * SECOND,
        ca_overlap=5 * SECOND,
        serving_lifetime=60 * SECOND,
        handover=1.5 * SECOND,
        backdate=datetime.timedelta(0),
    )
    client = client_loop_while_rotating(api, tmp_path, policy, seconds=9)

    assert client.failures == []
    assert client.requests > 100
    assert len(client.issuers) >= 3  # served by at least three successive CAs
    assert len(client.bundles) >= 3
    assert min(client.bundles[1:]) >= 2  # once rotating, old and new CAs are trusted together
    assert any(b < a for a, b in itertools.pairwise(client.bundles))  # expired CAs leave
