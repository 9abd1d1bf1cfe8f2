"""Compiled modules left in the source tree, which a test run would import instead of the source
(tests/conftest.py stops on them), and whether the running webhook package is compiled."""

from __future__ import annotations

from pathlib import Path


def compiled_modules_in_tree(root: Path) -> list[str]:
    """Sources under webhook/ that have a compiled extension beside them."""
    shadowed = []
    for extension in sorted((root / "webhook").rglob("*.so")):
        source = extension.with_name(extension.name.partition(".")[0] + ".py")
        shadowed.append(source.relative_to(root).as_posix())
    return shadowed
