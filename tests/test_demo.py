"""`make demo`, the first command of the README, admits every example over TLS and finds each
pod the same as `trainhook render` makes it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_demo_admits_every_example_as_render_shows_it() -> None:
    result = subprocess.run(
        [sys.executable, "scripts/demo.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert result.returncode == 0, result.stderr[-2000:]
    last = result.stdout.strip().splitlines()[-1]
    assert last == "Every pod is identical to what `trainhook render examples/` makes offline."
