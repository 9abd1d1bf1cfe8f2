"""Running the admission webhook under gunicorn, with TLS, from settings the CLI parsed."""

from __future__ import annotations

import logging.config
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flask import Flask

    from webhook.core.fabrics.schema import Profile
    from webhook.core.job.progress import ProgressEndpoint

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


@dataclass(frozen=True)
class ServeSettings:
    bind: str
    cert_file: str
    key_file: str
    workers: int
    cluster_domain: str
    coscheduling_scheduler: str
    log_level: str
    lookup: bool
    cert_mode: str
    cert_secret: str
    webhook_config: str
    service: str
    namespace: str
    lookup_namespaces: tuple[str, ...] = ()  # empty: every namespace
    sweeper_username: str = ""
    progress_url: str = ""  # the sweeper's progress endpoint; "" when it serves none
    progress_ca_file: str = ""  # the CA pods trust it with (PEM)
    fabric_profiles: str = ""  # the cluster's fabric profiles (YAML); "" for the reference ones


def serve(settings: ServeSettings) -> int:
    """Run the webhook under gunicorn until it stops; the exit code."""
    from webhook.server.logs import logging_config

    # JSON lines from the start: setting up certificates logs before gunicorn configures logging.
    logging.config.dictConfig(logging_config(settings.log_level))
    metrics_dir, private = _metrics_dir()
    master = os.getpid()
    cleanups: list[Callable[[], None]] = []
    try:
        return _serve(settings, cleanups)
    finally:
        if os.getpid() == master:  # gunicorn's workers leave through here too: not theirs to do
            for cleanup in cleanups:
                cleanup()
            if private:
                shutil.rmtree(metrics_dir, ignore_errors=True)


def _serve(settings: ServeSettings, cleanups: list[Callable[[], None]]) -> int:
    # Imported only now: prometheus_client reads PROMETHEUS_MULTIPROC_DIR when it is imported.
    from webhook.certs.material import CertificateError
    from webhook.core.errors import TrainhookError
    from webhook.server.tls import serving_certificate

    if settings.lookup:
        problem = _api_problem()
        if problem is not None:
            print(
                f"trainhook serve: --lookup reads sibling workloads from the API server, "
                f"but {problem}; run in the cluster, set KUBECONFIG, or pass --no-lookup",
                file=sys.stderr,
            )
            return 2
    if settings.cert_mode == "self":
        try:
            settings = _self_managed(settings, cleanups)
        except _SetupError as error:
            print(
                f"trainhook serve: cannot set up self-managed certificates: {error}",
                file=sys.stderr,
            )
            return 2
    try:
        progress_endpoint(settings.progress_url, settings.progress_ca_file)
    except _SetupError as error:
        print(f"trainhook serve: {error}", file=sys.stderr)
        return 2
    try:
        use_fabric_profiles(settings.fabric_profiles)
    except TrainhookError as error:
        print(f"trainhook serve: --fabric-profiles {error}", file=sys.stderr)
        return 2
    try:
        serving_certificate(settings.cert_file, settings.key_file).load()
    except CertificateError as error:
        print(f"trainhook serve: cannot load the serving certificate: {error}", file=sys.stderr)
        return 2
    server = _Server(settings)
    try:
        server.run()
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else 1
    return 0


def _metrics_dir() -> tuple[str, bool]:
    """The directory every worker writes its metrics to, emptied of an earlier run's samples."""
    directory = os.environ.get(MULTIPROC_ENV)
    if not directory:
        directory = tempfile.mkdtemp(prefix="trainhook-metrics-")
        os.environ[MULTIPROC_ENV] = directory
        return directory, True
    os.makedirs(directory, exist_ok=True)
    for name in os.listdir(directory):
        if name.endswith(".db"):
            os.unlink(os.path.join(directory, name))
    return directory, False


def _kubernetes_podgroups_served() -> bool | None:
    """Whether the cluster serves Kubernetes' own PodGroup; None when it cannot be asked."""
    from webhook.kube.client import ApiError, Kube
    from webhook.kube.discovery import served_podgroup_api

    try:
        kube = Kube.from_environment()
    except ApiError:
        return None
    try:
        return served_podgroup_api(kube) is not None
    except ApiError:
        return None
    finally:
        kube.close()


def _compute_domains_served() -> bool | None:
    """Whether the cluster serves NVIDIA's ComputeDomain; None when it cannot be asked."""
    from webhook.kube.client import ApiError, Kube
    from webhook.kube.discovery import compute_domains_served

    try:
        kube = Kube.from_environment()
    except ApiError:
        return None
    try:
        return compute_domains_served(kube)
    except ApiError:
        return None
    finally:
        kube.close()


def build_app(settings: ServeSettings) -> Flask:
    """The WSGI app of one worker process."""
    from webhook.server.admission import Context
    from webhook.server.app import ReadinessCheck, create_app
    from webhook.server.tls import serving_certificate

    certificate = serving_certificate(settings.cert_file, settings.key_file)
    use_fabric_profiles(settings.fabric_profiles)

    def certificate_loaded() -> str | None:
        return None if certificate.loaded else "the serving certificate is not loaded"

    checks: list[ReadinessCheck] = [certificate_loaded]
    lookup = None
    if settings.lookup:
        from webhook.kube.lookup import start_sibling_cache

        # Each worker watches for itself: the watch threads would not survive the fork.
        cache = lookup = start_sibling_cache(namespaces=settings.lookup_namespaces)

        def cache_synced() -> str | None:
            return None if cache.synced() else "the sibling cache has not synced yet"

        checks.append(cache_synced)
    context = Context(
        cluster_domain=settings.cluster_domain,
        coscheduling_scheduler=settings.coscheduling_scheduler,
        lookup=lookup,
        sweeper_username=settings.sweeper_username,
        kubernetes_podgroups_served=_kubernetes_podgroups_served() if settings.lookup else None,
        compute_domains_served=_compute_domains_served() if settings.lookup else None,
        progress=progress_endpoint(settings.progress_url, settings.progress_ca_file),
    )
    return create_app(context, tuple(checks))


class _SetupError(Exception):
    pass


def use_fabric_profiles(path: str) -> None:
    """Admit with the reference fabric profiles and those of the file at `path` (none when "");
    raises webhook.core.fabrics.schema.ProfileError for a file that cannot be used."""
    from webhook.core.fabrics.registry import use_profiles

    use_profiles(read_fabric_profiles(path) if path else {})


def read_fabric_profiles(path: str) -> dict[str, Profile]:
    """The profiles of a YAML or JSON file (name -> fields); raises ProfileError in one line."""
    import yaml

    from webhook.core.fabrics.schema import ProfileError, parse_profiles

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        reason = getattr(error, "strerror", None) or str(error)
        raise ProfileError(f"{path}: cannot read: {reason}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or "not valid YAML"
        raise ProfileError(f"{path}:{line}: invalid YAML: {problem}") from None
    return parse_profiles(data, path)


def progress_endpoint(url: str, ca_file: str) -> ProgressEndpoint | None:
    """The progress endpoint pods are sent to, with the CA read from `ca_file`."""
    from webhook.core.job.progress import ProgressEndpoint

    if not url:
        return None
    if not url.startswith("https://") or not ca_file:
        raise _SetupError(
            f"--progress-url {url!r}: an https:// URL, with --progress-ca-file, is allowed"
        )
    try:
        ca = Path(ca_file).read_text()
    except OSError as error:
        raise _SetupError(f"--progress-ca-file {ca_file}: {error.strerror}") from None
    if "-----BEGIN CERTIFICATE-----" not in ca:
        raise _SetupError(f"--progress-ca-file {ca_file}: no PEM certificate in it")
    return ProgressEndpoint(url, ca)


def _self_managed(settings: ServeSettings, cleanups: list[Callable[[], None]]) -> ServeSettings:
    """Issue or load the certificates in the cluster, and keep them renewed from a thread of
    this (gunicorn's master) process; the settings then name the files it writes."""
    from webhook.certs.material import CertificateError
    from webhook.certs.selfmanaged import SelfManagedSettings, start_self_managed
    from webhook.kube.client import ApiError

    directory = Path(settings.cert_file).parent
    if Path(settings.key_file).parent != directory:
        raise _SetupError(
            f"--cert-file {settings.cert_file} and --key-file {settings.key_file} must be in one "
            "directory, where tls.crt and tls.key are written"
        )
    try:
        manager = start_self_managed(
            SelfManagedSettings(
                namespace=settings.namespace,
                secret=settings.cert_secret,
                webhook_config=settings.webhook_config,
                service=settings.service,
                directory=directory,
                extra_names=_progress_names(settings.progress_url),
            )
        )
    except ApiError as error:
        raise _SetupError(error.message) from None
    except (CertificateError, OSError) as error:
        raise _SetupError(str(error)) from None
    cleanups.append(manager.stop)
    files = manager.files
    return replace(settings, cert_file=files.cert_file, key_file=files.key_file)


def _progress_names(url: str) -> tuple[str, ...]:
    """The progress endpoint's host, which the self-managed certificate must name too."""
    from urllib.parse import urlsplit

    host = urlsplit(url).hostname if url else None
    if not host:
        return ()
    # The short names of a Service in-cluster clients may use as well.
    parts = host.split(".")
    return tuple(dict.fromkeys([host, *(".".join(parts[:n]) for n in (1, 2, 3) if n < len(parts))]))


def _api_problem() -> str | None:
    """Why no client for the Kubernetes API can be configured; None when one can."""
    from webhook.kube.client import ApiError, Kube

    try:
        Kube.from_environment().close()
    except ApiError as error:
        return f"no API server is configured ({error.message})"
    return None


class _Server:
    """gunicorn, configured from webhook.server.gunicorn_conf and the command line."""

    def __init__(self, settings: ServeSettings) -> None:
        from gunicorn.app.base import BaseApplication

        from webhook.server import gunicorn_conf
        from webhook.server.logs import logging_config

        class Application(BaseApplication):  # type: ignore[misc]
            def load_config(self) -> None:
                for key, value in vars(gunicorn_conf).items():
                    if key in self.cfg.settings:
                        self.cfg.set(key, value)
                self.cfg.set("bind", [settings.bind])
                self.cfg.set("workers", settings.workers)
                self.cfg.set("certfile", settings.cert_file)
                self.cfg.set("keyfile", settings.key_file)
                self.cfg.set("loglevel", settings.log_level)
                self.cfg.set("logconfig_dict", logging_config(settings.log_level))

            def load(self) -> Flask:
                return build_app(settings)

        self.run: Callable[[], None] = Application().run
