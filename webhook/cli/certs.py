"""`trainhook certs generate`: a CA and a serving certificate for development and tests."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from webhook.certs.material import generate
from webhook.cli.validators import dns_label, positive_days


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    gen = sub.add_parser(
        "generate",
        help="make a CA and a serving certificate for the webhook Service",
        description="Make a CA and a serving certificate for the webhook Service. The serving "
        "certificate is valid for SERVICE, SERVICE.NAMESPACE, SERVICE.NAMESPACE.svc, "
        "SERVICE.NAMESPACE.svc.cluster.local, localhost and 127.0.0.1.",
    )
    gen.add_argument(
        "--out",
        type=Path,
        default=Path("certs"),
        help="directory for the four PEM files (default: certs, the repository's certs/ folder, "
        "whose keys and certificates git ignores)",
    )
    gen.add_argument("--service", type=dns_label, required=True, help="the webhook's Service")
    gen.add_argument("--namespace", type=dns_label, required=True, help="the Service's namespace")
    gen.add_argument(
        "--days", type=positive_days, default=365, help="serving certificate validity (365)"
    )
    gen.add_argument("--ca-days", type=positive_days, default=3650, help="CA validity (3650)")


def run(args: argparse.Namespace) -> int:
    if args.days > args.ca_days:
        print(
            f"trainhook certs: --days {args.days} exceeds --ca-days {args.ca_days}: "
            "a serving certificate cannot outlive its CA",
            file=sys.stderr,
        )
        return 2
    try:
        paths = generate(
            args.out, args.service, args.namespace, days=args.days, ca_days=args.ca_days
        )
    except OSError as e:
        print(f"trainhook certs: cannot write {e.filename}: {e.strerror}", file=sys.stderr)
        return 1
    for path in paths:
        print(path)
    return 0
