#!/usr/bin/env python3
"""Compile the admission path in place (setup.py), or take the same build from the cache.

mypyc takes a minute and a half for the admission path; a fresh clone of a commit already built
on this machine gets the very same extensions from `<cache>/<key>/`, where the key is a digest of
every input of the build: setup.py, each module's path and source (the compiled ones and those
they are compiled against, as setup.py's `build_inputs` names them), mypy (which ships mypyc),
this Python and its C compiler. Anything else is compiled and then kept there (the newest `KEEP`
builds). Extensions taken from the cache are dated now, as a build's would be, so that none looks
older than its source (tests/conftest.py stops on one that does).

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
    # Every core module, compiled or not (mypyc compiles against the ones it leaves interpreted),
    # and the server's compiled module with those it imports: setup.py (this tree's) names them.
    setup = runpy.run_path(str(ROOT / "setup.py"), run_name="trainhook_setup")
    for path in setup["build_inputs"]():
        digest.update(path.encode() + b"\0" + (ROOT / path).read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def _compiler() -> str:
    compiler = (sysconfig.get_config_var("CC") or "cc").split()[0]
    try:
        found = subprocess.run(
            [compiler, "--version"], capture_output=True, text=True, check=False, timeout=30
        )
    except OSError:
        return compiler
    return found.stdout.splitlines()[0] if found.stdout else compiler


def built_extensions() -> list[Path]:
    return sorted(p.relative_to(ROOT) for p in (ROOT / "webhook").rglob("*.so"))


def take(kept: Path) -> bool:
    """Copy a kept build into the tree, dated now; False when there is none."""
    if not (kept / "complete").exists():
        return False
    for path in built_extensions():  # a build that left more modules compiled than this one
        (ROOT / path).unlink()
    for source in (kept / "webhook").rglob("*.so"):
        target = ROOT / source.relative_to(kept)
        shutil.copyfile(source, target)
        target.chmod(0o755)
    return True


def keep(cache: Path, key: str) -> None:
    """Store the tree's extensions under `key`, whole or not at all, and drop the oldest."""
    cache.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".incoming-", dir=cache))
    for path in built_extensions():
        (staging / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / path, staging / path)
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


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    cache = Path(argv[0])
    key = build_key()
    if take(cache / key):
        os.utime(cache / key)  # most recently used
        print(f"compile: the admission path as built before ({cache / key})")
        return 0
    command = [sys.executable, "setup.py", "--quiet", "build_ext", "--inplace", "--force"]
    built = subprocess.run(command, cwd=ROOT, check=False)
    if built.returncode != 0:
        return built.returncode
    try:
        keep(cache, key)
    except OSError as error:  # a cache that cannot be written costs the next clone a build
        print(f"compile: not kept in {cache}: {error}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
