"""What `make` compiles with mypyc is the admission path setup.py names, and a test run never
imports a compiled module older than its source."""

from __future__ import annotations

import importlib
import os
import runpy
from pathlib import Path

import pytest

from tests.support.compiled import stale_compiled_modules
from tests.support.serving import ROOT

COMPILED_BY_MAKE = ROOT / ".venv" / ".compiled"


def admission_path() -> list[str]:
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="trainhook_setup")
    modules: list[str] = setup["admission_path"]()
    return modules


def test_setup_compiles_the_core_and_the_review_handler_not_migration_rendering_errors() -> None:
    modules = admission_path()

    assert "webhook/core/pod_mutation.py" in modules
    assert "webhook/core/frameworks/tensorflow.py" in modules
    assert "webhook/core/compat/volcano.py" in modules
    assert [m for m in modules if not m.startswith("webhook/core/")] == [
        "webhook/server/admission.py"  # the handler of one review, around the core
    ]
    assert [m for m in modules if m.endswith("/__init__.py")] == []
    assert "webhook/core/errors.py" not in modules
    assert "webhook/core/render.py" not in modules
    assert [m for m in modules if m.startswith("webhook/core/migrate/")] == []


@pytest.mark.skipif(not COMPILED_BY_MAKE.exists(), reason="run by `make test`, which compiles")
def test_every_module_of_the_admission_path_is_imported_compiled_after_make() -> None:
    interpreted = []
    for module in admission_path():
        name = module.removesuffix(".py").replace("/", ".")
        if not str(importlib.import_module(name).__file__).endswith(".so"):
            interpreted.append(name)

    assert interpreted == []


def test_a_source_changed_after_its_module_was_compiled_is_named(tmp_path: Path) -> None:
    core = tmp_path / "webhook" / "core"
    core.mkdir(parents=True)
    for name in ("admit", "topology"):
        (core / f"{name}.py").write_text("")
        (core / f"{name}.cpython-311-x86_64-linux-gnu.so").write_bytes(b"")
    (core / "plain.py").write_text("")
    os.utime(core / "topology.cpython-311-x86_64-linux-gnu.so", (1_000_000, 1_000_000))

    assert stale_compiled_modules(tmp_path) == ["webhook/core/topology.py"]
