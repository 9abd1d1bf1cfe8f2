"""Every example the docs and the chart's values.yaml give is accepted by what reads it: annotation
values by the webhook's settings parser (failure rules included), `trainhook` command lines and
`extraArgs` by the command's own argument parser."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import re
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from webhook.cli import COMMANDS
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.job.settings import SCHEDULERS, SETTING_KEYS, read_settings

REPO = Path(__file__).resolve().parent.parent
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), REPO / "examples" / "README.md"]
VALUES = REPO / "charts" / "trainhook" / "values.yaml"
INSTALL = REPO / "docs" / "install.md"
SETTINGS = frozenset(SETTING_KEYS)
# A placeholder stands for a value (`N`, `min:max`, `<job>`): no example.
PLACEHOLDER = re.compile(r'^"?(N|min:max|<[^>]*>)"?$')
RULE = re.compile(r"^(\*|[a-z-]+[=~]\S*( [a-z-]+[=~]\S*)*) -> [a-z-]+( max=\d+)?$")


def relative(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# Annotation examples -------------------------------------------------------------------------


def inline_settings(path: Path) -> Iterator[tuple[str, str, str]]:
    """`trainhook.io/KEY: VALUE` in inline code (in values.yaml, in its comments). A value is one
    word, or a whole failure rule: what has more words is a refusal line quoted
    (`trainhook.io/port: invalid value 'http': an integer from 1 to 65535`), not an example."""
    text = path.read_text()
    if path.suffix == ".yaml":
        comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
        found = re.findall(r'(trainhook\.io/[a-z-]+): ("[^"]*"|[A-Za-z0-9_./:-]+)', comments)
    else:
        found = re.findall(r"`(trainhook\.io/[a-z-]+): ([^`]+)`", text)
    for key, value in found:
        one_word = len(value.split()) == 1 or (key == contract.FAILURE_POLICY and RULE.match(value))
        if key in SETTINGS and one_word and not PLACEHOLDER.match(value):
            yield relative(path), key, value.strip().strip('"')


def yaml_settings(path: Path) -> Iterator[tuple[str, str, str]]:
    """Every `trainhook.io/` setting in the page's YAML blocks, as YAML reads it."""
    for block in re.findall(r"```yaml\n(.*?)```", path.read_text(), flags=re.S):
        for document in yaml.safe_load_all(block):
            for key, value in mappings(document):
                if key in SETTINGS and isinstance(value, str) and not PLACEHOLDER.match(value):
                    yield relative(path), key, value


def mappings(node: Any) -> Iterator[tuple[Any, Any]]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield key, value
            yield from mappings(value)
    elif isinstance(node, list):
        for item in node:
            yield from mappings(item)


def rule_examples(path: Path) -> Iterator[tuple[str, str, str]]:
    """Failure rules written whole in inline code (`role=ps -> restart-role max=3`)."""
    for span in re.findall(r"`([^`]*->[^`]*)`", path.read_text()):
        rule = span.replace("\\|", "|")
        if RULE.match(rule):
            yield relative(path), contract.FAILURE_POLICY, rule


SETTING_EXAMPLES = sorted(
    {
        example
        for path in [*DOCS, VALUES]
        for found in (inline_settings(path), yaml_settings(path), rule_examples(path))
        for example in found
    }
)


def contexts() -> Iterator[tuple[str, dict[str, str]]]:
    """Every framework, alone or elastic, with no scheduler or each, with or without a placement:
    an example of one key is accepted when some job it could belong to accepts it."""
    companions: list[dict[str, str]] = [{}]
    for scheduler in SCHEDULERS:
        companions.append({contract.SCHEDULER: scheduler})
        placed = {contract.SCHEDULER: scheduler, contract.PLACEMENT_TOPOLOGY: "example.com/rack"}
        if scheduler == "volcano":
            placed[contract.PLACEMENT_TIER] = "2"
        if scheduler == "kai":
            placed[contract.KAI_TOPOLOGY] = "cluster-topology"
        companions.append(placed)
    companions.append({contract.PLACEMENT_TOPOLOGY: "example.com/rack"})
    # Settings read only beside another: the preflight's own, and what needs progress reports.
    companions.append({contract.PREFLIGHT: "nccl,dcgm"})
    companions.append({contract.REPORT_PROGRESS: "true"})
    for name, framework in FRAMEWORKS.items():
        for extra in companions:
            yield name, extra
            if framework.elastic:
                yield name, {**extra, contract.ELASTIC: "1:3"}


def refusal(key: str, value: str) -> str | None:
    """None when some job accepts the value; else the refusal of the plainest job."""
    first = None
    for name, companions in contexts():
        try:
            read_settings({**companions, key: value}, FRAMEWORKS[name])
        except TrainhookError as error:
            first = first or str(error)
        else:
            return None
    return first


def test_the_docs_give_annotation_examples_of_most_settings() -> None:
    assert len({key for _, key, _ in SETTING_EXAMPLES}) >= 20


@pytest.mark.parametrize(("where", "key", "value"), SETTING_EXAMPLES)
def test_every_annotation_example_is_accepted_by_the_settings_parser(
    where: str, key: str, value: str
) -> None:
    assert refusal(key, value) is None, f"{where}: {key}: {value!r}: {refusal(key, value)}"


def test_a_wrong_annotation_example_would_be_refused() -> None:
    assert refusal(contract.PORT, "http") is not None
    assert refusal(contract.FAILURE_POLICY, "exit=1-300 -> fail") is not None
    assert refusal(contract.RESTART_POLICY, "Always") is not None


# Command lines -------------------------------------------------------------------------------


def parse(command: str, args: list[str]) -> str | None:
    """None when `trainhook COMMAND ARGS` parses; else what argparse says."""
    parser = argparse.ArgumentParser(prog=f"trainhook {command}", exit_on_error=False)
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parser.parse_args(args)
    except (SystemExit, argparse.ArgumentError) as error:
        return stderr.getvalue().strip().splitlines()[-1] if stderr.getvalue() else str(error)
    return None


def command_lines(path: Path) -> Iterator[tuple[str, str, list[str]]]:
    """`trainhook COMMAND ...` (also `kubectl trainhook`, `.venv/bin/trainhook`) in shell and
    console blocks, up to a pipe, a redirection or a comment."""
    for block in re.findall(r"```(?:sh|console)\n(.*?)```", path.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line.removeprefix("$ "), comments=True)
            cut = [i for i, word in enumerate(words) if word in ("|", ">", ">>", "&&", ";")]
            words = words[: cut[0]] if cut else words
            if words[:1] == ["kubectl"] and words[1:2] == ["trainhook"]:
                words = words[1:]
            named = words[1:2] and words[0].rpartition("/")[2] == "trainhook"
            if named and words[1] in COMMANDS:
                yield relative(path), words[1], words[2:]


def extra_args() -> Iterator[tuple[str, str, list[str]]]:
    """`webhook.extraArgs` and `sweeper.extraArgs` examples, in values.yaml and docs/install.md."""
    process = {"webhook": "serve", "sweeper": "sweep"}
    for path in (VALUES, INSTALL):
        pattern = r"(webhook|sweeper)\.extraArgs\b[^\n]*?e\.g\. `?(\[[^\]]*\])"
        for component, example in re.findall(pattern, path.read_text()):
            yield relative(path), process[component], [str(arg) for arg in yaml.safe_load(example)]


COMMAND_EXAMPLES = sorted(
    {
        (where, command, shlex.join(args))
        for path in DOCS
        for where, command, args in command_lines(path)
    }
    | {(where, command, shlex.join(args)) for where, command, args in extra_args()}
)


def test_the_docs_give_command_lines_of_the_commands_users_run() -> None:
    assert {"render", "serve", "sweep", "status", "certs"} <= {c for _, c, _ in COMMAND_EXAMPLES}


@pytest.mark.parametrize(("where", "command", "args"), COMMAND_EXAMPLES)
def test_every_command_line_and_extra_args_example_parses(
    where: str, command: str, args: str
) -> None:
    problem = parse(command, shlex.split(args))
    assert problem is None, f"{where}: trainhook {command} {args}: {problem}"


def test_a_flag_the_command_lacks_is_caught() -> None:
    assert parse("serve", ["--log-format=json"]) is not None
    assert parse("serve", ["--log-level=debug"]) is None
