"""`make demo`, the first command of the README: it admits every example over TLS and finds each
pod the same as `trainhook render` makes it, then plays one job's life through a real
`trainhook sweep` process, shown by `trainhook status`."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def demo() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "scripts/demo.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_demo_admits_every_example_as_render_shows_it(demo) -> None:
    assert demo.returncode == 0, demo.stderr[-3000:]
    lines = demo.stdout.splitlines()
    assert "Every pod is identical to what `trainhook render examples/` makes offline." in lines
    assert re.fullmatch(r"\d+ admissions over TLS \(.*\); the server has stopped\.", lines[-1])


def test_the_demo_heads_each_job_as_render_does(demo) -> None:
    rendered = subprocess.run(
        [sys.executable, "-m", "webhook.cli", "render", "examples/"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout

    shown = [line for line in demo.stdout.splitlines() if line.startswith("job ")]

    assert "job pi (mpi, MPICH, namespace default, 3 pods)" in shown
    assert len(shown) >= 15
    assert [line for line in shown if line not in rendered.splitlines()] == []


def test_the_demo_shows_the_sweeper_restart_a_failed_job_until_it_succeeds(demo) -> None:
    assert demo.returncode == 0, demo.stderr[-3000:]
    rows = _status_rows(demo.stdout)

    assert [(row["PHASE"], row["REASON"], row["RESTARTS"]) for row in rows] == [
        ("Running", "Running", "0"),
        ("Restarting", "Error", "0"),
        ("Running", "Running", "1"),
        ("Succeeded", "Completed", "1"),
    ]
    assert {row["JOB"] for row in rows} == {"pytorch-mnist"}
    assert rows[0]["ROLES"] == rows[2]["ROLES"] == "master 1/1, worker 2/2"
    assert rows[1]["ROLES"] == "master 1/1, worker 1/2"  # the rank that exited 1
    assert rows[3]["ROLES"] == "master 0/0, worker 0/0"  # scaled to 0 once it succeeded
    assert "pytorch-mnist-worker-1's training container exited with code 1" in demo.stdout
    took = re.search(r"The job's life took (\d+) s; the sweeper and the played", demo.stdout)
    assert took is not None and int(took[1]) < 60


def _status_rows(output: str) -> list[dict[str, str]]:
    """The job's row of every `trainhook status -n ml` the demo ran, by column."""
    lines = [line.strip() for line in output.splitlines()]
    rows = []
    for at, line in enumerate(lines):
        if line == "$ trainhook status -n ml":
            header = re.split(r"\s{3,}", lines[at + 1])
            cells = re.split(r"\s{3,}", lines[at + 2])
            assert header[0] == "JOB" and len(cells) == len(header), lines[at : at + 3]
            rows.append(dict(zip(header, cells, strict=True)))
    return rows
