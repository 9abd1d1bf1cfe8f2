"""A test run tests the tree's source: it stops when a compiled module sits beside a source under
webhook/ (left by an older in-place build), since Python would import that instead. The image's
compiled build is checked apart, installed in a virtualenv of its own (`make image-check`)."""

from __future__ import annotations

import pytest

from tests.support.compiled import compiled_modules_in_tree
from tests.support.serving import ROOT


def pytest_sessionstart(session: pytest.Session) -> None:
    import webhook

    if not webhook.__file__ or not webhook.__file__.startswith(str(ROOT / "webhook")):
        return  # the installed image build, under `make image-check`
    shadowed = compiled_modules_in_tree(ROOT)
    if shadowed:
        pytest.exit(
            f"{', '.join(shadowed[:3])}{' and more' if len(shadowed) > 3 else ''} has a compiled "
            "module beside it in the tree, which tests would import instead of the source: "
            "`make clean` removes them (the compiled build is `make image-check`'s)",
            returncode=2,
        )
