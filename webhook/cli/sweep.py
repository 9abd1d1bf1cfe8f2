"""`trainhook sweep`: the long-running sweeper process."""

from __future__ import annotations

import argparse
import logging.config
import os
import signal
import socket
import sys
import threading
from pathlib import Path
from typing import Any

from webhook.cli.validators import (
    log_level,
    positive_int,
    positive_seconds,
    seconds_up_to_a_minute,
    whole_seconds,
)
from webhook.kube.client import ApiError, Kube
from webhook.logs import logging_config
from webhook.sweeper.heap import PERIOD_SECONDS
from webhook.sweeper.runner import BATCH_SECONDS, TRICKLE_PAUSE_MAX, Sweeper, SweeperConfig
from webhook.sweeper.serving.metrics import ProgressFigures, StragglerFigures, SweeperMetrics
from webhook.sweeper.serving.progress import Limits, ProgressDesk
from webhook.sweeper.serving.progress_server import serve as serve_progress
from webhook.sweeper.writes import BURST, PER_MINUTE

SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _own_namespace() -> str:
    if os.environ.get("TRAINHOOK_NAMESPACE"):
        return os.environ["TRAINHOOK_NAMESPACE"]
    try:
        return SERVICE_ACCOUNT_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def _namespaces(flags: list[str] | None) -> tuple[str, ...]:
    """The --namespace flags (an empty one means every namespace), else the environment's."""
    given = flags if flags is not None else [os.environ.get("TRAINHOOK_WATCH_NAMESPACE", "")]
    names = (name.strip() for flag in given for name in flag.split(","))
    return tuple(dict.fromkeys(name for name in names if name))


def _bind(text: str) -> str:
    _host, colon, port = text.rpartition(":")
    if text and (not colon or not port.isdigit() or int(port) > 65535):
        raise argparse.ArgumentTypeError(f"invalid value {text!r}: HOST:PORT, e.g. 0.0.0.0:9090")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--namespace",
        action="append",
        dest="namespaces",
        default=None,
        help="sweep only this namespace; repeat for several (env TRAINHOOK_WATCH_NAMESPACE, "
        "a comma list; default: every namespace)",
    )
    parser.add_argument(
        "--resync-seconds",
        type=positive_seconds,
        default=60.0,
        help="look at every job this often, even without events (default: 60)",
    )
    parser.add_argument(
        "--batch-seconds",
        type=seconds_up_to_a_minute,
        default=BATCH_SECONDS,
        help="a job's watch events within this many seconds share one look at it, and pod "
        "events that trickle are read at most every half of it (at most every "
        f"{TRICKLE_PAUSE_MAX:g} s); 0 looks at once (default: {BATCH_SECONDS:g})",
    )
    parser.add_argument(
        "--lease-name",
        default="trainhook-sweeper",
        help="the Lease that elects the active sweeper (with shards: of shard 0; shard i's is "
        "<lease-name>-<i>)",
    )
    parser.add_argument(
        "--shards",
        type=positive_int,
        default=1,
        help="split the jobs (hashed by namespace/name) into this many shards, each acted on "
        "by the replica holding its Lease (default: 1)",
    )
    parser.add_argument(
        "--replicas",
        type=positive_int,
        default=1,
        help="how many sweeper replicas share the shards: each takes shards/replicas at first "
        "and more only when they stay free (default: 1)",
    )
    parser.add_argument(
        "--lease-namespace",
        default=None,
        help="namespace of the Lease (env TRAINHOOK_NAMESPACE; default: this pod's namespace)",
    )
    parser.add_argument(
        "--identity",
        default=os.environ.get("POD_NAME") or socket.gethostname(),
        help="this replica's name in the Lease (env POD_NAME; default: the host name)",
    )
    parser.add_argument(
        "--lease-duration-seconds",
        type=whole_seconds,
        default=15,
        help="how long a silent leader keeps the lease before another replica takes over",
    )
    parser.add_argument(
        "--metrics-bind",
        type=_bind,
        default=_bind(os.environ.get("TRAINHOOK_METRICS_BIND", "")),
        help="serve Prometheus metrics over HTTP on HOST:PORT (env TRAINHOOK_METRICS_BIND; "
        "default: none)",
    )
    parser.add_argument(
        "--progress-bind",
        type=_bind,
        default=_bind(os.environ.get("TRAINHOOK_PROGRESS_BIND", "")),
        help="serve the progress endpoint (Kubeflow Trainer v2's status protocol) over TLS on "
        "HOST:PORT (env TRAINHOOK_PROGRESS_BIND; default: none)",
    )
    parser.add_argument(
        "--progress-cert-file",
        default=os.environ.get("TRAINHOOK_PROGRESS_CERT_FILE", "certs/tls.crt"),
        help="the progress endpoint's certificate (PEM; env TRAINHOOK_PROGRESS_CERT_FILE)",
    )
    parser.add_argument(
        "--progress-key-file",
        default=os.environ.get("TRAINHOOK_PROGRESS_KEY_FILE", "certs/tls.key"),
        help="its private key (PEM; env TRAINHOOK_PROGRESS_KEY_FILE)",
    )
    parser.add_argument(
        "--progress-write-seconds",
        type=positive_seconds,
        default=10.0,
        help="write a job's trainhook.io/progress at most this often (default: 10)",
    )
    parser.add_argument(
        "--writes-per-minute",
        type=positive_int,
        default=PER_MINUTE,
        help="each job's write budget: API writes (creates, patches, deletes; Events apart) a "
        f"job may make a minute once its burst is spent; more wait (default: {PER_MINUTE})",
    )
    parser.add_argument(
        "--write-burst",
        type=positive_int,
        default=BURST,
        help="writes a job may make at once, plus one per pod of the job (its start and a "
        f"whole-job restart fit) (default: {BURST})",
    )
    parser.add_argument(
        "--cluster-domain",
        default="",
        help="the webhook's --cluster-domain: host names in large jobs' peer lists end in "
        ".svc.<domain>",
    )
    parser.add_argument(
        "--log-level",
        type=log_level,
        default=log_level(os.environ.get("TRAINHOOK_LOG_LEVEL", "info")),
        help="debug, info, warning or error (env TRAINHOOK_LOG_LEVEL; default: info)",
    )


def config_from(args: argparse.Namespace) -> SweeperConfig:
    duration: int = args.lease_duration_seconds
    return SweeperConfig(
        identity=args.identity,
        namespaces=_namespaces(args.namespaces),
        resync_seconds=args.resync_seconds,
        lease_name=args.lease_name,
        lease_namespace=args.lease_namespace or _own_namespace(),
        lease_duration_seconds=duration,
        renew_deadline=duration * 2 / 3,
        retry_period=max(0.2, duration / 7.5),
        cluster_domain=args.cluster_domain,
        shards=args.shards,
        replicas=args.replicas,
        writes_per_minute=args.writes_per_minute,
        write_burst=args.write_burst,
        batch_seconds=args.batch_seconds,
        heap_seconds=PERIOD_SECONDS,
    )


def run(args: argparse.Namespace) -> int:
    try:
        kube = Kube.from_environment()
    except ApiError as error:
        print(f"trainhook sweep: {error.message}", file=sys.stderr)
        return 1
    logging.config.dictConfig(logging_config(args.log_level))
    stop = threading.Event()

    def request_stop(signum: int, frame: Any) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    sweeper = Sweeper(kube, config_from(args))
    metrics = SweeperMetrics(sweeper.elector.is_leader, sweeper.health)
    if args.metrics_bind:
        try:
            host, port = metrics.serve(args.metrics_bind)
        except OSError as error:
            print(f"trainhook sweep: cannot serve metrics on {args.metrics_bind}: {error}",
                  file=sys.stderr)  # fmt: skip
            return 1
        logging.getLogger("trainhook.sweeper").info("metrics at http://%s:%d/metrics", host, port)
    progress = None
    if args.progress_bind:
        desk = ProgressDesk(
            kube,
            Limits(write_interval=args.progress_write_seconds),
            namespaces=_namespaces(args.namespaces),
        )
        metrics.registry.register(ProgressFigures(desk.latest))
        metrics.registry.register(StragglerFigures(desk.straggling))
        sweeper.on_gone.append(desk.forget)
        try:
            progress = serve_progress(
                desk, args.progress_bind, args.progress_cert_file, args.progress_key_file
            )
        except (OSError, ValueError) as error:
            print(f"trainhook sweep: cannot serve progress on {args.progress_bind}: {error}",
                  file=sys.stderr)  # fmt: skip
            metrics.stop()
            return 1
    try:
        sweeper.run(stop)
    finally:
        metrics.stop()
        if progress is not None:
            progress[1].set()
            progress[0].shutdown()
    return 0
