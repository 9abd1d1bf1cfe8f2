"""The package stays easy to hold in one's head: folders of about a dozen modules, none over 600
lines, the sweeper's pure modules under the purity contract, and bench/ and scripts/ built on
tests/support alone."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE = REPO / "webhook"
MOST_MODULES = 12
MOST_LINES = 600


def modules_in(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")


def test_no_folder_of_the_package_holds_more_than_a_dozen_modules() -> None:
    crowded = {
        folder.relative_to(REPO).as_posix(): len(modules_in(folder))
        for folder in [PACKAGE, *PACKAGE.rglob("*")]
        if folder.is_dir() and len(modules_in(folder)) > MOST_MODULES
    }

    assert crowded == {}


def test_no_module_of_the_package_is_over_six_hundred_lines() -> None:
    long = {
        path.relative_to(REPO).as_posix(): lines
        for path in PACKAGE.rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > MOST_LINES
    }

    assert long == {}


def test_every_pure_sweeper_module_is_under_the_purity_contract() -> None:
    contracts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]
    (purity,) = [c for c in contracts["contracts"] if c["name"].startswith("The sweeper's")]

    assert purity["source_modules"] == ["webhook.sweeper.decide", "webhook.sweeper.job"]
    assert {"threading", "time", "socket", "kubernetes"} <= set(purity["forbidden_modules"])


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_bench_and_scripts_import_only_the_shared_test_support() -> None:
    sources = [*(REPO / "bench").rglob("*.py"), *(REPO / "scripts").glob("*.py")]
    reaching_into_tests = {
        f"{path.relative_to(REPO).as_posix()}: {name}"
        for path in sources
        for name in imported_modules(path)
        if name.split(".")[0] == "tests" and not name.startswith("tests.support")
    }

    assert sources and reaching_into_tests == set()
