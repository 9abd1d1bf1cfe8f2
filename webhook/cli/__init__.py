"""The `trainhook` command: one subcommand per shell around the core."""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

from webhook import __version__

# Each subcommand lives in its own module, exposing `add_arguments(parser)` and `run(args) -> int`.
# Modules are imported only when their subcommand runs, so `render` never loads Flask or gunicorn.
COMMANDS: dict[str, tuple[str, str]] = {
    "render": (
        "webhook.cli.render",
        "render labelled manifests into the pods Kubernetes would run",
    ),
    "migrate": (
        "webhook.cli.migrate",
        "turn operators' jobs (PyTorchJob, TFJob, MPIJob, PaddleJob, MSJob, Volcano Job...) "
        "into labelled workloads",
    ),
    "certs": (
        "webhook.cli.certs",
        "make the CA and serving certificate the webhook serves with",
    ),
    "serve": ("webhook.cli.serve", "run the admission webhook under gunicorn with TLS"),
    "sweep": ("webhook.cli.sweep", "run the sweeper: Services, PodGroups, completion, cleanup"),
    "status": ("webhook.cli.status", "show the training jobs: roles ready, phase, age"),
    "describe": (
        "webhook.cli.describe",
        "show one training job: roles, pods, Service, PodGroup, events, last failure",
    ),
}

# `kubectl trainhook ...` (the kubectl-trainhook executable): the commands that read a cluster
# or files, as a kubectl plugin.
PLUGIN_COMMANDS = ("status", "render", "describe", "migrate")


def build_parser(
    prog: str = "trainhook", commands: Sequence[str] = tuple(COMMANDS)
) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Turn labelled StatefulSets, Indexed Jobs and Pods into training jobs.",
    )
    parser.add_argument(
        "--version", action="version", version=f"trainhook {__version__}", help="print the version"
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in commands:
        summary = COMMANDS[name][1]
        sub.add_parser(name, help=summary, description=summary, add_help=False)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    prog: str = "trainhook",
    commands: Sequence[str] = tuple(COMMANDS),
) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in commands:
        name = args[0]
        module_name, summary = COMMANDS[name]
        module = importlib.import_module(module_name)
        parser = argparse.ArgumentParser(prog=f"{prog} {name}", description=summary)
        module.add_arguments(parser)
        parsed = parser.parse_args(args[1:])
        try:
            code: int = module.run(parsed)
            sys.stdout.flush()
        except BrokenPipeError:
            # The reader went away (`trainhook render examples/ | head`): stop quietly, as Unix
            # tools do, with no traceback when Python flushes stdout at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 128 + signal.SIGPIPE
        return code
    build_parser(prog, commands).parse_args(args)
    return 2


def kubectl_plugin() -> int:
    """The kubectl-trainhook executable: `kubectl trainhook status|render|describe|migrate ...`."""
    return main(prog="kubectl trainhook", commands=PLUGIN_COMMANDS)


if __name__ == "__main__":
    sys.exit(main())
