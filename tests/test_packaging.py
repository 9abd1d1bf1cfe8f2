"""The package's metadata as pip and the chart read it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def test_license_is_an_spdx_expression_that_the_pinned_setuptools_understands() -> None:
    # The table form ({text = ...}) makes every build print a deprecation warning; the string
    # form needs setuptools 77 or later in the build requirements.
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in PYPROJECT["build-system"]["requires"] if "setuptools" in r]
    minimum = re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert minimum is not None and int(minimum.group(1)) >= 77


def test_one_version_for_the_package_the_command_and_the_chart() -> None:
    import subprocess
    import sys

    import yaml

    from webhook import __version__

    version = PYPROJECT["project"]["version"]
    chart = yaml.safe_load((REPO / "charts" / "trainhook" / "Chart.yaml").read_text())
    assert __version__ == version
    assert chart["appVersion"] == version
    shown = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "--version"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (shown.returncode, shown.stdout) == (0, f"trainhook {version}\n")
