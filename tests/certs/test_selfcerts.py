"""Self-managed certificates against kmock's Kubernetes emulator: the Secret, the files, the
webhook configuration's caBundle, renewal, CA rotation, and two replicas at once."""

from __future__ import annotations

import base64
import datetime
import os
import socket
import stat
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
from cryptography import x509

from tests.support.emulator import EmulatorThread as Emulator
from tests.support.emulator import emulator
from tests.support.waiting import eventually
from webhook.certs import material as certs
from webhook.certs.material import CertificateError, RenewalPolicy
from webhook.certs.selfmanaged import (
    SelfManagedCertificates,
    SelfManagedSettings,
    write_atomically,
)
from webhook.kube.client import Kube, api_client_for

NS = "trainhook-system"
SECRET_PATH = f"/api/v1/namespaces/{NS}/secrets/trainhook-certs"
CONFIG_PATH = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/trainhook"
DAY = datetime.timedelta(days=1)
MINUTE = datetime.timedelta(minutes=1)
POLICY = RenewalPolicy(
    ca_lifetime=60 * DAY,
    serving_lifetime=9 * DAY,
    ca_overlap=15 * DAY,
    handover=5 * MINUTE,
    backdate=datetime.timedelta(0),
)


class Clock:
    def __init__(self) -> None:
        self.now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)

    def __call__(self) -> datetime.datetime:
        return self.now


def webhook_config(*names: str) -> dict[str, Any]:
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": "trainhook"},
        "webhooks": [
            {
                "name": name,
                "clientConfig": {"service": {"name": "trainhook", "namespace": NS}},
                "admissionReviewVersions": ["v1"],
                "sideEffects": "None",
            }
            for name in names
        ],
    }


def settings(directory: Path, **overrides: Any) -> SelfManagedSettings:
    values: dict[str, Any] = {
        "namespace": NS,
        "secret": "trainhook-certs",
        "webhook_config": "trainhook",
        "service": "trainhook",
        "directory": directory,
        "policy": POLICY,
        "retry_seconds": (0.05, 0.2),
    }
    return SelfManagedSettings(**{**values, **overrides})


def secret_pem(api: Emulator, key: str) -> bytes:
    return base64.b64decode(api.read(SECRET_PATH)["data"][key])


def ca_bundles(api: Emulator) -> list[bytes]:
    config = api.read(CONFIG_PATH)
    return [base64.b64decode(w["clientConfig"].get("caBundle", "")) for w in config["webhooks"]]


def served(directory: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate((directory / "tls.crt").read_bytes())


def issuer_cn(cert: x509.Certificate) -> str:
    return cert.issuer.rfc4514_string()


@pytest.fixture
def api() -> Iterator[Emulator]:
    with emulator() as running:
        running.create(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            webhook_config("pods.trainhook.io", "workloads.trainhook.io"),
        )
        yield running


@pytest.fixture
def managers() -> Iterator[list[SelfManagedCertificates]]:
    started: list[SelfManagedCertificates] = []
    yield started
    for manager in started:
        manager.stop()


def test_first_start_creates_the_secret_writes_the_files_and_sets_every_ca_bundle(
    api: Emulator, tmp_path: Path, managers: list[SelfManagedCertificates]
) -> None:
    manager = SelfManagedCertificates(settings(tmp_path / "certs"), api.api())
    managers.append(manager)

    files = manager.start()

    secret = api.read(SECRET_PATH)
    assert secret["type"] == "kubernetes.io/tls"
    assert sorted(secret["data"]) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    assert secret["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "trainhook"
    assert Path(files.cert_file).read_bytes() == secret_pem(api, "tls.crt")
    assert Path(files.key_file).read_bytes() == secret_pem(api, "tls.key")
    assert Path(files.ca_file).read_bytes() == secret_pem(api, "ca.crt")
    assert ca_bundles(api) == [secret_pem(api, "ca.crt")] * 2
    (ca,) = certs.load_certs(secret_pem(api, "ca.crt"), "ca.crt")
    assert certs.is_issued_by(served(tmp_path / "certs"), ca)
    assert certs.names_of(served(tmp_path / "certs")).dns_names == (
        "trainhook",
        "trainhook.trainhook-system",
        "trainhook.trainhook-system.svc",
        "trainhook.trainhook-system.svc.cluster.local",
    )


def test_files_are_links_into_one_versioned_directory_and_the_key_is_private(
    api: Emulator, tmp_path: Path, managers: list[SelfManagedCertificates]
) -> None:
    manager = SelfManagedCertificates(settings(tmp_path), api.api())
    managers.append(manager)
    manager.start()

    version = os.readlink(tmp_path / "..data")
    assert {name: os.readlink(tmp_path / name) for name in ("tls.crt", "tls.key", "ca.crt")} == {
        "tls.crt": "..data/tls.crt",
        "tls.key": "..data/tls.key",
        "ca.crt": "..data/ca.crt",
    }
    assert sorted(p.name for p in (tmp_path / version).iterdir()) == [
        "ca.crt",
        "tls.crt",
        "tls.key",
    ]
    assert stat.S_IMODE((tmp_path / version / "tls.key").stat().st_mode) == 0o600


def test_a_second_replica_serves_the_certificate_already_in_the_secret(
    api: Emulator, tmp_path: Path, managers: list[SelfManagedCertificates]
) -> None:
    first = SelfManagedCertificates(settings(tmp_path / "a"), api.api())
    second = SelfManagedCertificates(settings(tmp_path / "b"), api.api())
    managers.extend([first, second])

    first.start()
    second.start()

    assert (tmp_path / "b" / "tls.crt").read_bytes() == (tmp_path / "a" / "tls.crt").read_bytes()
    assert (tmp_path / "b" / "ca.crt").read_bytes() == (tmp_path / "a" / "ca.crt").read_bytes()
    creations = [r for r in api.requests() if r.method.value == "POST" and "secrets" in r.url.path]
    assert len(creations) == 1


def secret_calls(api: Emulator, since: int = 0) -> list[tuple[str, str]]:
    return [
        (r.method.value, r.url.path) for r in api.requests()[since:] if "/secrets" in r.url.path
    ]


def once(payload: object) -> Callable[[], object]:
    """A kmock reaction that answers one request with `payload`, then steps aside."""
    used: list[bool] = []

    def react() -> object:
        if used:
            return NotImplemented
        used.append(True)
        return payload

    return react


def test_a_replica_that_loses_the_creation_race_uses_the_winners_secret(
    api: Emulator, tmp_path: Path
) -> None:
    winner = SelfManagedCertificates(settings(tmp_path / "winner"), api.api())
    winner.reconcile()
    not_found = kmock.Response(status=404, payload={"kind": "Status", "code": 404})  # type: ignore[attr-defined]
    api.run(lambda: api.handler["get", SECRET_PATH] << once(not_found))  # type: ignore[operator]
    loser = SelfManagedCertificates(settings(tmp_path / "loser"), api.api())
    seen = len(api.requests())

    loser.reconcile()

    assert secret_calls(api, seen) == [
        ("GET", SECRET_PATH),  # not there yet
        ("POST", f"/api/v1/namespaces/{NS}/secrets"),  # 409: the winner was first
        ("GET", SECRET_PATH),
    ]
    assert (tmp_path / "loser" / "tls.crt").read_bytes() == (
        tmp_path / "winner" / "tls.crt"
    ).read_bytes()


def test_of_two_replicas_renewing_at_once_only_the_first_write_counts(
    api: Emulator, tmp_path: Path
) -> None:
    clock = Clock()
    first = SelfManagedCertificates(settings(tmp_path / "a"), api.api(), clock=clock)
    second = SelfManagedCertificates(settings(tmp_path / "b"), api.api(), clock=clock)
    first.reconcile()
    second.reconcile()
    clock.now += 7 * DAY  # the serving certificate is due on both replicas
    before_renewal = api.read(SECRET_PATH)
    first.reconcile()
    # The second replica read the Secret just before the first one wrote its renewal.
    api.run(lambda: api.handler["get", SECRET_PATH] << once(before_renewal))  # type: ignore[operator]
    seen = len(api.requests())

    second.reconcile()

    assert secret_calls(api, seen) == [
        ("GET", SECRET_PATH),  # the outdated read
        ("PATCH", SECRET_PATH),  # refused: the data it tested for has changed
        ("GET", SECRET_PATH),  # nothing left to renew
    ]
    renewed = secret_pem(api, "tls.crt")
    assert renewed != base64.b64decode(before_renewal["data"]["tls.crt"])
    assert (tmp_path / "a" / "tls.crt").read_bytes() == renewed
    assert (tmp_path / "b" / "tls.crt").read_bytes() == renewed


def test_serving_certificate_is_renewed_by_the_same_ca_when_a_third_of_its_life_is_left(
    api: Emulator, tmp_path: Path
) -> None:
    clock = Clock()
    manager = SelfManagedCertificates(settings(tmp_path), api.api(), clock=clock)
    manager.reconcile()
    before = served(tmp_path)
    bundle = ca_bundles(api)

    clock.now += 6 * DAY - MINUTE
    next_check = manager.reconcile()
    unchanged = served(tmp_path)
    clock.now += MINUTE
    manager.reconcile()

    assert unchanged == before
    assert next_check == clock.now
    assert served(tmp_path) != before
    assert issuer_cn(served(tmp_path)) == issuer_cn(before)
    assert certs.expires_at(served(tmp_path)) == clock.now + 9 * DAY
    assert ca_bundles(api) == bundle
    assert (tmp_path / "tls.crt").read_bytes() == secret_pem(api, "tls.crt")


def test_ca_rotation_trusts_both_cas_before_switching_and_drops_the_old_one_when_it_expires(
    api: Emulator, tmp_path: Path
) -> None:
    clock = Clock()
    start = clock.now
    manager = SelfManagedCertificates(settings(tmp_path), api.api(), clock=clock)
    manager.reconcile()
    (old_ca,) = certs.load_certs(ca_bundles(api)[0], "caBundle")
    stages: list[tuple[int, str]] = []

    def record() -> None:
        bundle = certs.load_certs(ca_bundles(api)[0], "caBundle")
        signer = "old" if certs.is_issued_by(served(tmp_path), old_ca) else "new"
        stages.append((len(bundle), signer))

    for day in range(6, 45, 6):  # the serving certificate is renewed every six days
        clock.now = start + day * DAY
        manager.reconcile()
    for at in (45 * DAY + MINUTE, 45 * DAY + 5 * MINUTE, 45 * DAY + 7 * MINUTE, 60 * DAY):
        clock.now = start + at
        manager.reconcile()
        record()

    assert stages == [(2, "old"), (2, "old"), (2, "new"), (1, "new")]
    assert old_ca not in certs.load_certs(ca_bundles(api)[0], "caBundle")


def test_a_ca_bundle_changed_by_someone_else_is_restored_promptly(
    api: Emulator, tmp_path: Path, managers: list[SelfManagedCertificates]
) -> None:
    manager = SelfManagedCertificates(settings(tmp_path, resync_seconds=600), api.api())
    managers.append(manager)
    manager.start()
    ours = ca_bundles(api)

    api.send(
        "PATCH",
        CONFIG_PATH,
        [{"op": "replace", "path": "/webhooks/1/clientConfig/caBundle", "value": "Zm9v"}],
        "application/json-patch+json",
    )

    assert eventually(lambda: ca_bundles(api) == ours, timeout=3)


def test_a_webhook_configuration_installed_after_the_server_gets_the_bundle(
    tmp_path: Path, managers: list[SelfManagedCertificates]
) -> None:
    with emulator() as api:
        manager = SelfManagedCertificates(settings(tmp_path, resync_seconds=600), api.api())
        managers.append(manager)
        manager.start()

        api.create(
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations",
            webhook_config("pods.trainhook.io"),
        )

        assert eventually(lambda: ca_bundles(api) == [(tmp_path / "ca.crt").read_bytes()], 3)


def test_a_deleted_secret_is_recreated_with_the_certificates_in_use(
    api: Emulator, tmp_path: Path
) -> None:
    manager = SelfManagedCertificates(settings(tmp_path), api.api())
    manager.reconcile()
    in_use = (tmp_path / "tls.crt").read_bytes()

    api.delete(SECRET_PATH)
    manager.reconcile()

    assert secret_pem(api, "tls.crt") == in_use
    assert (tmp_path / "tls.crt").read_bytes() == in_use


def test_a_secret_with_unusable_contents_is_replaced(api: Emulator, tmp_path: Path) -> None:
    api.create(
        f"/api/v1/namespaces/{NS}/secrets",
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "trainhook-certs", "namespace": NS},
            "type": "kubernetes.io/tls",
            "data": {"tls.crt": base64.b64encode(b"not a certificate").decode(), "tls.key": ""},
        },
    )
    manager = SelfManagedCertificates(settings(tmp_path), api.api())

    manager.reconcile()

    assert certs.load_certs(secret_pem(api, "tls.crt"), "tls.crt")[0] == served(tmp_path)


def test_emptying_the_ca_in_the_secret_replaces_the_ca_and_serving_certificate_at_once(
    api: Emulator, tmp_path: Path
) -> None:
    manager = SelfManagedCertificates(settings(tmp_path), api.api())
    manager.reconcile()
    (old_ca,) = certs.load_certs(secret_pem(api, "ca.crt"), "ca.crt")

    api.send(
        "PATCH",
        SECRET_PATH,
        [{"op": "replace", "path": "/data/ca.crt", "value": ""},
         {"op": "replace", "path": "/data/ca.key", "value": ""}],
        "application/json-patch+json",
    )  # fmt: skip
    manager.reconcile()

    (new_ca,) = certs.load_certs(secret_pem(api, "ca.crt"), "ca.crt")
    assert new_ca != old_ca
    assert certs.is_issued_by(served(tmp_path), new_ca)
    assert ca_bundles(api) == [certs.cert_pem(new_ca)] * 2


def test_unreachable_api_at_start_fails_naming_the_secret_and_the_reason(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        api = Kube(api_client_for(kmock_free_config(port)))
        manager = SelfManagedCertificates(settings(tmp_path, startup_seconds=0.3), api)

        with pytest.raises(CertificateError) as error:
            manager.start()

    assert str(error.value).startswith(
        "cannot set up certificates from Secret trainhook-system/trainhook-certs: "
    )
    assert "refused" in str(error.value).lower()


def kmock_free_config(port: int) -> Any:
    from kubernetes import client

    return client.Configuration(host=f"http://127.0.0.1:{port}")


def test_missing_settings_are_named() -> None:
    with pytest.raises(CertificateError) as error:
        SelfManagedSettings(namespace="", secret="s", webhook_config="", service="svc")

    assert str(error.value) == "self-managed certificates need --namespace, --webhook-config"


def test_write_atomically_swaps_all_files_at_once_and_removes_the_previous_version(
    tmp_path: Path,
) -> None:
    write_atomically(tmp_path, {"a": (b"1", 0o644), "b": (b"2", 0o600)})
    first = os.readlink(tmp_path / "..data")

    changed = write_atomically(tmp_path, {"a": (b"3", 0o644), "b": (b"4", 0o600)})
    unchanged = write_atomically(tmp_path, {"a": (b"3", 0o644), "b": (b"4", 0o600)})

    assert (changed, unchanged) == (True, False)
    assert ((tmp_path / "a").read_bytes(), (tmp_path / "b").read_bytes()) == (b"3", b"4")
    assert not (tmp_path / first).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["..data", os.readlink(tmp_path / "..data"), "a", "b"]
    )


def test_write_atomically_replaces_plain_files_left_from_before(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_bytes(b"old")

    write_atomically(tmp_path, {"tls.crt": (b"new", 0o644)})

    assert os.readlink(tmp_path / "tls.crt") == "..data/tls.crt"
    assert (tmp_path / "tls.crt").read_bytes() == b"new"


def test_the_certificate_also_names_the_progress_endpoint_the_sweeper_serves_with_it(
    api: Emulator, tmp_path: Path, managers: list[SelfManagedCertificates]
) -> None:
    from webhook.server.launch import _progress_names

    names = _progress_names("https://trainhook-progress.trainhook-system.svc:8444")
    assert names == (
        "trainhook-progress.trainhook-system.svc",
        "trainhook-progress",
        "trainhook-progress.trainhook-system",
    )
    manager = SelfManagedCertificates(settings(tmp_path / "certs", extra_names=names), api.api())
    managers.append(manager)
    manager.start()
    assert certs.names_of(served(tmp_path / "certs")).dns_names == (
        "trainhook",
        "trainhook.trainhook-system",
        "trainhook.trainhook-system.svc",
        "trainhook.trainhook-system.svc.cluster.local",
        "trainhook-progress.trainhook-system.svc",
        "trainhook-progress",
        "trainhook-progress.trainhook-system",
    )
