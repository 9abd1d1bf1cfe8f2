"""Self-managed certificates: the webhook issues, renews and publishes its own TLS material.

The CA and the serving certificate live in a Secret (`--cert-secret`, in `--namespace`), which
every replica reads and any replica may renew. The trust bundle (every CA still trusted) is
kept in `webhooks[*].clientConfig.caBundle` of the MutatingWebhookConfiguration
(`--webhook-config`), and re-patched whenever someone else changes it. The serving pair is
written to a local directory the server reads, swapped in atomically on renewal, so the server
picks it up on its next connection without a restart.

Start it in the gunicorn master, before the server loads its certificate:

    from webhook.certs.selfmanaged import SelfManagedSettings, start_self_managed

    manager = start_self_managed(
        SelfManagedSettings(namespace="trainhook-system", secret="trainhook-certs",
                            webhook_config="trainhook", service="trainhook")
    )
    manager.files.cert_file, manager.files.key_file   # hand these to gunicorn
    manager.stop()                                     # when the server exits

`start_self_managed` returns once the files hold a usable pair (it raises
`webhook.certs.material.CertificateError` if that cannot be done within `startup_seconds`); renewal
and re-patching then run in a daemon thread of the calling process.

The files are laid out as Kubernetes lays out a mounted Secret: `tls.crt`, `tls.key` and
`ca.crt` are links into `..data`, itself a link to a versioned directory that is replaced
with one rename, so readers never see a certificate next to the wrong key.

RBAC: in the namespace, `get`, `create` and `patch` on the Secret; cluster-wide, `get`,
`list`, `watch` and `patch` on the MutatingWebhookConfiguration (`resourceNames` may name it).
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import logging
import os
import random
import shutil
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.certs import material as certs
from webhook.certs.material import CertificateError, Material, PemFiles, RenewalPolicy
from webhook.core.patch import escape
from webhook.kube.client import JSON_PATCH, ApiError, Kube
from webhook.kube.informer import Informer
from webhook.kube.resources import MUTATING_WEBHOOK_CONFIGURATIONS, SECRETS

log = logging.getLogger("trainhook.certs")

DEFAULT_DIRECTORY = Path("/var/run/trainhook/certs")
SECRET_KEYS = ("ca.crt", "ca.key", "tls.crt", "tls.key")
LABELS = {
    "app.kubernetes.io/name": "trainhook",
    "app.kubernetes.io/component": "webhook-certificates",
    "app.kubernetes.io/managed-by": "trainhook",
}


@dataclass(frozen=True)
class SelfManagedSettings:
    namespace: str
    secret: str
    webhook_config: str
    service: str
    directory: Path = DEFAULT_DIRECTORY
    policy: RenewalPolicy = field(default_factory=RenewalPolicy)
    loopback: bool = False  # also valid for localhost and 127.0.0.1
    # More DNS names the certificate is valid for: the sweeper's progress endpoint serves it too.
    extra_names: tuple[str, ...] = ()
    resync_seconds: float = 60.0  # longest time between two passes
    retry_seconds: tuple[float, float] = (1.0, 30.0)  # backoff after a failed pass
    startup_seconds: float = 60.0
    request_timeout: float = 10.0
    watch_seconds: int = 300

    def __post_init__(self) -> None:
        missing = [
            flag
            for flag, value in (
                ("--namespace", self.namespace),
                ("--cert-secret", self.secret),
                ("--webhook-config", self.webhook_config),
                ("--service", self.service),
            )
            if not value
        ]
        if missing:
            raise CertificateError(f"self-managed certificates need {', '.join(missing)}")


@dataclass(frozen=True)
class CertificateFiles:
    cert_file: str
    key_file: str
    ca_file: str


class _Changed(Exception):
    """Another replica changed the Secret since it was read."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class SelfManagedCertificates:
    def __init__(
        self,
        settings: SelfManagedSettings,
        kube: Kube,
        *,
        clock: Callable[[], datetime.datetime] = _now,
    ) -> None:
        self.settings = settings
        self._kube = kube
        self._clock = clock
        identity = certs.service_identity(
            settings.service, settings.namespace, loopback=settings.loopback
        )
        extra = tuple(n for n in settings.extra_names if n not in identity.dns_names)
        self._identity = dataclasses.replace(identity, dns_names=identity.dns_names + extra)
        directory = settings.directory
        self.files = CertificateFiles(
            str(directory / "tls.crt"), str(directory / "tls.key"), str(directory / "ca.crt")
        )
        self._known: Material | None = None  # the last material written to the Secret or read
        self._bundle_b64 = ""
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._webhook_watch: Informer[str] | None = None
        self._threads: list[threading.Thread] = []

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> CertificateFiles:
        """Reconcile once (retrying until `startup_seconds`), then keep reconciling."""
        deadline = time.monotonic() + self.settings.startup_seconds
        delay = self.settings.retry_seconds[0]
        while True:
            try:
                self.reconcile()
                break
            except (ApiError, CertificateError) as e:
                if time.monotonic() + delay > deadline:
                    raise CertificateError(
                        f"cannot set up certificates from Secret "
                        f"{self.settings.namespace}/{self.settings.secret}: {e}"
                    ) from None
                log.warning("certificates not ready, retrying in %.1fs: %s", delay, e)
                time.sleep(delay)
                delay = min(delay * 2, self.settings.retry_seconds[1])
        thread = threading.Thread(target=self._run, name="trainhook-certs-renew", daemon=True)
        self._threads.append(thread)
        thread.start()
        self._webhook_watch = self._watch_webhook().start(name="trainhook-certs-webhook-watch")
        return self.files

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        self._wake.set()
        deadline = time.monotonic() + timeout
        if self._webhook_watch is not None:
            self._webhook_watch.stop(timeout)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _run(self) -> None:
        delay = self.settings.retry_seconds[0]
        while not self._stop.is_set():
            try:
                next_check = self.reconcile()
                wait = (next_check - self._clock()).total_seconds()
                delay = self.settings.retry_seconds[0]
            except (ApiError, CertificateError) as e:
                log.warning("certificate pass failed, retrying in %.1fs: %s", delay, e)
                wait = delay * random.uniform(0.8, 1.2)
                delay = min(delay * 2, self.settings.retry_seconds[1])
            self._wake.wait(min(max(wait, 0.05), self.settings.resync_seconds))
            self._wake.clear()

    # --- one pass --------------------------------------------------------------------------

    def reconcile(self) -> datetime.datetime:
        """Read the Secret, renew what is due, write the files, patch the webhook config.
        Returns when the next pass is due."""
        for _ in range(5):
            secret = self._read_secret()
            material = self._material(secret)
            now = self._clock()
            renewed, plan = certs.renew(material, self._identity, now, self.settings.policy)
            try:
                if secret is None:
                    self._create_secret(renewed)
                elif plan.changes:
                    self._update_secret(secret, renewed)
            except _Changed:
                continue
            if plan.changes:
                log.info(
                    "certificates renewed",
                    extra={
                        "reasons": list(plan.reasons),
                        "serving": certs.fingerprint(renewed.serving) if renewed.serving else "",
                    },
                )
            self._known = renewed
            self._write_files(renewed)
            webhook_found = self._patch_webhook(renewed.bundle)
            next_check = certs.plan_renewal(
                renewed, self._identity, self._clock(), self.settings.policy
            ).next_check
            if not webhook_found:
                next_check = min(next_check, now + datetime.timedelta(seconds=5))
            return next_check
        raise CertificateError(
            f"Secret {self.settings.namespace}/{self.settings.secret} kept changing while it "
            "was being renewed"
        )

    def _read_secret(self) -> dict[str, Any] | None:
        try:
            return self._kube.get(
                SECRETS,
                self.settings.namespace,
                self.settings.secret,
                timeout=self.settings.request_timeout,
            )
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def _material(self, secret: Mapping[str, Any] | None) -> Material:
        if secret is None:
            # A deleted Secret is re-created from what this replica knows, so that the CA and
            # the serving certificate in use stay in use.
            return self._known or Material()
        data = secret.get("data") or {}
        try:
            pem = {key: base64.b64decode(data.get(key) or "") for key in SECRET_KEYS}
            return certs.from_pem(
                PemFiles(pem["ca.crt"], pem["ca.key"], pem["tls.crt"], pem["tls.key"])
            )
        except (CertificateError, ValueError) as e:
            log.warning(
                "Secret %s/%s holds unusable certificates, issuing new ones: %s",
                self.settings.namespace,
                self.settings.secret,
                e,
            )
            return Material()

    def _create_secret(self, material: Material) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": self.settings.secret,
                "namespace": self.settings.namespace,
                "labels": LABELS,
            },
            "type": "kubernetes.io/tls",
            "data": _secret_data(material),
        }
        try:
            self._kube.request(
                "POST", SECRETS.path(self.settings.namespace), body=body,
                timeout=self.settings.request_timeout,
            )  # fmt: skip
        except ApiError as e:
            if e.status == 409:  # another replica created it first: use theirs
                raise _Changed() from None
            raise

    def _update_secret(self, secret: Mapping[str, Any], material: Material) -> None:
        """Replace the data, on condition that nobody changed it since it was read."""
        ops: list[dict[str, Any]] = []
        version = (secret.get("metadata") or {}).get("resourceVersion")
        if version:
            ops.append({"op": "test", "path": "/metadata/resourceVersion", "value": version})
        for key, value in (secret.get("data") or {}).items():
            if key in SECRET_KEYS:
                ops.append({"op": "test", "path": f"/data/{escape(key)}", "value": value})
        ops.append({"op": "add", "path": "/data", "value": _secret_data(material)})
        try:
            self._kube.request(
                "PATCH",
                SECRETS.path(self.settings.namespace, self.settings.secret),
                body=ops,
                content_type=JSON_PATCH,
                timeout=self.settings.request_timeout,
            )
        except ApiError as e:
            # 422: a test failed (the Secret moved on since it was read); 409: a conflict;
            # 404: deleted meanwhile; 500: the patch failed otherwise. Each time, reading
            # again and deciding anew is safe: the patch only ever applies to what was read.
            if e.status in (404, 409, 422, 500):
                raise _Changed() from None
            raise

    def _patch_webhook(self, bundle: tuple[Any, ...]) -> bool:
        """Put the bundle into every webhook of the configuration; False when it is absent."""
        self._bundle_b64 = base64.b64encode(certs.bundle_pem(bundle)).decode()
        path = MUTATING_WEBHOOK_CONFIGURATIONS.path(None, self.settings.webhook_config)
        try:
            config = self._kube.request("GET", path, timeout=self.settings.request_timeout)
        except ApiError as e:
            if e.status == 404:
                log.warning(
                    "MutatingWebhookConfiguration %s not found; its caBundle will be set once "
                    "it exists",
                    self.settings.webhook_config,
                )
                return False
            raise
        ops = _bundle_ops(config, self._bundle_b64)
        if ops:
            self._kube.request(
                "PATCH", path, body=ops, content_type=JSON_PATCH,
                timeout=self.settings.request_timeout,
            )  # fmt: skip
            log.info(
                "caBundle set",
                extra={"webhook_config": self.settings.webhook_config, "cas": len(bundle)},
            )
        return True

    def _write_files(self, material: Material) -> None:
        assert material.serving is not None and material.serving_key is not None
        write_atomically(
            self.settings.directory,
            {
                "tls.crt": (certs.cert_pem(material.serving), 0o644),
                "tls.key": (certs.key_pem(material.serving_key), 0o600),
                "ca.crt": (certs.bundle_pem(material.bundle), 0o644),
            },
        )

    # --- drift of the webhook configuration -------------------------------------------------

    def _watch_webhook(self) -> Informer[str]:
        """An informer of the configuration that wakes the renewal thread whenever its
        caBundle is not ours."""
        name = self.settings.webhook_config

        def changed(key: str) -> None:
            config = watch.get("", key)
            if config is not None and _bundle_ops(config, self._bundle_b64):
                log.info("caBundle of %s changed by someone else; restoring it", name)
                self._wake.set()

        watch: Informer[str] = Informer(
            self._kube,
            MUTATING_WEBHOOK_CONFIGURATIONS,
            namespace=None,
            selector="",
            field_selector=f"metadata.name={name}",
            index=lambda obj: (obj.get("metadata") or {}).get("name"),
            on_change=changed,
            resync_seconds=self.settings.watch_seconds,
            backoff_base=self.settings.retry_seconds[0],
            backoff_cap=self.settings.retry_seconds[1],
        )
        return watch


def _bundle_ops(config: Mapping[str, Any], bundle_b64: str) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = []
    for i, webhook in enumerate(config.get("webhooks") or []):
        if (webhook.get("clientConfig") or {}).get("caBundle") != bundle_b64:
            ops.append({"op": "test", "path": f"/webhooks/{i}/name", "value": webhook.get("name")})
            ops.append(
                {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": bundle_b64}
            )
    return ops


def _secret_data(material: Material) -> dict[str, str]:
    pem = certs.to_pem(material)
    values = {
        "ca.crt": pem.ca_crt,
        "ca.key": pem.ca_key,
        "tls.crt": pem.tls_crt,
        "tls.key": pem.tls_key,
    }
    return {key: base64.b64encode(value).decode() for key, value in values.items()}


def write_atomically(directory: Path, files: Mapping[str, tuple[bytes, int]]) -> bool:
    """Publish `files` (name -> content, mode) in `directory` as one atomic change.

    Each name is a link to `..data/<name>`; `..data` links to a versioned directory and is
    replaced with one rename. Returns False when the files already hold these contents."""
    data = directory / "..data"
    if all(_read(data / name) == content for name, (content, _) in files.items()):
        return False
    directory.mkdir(parents=True, exist_ok=True)
    version = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.time_ns() % 10**9:09d}"
    version.mkdir(mode=0o755)
    for name, (content, mode) in files.items():
        certs.write_private(version / name, content, mode)
    staged = directory / "..data_tmp"
    if staged.is_symlink() or staged.exists():
        staged.unlink()
    os.symlink(version.name, staged)
    previous = os.readlink(data) if data.is_symlink() else None
    os.replace(staged, data)
    for name in files:
        link = directory / name
        if not (link.is_symlink() and os.readlink(link) == f"..data/{name}"):
            staged_link = directory / f".{name}.tmp"
            if staged_link.is_symlink() or staged_link.exists():
                staged_link.unlink()
            os.symlink(f"..data/{name}", staged_link)
            os.replace(staged_link, link)
    if previous and previous != version.name:
        shutil.rmtree(directory / previous, ignore_errors=True)
    return True


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def start_self_managed(
    settings: SelfManagedSettings, kube: Kube | None = None
) -> SelfManagedCertificates:
    """Issue or load the certificates, write the files, and keep them current in a thread."""
    manager = SelfManagedCertificates(settings, kube or Kube.from_environment())
    manager.start()
    return manager
