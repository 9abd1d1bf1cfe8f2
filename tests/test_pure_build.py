"""`pip install .` and the make targets a newcomer runs build plain Python: no C compiler is
needed, and only the image's build (TRAINHOOK_COMPILE=1) compiles the admission path."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_setup_builds_no_extension_unless_the_image_build_asks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    setup = runpy.run_path(str(REPO / "setup.py"), run_name="trainhook_setup")
    monkeypatch.delenv("TRAINHOOK_COMPILE", raising=False)

    assert setup["extensions"]() == []


def test_a_build_with_no_c_compiler_on_path_makes_a_pure_python_wheel(tmp_path: Path) -> None:
    # Only this Python's own directory on PATH, and a C compiler that does not exist: a build
    # that reached for one would fail.
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "python").symlink_to(sys.executable)
    environment = {
        "PATH": str(tools),
        "CC": str(tmp_path / "no-cc"),
        "HOME": str(tmp_path),
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    built = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--wheel-dir", str(tmp_path / "dist"), str(REPO)),
        ],
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert built.returncode == 0, built.stderr
    assert [wheel.name for wheel in (tmp_path / "dist").iterdir()] == [
        "trainhook-0.1.0-py3-none-any.whl"
    ]


def test_the_newcomer_targets_do_not_depend_on_the_compiled_build() -> None:
    makefile = (REPO / "Makefile").read_text()
    targets = {
        line.partition(":")[0]: line.partition(":")[2].split()
        for line in makefile.splitlines()
        if line and not line[0].isspace() and ":" in line and "=" not in line.partition(":")[0]
    }

    for target in ("demo", "test", "lint", "e2e", "wheel"):
        assert "$(IMAGE_STAMP)" not in targets[target], target
    assert "$(IMAGE_STAMP)" in targets["bench"]
    assert "$(IMAGE_STAMP)" in targets["image-check"]
