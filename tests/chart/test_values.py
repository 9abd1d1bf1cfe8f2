"""values.yaml explains every key, and values.schema.json types every value and refuses the rest."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.rendering import CHART, COMBINATIONS, render_error

VALUES_FILE = CHART / "values.yaml"
SCHEMA = json.loads((CHART / "values.schema.json").read_text())
DEFAULTS = yaml.safe_load(VALUES_FILE.read_text())


def resolve(schema: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in schema:
        name = schema["$ref"].removeprefix("#/definitions/")
        return {**SCHEMA["definitions"][name], **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def chart_defined_keys(
    node: yaml.MappingNode, schema: dict[str, Any], path: str = ""
) -> list[tuple[str, int]]:
    """(dotted path, line) of every key whose structure the schema spells out."""
    keys = []
    for key_node, value_node in node.value:
        dotted = f"{path}{key_node.value}"
        keys.append((dotted, key_node.start_mark.line))
        child = resolve(schema["properties"][key_node.value])
        if isinstance(value_node, yaml.MappingNode) and "properties" in child:
            keys += chart_defined_keys(value_node, child, dotted + ".")
    return keys


def test_every_key_in_values_yaml_has_a_comment_that_names_it() -> None:
    lines = VALUES_FILE.read_text().splitlines()
    root = yaml.compose(VALUES_FILE.read_text())
    assert isinstance(root, yaml.MappingNode), "values.yaml is one mapping of keys"
    missing = []
    for dotted, line in chart_defined_keys(root, SCHEMA):
        above = line - 1
        while above >= 0 and lines[above].strip().startswith("#"):
            above -= 1
        block = [text.strip() for text in lines[above + 1 : line]]
        if not block or not block[0].startswith(f"# {dotted}:"):
            missing.append(f"line {line + 1}: {dotted}")
    assert missing == []
    assert len(chart_defined_keys(root, SCHEMA)) > 60


def walk_schema(schema: dict[str, Any], path: str = "") -> list[tuple[str, dict[str, Any]]]:
    found = []
    for name, child in schema.get("properties", {}).items():
        dotted = f"{path}{name}"
        found.append((dotted, child))
        found += walk_schema(resolve(child), dotted + ".")
    return found


def lookup(values: dict[str, Any], dotted: str) -> Any:
    for part in dotted.split("."):
        values = values[part]
    return values


def test_schema_describes_every_value_and_every_value_has_a_default() -> None:
    properties = walk_schema(SCHEMA)
    undocumented = [p for p, s in properties if not s.get("description")]
    assert undocumented == []
    without_default = []
    for dotted, _ in properties:
        try:
            lookup(DEFAULTS, dotted)
        except KeyError:
            if not dotted.startswith("certificates.certManager.issuerRef."):
                without_default.append(dotted)
    assert without_default == []


def test_every_object_the_chart_defines_refuses_unknown_keys() -> None:
    open_objects = [
        dotted
        for dotted, child in [("", SCHEMA), *walk_schema(SCHEMA)]
        if "properties" in resolve(child)
        and resolve(child).get("additionalProperties") is not False
    ]
    assert open_objects == []


def test_default_values_and_every_tested_combination_satisfy_the_schema() -> None:
    validator = jsonschema.Draft7Validator(SCHEMA)
    assert list(validator.iter_errors(DEFAULTS)) == []


BAD_VALUES: dict[str, tuple[dict[str, Any], str]] = {
    "replicas-as-text": ({"webhook": {"replicas": "two"}}, "'two' is not of type 'integer'"),
    "unknown-top-level-key": ({"replicaCount": 2}, "'replicaCount' was unexpected"),
    "unknown-nested-key": ({"webhook": {"replica": 2}}, "'replica' was unexpected"),
    "failure-policy-typo": (
        {"webhookConfiguration": {"failurePolicy": "fail"}},
        "'fail' is not one of ['Fail', 'Ignore']",
    ),
    "timeout-over-30": (
        {"webhookConfiguration": {"timeoutSeconds": 31}},
        "31 is greater than the maximum of 30",
    ),
    "selector-operator": (
        {
            "webhookConfiguration": {
                "objectSelector": {"matchExpressions": [{"key": "a", "operator": "Is"}]}
            }
        },
        "'Is' is not one of",
    ),
    "lookup-as-text": ({"webhook": {"lookup": "yes"}}, "'yes' is not of type 'boolean'"),
    "labels-as-list": ({"commonLabels": ["team=ml"]}, "['team=ml'] is not of type 'object'"),
    "root-user": (
        {"securityContext": {"runAsUser": 0}},
        "0 is not valid under any of the given schemas",
    ),
    "bad-duration": (
        {"certificates": {"certManager": {"duration": "1 year"}}},
        "'1 year' does not match",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_schema_refuses_wrong_types_and_unknown_keys(case: str) -> None:
    values, message = BAD_VALUES[case]
    merged = json.loads(json.dumps(DEFAULTS))
    _deep_update(merged, values)
    errors = [error.message for error in jsonschema.Draft7Validator(SCHEMA).iter_errors(merged)]
    assert any(message in error for error in errors), errors


def _deep_update(target: dict[str, Any], changes: dict[str, Any]) -> None:
    for key, value in changes.items():
        if isinstance(value, dict) and isinstance(target.get(key), dict):
            _deep_update(target[key], value)
        else:
            target[key] = value


def write_values(directory: Path, name: str, values: dict[str, Any]) -> Path:
    path = directory / f"{name}.yaml"
    merged = json.loads(json.dumps(DEFAULTS))
    _deep_update(merged, values)
    # Helm drops keys set to null before validating; so does this file.
    path.write_text(yaml.safe_dump(_without_nulls(merged)))
    return path


def _without_nulls(values: Any) -> Any:
    if isinstance(values, dict):
        return {k: _without_nulls(v) for k, v in values.items() if v is not None}
    return values


def check_jsonschema(files: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--schemafile",
            str(CHART / "values.schema.json"),
            *map(str, files),
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_check_jsonschema_accepts_the_defaults_and_every_tested_combination(tmp_path: Path) -> None:
    files = [VALUES_FILE] + [
        write_values(tmp_path, name, values) for name, values in COMBINATIONS.items()
    ]
    result = check_jsonschema(files)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_jsonschema_refuses_each_bad_values_file(tmp_path: Path) -> None:
    files = [write_values(tmp_path, name, values) for name, (values, _) in BAD_VALUES.items()]
    result = check_jsonschema(files)
    assert result.returncode == 1
    for path in files:
        assert str(path) in result.stdout, f"{path.name} was accepted"


def test_helm_refuses_unknown_keys_and_wrong_types_before_rendering() -> None:
    assert "webhook: Additional property replica is not allowed" in render_error(
        {"webhook": {"replica": 2}}
    )
    assert "Invalid type. Expected: boolean, given: string" in render_error(
        {"webhook": {"lookup": "yes"}}
    )
    helm4 = render_error({"webhook": {"replica": 2}}, major="4")
    assert "at '/webhook': additional properties 'replica' not allowed" in helm4


# What each component's extraArgs are appended to.
COMMAND_OF = {"webhook": "serve", "sweeper": "sweep"}
ARGS_DEFINITION = {"serve": "serveArgs", "sweep": "sweepArgs"}
INSTALL_DOC = (CHART.parent.parent / "docs" / "install.md").read_text()


def command_parser(command: str) -> argparse.ArgumentParser:
    """The parser `trainhook serve` or `trainhook sweep` reads its command line with."""
    parser = argparse.ArgumentParser(prog=f"trainhook {command}")
    importlib.import_module(f"webhook.cli.{command}").add_arguments(parser)
    return parser


def parse_error(command: str, args: list[str]) -> str | None:
    """What the command says of `args` appended to its command line; None when it takes them."""
    errors = io.StringIO()
    with contextlib.redirect_stderr(errors):
        try:
            command_parser(command).parse_args(args)
        except SystemExit:
            return errors.getvalue().strip().splitlines()[-1]
    return None


def extra_args_examples() -> list[tuple[str, str, list[str]]]:
    """(where, component, args) for every extraArgs example values.yaml, the install guide and
    the chart's tested combinations give."""
    found = []
    for match in re.finditer(r"# (\w+)\.extraArgs: [^\n]*?e\.g\. (\[[^\]]*\])", DEFAULTS_TEXT):
        found.append(("values.yaml", match[1], json.loads(match[2])))
    for match in re.finditer(r"\| `(\w+)\.extraArgs` \| [^\n]*?e\.g\. `(\[[^\]]*\])`", INSTALL_DOC):
        found.append(("docs/install.md", match[1], json.loads(match[2])))
    for name, values in COMBINATIONS.items():
        for component in COMMAND_OF:
            args = (values.get(component) or {}).get("extraArgs")
            if args:
                found.append((f"combination {name}", component, args))
    return found


DEFAULTS_TEXT = VALUES_FILE.read_text()


def test_every_extra_args_example_is_taken_by_the_command_it_is_given_to() -> None:
    examples = extra_args_examples()
    shown = {(where, component) for where, component, _ in examples}
    assert {("values.yaml", "webhook"), ("values.yaml", "sweeper")} <= shown
    assert {("docs/install.md", "webhook"), ("docs/install.md", "sweeper")} <= shown
    refused = [
        (where, component, args, error)
        for where, component, args in examples
        if (error := parse_error(COMMAND_OF[component], args)) is not None
    ]
    assert refused == []


def schema_flags(command: str) -> set[str]:
    pattern = SCHEMA["definitions"][ARGS_DEFINITION[command]]["items"]["pattern"]
    names = re.fullmatch(r"\^\(\[\^-\]\.\*\|--\(([-a-z|]+)\)\(=\.\*\)\?\)\$", pattern)
    assert names is not None, pattern
    return {f"--{name}" for name in names[1].split("|")}


@pytest.mark.parametrize("command", sorted(ARGS_DEFINITION))
def test_the_schema_takes_exactly_the_flags_of_the_command(command: str) -> None:
    parser = command_parser(command)
    flags = {
        flag
        for action in parser._actions
        for flag in action.option_strings
        if flag.startswith("--") and flag != "--help"
    }
    definition = ARGS_DEFINITION[command]
    assert schema_flags(command) == flags, (
        f"values.schema.json's {definition} pattern must list the flags of trainhook {command}"
    )


@pytest.mark.parametrize(
    ("component", "args", "taken"),
    [
        ("webhook", ["--log-level=debug"], True),
        ("webhook", ["--workers", "4"], True),
        ("webhook", ["--no-lookup"], True),
        ("webhook", ["--log-format=json"], False),
        ("webhook", ["-v"], False),
        ("sweeper", ["--log-level=debug", "--resync-seconds=60"], True),
        ("sweeper", ["--workers=4"], False),  # a flag of the webhook, not of the sweeper
    ],
)
def test_the_schema_takes_the_extra_args_the_command_takes_and_refuses_the_others(
    component: str, args: list[str], taken: bool
) -> None:
    values = json.loads(json.dumps(DEFAULTS))
    values[component]["extraArgs"] = args
    errors = list(jsonschema.Draft7Validator(SCHEMA).iter_errors(values))
    assert (errors == [], parse_error(COMMAND_OF[component], args) is None) == (taken, taken)


def test_helm_refuses_an_extra_arg_the_webhook_does_not_know_instead_of_a_crashing_webhook() -> (
    None
):
    assert parse_error("serve", ["--log-format=json"]) == (
        "trainhook serve: error: unrecognized arguments: --log-format=json"
    )
    error = render_error({"webhook": {"extraArgs": ["--log-format=json"]}})
    assert "- webhook.extraArgs.0: Does not match pattern '^([^-].*|--(bind|" in error
    helm4 = render_error({"webhook": {"extraArgs": ["--log-format=json"]}}, major="4")
    assert "at '/webhook/extraArgs/0': '--log-format=json' does not match pattern" in helm4
