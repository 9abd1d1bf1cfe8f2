"""The package's metadata as pip and the chart read it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())


def test_license_is_an_spdx_expression_that_the_pinned_setuptools_understands() -> None:
    # The table form ({text = ...}) makes every build print a deprecation warning; the string
    # form needs setuptools 77 or later in the build requirements.
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    (setuptools,) = [r for r in PYPROJECT["build-system"]["requires"] if "setuptools" in r]
    minimum = re.fullmatch(r"setuptools>=(\d+)", setuptools)
    assert minimum is not None and int(minimum.group(1)) >= 77
