"""`trainhook serve`: the admission webhook under gunicorn, with TLS.

Every flag can also be set through the environment variable named in its help.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from webhook.cli.validators import boolean_env, log_level, positive_int, scheduler_name
from webhook.core.contract import DEFAULT_COSCHEDULING_SCHEDULER


def add_arguments(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get

    def option(flag: str, variable: str, default: str | None, help: str, **kw: Any) -> None:
        parser.add_argument(flag, default=env(variable, default), help=f"{help} [{variable}]", **kw)

    option("--bind", "TRAINHOOK_BIND", "0.0.0.0:8443", "HOST:PORT to listen on (or fd://N)")
    option("--cert-file", "TRAINHOOK_CERT_FILE", "certs/tls.crt", "serving certificate (PEM)")
    option("--key-file", "TRAINHOOK_KEY_FILE", "certs/tls.key", "its private key (PEM)")
    option("--workers", "TRAINHOOK_WORKERS", "2", "gunicorn worker processes", type=positive_int)
    option(
        "--cluster-domain",
        "TRAINHOOK_CLUSTER_DOMAIN",
        "",
        "append .svc.DOMAIN to pod host names (e.g. cluster.local)",
    )
    option(
        "--coscheduling-scheduler-name",
        "TRAINHOOK_COSCHEDULING_SCHEDULER_NAME",
        DEFAULT_COSCHEDULING_SCHEDULER,
        "schedulerName given to pods of jobs with trainhook.io/scheduler: coscheduling",
        type=scheduler_name,
    )
    option(
        "--log-level",
        "TRAINHOOK_LOG_LEVEL",
        "info",
        "debug, info, warning or error",
        type=log_level,
    )
    parser.add_argument(
        "--lookup",
        action=argparse.BooleanOptionalAction,
        default=boolean_env("serve", "TRAINHOOK_LOOKUP", default=True),
        help="read sibling workloads of multi-role jobs from the API server [TRAINHOOK_LOOKUP]",
    )
    parser.add_argument(
        "--lookup-namespace",
        action="append",
        dest="lookup_namespaces",
        default=None,
        help="read siblings only in this namespace; repeat for several (env "
        "TRAINHOOK_LOOKUP_NAMESPACES, a comma list; default: every namespace)",
    )
    option(
        "--cert-mode",
        "TRAINHOOK_CERT_MODE",
        "files",
        "files: serve the certificate files as they are (reloaded when they change); "
        "self: issue and renew them in the cluster",
        choices=("files", "self"),
    )
    option("--cert-secret", "TRAINHOOK_CERT_SECRET", "", "self mode: Secret holding the CA")
    option(
        "--webhook-config",
        "TRAINHOOK_WEBHOOK_CONFIG",
        "",
        "self mode: MutatingWebhookConfiguration whose caBundle is kept current",
    )
    option("--service", "TRAINHOOK_SERVICE", "", "self mode: the webhook's Service")
    option("--namespace", "TRAINHOOK_NAMESPACE", "", "self mode: the Service's namespace")
    option(
        "--sweeper-username",
        "TRAINHOOK_SWEEPER_USERNAME",
        "",
        "the sweeper's user (system:serviceaccount:NAMESPACE:NAME): the only one allowed to "
        "change trainhook.io/phase, finished-at and reason",
    )
    option(
        "--progress-url",
        "TRAINHOOK_PROGRESS_URL",
        "",
        "https://HOST:PORT of the sweeper's progress endpoint, given to pods of jobs with "
        "trainhook.io/report-progress (default: none, such pods are refused)",
    )
    option(
        "--fabric-profiles",
        "TRAINHOOK_FABRIC_PROFILES",
        "",
        "YAML file of the cluster's fabric profiles for trainhook.io/fabric, beside the "
        "reference aws-efa, infiniband and gke-tcpxo (docs/fabrics.md)",
    )
    option(
        "--progress-ca-file",
        "TRAINHOOK_PROGRESS_CA_FILE",
        "",
        "the CA (PEM) pods verify the progress endpoint with",
    )


def _namespaces(flags: list[str] | None) -> tuple[str, ...]:
    """The --lookup-namespace flags, else the environment's comma list; empty: every one."""
    given = flags if flags is not None else [os.environ.get("TRAINHOOK_LOOKUP_NAMESPACES", "")]
    names = (name.strip() for flag in given for name in flag.split(","))
    return tuple(dict.fromkeys(name for name in names if name))


def run(args: argparse.Namespace) -> int:
    from webhook.server.launch import ServeSettings, serve

    return serve(
        ServeSettings(
            bind=args.bind,
            cert_file=args.cert_file,
            key_file=args.key_file,
            workers=int(args.workers),
            cluster_domain=args.cluster_domain,
            coscheduling_scheduler=args.coscheduling_scheduler_name,
            log_level=args.log_level,
            lookup=args.lookup,
            cert_mode=args.cert_mode,
            cert_secret=args.cert_secret,
            webhook_config=args.webhook_config,
            service=args.service,
            namespace=args.namespace,
            lookup_namespaces=_namespaces(args.lookup_namespaces),
            sweeper_username=args.sweeper_username,
            progress_url=args.progress_url,
            progress_ca_file=args.progress_ca_file,
            fabric_profiles=args.fabric_profiles,
        )
    )
