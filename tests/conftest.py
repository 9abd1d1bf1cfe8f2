"""The modules `make` compiles are imported before their source: a test run stops when the
compiled copy is older than the source, so it never tests code other than the tree's."""

from __future__ import annotations

import pytest

from tests.support.compiled import stale_compiled_modules
from tests.support.serving import ROOT


def pytest_sessionstart(session: pytest.Session) -> None:
    stale = stale_compiled_modules(ROOT)
    if stale:
        pytest.exit(
            f"{', '.join(stale[:3])}{' and more' if len(stale) > 3 else ''} changed after "
            "it was compiled: `make test` compiles it again, and without webhook's *.so files "
            "the tests run plain Python",
            returncode=2,
        )
