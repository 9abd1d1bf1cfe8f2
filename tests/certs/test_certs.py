"""The certificate core: what is made, what is renewed when, and what the command writes."""

from __future__ import annotations

import bisect
import datetime
import socket
import ssl
import stat
import threading
from pathlib import Path

import pytest
from cryptography import x509

from webhook import cli
from webhook.certs import material as certs

T0 = datetime.datetime(2030, 1, 1, tzinfo=datetime.UTC)
DAY = datetime.timedelta(days=1)
HOUR = datetime.timedelta(hours=1)
MINUTE = datetime.timedelta(minutes=1)
POLICY = certs.RenewalPolicy(
    ca_lifetime=60 * DAY,
    serving_lifetime=9 * DAY,
    ca_overlap=15 * DAY,
    handover=5 * MINUTE,
    backdate=datetime.timedelta(0),
)
IDENTITY = certs.service_identity("trainhook", "ml")


def issued_at(now: datetime.datetime) -> certs.Material:
    material, _ = certs.renew(certs.Material(), IDENTITY, now, POLICY)
    return material


def handshake(cert_file: Path, key_file: Path, ca_file: Path, server_name: str) -> str:
    """One TLS handshake over a socket pair; returns the server name the client verified."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert_file, key_file)
    client_ctx = ssl.create_default_context(cafile=str(ca_file))
    left, right = socket.socketpair()
    errors: list[BaseException] = []

    def serve() -> None:
        try:
            with server_ctx.wrap_socket(left, server_side=True) as tls:
                tls.sendall(tls.recv(5))
        except (OSError, ssl.SSLError) as e:
            errors.append(e)

    thread = threading.Thread(target=serve)
    thread.start()
    try:
        with client_ctx.wrap_socket(right, server_hostname=server_name) as tls:
            tls.sendall(b"hello")
            assert tls.recv(5) == b"hello"
    finally:
        thread.join(5)
    assert not errors
    return server_name


def test_generate_writes_a_ca_and_a_serving_pair_with_private_keys_readable_only_by_owner(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["certs", "generate", "--out", str(tmp_path / "certs"), "--service", "trainhook",
         "--namespace", "trainhook-system"]
    )  # fmt: skip

    out = tmp_path / "certs"
    assert code == 0
    assert capsys.readouterr().out.split() == [
        str(out / name) for name in ("ca.crt", "ca.key", "tls.crt", "tls.key")
    ]
    assert stat.S_IMODE((out / "ca.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "tls.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((out / "tls.crt").stat().st_mode) == 0o644
    assert sorted(p.name for p in out.iterdir()) == ["ca.crt", "ca.key", "tls.crt", "tls.key"]


def test_generated_serving_certificate_names_the_service_localhost_and_127_0_0_1(
    tmp_path: Path,
) -> None:
    certs.generate(tmp_path, "trainhook", "trainhook-system", days=30)

    (serving,) = certs.load_certs((tmp_path / "tls.crt").read_bytes(), "tls.crt")
    (ca,) = certs.load_certs((tmp_path / "ca.crt").read_bytes(), "ca.crt")
    assert certs.names_of(serving) == certs.ServingIdentity(
        (
            "trainhook",
            "trainhook.trainhook-system",
            "trainhook.trainhook-system.svc",
            "trainhook.trainhook-system.svc.cluster.local",
            "localhost",
        ),
        ("127.0.0.1",),
    )
    assert certs.is_issued_by(serving, ca)
    assert certs.is_ca(ca) and not certs.is_ca(serving)
    life = certs.expires_at(serving) - certs.starts_at(serving)
    assert life == 30 * DAY + certs.DEFAULT_BACKDATE


@pytest.mark.parametrize("name", ["trainhook.trainhook-system.svc", "localhost"])
def test_a_client_trusting_ca_crt_completes_a_tls_handshake_with_the_generated_pair(
    tmp_path: Path, name: str
) -> None:
    certs.generate(tmp_path, "trainhook", "trainhook-system")

    verified = handshake(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt", name)

    assert verified == name


def test_a_client_rejects_the_generated_certificate_for_another_service(tmp_path: Path) -> None:
    certs.generate(tmp_path, "trainhook", "trainhook-system")

    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        handshake(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt", "other.svc")


def test_generate_refuses_a_serving_certificate_that_outlives_its_ca(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main(
        ["certs", "generate", "--out", str(tmp_path), "--service", "s", "--namespace", "n",
         "--days", "400", "--ca-days", "300"]
    )  # fmt: skip

    assert code == 2
    assert capsys.readouterr().err == (
        "trainhook certs: --days 400 exceeds --ca-days 300: "
        "a serving certificate cannot outlive its CA\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_generate_rejects_a_service_name_that_is_not_a_dns_label(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["certs", "generate", "--out", str(tmp_path), "--service", "Web_Hook",
                  "--namespace", "n"])  # fmt: skip

    assert exit_info.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "trainhook certs generate: error: argument --service: 'Web_Hook' is not a DNS label: "
        "lower-case letters, digits and '-', at most 63, starting and ending with a letter or digit"
    )


def test_generate_rejects_zero_days(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["certs", "generate", "--out", str(tmp_path), "--service", "s",
                  "--namespace", "n", "--days", "0"])  # fmt: skip

    assert capsys.readouterr().err.splitlines()[-1] == (
        "trainhook certs generate: error: argument --days: '0' is not a positive number of days"
    )


def test_nothing_at_all_gets_a_new_ca_and_a_serving_certificate_it_signed() -> None:
    plan = certs.plan_renewal(certs.Material(), IDENTITY, T0, POLICY)
    material = certs.apply_plan(certs.Material(), plan, IDENTITY, T0, POLICY)

    assert (plan.new_ca, plan.new_serving) == (True, True)
    assert plan.reasons == ("no CA key", "no serving certificate")
    assert len(material.bundle) == 1
    assert material.signing_ca == material.bundle[0]
    assert material.serving is not None
    assert certs.is_issued_by(material.serving, material.bundle[0])
    assert certs.expires_at(material.serving) == T0 + 9 * DAY


def test_fresh_material_needs_nothing_until_two_thirds_of_the_serving_life_have_passed() -> None:
    material = issued_at(T0)

    plan = certs.plan_renewal(material, IDENTITY, T0 + HOUR, POLICY)

    assert not plan.changes
    assert plan.reasons == ()
    assert plan.next_check == T0 + 6 * DAY


def test_serving_certificate_with_a_third_of_its_life_left_is_renewed_by_the_same_ca() -> None:
    material = issued_at(T0)
    now = T0 + 6 * DAY

    renewed, plan = certs.renew(material, IDENTITY, now, POLICY)

    assert (plan.new_ca, plan.new_serving, plan.drop) == (False, True, ())
    assert plan.reasons == ("serving certificate expires at 2030-01-10T00:00:00+00:00",)
    assert renewed.bundle == material.bundle
    assert renewed.serving is not None and renewed.serving != material.serving
    assert certs.is_issued_by(renewed.serving, material.bundle[0])
    assert certs.expires_at(renewed.serving) == now + 9 * DAY


def test_serving_certificate_never_outlives_the_ca_that_signs_it() -> None:
    material = issued_at(T0)
    now = T0 + 44 * DAY  # the CA has 16 days left: not yet in its overlap window

    renewed, plan = certs.renew(
        certs.Material(material.bundle, material.ca_key), IDENTITY, now, POLICY
    )

    assert plan.new_serving and not plan.new_ca
    assert renewed.serving is not None
    assert certs.expires_at(renewed.serving) == now + 9 * DAY
    renewed, _ = certs.renew(
        certs.Material(material.bundle, material.ca_key), IDENTITY, T0 + 55 * DAY - HOUR, POLICY
    )
    assert renewed.signing_ca != material.bundle[0]  # the CA itself was due


def test_ca_in_its_overlap_window_is_joined_by_a_new_ca_while_the_serving_certificate_stays() -> (
    None
):
    material = issued_at(T0)
    material, _ = certs.renew(material, IDENTITY, T0 + 42 * DAY, POLICY)  # serving renewed
    now = T0 + 45 * DAY + MINUTE  # the CA has less than 15 days left

    rotated, plan = certs.renew(material, IDENTITY, now, POLICY)

    assert (plan.new_ca, plan.new_serving) == (True, False)
    assert plan.reasons == ("CA expires at 2030-03-02T00:00:00+00:00",)
    assert plan.next_check == now + 5 * MINUTE
    assert len(rotated.bundle) == 2
    assert rotated.bundle[1] == material.bundle[0]
    assert rotated.signing_ca == rotated.bundle[0]
    assert rotated.serving == material.serving


def test_new_ca_signs_the_serving_certificate_once_it_has_been_trusted_for_the_handover_time() -> (
    None
):
    material = issued_at(T0)
    material, _ = certs.renew(material, IDENTITY, T0 + 42 * DAY, POLICY)
    rotated, _ = certs.renew(material, IDENTITY, T0 + 45 * DAY + MINUTE, POLICY)

    waiting = certs.plan_renewal(rotated, IDENTITY, T0 + 45 * DAY + 5 * MINUTE, POLICY)
    handed_over, plan = certs.renew(rotated, IDENTITY, T0 + 45 * DAY + 6 * MINUTE, POLICY)

    assert not waiting.changes
    assert waiting.next_check == T0 + 45 * DAY + 6 * MINUTE
    assert (plan.new_ca, plan.new_serving) == (False, True)
    assert plan.reasons == ("a new CA took over signing",)
    assert handed_over.serving is not None
    assert certs.is_issued_by(handed_over.serving, rotated.bundle[0])
    assert handed_over.bundle == rotated.bundle  # the old CA stays trusted


def test_old_ca_leaves_the_bundle_when_it_expires() -> None:
    material = issued_at(T0)
    rotated, _ = certs.renew(material, IDENTITY, T0 + 45 * DAY + MINUTE, POLICY)
    handed_over, _ = certs.renew(rotated, IDENTITY, T0 + 45 * DAY + 6 * MINUTE, POLICY)

    before = certs.plan_renewal(handed_over, IDENTITY, T0 + 60 * DAY - MINUTE, POLICY)
    pruned, plan = certs.renew(handed_over, IDENTITY, T0 + 60 * DAY, POLICY)

    assert before.drop == ()
    assert plan.drop == (material.bundle[0],)
    assert plan.reasons[-1] == "1 expired or repeated CA certificate(s) leave the bundle"
    assert pruned.bundle == (rotated.bundle[0],)


def test_serving_certificate_missing_a_name_is_replaced_at_once() -> None:
    material = issued_at(T0)
    renamed = certs.service_identity("trainhook-v2", "ml")

    plan = certs.plan_renewal(material, renamed, T0 + HOUR, POLICY)

    assert (plan.new_ca, plan.new_serving) == (False, True)
    assert plan.reasons == (
        "serving certificate lacks trainhook-v2, trainhook-v2.ml, trainhook-v2.ml.svc, "
        "trainhook-v2.ml.svc.cluster.local",
    )


def test_serving_key_that_does_not_match_the_certificate_is_replaced() -> None:
    material = issued_at(T0)
    other = issued_at(T0)

    plan = certs.plan_renewal(
        certs.Material(material.bundle, material.ca_key, material.serving, other.serving_key),
        IDENTITY,
        T0 + HOUR,
        POLICY,
    )

    assert plan.new_serving and not plan.new_ca
    assert plan.reasons == ("serving certificate and key do not match",)


def test_ca_key_from_another_ca_gets_a_new_ca_and_an_immediate_serving_certificate() -> None:
    material = issued_at(T0)
    stranger = issued_at(T0)

    renewed, plan = certs.renew(
        certs.Material(material.bundle, stranger.ca_key, material.serving, material.serving_key),
        IDENTITY,
        T0 + HOUR,
        POLICY,
    )

    assert plan.reasons[0] == "CA key matches no CA"
    assert plan.new_ca
    assert not plan.new_serving  # the serving certificate is still signed by a trusted CA
    assert renewed.bundle[1] == material.bundle[0]


def test_expired_serving_certificate_is_replaced_at_once_even_by_a_brand_new_ca() -> None:
    material = issued_at(T0)
    long_after = T0 + 59 * DAY  # everything ran out while the server was down

    renewed, plan = certs.renew(material, IDENTITY, long_after, POLICY)

    assert (plan.new_ca, plan.new_serving) == (True, True)
    assert renewed.serving is not None
    assert certs.is_issued_by(renewed.serving, renewed.bundle[0])


def test_trust_bundle_keeps_unexpired_cas_once_each_newest_first() -> None:
    older = certs.make_ca(T0, 10 * DAY, backdate=datetime.timedelta(0))
    newer = certs.make_ca(T0 + DAY, 10 * DAY, backdate=datetime.timedelta(0))
    expired = certs.make_ca(T0 - 20 * DAY, 10 * DAY, backdate=datetime.timedelta(0))
    leaf = certs.make_serving(older, IDENTITY, T0, DAY)

    bundle = certs.trust_bundle(
        [older.cert, expired.cert, newer.cert, older.cert, leaf.cert], T0 + 2 * DAY
    )

    assert bundle == (newer.cert, older.cert)


def test_policy_with_an_overlap_longer_than_the_ca_life_is_rejected() -> None:
    with pytest.raises(ValueError) as error:
        certs.RenewalPolicy(ca_lifetime=10 * DAY, ca_overlap=20 * DAY)

    assert str(error.value) == (
        "CA lifetimes: need handover (0:05:00) < ca_overlap (20 days, 0:00:00) "
        "< ca_lifetime (10 days, 0:00:00)"
    )


def test_pem_round_trip_keeps_every_part() -> None:
    material = issued_at(T0)

    again = certs.from_pem(certs.to_pem(material))

    assert again.bundle == material.bundle
    assert again.serving == material.serving
    assert certs.to_pem(again) == certs.to_pem(material)


def test_pem_that_is_not_a_key_is_reported_by_file_name() -> None:
    with pytest.raises(certs.CertificateError) as error:
        certs.load_key(b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n", "tls.key")

    assert str(error.value).startswith("tls.key: not an unencrypted PEM private key (")


def test_a_year_of_renewal_passes_never_serves_a_certificate_clients_do_not_trust() -> None:
    """Passes run a minute after every change, at each planned check and at least every six
    hours. Clients see the bundle published one handover earlier; every served certificate
    must verify against it, be within its validity and carry the service names."""
    published: list[tuple[datetime.datetime, tuple[x509.Certificate, ...]]] = []
    material = certs.Material()
    cas_seen: set[str] = set()
    now = T0
    while now < T0 + 365 * DAY:
        material, plan = certs.renew(material, IDENTITY, now, POLICY)
        published.append((now, material.bundle))
        lagging = bisect.bisect_right([at for at, _ in published[-20:]], now - POLICY.handover)
        seen_by_clients = published[-20:][lagging - 1][1] if lagging else published[0][1]
        serving = material.serving
        assert serving is not None
        assert certs.starts_at(serving) <= now < certs.expires_at(serving)
        assert any(certs.is_issued_by(serving, ca) for ca in seen_by_clients)
        assert set(IDENTITY.dns_names) <= set(certs.names_of(serving).dns_names)
        cas_seen.update(certs.fingerprint(ca) for ca in material.bundle)
        now += MINUTE if plan.changes else min(6 * HOUR, max(plan.next_check - now, MINUTE))

    assert len(cas_seen) == 9  # a CA on days 0, 45, 90, ... 360
