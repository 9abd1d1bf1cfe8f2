"""The modules `make` compiles are imported before their source: a test run stops when the
compiled copy is older than the source, so it never tests code other than the tree's."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def stale_compiled_modules(root: Path = ROOT) -> list[str]:
    """Sources under webhook/ changed after the extension compiled from them."""
    stale = []
    for extension in sorted((root / "webhook").rglob("*.so")):
        source = extension.with_name(extension.name.partition(".")[0] + ".py")
        if source.exists() and source.stat().st_mtime > extension.stat().st_mtime:
            stale.append(source.relative_to(root).as_posix())
    return stale


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_compiled_modules()
    if stale:
        pytest.exit(
            f"{', '.join(stale[:3])}{' and more' if len(stale) > 3 else ''} changed after "
            "it was compiled: `make test` compiles it again, and without webhook's *.so files "
            "the tests run plain Python",
            returncode=2,
        )
