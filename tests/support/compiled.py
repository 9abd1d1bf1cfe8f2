"""Which compiled modules under webhook/ are older than their source (tests/conftest.py stops a
run on them)."""

from __future__ import annotations

from pathlib import Path


def stale_compiled_modules(root: Path) -> list[str]:
    """Sources under webhook/ changed after the extension compiled from them."""
    stale = []
    for extension in sorted((root / "webhook").rglob("*.so")):
        source = extension.with_name(extension.name.partition(".")[0] + ".py")
        if source.exists() and source.stat().st_mtime > extension.stat().st_mtime:
            stale.append(source.relative_to(root).as_posix())
    return stale
