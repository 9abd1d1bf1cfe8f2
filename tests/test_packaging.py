"""The package's metadata as pip and the chart read it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

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


@pytest.mark.e2e  # installs the wheel's dependencies from the registries: about a minute
def test_the_wheel_make_builds_installs_the_commands_in_a_fresh_venv(tmp_path: Path) -> None:
    """README's install without PyPI: `make wheel`, then pip install of the wheel alone."""
    import os
    import subprocess
    import sys

    dist = tmp_path / "dist"
    subprocess.run(
        ["make", "--no-print-directory", "-C", str(REPO), "wheel", f"DIST={dist}"],
        check=True,
        capture_output=True,
    )
    (wheel,) = dist.glob("trainhook-*-py3-none-any.whl")
    assert wheel.name == f"trainhook-{PYPROJECT['project']['version']}-py3-none-any.whl"
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    subprocess.run(
        [str(bin_dir / "pip"), "install", "--quiet", str(wheel)], check=True, capture_output=True
    )
    # Away from the clone, so nothing is imported from the working tree.
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    version = subprocess.run(
        ["trainhook", "--version"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert (version.returncode, version.stdout) == (
        0,
        f"trainhook {PYPROJECT['project']['version']}\n",
    )
    corpus = REPO / "tests" / "corpus" / "training-operator" / "pytorchjob-simple.yaml"
    migrated = subprocess.run(
        ["kubectl-trainhook", "migrate", str(corpus)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert migrated.returncode == 0, migrated.stderr
    assert migrated.stdout.count("kind: StatefulSet") == 2


def test_the_license_file_is_apache_2_and_the_wheel_carries_it(tmp_path: Path) -> None:
    """pyproject.toml says Apache-2.0; LICENSE holds its text, and setuptools' default
    license-files put it into every wheel (and so into the image's installed package)."""
    import os
    import shutil
    import subprocess
    import sys
    import zipfile

    text = (REPO / "LICENSE").read_text()
    assert text.split()[:4] == ["Apache", "License", "Version", "2.0,"]
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md", "LICENSE"):
        shutil.copy(REPO / name, source / name)
    shutil.copytree(REPO / "webhook", source / "webhook", ignore=shutil.ignore_patterns("*.so"))
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    built = subprocess.run(
        [*pip_wheel, "--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"), str(source)],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "TRAINHOOK_COMPILE": "0"},  # plain Python, as pip install . builds
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("trainhook-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        info = f"trainhook-{PYPROJECT['project']['version']}.dist-info"
        assert archive.read(f"{info}/licenses/LICENSE").decode() == text
        metadata = archive.read(f"{info}/METADATA").decode()
    assert "License-Expression: Apache-2.0" in metadata.splitlines()
    assert "License-File: LICENSE" in metadata.splitlines()
