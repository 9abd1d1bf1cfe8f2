"""`trainhook migrate FILE|DIR|-`: operators' jobs in, labelled workloads out, as one stream."""

from __future__ import annotations

import argparse
import sys
from typing import Any

import yaml

from webhook.cli.render import InputError, add_paths, load
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.migrate import SOURCES, MigrationError, migrate_one


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_paths(parser)
    parser.add_argument(
        "--framework",
        choices=tuple(FRAMEWORKS),
        help="the framework of Volcano Jobs that name none in their plugins (default: generic)",
    )


def run(args: argparse.Namespace) -> int:
    try:
        sources = load(args.paths)
    except InputError as error:
        print(f"trainhook migrate: {error}", file=sys.stderr)
        return 1
    objects: list[Any] = []
    notes: list[str] = []
    for where, doc in sources:
        what = _what(doc)
        if not isinstance(doc, dict) or (doc.get("apiVersion"), doc.get("kind")) not in SOURCES:
            objects.append(doc)
            notes.append(f"note: {where} ({what}): not an operator's job; written unchanged")
            continue
        try:
            migration = migrate_one(doc, args.framework)
        except MigrationError as error:
            print(f"trainhook migrate: {where} ({what}): {error}", file=sys.stderr)
            return 1
        objects.extend(migration.objects)
        objects.extend(migration.others)
        notes.extend(f"note: {where} ({what}): {line}" for line in migration.notes)
    if not objects:
        print("trainhook migrate: no documents found", file=sys.stderr)
        return 1
    sys.stdout.write(yaml.dump_all(objects, Dumper=ManifestDumper, sort_keys=False, width=100))
    for line in notes:
        print(line, file=sys.stderr)
    return 0


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
