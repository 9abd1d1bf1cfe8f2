"""The install commands in README.md and docs/install.md work against the chart as written."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

from tests.chart.rendering import (
    CA_BUNDLE,
    CHART,
    NAMESPACE,
    OLDEST_KUBERNETES,
    REPO,
    helm,
    run_helm,
)
from tests.chart.test_values import SCHEMA, chart_defined_keys, resolve
from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS

README = (REPO / "README.md").read_text()
INSTALL_DOC = (REPO / "docs" / "install.md").read_text()


def install_section() -> str:
    return README.split("## Install\n", 1)[1].split("\n## ", 1)[0]


def shell_commands(markdown: str) -> list[list[str]]:
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", markdown, flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #", 1)[0].strip()
            if line:
                commands.append(shlex.split(line.replace('"$(base64 -w0 ca.crt)"', CA_BUNDLE)))
    return commands


def helm_commands(markdown: str) -> list[list[str]]:
    return [
        c for c in shell_commands(markdown) if c[0] == "helm" and c[1] in ("install", "upgrade")
    ]


def as_template(command: list[str]) -> list[str]:
    """The same release and settings, rendered with `helm template` instead of installed."""
    _, _, release, chart, *options = command
    kept = []
    for i, option in enumerate(options):
        if option in ("--set", "--set-string"):
            kept += [option, options[i + 1]]
        elif option.startswith(("--set=", "--set-string=")):
            kept.append(option)
    return [
        "template",
        release,
        str(REPO / chart),
        "--namespace",
        NAMESPACE,
        "--kube-version",
        OLDEST_KUBERNETES,
        *kept,
    ]


def test_readme_installs_the_chart_with_one_helm_install_line() -> None:
    (command,) = helm_commands(install_section())
    assert command[:4] == ["helm", "install", "trainhook", "./charts/trainhook"]
    assert REPO / command[3] == CHART
    assert {"--namespace", "--create-namespace", "--wait"} <= set(command)


def test_readme_opts_in_an_existing_statefulset_with_the_framework_label() -> None:
    (label,) = [c for c in shell_commands(install_section()) if c[:2] == ["kubectl", "label"]]
    assert label[2] == "statefulset"
    key, value = label[4].split("=")
    assert key == contract.FRAMEWORK
    assert value in FRAMEWORKS
    assert "docs/gitops.md" in install_section()


def as_documented(command: list[str]) -> str:
    """A command's test id, with the docs' `$(base64 -w0 ca.crt)` in place of the test's CA
    (made afresh in each process, so the same in every pytest worker)."""
    return shlex.join(command).replace(CA_BUNDLE, "$(base64 -w0 ca.crt)")


@pytest.mark.parametrize(
    "command", helm_commands(INSTALL_DOC) + helm_commands(install_section()), ids=as_documented
)
def test_every_documented_helm_command_renders_with_the_schema(command: list[str]) -> None:
    assert helm()  # fetched
    result = run_helm(as_template(command), None)
    assert result.returncode == 0, result.stderr


def test_the_documented_opt_in_selector_reaches_the_configuration() -> None:
    (command,) = [c for c in helm_commands(INSTALL_DOC) if any("namespaceSelector" in a for a in c)]
    result = run_helm(as_template(command), None)
    assert 'trainhook.io/enabled: "true"' in result.stdout


def is_option(dotted: str) -> bool:
    """A key that takes a value (not a group of keys)."""
    schema = SCHEMA
    for part in dotted.split("."):
        schema = resolve(schema["properties"][part])
    return "properties" not in schema


def test_install_guide_names_every_option_of_the_chart() -> None:
    values_file = CHART / "values.yaml"
    root = yaml.compose(values_file.read_text())
    assert isinstance(root, yaml.MappingNode), "values.yaml is one mapping of keys"
    keys = [key for key, _ in chart_defined_keys(root, SCHEMA) if is_option(key)]
    missing = [key for key in keys if f"`{key}`" not in INSTALL_DOC]
    assert len(keys) > 100
    assert missing == []
