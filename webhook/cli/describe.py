"""`trainhook describe [-n NAMESPACE] JOB`: one training job in detail."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from webhook.kube.client import ApiError, Kube
from webhook.sweeper.report.describe import describe, read_job


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-n", "--namespace", default="default", help="the job's namespace (default: default)"
    )
    parser.add_argument("job", help="the job (its trainhook.io/job label, else workload name)")


def run(args: argparse.Namespace) -> int:
    try:
        objects = read_job(Kube.from_environment(), args.namespace, args.job)
    except ApiError as error:
        print(f"trainhook describe: {error.message or error}", file=sys.stderr)
        return 1
    if not objects.workloads and not objects.pods:
        print(f"No training job {args.job} found in namespace {args.namespace}.", file=sys.stderr)
        return 1
    print(describe(objects, datetime.now(UTC)))
    return 0
