"""Builds Trainhook. pyproject.toml holds what the package is; this compiles its admission path.

The modules every admission runs are compiled with mypyc into C extensions from the same typed
source: the review's handler then costs about two thirds of its interpreted time
(docs/performance.md). `TRAINHOOK_PURE=1` builds the package as plain Python, as `make wheel`
does for the command-line tools.
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
    if os.environ.get("TRAINHOOK_PURE") == "1":
        return []
    from mypyc.build import mypycify

    return mypycify(admission_path(), opt_level="3", group_name=GROUP)


if __name__ == "__main__":  # as setuptools runs it; tests/test_compiled.py reads the list
    setup(ext_modules=extensions())
