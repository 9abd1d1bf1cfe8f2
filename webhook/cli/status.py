"""`trainhook status [-n NAMESPACE] [JOB]`: the training jobs of a cluster, at a glance."""

from __future__ import annotations

import argparse
import sys

from webhook.kube.client import ApiError, Kube
from webhook.sweeper.report.status import format_table, read_rows


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n", "--namespace", default=None, help="only this namespace (default: every namespace)"
    )
    parser.add_argument("job", nargs="?", help="only this job")


def run(args: argparse.Namespace) -> int:
    namespace: str | None = args.namespace
    try:
        rows = read_rows(Kube.from_environment(), namespace)
    except ApiError as error:
        print(f"trainhook status: {error.message or error}", file=sys.stderr)
        return 1
    if args.job:
        rows = [row for row in rows if row.job == args.job]
    where = f" in namespace {namespace}" if namespace else ""
    if not rows:
        what = f"training job {args.job}" if args.job else "training jobs"
        print(f"No {what} found{where}.", file=sys.stderr)
        return 1 if args.job else 0
    print(format_table(rows, with_namespace=namespace is None))
    return 0
