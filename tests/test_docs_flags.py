"""Every flag table in the docs lists exactly the flags its command's `--help` prints, each with the
environment variable that help names."""

from __future__ import annotations

import argparse
import importlib
import re
from pathlib import Path

import pytest

from webhook.cli import COMMANDS

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Which command each page's flag table is for.
TABLES = {"serving.md": "serve", "sweeper.md": "sweep"}
VARIABLE = re.compile(r"\b(TRAINHOOK_[A-Z_]+|POD_NAME)\b")
FLAG = re.compile(r"`(--[a-z][a-z-]*)`")


def flag_table(markdown: str) -> list[tuple[set[str], set[str]]]:
    """Each row of the page's table headed `| flag |`: its flags and the variables it names."""
    rows: list[tuple[set[str], set[str]]] = []
    lines = iter(markdown.splitlines())
    for line in lines:
        if line.startswith("| flag |"):
            next(lines)  # |---|
            for row in lines:
                if not row.startswith("|"):
                    break
                flags, variables = [cell.strip() for cell in row.strip("|").split("|")][:2]
                rows.append((set(FLAG.findall(flags)), set(VARIABLE.findall(variables))))
    return rows


def parser_of(command: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"trainhook {command}")
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    return parser


def help_flags(command: str) -> dict[str, set[str]]:
    """Every flag `trainhook COMMAND --help` prints, with the variables its help names."""
    flags = {}
    for action in parser_of(command)._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        for option in action.option_strings:
            flags[option] = set(VARIABLE.findall(action.help or ""))
    return flags


def test_every_flag_table_in_the_docs_is_checked_against_its_command() -> None:
    pages = {page.name for page in DOCS if "\n| flag |" in page.read_text()}
    assert pages == set(TABLES)


@pytest.mark.parametrize(("page", "command"), sorted(TABLES.items()))
def test_the_flag_table_lists_exactly_the_flags_help_prints(page: str, command: str) -> None:
    documented = {
        flag for flags, _ in flag_table((REPO / "docs" / page).read_text()) for flag in flags
    }
    printed = set(help_flags(command))
    assert sorted(printed - documented) == [], f"trainhook {command} has them; {page} misses them"
    assert sorted(documented - printed) == [], f"{page} lists them; trainhook {command} has none"


@pytest.mark.parametrize(("page", "command"), sorted(TABLES.items()))
def test_each_flag_row_names_the_variables_its_help_names(page: str, command: str) -> None:
    printed = help_flags(command)
    for flags, variables in flag_table((REPO / "docs" / page).read_text()):
        expected = set().union(*(printed.get(flag, set()) for flag in flags))
        assert variables == expected, f"{page}: {sorted(flags)}"
