"""Builds Trainhook. pyproject.toml holds what the package is; this can compile its admission path.

A build is plain Python unless `TRAINHOOK_COMPILE=1` asks for the webhook image's build: then the
modules every admission runs are compiled with mypyc into C extensions from the same typed source,
and the review's handler costs about two thirds of its interpreted time (docs/performance.md).
That build needs a C compiler, Python's headers and mypy in the build environment (the Dockerfile
installs them and builds with `--no-build-isolation`); `make bench` measures the same build.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).parent
# What no admission runs stays Python (the migration and offline rendering), and so do the core's
# errors, whose class attributes the server reads and mypyc would make instance attributes.
INTERPRETED = ("webhook/core/migrate/", "webhook/core/render.py", "webhook/core/errors.py")
# The compiled modules' shared library, inside the package so that it is found wherever the
# package is (an editable install maps only `webhook`). The packages' `__init__.py` stay Python:
# a compiled one would look for its modules beside that library rather than beside itself.
GROUP = "webhook.admission"
# Beyond the core, the server's handler of one review (decoding it, calling the core, building the
# answer: no Flask, no I/O), which every request runs; and the server modules it is compiled
# against, which stay Python.
SERVER = ("webhook/server/admission.py",)
SERVER_IMPORTS = ("webhook/server/reviews.py", "webhook/server/shape.py")


def _core() -> list[str]:
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "webhook/core").rglob("*.py"))


def admission_path() -> list[str]:
    compiled = [
        module
        for module in _core()
        if not module.startswith(INTERPRETED) and not module.endswith("/__init__.py")
    ]
    return compiled + list(SERVER)


def build_inputs() -> list[str]:
    """Every source the build reads: what it compiles and what that is compiled against."""
    return ["setup.py", *_core(), *SERVER, *SERVER_IMPORTS]


def extensions() -> list[Extension]:
    if os.environ.get("TRAINHOOK_COMPILE") != "1":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        raise SystemExit(
            "TRAINHOOK_COMPILE=1 needs mypy (which ships mypyc) in the build environment: "
            "pip install 'mypy==2.4.1' 'orjson>=3.10' 'msgspec>=0.19', "
            "then build with --no-build-isolation"
        ) from None

    return mypycify(admission_path(), opt_level="3", group_name=GROUP)


if __name__ == "__main__":  # as setuptools runs it; tests/test_compiled.py reads the list
    setup(ext_modules=extensions())
