"""Rotation end to end: `trainhook serve` (gunicorn, TLS) serves the files that the
self-managed certificate loop renews, while a client that trusts the caBundle published in
the MutatingWebhookConfiguration (as the API server does) sends admissions back to back."""

from __future__ import annotations

import base64
import datetime
import itertools
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509

from tests.support.emulator import EmulatorThread as Emulator
from tests.support.emulator import emulator
from tests.support.load import AdmissionLoop
from tests.support.reviews import encoded, review
from tests.support.serving import Webhook, serving
from tests.support.waiting import eventually
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
        self.bundle_file = bundle_file
        self.admissions = AdmissionLoop(webhook, bundle_file, encoded(review(POD)))
        self.bundles: list[int] = []  # how many CAs each published caBundle held
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

    @contextmanager
    def running(self) -> Iterator[ApiServerSide]:
        follower = threading.Thread(target=self.follow_bundle, daemon=True)
        follower.start()
        try:
            eventually(self.bundle_file.exists, what="the first caBundle")
            with self.admissions.running():
                yield self
        finally:
            self._stop.set()
            follower.join(20)


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

    assert client.admissions.failures == []
    assert client.admissions.requests > 50
    assert len(client.admissions.served) >= 3  # renewed at least twice
    assert len(client.admissions.issuers) == 1  # by the same CA
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

    assert client.admissions.failures == []
    assert client.admissions.requests > 100
    assert len(client.admissions.issuers) >= 3  # served by at least three successive CAs
    assert len(client.bundles) >= 3
    assert min(client.bundles[1:]) >= 2  # once rotating, old and new CAs are trusted together
    assert any(b < a for a, b in itertools.pairwise(client.bundles))  # expired CAs leave
