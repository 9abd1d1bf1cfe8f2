"""The image's compiled wheel is built once per set of inputs on a machine: a fresh clone of a
commit built before takes the kept wheel (scripts/compile.py), and any change to what the build
reads makes a new one."""

from __future__ import annotations

import ast
import importlib.util
import os
import runpy
import shutil
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def compile_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compile_script", ROOT / "scripts/compile.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def clone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The script, working on a copy of the tree's build inputs: the package and its setup."""
    tree = tmp_path / "clone"
    shutil.copytree(
        ROOT / "webhook", tree / "webhook", ignore=shutil.ignore_patterns("*.so", "__pycache__")
    )
    for name in ("setup.py", "pyproject.toml"):
        shutil.copyfile(ROOT / name, tree / name)
    script = compile_script()
    monkeypatch.setattr(script, "ROOT", tree)
    return script


def built_wheel(tmp_path: Path, content: bytes = b"compiled") -> Path:
    wheel = tmp_path / "built" / "trainhook-0.1.0-cp311-cp311-linux_x86_64.whl"
    wheel.parent.mkdir(parents=True, exist_ok=True)
    wheel.write_bytes(content)
    return wheel


def test_a_fresh_clone_takes_the_kept_wheel(clone: ModuleType, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    kept = clone.keep(cache, "k1", built_wheel(tmp_path))

    assert clone.kept_wheel(cache / "k1") == kept
    assert kept.read_bytes() == b"compiled"
    assert kept.name == "trainhook-0.1.0-cp311-cp311-linux_x86_64.whl"


def test_a_build_kept_only_in_part_is_not_taken(clone: ModuleType, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    clone.keep(cache, "k1", built_wheel(tmp_path))
    (cache / "k1" / "complete").unlink()

    assert clone.kept_wheel(cache / "k1") is None
    assert clone.kept_wheel(cache / "never-built") is None


def test_any_change_to_what_the_build_reads_changes_the_key(clone: ModuleType) -> None:
    source = clone.ROOT / "webhook/core/patch.py"
    first = clone.build_key()
    text = source.read_text()

    source.write_text(text + "\n")
    changed = clone.build_key()
    source.write_text(text)

    assert changed != first
    assert clone.build_key() == first
    interpreted = clone.ROOT / "webhook/core/errors.py"  # compiled against, not compiled
    interpreted.write_text(interpreted.read_text() + "\n")
    assert clone.build_key() != first
    interpreted.write_text(interpreted.read_text()[:-1])
    imported = clone.ROOT / "webhook/server/reviews.py"  # the compiled server module imports it
    imported.write_text(imported.read_text() + "\n")
    assert clone.build_key() != first
    imported.write_text(imported.read_text()[:-1])
    assert clone.build_key() == first
    (clone.ROOT / "setup.py").write_text((clone.ROOT / "setup.py").read_text() + "#\n")
    assert clone.build_key() != first
    (clone.ROOT / "setup.py").write_text((clone.ROOT / "setup.py").read_text()[:-2])
    (clone.ROOT / "pyproject.toml").write_text((clone.ROOT / "pyproject.toml").read_text() + "#\n")
    assert clone.build_key() != first


def test_a_change_to_a_module_the_wheel_carries_uncompiled_changes_the_key(
    clone: ModuleType,
) -> None:
    # The wheel packs the sweeper as it is: a build kept for an older one would have the bench
    # and image-check run that older sweeper.
    first = clone.build_key()
    sweeper = clone.ROOT / "webhook/sweeper/runner.py"
    sweeper.write_text(sweeper.read_text() + "\n")
    assert clone.build_key() != first
    sweeper.write_text(sweeper.read_text()[:-1])
    added = clone.ROOT / "webhook/sweeper/added.py"
    added.write_text("")
    assert clone.build_key() != first
    added.unlink()
    assert clone.build_key() == first


def test_make_builds_the_image_wheel_again_when_any_source_the_build_reads_changes() -> None:
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="trainhook_setup")
    makefile = (ROOT / "Makefile").read_text()
    listed = makefile.partition("ADMISSION :=")[2].partition("\n#")[0]

    assert "$(shell find webhook -type f" in listed  # every file the wheel packs
    beyond_package = [p for p in setup["build_inputs"]() if not p.startswith("webhook/")]
    assert beyond_package == ["setup.py"]
    assert [p for p in [*beyond_package, "pyproject.toml"] if p not in listed.split()] == []


def test_the_build_reads_every_server_module_the_compiled_one_imports() -> None:
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="trainhook_setup")
    compiled = [p for p in setup["admission_path"]() if p.startswith("webhook/server/")]
    modules = [
        node.module or ""
        for path in compiled
        for node in ast.walk(ast.parse((ROOT / path).read_text()))
        if isinstance(node, ast.ImportFrom)
    ]
    imported = {f"{m.replace('.', '/')}.py" for m in modules if m.startswith("webhook.server")}

    assert imported == {"webhook/server/reviews.py", "webhook/server/shape.py"}
    assert imported <= set(setup["build_inputs"]())


def test_only_the_newest_builds_are_kept(clone: ModuleType, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    for number in range(clone.KEEP + 2):
        clone.keep(cache, f"k{number}", built_wheel(tmp_path))
        os.utime(cache / f"k{number}", (number * 100, number * 100))

    clone.keep(cache, "newest", built_wheel(tmp_path))

    kept = sorted(p.name for p in cache.iterdir())
    assert kept == sorted(["newest"] + [f"k{n}" for n in range(3, clone.KEEP + 2)])
