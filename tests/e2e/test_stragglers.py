"""A straggler caught end to end: three ranks of a job run the same CPU work per step in real
processes, one of them held to a twentieth of a CPU by a cgroup CPU quota, as a throttled GPU or a
noisy neighbour would hold it. Each reports its step time with examples/progress/
trainhook_progress.py, with its own pod's token, over real TLS to the sweeper's progress
endpoint, within the job's report rate; the endpoint names the throttled rank, its pod and its
node on the job, and `trainhook describe` shows it.

The pods are the webhook's (a StatefulSet with `trainhook.io/report-progress` and
`trainhook.io/straggler-threshold` admitted by the core, its pods made as the StatefulSet
controller makes them, bound to a node each and admitted too); the kubelet's part is played as
in test_progress.py. The quota is a cgroup's: `cpu.max` where the unified hierarchy has the CPU
controller, else the v1 CPU controller's `cpu.cfs_quota_us` (root only).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.emulator import EmulatorThread, emulator
from webhook.certs.material import generate
from webhook.cli import main
from webhook.core import contract
from webhook.core.job.progress import ProgressEndpoint
from webhook.sweeper.serving.progress import Limits, ProgressDesk

from .test_progress import (
    REPORTER,
    admitted,
    controller_pods,
    point_clients_at,
    serving_desk,
    start_pod_files,
)

pytestmark = pytest.mark.e2e

NAMESPACE = "ml"
JOB = "strag"
SHARE = 0.05  # of one CPU, for the throttled rank
THROTTLED = 2  # the rank held to it
THRESHOLD = {contract.STRAGGLER_THRESHOLD: "2"}

# The same work every step on every rank, timed by the reporter between steps; every rank
# reports its step time every 3 s (three pods: once a second for the job, its rate).
RANK_LOOP = """
import time
from trainhook_progress import Progress

progress = Progress(total_steps=400, step_times=True, every_seconds=3.0)
deadline = time.monotonic() + 40
while time.monotonic() < deadline:
    total = 0
    for i in range(100_000):
        total += i * i
    time.sleep(0.02)  # the rest of a step: the ranks leave CPU to each other and the machine
    progress.step(loss=float(total % 7))
progress.done()
"""


def cgroup_quota(name: str, share: float) -> tuple[Callable[[], None], Callable[[], None]]:
    """A cgroup holding its processes to `share` of a CPU: the child's pre-exec hook that joins
    it, and its removal."""
    period = 100_000
    v2 = Path("/sys/fs/cgroup")
    controllers = v2 / "cgroup.controllers"
    if controllers.exists() and "cpu" in controllers.read_text().split():
        group = v2 / name
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{int(period * share)} {period}")
    else:
        group = Path("/sys/fs/cgroup/cpu") / name
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(str(period))
        (group / "cpu.cfs_quota_us").write_text(str(int(period * share)))
    procs = group / "cgroup.procs"

    def join() -> None:
        procs.write_text(str(os.getpid()))

    def remove() -> None:
        for _ in range(50):
            try:
                group.rmdir()
                return
            except OSError:
                time.sleep(0.1)

    return join, remove


def can_throttle() -> bool:
    if os.geteuid() != 0:
        return False
    v2 = Path("/sys/fs/cgroup/cgroup.controllers")
    return (v2.exists() and "cpu" in v2.read_text().split()) or Path(
        "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
    ).exists()


def start_pods(api: EmulatorThread, endpoint: ProgressEndpoint, workdir: Path) -> list[Any]:
    """The job's three pods as the cluster starts them, pod i on node node-i: each one's env."""
    envs = []
    for i, pod in enumerate(controller_pods(api, endpoint, JOB, 3, THRESHOLD)):
        pod["spec"]["nodeName"] = f"node-{i}"
        pod = api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", admitted(pod, endpoint))
        (workdir / str(i)).mkdir()
        envs.append(start_pod_files(api, pod, workdir / str(i)))
    return envs


def run_rank(env: dict[str, str], workdir: Path, join: Callable[[], None] | None) -> Any:
    process_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(workdir),
        "PYTHONPATH": str(REPORTER),
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-c", RANK_LOOP],
        env=process_env,
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        preexec_fn=join,
    )


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The emulator, the progress endpoint over TLS with the sweeper's report rate (once a
    second per job after a burst of 10), and `trainhook describe` pointed at both."""
    certs = tmp_path / "certs"
    generate(certs, "trainhook-progress", "trainhook")  # names 127.0.0.1 too
    with emulator() as api:
        point_clients_at(api, tmp_path, monkeypatch)
        desk = ProgressDesk(api.api(), Limits(write_interval=0.5))
        with serving_desk(desk, certs) as endpoint:
            yield {"api": api, "endpoint": endpoint, "desk": desk}


@pytest.fixture
def quota() -> Iterator[tuple[Callable[[], None], Callable[[], None]]]:
    if not can_throttle():
        pytest.skip("a CPU quota needs root and the cgroup CPU controller")
    join, remove = cgroup_quota(f"trainhook-e2e-straggler-{os.getpid()}", SHARE)
    try:
        yield join, remove
    finally:
        remove()


def stragglers_of(api: EmulatorThread) -> dict[str, Any] | None:
    sts = api.read(f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/{JOB}")
    raw = sts["metadata"].get("annotations", {}).get(contract.STRAGGLERS)
    return json.loads(raw) if raw else None


def test_the_rank_held_to_a_twentieth_of_a_cpu_is_the_straggler_named_on_the_job(
    cluster: dict[str, Any],
    quota: tuple[Callable[[], None], Callable[[], None]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    api, endpoint = cluster["api"], cluster["endpoint"]
    envs = start_pods(api, endpoint, tmp_path)
    assert [env["RANK"] for env in envs] == ["0", "1", "2"]
    join, _ = quota
    ranks = [
        run_rank(env, tmp_path / str(i), join if i == THROTTLED else None)
        for i, env in enumerate(envs)
    ]
    try:
        deadline = time.monotonic() + 40
        found = None
        while time.monotonic() < deadline and found is None:
            found = stragglers_of(api)
            time.sleep(0.5)
        assert found is not None, "no straggler named within 40 s"
        (flagged,) = found["flagged"]
        assert (flagged["pod"], flagged["node"], flagged["rank"]) == (f"{JOB}-2", "node-2", 2)
        assert flagged["ratio"] >= 2 and (found["count"], found["ranks"]) == (1, 3)
        assert cluster["desk"].straggling() == [((NAMESPACE, JOB), 1)]
        assert main(["describe", "-n", NAMESPACE, JOB]) == 0
        (line,) = [
            line for line in capsys.readouterr().out.splitlines() if line.startswith("Stragglers:")
        ]
        assert line.startswith(
            "Stragglers:   1 of 3 ranks over 2x the others' median step time: rank 2 (pod "
            f"{JOB}-2 on node node-2, "
        )
    finally:
        for process in ranks:
            process.kill()
            process.wait(timeout=30)
