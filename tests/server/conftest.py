"""Fixtures: development certificates and one shared `trainhook serve`."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.serving import Webhook, serving
from webhook.certs.material import generate


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    generate(directory, "trainhook", "trainhook-system")
    return directory


@pytest.fixture(scope="session")
def webhook(certs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    """One server for the tests that do not stop or reconfigure it: two workers."""
    log = tmp_path_factory.mktemp("webhook") / "serve.log"
    with serving(certs, log, "--workers=2") as running:
        yield running
