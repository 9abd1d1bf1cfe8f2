"""Certificates for the admission server: a private CA, serving certificates it signs, renewal.

Everything here works on values: certificates, keys and a clock reading go in, certificates,
PEM bytes and renewal decisions come out. Reading and writing Secrets and files is done by
`webhook.certs.selfmanaged` (in the cluster) and by `trainhook certs generate` (for development).

Keys are ECDSA P-256 in PKCS#8 PEM; both the API server and Python's ssl module accept them.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey

DEFAULT_CA_LIFETIME = datetime.timedelta(days=3650)
DEFAULT_SERVING_LIFETIME = datetime.timedelta(days=365)
DEFAULT_CA_OVERLAP = datetime.timedelta(days=90)
DEFAULT_HANDOVER = datetime.timedelta(minutes=5)
DEFAULT_BACKDATE = datetime.timedelta(minutes=5)
LOOPBACK_NAMES = ("localhost",)
LOOPBACK_ADDRESSES = ("127.0.0.1",)


class CertificateError(Exception):
    """Certificate material that cannot be used; the message says which and why."""


@dataclass(frozen=True)
class Issued:
    """A certificate and its private key."""

    cert: x509.Certificate
    key: PrivateKey


@dataclass(frozen=True)
class ServingIdentity:
    """The names a serving certificate must carry."""

    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...] = ()


@dataclass(frozen=True)
class RenewalPolicy:
    """How long certificates live and when they are replaced.

    * A serving certificate is renewed when less than `renew_fraction` of its life remains.
    * The CA is renewed when less than `ca_overlap` of its life remains; the old CA stays in the
      trust bundle until it expires, so clients that trust the bundle keep trusting both.
    * A new CA signs the serving certificate only after it has been in the bundle for
      `handover`, time for the bundle to reach the webhook configuration and every replica.
    * `backdate` moves each certificate's start back to absorb clock skew between machines.
    """

    ca_lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME
    serving_lifetime: datetime.timedelta = DEFAULT_SERVING_LIFETIME
    ca_overlap: datetime.timedelta = DEFAULT_CA_OVERLAP
    handover: datetime.timedelta = DEFAULT_HANDOVER
    backdate: datetime.timedelta = DEFAULT_BACKDATE
    renew_fraction: float = 1 / 3

    def __post_init__(self) -> None:
        if not 0 < self.renew_fraction < 1:
            raise ValueError(f"renew_fraction: {self.renew_fraction} is not between 0 and 1")
        if self.serving_lifetime <= datetime.timedelta(0):
            raise ValueError("serving_lifetime: must be positive")
        if not self.handover < self.ca_overlap < self.ca_lifetime:
            raise ValueError(
                f"CA lifetimes: need handover ({self.handover}) < ca_overlap "
                f"({self.ca_overlap}) < ca_lifetime ({self.ca_lifetime})"
            )


@dataclass(frozen=True)
class Material:
    """Everything the admission server needs: the trust bundle, the signing CA key, the
    serving certificate and its key. Any part may be missing before the first issue."""

    bundle: tuple[x509.Certificate, ...] = ()
    ca_key: PrivateKey | None = None
    serving: x509.Certificate | None = None
    serving_key: PrivateKey | None = None

    @property
    def signing_ca(self) -> x509.Certificate | None:
        """The CA certificate in the bundle that `ca_key` belongs to."""
        if self.ca_key is None:
            return None
        for cert in self.bundle:
            if same_public_key(cert, self.ca_key):
                return cert
        return None


@dataclass(frozen=True)
class Plan:
    """What a renewal pass does. `next_check` is the earliest time a decision can change."""

    new_ca: bool
    new_serving: bool
    drop: tuple[x509.Certificate, ...]
    reasons: tuple[str, ...]
    next_check: datetime.datetime

    @property
    def changes(self) -> bool:
        return self.new_ca or self.new_serving or bool(self.drop)


@dataclass(frozen=True)
class PemFiles:
    """Material as the four PEM documents written to disk and into the Secret."""

    ca_crt: bytes
    ca_key: bytes
    tls_crt: bytes
    tls_key: bytes


# --- making certificates -------------------------------------------------------------------


def new_key() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def make_ca(
    now: datetime.datetime,
    lifetime: datetime.timedelta = DEFAULT_CA_LIFETIME,
    *,
    backdate: datetime.timedelta = DEFAULT_BACKDATE,
    name: str = "trainhook-ca",
) -> Issued:
    """A self-signed CA. Its common name carries the issue time, so that successive CAs have
    distinct subjects and verifiers never confuse an old CA with its successor."""
    key = new_key()
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name}@{int(now.timestamp())}")])
    ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - backdate)
        .not_valid_after(now + lifetime)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(ski, critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False
        )
        .sign(key, hashes.SHA256())
    )
    return Issued(cert, key)


def service_identity(service: str, namespace: str, *, loopback: bool = False) -> ServingIdentity:
    """The names the API server uses to reach `service` in `namespace`; with `loopback`, also
    localhost and 127.0.0.1 for a server run on a workstation."""
    base = f"{service}.{namespace}"
    names = (service, base, f"{base}.svc", f"{base}.svc.cluster.local")
    if loopback:
        return ServingIdentity(names + LOOPBACK_NAMES, LOOPBACK_ADDRESSES)
    return ServingIdentity(names)


def make_serving(
    ca: Issued,
    identity: ServingIdentity,
    now: datetime.datetime,
    lifetime: datetime.timedelta = DEFAULT_SERVING_LIFETIME,
    *,
    backdate: datetime.timedelta = DEFAULT_BACKDATE,
) -> Issued:
    """A TLS server certificate for `identity`, signed by `ca`, never outliving the CA."""
    if not identity.dns_names:
        raise CertificateError("a serving certificate needs at least one DNS name")
    key = new_key()
    alt_names: list[x509.GeneralName] = [x509.DNSName(n) for n in identity.dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(a)) for a in identity.ip_addresses]
    not_after = min(now + lifetime, ca.cert.not_valid_after_utc)
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.dns_names[0])]))
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(max(now - backdate, ca.cert.not_valid_before_utc))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False
        )
        .sign(ca.key, hashes.SHA256())
    )
    return Issued(cert, key)


# --- reading certificates ------------------------------------------------------------------


def expires_at(cert: x509.Certificate) -> datetime.datetime:
    return cert.not_valid_after_utc


def starts_at(cert: x509.Certificate) -> datetime.datetime:
    return cert.not_valid_before_utc


def names_of(cert: x509.Certificate) -> ServingIdentity:
    """The DNS names and IP addresses a certificate is valid for."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ServingIdentity(())
    return ServingIdentity(
        tuple(san.get_values_for_type(x509.DNSName)),
        tuple(str(a) for a in san.get_values_for_type(x509.IPAddress)),
    )


def is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


def is_issued_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    """True when `ca` signed `cert`."""
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def same_public_key(cert: x509.Certificate, key: PrivateKey) -> bool:
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    encoding = serialization.Encoding.DER
    return cert.public_key().public_bytes(encoding, public) == key.public_key().public_bytes(
        encoding, public
    )


def fingerprint(cert: x509.Certificate) -> str:
    """SHA-256 fingerprint, hex, as shown in logs."""
    return cert.fingerprint(hashes.SHA256()).hex()


# --- PEM -----------------------------------------------------------------------------------


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def bundle_pem(certs: Iterable[x509.Certificate]) -> bytes:
    """Concatenated PEM certificates: the form of a `caBundle` and of a `ca.crt` file."""
    return b"".join(cert_pem(c) for c in certs)


def load_certs(pem: bytes, what: str) -> tuple[x509.Certificate, ...]:
    """Every certificate in a PEM document; `what` names the document in errors."""
    if not pem.strip():
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(pem))
    except ValueError as e:
        raise CertificateError(f"{what}: not a PEM certificate list ({e})") from None


def load_key(pem: bytes, what: str) -> PrivateKey | None:
    """The ECDSA private key in a PEM document, None when the document is empty."""
    if not pem.strip():
        return None
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as e:
        raise CertificateError(f"{what}: not an unencrypted PEM private key ({e})") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise CertificateError(f"{what}: {type(key).__name__} is not supported, use ECDSA")
    return key


def to_pem(material: Material) -> PemFiles:
    return PemFiles(
        ca_crt=bundle_pem(material.bundle),
        ca_key=key_pem(material.ca_key) if material.ca_key else b"",
        tls_crt=cert_pem(material.serving) if material.serving else b"",
        tls_key=key_pem(material.serving_key) if material.serving_key else b"",
    )


def from_pem(files: PemFiles) -> Material:
    """Material from PEM documents; parts that are missing or empty stay None."""
    serving = load_certs(files.tls_crt, "tls.crt")
    return Material(
        bundle=load_certs(files.ca_crt, "ca.crt"),
        ca_key=load_key(files.ca_key, "ca.key"),
        serving=serving[0] if serving else None,
        serving_key=load_key(files.tls_key, "tls.key"),
    )


# --- renewal -------------------------------------------------------------------------------


def trust_bundle(
    cas: Iterable[x509.Certificate], now: datetime.datetime
) -> tuple[x509.Certificate, ...]:
    """The CAs still worth trusting, newest first: unexpired CA certificates, each once."""
    seen: set[bytes] = set()
    kept: list[x509.Certificate] = []
    for cert in cas:
        key = cert.fingerprint(hashes.SHA256())
        if key in seen or not is_ca(cert) or expires_at(cert) <= now:
            continue
        seen.add(key)
        kept.append(cert)
    return tuple(sorted(kept, key=starts_at, reverse=True))


def _renewal_time(cert: x509.Certificate, fraction: float) -> datetime.datetime:
    life = expires_at(cert) - starts_at(cert)
    return expires_at(cert) - life * fraction


def _serving_problem(
    material: Material, identity: ServingIdentity, now: datetime.datetime, policy: RenewalPolicy
) -> str | None:
    """Why the current serving certificate cannot stay in use, or None when it can."""
    serving, key = material.serving, material.serving_key
    if serving is None or key is None:
        return "no serving certificate"
    if not same_public_key(serving, key):
        return "serving certificate and key do not match"
    if expires_at(serving) - now < policy.handover:
        return "serving certificate expires within the handover time"
    have = names_of(serving)
    missing = (set(identity.dns_names) - set(have.dns_names)) | (
        set(identity.ip_addresses) - set(have.ip_addresses)
    )
    if missing:
        return "serving certificate lacks " + ", ".join(sorted(missing))
    trusted = trust_bundle(material.bundle, now)
    if not any(is_issued_by(serving, ca) for ca in trusted):
        return "serving certificate is not signed by a trusted CA"
    return None


def plan_renewal(
    material: Material,
    identity: ServingIdentity,
    now: datetime.datetime,
    policy: RenewalPolicy,
) -> Plan:
    """Decide what to renew; generates nothing.

    The CA is renewed when it is missing, unusable, or within `policy.ca_overlap` of its expiry.
    The serving certificate is renewed when it is missing or unusable (immediately, by whichever
    CA signs), when less than `policy.renew_fraction` of its life remains, or when the signing
    CA changed and the new one has been trusted for `policy.handover`.
    CAs leave the bundle when they expire.
    """
    reasons: list[str] = []
    checks: list[datetime.datetime] = []
    signing = material.signing_ca

    new_ca = False
    if signing is None:
        new_ca = True
        reasons.append("no CA key" if material.ca_key is None else "CA key matches no CA")
    elif not is_ca(signing):
        new_ca = True
        reasons.append("signing certificate is not a CA")
    elif expires_at(signing) - now < policy.ca_overlap:
        new_ca = True
        reasons.append(f"CA expires at {expires_at(signing).isoformat()}")
    else:
        checks.append(expires_at(signing) - policy.ca_overlap)

    problem = _serving_problem(material, identity, now, policy)
    new_serving = False
    if problem is not None:
        new_serving = True
        reasons.append(problem)
    elif not new_ca:
        assert signing is not None and material.serving is not None
        renew_at = _renewal_time(material.serving, policy.renew_fraction)
        handover_at = starts_at(signing) + policy.backdate + policy.handover
        if not is_issued_by(material.serving, signing):
            if now >= handover_at:
                new_serving = True
                reasons.append("a new CA took over signing")
            else:
                checks.append(handover_at)
        elif now >= renew_at:
            new_serving = True
            reasons.append(
                f"serving certificate expires at {expires_at(material.serving).isoformat()}"
            )
        else:
            checks.append(renew_at)
    if new_ca and not new_serving:
        checks.append(now + policy.handover)

    kept = trust_bundle(material.bundle, now)
    drop = tuple(c for c in material.bundle if c not in kept)
    if drop:
        reasons.append(f"{len(drop)} expired or repeated CA certificate(s) leave the bundle")
    checks += [expires_at(c) for c in kept]
    next_check = min(checks, default=now + policy.handover)
    return Plan(new_ca, new_serving, drop, tuple(reasons), max(next_check, now))


def apply_plan(
    material: Material,
    plan: Plan,
    identity: ServingIdentity,
    now: datetime.datetime,
    policy: RenewalPolicy,
) -> Material:
    """Carry out `plan`: make the CA and serving certificate it asks for, prune the bundle."""
    bundle = trust_bundle(material.bundle, now)
    result = replace(material, bundle=bundle)
    if plan.new_ca:
        ca = make_ca(now, policy.ca_lifetime, backdate=policy.backdate)
        result = replace(result, bundle=(ca.cert, *bundle), ca_key=ca.key)
    if plan.new_serving:
        signing = result.signing_ca
        assert signing is not None and result.ca_key is not None
        issued = make_serving(
            Issued(signing, result.ca_key),
            identity,
            now,
            policy.serving_lifetime,
            backdate=policy.backdate,
        )
        result = replace(result, serving=issued.cert, serving_key=issued.key)
    return result


def renew(
    material: Material,
    identity: ServingIdentity,
    now: datetime.datetime,
    policy: RenewalPolicy,
) -> tuple[Material, Plan]:
    plan = plan_renewal(material, identity, now, policy)
    if not plan.changes:
        return material, plan
    return apply_plan(material, plan, identity, now, policy), plan


# --- `trainhook certs` ---------------------------------------------------------------------


def write_private(path: Path, data: bytes, mode: int) -> None:
    """Write `data` to `path` atomically with permissions `mode` from the first byte on."""
    tmp = path.with_name(f".{path.name}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def generate(
    out: Path,
    service: str,
    namespace: str,
    *,
    days: int = 365,
    ca_days: int = 3650,
    now: datetime.datetime | None = None,
) -> Sequence[Path]:
    """Write ca.crt, ca.key, tls.crt and tls.key for `service` in `namespace` into `out`."""
    now = now or datetime.datetime.now(datetime.UTC)
    ca = make_ca(now, datetime.timedelta(days=ca_days))
    identity = service_identity(service, namespace, loopback=True)
    serving = make_serving(ca, identity, now, datetime.timedelta(days=days))
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "ca.crt": (cert_pem(ca.cert), 0o644),
        "ca.key": (key_pem(ca.key), 0o600),
        "tls.crt": (cert_pem(serving.cert), 0o644),
        "tls.key": (key_pem(serving.key), 0o600),
    }
    for name, (data, mode) in files.items():
        write_private(out / name, data, mode)
    return [out / name for name in files]
