#!/usr/bin/env python3
"""Build the webhook image's wheel (its admission path compiled with mypyc), or take it from cache.

The image (Dockerfile) installs Trainhook built with `TRAINHOOK_COMPILE=1`; `make bench` and
`make image-check` install this same build into a virtualenv of their own, so what they measure
and check is what the chart's image runs. Nothing is compiled in the source tree: `make demo`,
`make test` and `pip install .` stay plain Python.

mypyc takes a minute and a half; the wheel is kept in `<cache>/<key>/`, where the key is a digest
of every input of the build: setup.py, pyproject.toml, every file of the package (the compiled
modules, those they are compiled against, and the rest the wheel carries as they are: a wheel
kept for an older sweeper would have the bench measure that one), mypy (which ships mypyc), this
Python and its C compiler. The newest `KEEP` builds are kept. Prints the wheel's path.

Usage: python scripts/compile.py CACHE_DIR     (run it with the project's virtualenv Python)
"""

from __future__ import annotations

import hashlib
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KEEP = 5


def build_key() -> str:
    import mypy.version

    digest = hashlib.sha256()
    for part in (
        mypy.version.__version__,
        sys.version,
        sysconfig.get_config_var("SOABI") or "",
        _compiler(),
    ):
        digest.update(part.encode() + b"\0")
    # What mypyc compiles and compiles against (setup.py, this tree's, names them), then every
    # other file the wheel packs.
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="trainhook_setup")
    inputs = [*setup["build_inputs"](), "pyproject.toml", *package_files()]
    for path in dict.fromkeys(inputs):
        digest.update(path.encode() + b"\0" + (ROOT / path).read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def package_files() -> list[str]:
    """Every file of the `webhook` package the wheel is built from, by path, sorted."""
    return sorted(
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "webhook").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts and path.suffix not in (".so", ".pyc")
    )


def _compiler() -> str:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    try:
        found = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, check=False, timeout=30
        )
    except OSError:
        return compiler
    return found.stdout.splitlines()[0] if found.stdout else compiler


def kept_wheel(kept: Path) -> Path | None:
    """The wheel of a build kept whole under `kept`, or None."""
    if not (kept / "complete").exists():
        return None
    wheels = sorted(kept.glob("trainhook-*.whl"))
    return wheels[0] if len(wheels) == 1 else None


def keep(cache: Path, key: str, wheel: Path) -> Path:
    """Store `wheel` under `key`, whole or not at all, drop the oldest builds; the kept path."""
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=cache))
    shutil.copyfile(wheel, staging / wheel.name)
    (staging / "complete").touch()
    try:
        staging.rename(cache / key)
    except OSError:  # kept meanwhile by another build of the same key
        shutil.rmtree(staging, ignore_errors=True)
    builds = sorted(
        (p for p in cache.iterdir() if p.is_dir() and not p.name.startswith(".")),
        key=lambda p: p.stat().st_mtime,
    )
    for old in builds[:-KEEP]:
        shutil.rmtree(old, ignore_errors=True)
    return cache / key / wheel.name


def build(into: Path) -> Path:
    """Build the compiled wheel from this tree into `into` (mypy from this Python's environment)."""
    environment = {**os.environ, "TRAINHOOK_COMPILE": "1"}
    command = [
        *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation"),
        *("--wheel-dir", str(into), str(ROOT)),
    ]
    subprocess.run(command, cwd=ROOT, env=environment, check=True)
    (wheel,) = into.glob("trainhook-*.whl")
    return wheel


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    cache = Path(argv[0])
    key = build_key()
    wheel = kept_wheel(cache / key)
    if wheel is not None:
        os.utime(cache / key)  # most recently used
        print(f"compile: the image's wheel as built before ({wheel})", file=sys.stderr)
        print(wheel)
        return 0
    with tempfile.TemporaryDirectory(prefix="trainhook-wheel-") as scratch:
        try:
            built = build(Path(scratch))
        except subprocess.CalledProcessError as error:
            return error.returncode or 1
        try:
            wheel = keep(cache, key, built)
        except OSError as error:  # a cache that cannot be written costs the next clone a build
            print(f"compile: not kept in {cache}: {error}", file=sys.stderr)
            wheel = Path(tempfile.mkdtemp(prefix="trainhook-wheel-")) / built.name
            shutil.copyfile(built, wheel)
    print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
