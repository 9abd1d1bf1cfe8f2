"""`trainhook render FILE|DIR...`: what the webhook would make of labelled manifests, offline."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from webhook.cli.validators import scheduler_name
from webhook.core.contract import DEFAULT_COSCHEDULING_SCHEDULER, KUBERNETES_PODGROUP_APIS
from webhook.core.fabrics.registry import use_profiles
from webhook.core.fabrics.schema import ProfileError
from webhook.core.render import RenderError, render_all, table
from webhook.server.launch import read_fabric_profiles


def add_paths(parser: argparse.ArgumentParser) -> None:
    """The FILE arguments that `load` reads."""
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="FILE",
        help="YAML files (multi-document) or folders of them; '-' reads standard input",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_paths(parser)
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "yaml"),
        default="table",
        help="a table of pods (default) or the mutated workloads, pods and PodGroups as YAML",
    )
    parser.add_argument(
        "--cluster-domain", default="", help="append .svc.<domain> to host names, as the webhook"
    )
    parser.add_argument(
        "--coscheduling-scheduler-name",
        default=DEFAULT_COSCHEDULING_SCHEDULER,
        type=scheduler_name,
        help="schedulerName of coscheduling jobs' pods, as the webhook "
        f"(default {DEFAULT_COSCHEDULING_SCHEDULER})",
    )
    parser.add_argument(
        "--fabric-profiles",
        metavar="FILE",
        default="",
        help="the cluster's fabric profiles (YAML), as the webhook's --fabric-profiles",
    )
    parser.add_argument(
        "--kubernetes-podgroup-api",
        default=KUBERNETES_PODGROUP_APIS[0],
        choices=KUBERNETES_PODGROUP_APIS,
        help="the apiVersion of the PodGroup of jobs with trainhook.io/scheduler: kubernetes, the "
        f"one the cluster serves (the sweeper asks it; default {KUBERNETES_PODGROUP_APIS[0]})",
    )


def run(args: argparse.Namespace) -> int:
    try:
        sources = load(args.paths)
        use_profiles(read_fabric_profiles(args.fabric_profiles) if args.fabric_profiles else {})
    except (InputError, ProfileError) as error:
        print(f"trainhook render: {error}", file=sys.stderr)
        return 1
    documents = [doc for _, doc in sources]
    try:
        rendering = render_all(
            documents,
            args.cluster_domain,
            args.coscheduling_scheduler_name,
            args.kubernetes_podgroup_api,
        )
    except RenderError as error:
        where = sources[error.document][0]
        print(f"trainhook render: {where} ({error.what}): {error}", file=sys.stderr)
        return 1
    if not rendering.pods:
        print("trainhook render: no labelled StatefulSet, Job or Pod found", file=sys.stderr)
        return 1
    if args.output == "yaml":
        objects = [
            *rendering.workloads,
            *rendering.configmaps,
            *(p.pod for p in rendering.pods),
            *rendering.podgroups,
            *rendering.compute_domains,
        ]
        sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    else:
        print(table(rendering.pods, policies=rendering.failure_policies))
    for warning in rendering.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    for pod in rendering.pods:
        for warning in pod.warnings:
            print(f"warning: {pod.name}: {warning}", file=sys.stderr)
    return 0


class InputError(Exception):
    pass


def load(paths: list[str]) -> list[tuple[str, Any]]:
    """Every YAML document of the given files and folders, each with where it came from."""
    sources: list[tuple[str, Any]] = []
    for path in paths:
        for file in _files(path):
            text = sys.stdin.read() if file == "-" else _read(file)
            try:
                documents = list(yaml.safe_load_all(text))
            except yaml.YAMLError as error:
                mark = getattr(error, "problem_mark", None)
                line = f" line {mark.line + 1}" if mark is not None else ""
                problem = getattr(error, "problem", None) or "not valid YAML"
                raise InputError(
                    f"{file}:{line.strip() and line}: invalid YAML: {problem}"
                ) from None
            sources += [
                (f"{file} document {n}", doc)
                for n, doc in enumerate(documents, start=1)
                if doc is not None
            ]
    return sources


def _files(path: str) -> list[str]:
    if path == "-":
        return ["-"]
    target = Path(path)
    if target.is_dir():
        return sorted(str(p) for p in target.rglob("*") if p.suffix in (".yaml", ".yml"))
    if not target.exists():
        raise InputError(f"{path}: no such file or folder")
    return [path]


def _read(file: str) -> str:
    try:
        return Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"{file}: cannot read: {error}") from None
