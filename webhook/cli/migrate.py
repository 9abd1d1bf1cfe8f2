"""`trainhook migrate FILE|DIR|-`: operators' jobs in, labelled workloads out, as one stream."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import yaml

from webhook.cli.bounded_yaml import load_file
from webhook.cli.render import InputError, add_paths
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.migrate import MigrationError, is_source, migrate_one, runtime_key, runtimes_of


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_paths(parser)
    parser.add_argument(
        "--framework",
        choices=tuple(FRAMEWORKS),
        help="the framework of Volcano Jobs that name none in their plugins (default: generic)",
    )


def run(args: argparse.Namespace) -> int:
    """Each file on its own: a file or job that cannot be migrated is refused in one line and the
    others are still written; the exit is then 1."""
    objects: list[Any] = []
    notes: list[str] = []
    failed = False
    jobs: dict[tuple[str, str], str] = {}  # (namespace, name) -> where the job was
    documents: list[tuple[str, Any] | InputError] = []  # in file order, with unreadable files
    for file in _files(args.paths):
        try:
            documents += _unwrapped(load_file(file))
        except InputError as error:
            documents.append(error)
    # Trainer's runtimes are read for the TrainJobs that name them, wherever they are.
    runtimes = runtimes_of([d[1] for d in documents if not isinstance(d, InputError)])
    for document in documents:
        if isinstance(document, InputError):
            print(f"trainhook migrate: {document}", file=sys.stderr)
            failed = True
            continue
        where, doc = document
        what = _what(doc)
        if isinstance(doc, dict) and runtime_key(doc) is not None:
            notes.append(
                f"note: {where} ({what}): a Trainer runtime, read for the TrainJobs that name it; "
                "not written"
            )
            continue
        if not is_source(doc):
            objects.append(doc)
            notes.append(f"note: {where} ({what}): not an operator's job; written unchanged")
            continue
        try:
            migration = migrate_one(doc, args.framework, runtimes)
        except MigrationError as error:
            print(f"trainhook migrate: {where} ({what}): {error}", file=sys.stderr)
            failed = True
            continue
        job = (str((doc.get("metadata") or {}).get("namespace") or ""), _name(doc))
        if job in jobs:
            print(
                f"trainhook migrate: {where} ({what}): job {job[1]} is also {jobs[job]}, "
                "and two jobs of one name in one namespace would be one job; rename one",
                file=sys.stderr,
            )
            failed = True
            continue
        jobs[job] = where
        objects.extend(migration.objects)
        objects.extend(migration.others)
        notes.extend(f"note: {where} ({what}): {line}" for line in migration.notes)
    if not objects:
        if not failed:
            print("trainhook migrate: no documents found", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.dump_all(objects, Dumper=ManifestDumper, sort_keys=False, width=100))
    for line in notes:
        print(line, file=sys.stderr)
    return 1 if failed else 0


def _files(paths: list[str]) -> list[str]:
    """The files of the arguments, a folder's YAML files in order, as `trainhook render` reads
    them; each is loaded on its own so one that cannot be read refuses only itself."""
    found: list[str] = []
    for path in paths:
        target = Path(path)
        if path != "-" and target.is_dir():
            found += sorted(str(p) for p in target.rglob("*") if p.suffix in (".yaml", ".yml"))
        else:
            found.append(path)
    return found


def _unwrapped(sources: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """A `kind: List` (what `kubectl get -o yaml` prints) is its items."""
    found: list[tuple[str, Any]] = []
    for where, doc in sources:
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else None
        if isinstance(items, list):
            found += [(f"{where} item {n}", item) for n, item in enumerate(items, 1) if item]
        else:
            found.append((where, doc))
    return found


def _name(doc: dict[str, Any]) -> str:
    return str((doc.get("metadata") or {}).get("name"))


class ManifestDumper(yaml.SafeDumper):
    """Block style, as manifests are written by hand, but a list of plain values (a command,
    its args) on one line."""


def _flow_list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    flat = all(not isinstance(item, dict | list) for item in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat)


ManifestDumper.add_representer(list, _flow_list)


def _what(doc: Any) -> str:
    if not isinstance(doc, dict):
        return type(doc).__name__
    name = (doc.get("metadata") or {}).get("name")
    return f"{doc.get('kind')} {name}"
