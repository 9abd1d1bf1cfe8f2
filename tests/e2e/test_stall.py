"""A real hang caught end to end: a training process stopped with SIGSTOP is judged stalled by
the sweeper, and its job restarted in place.

The job's StatefulSet and pods are admitted by the webhook's core with
`trainhook.io/stall-timeout` and `stalled -> restart-in-place max=3`. Each pod runs on a played
node (in_place_node.py): its restarter and barrier are the pod spec's own scripts, its training
a real PyTorch loop reporting with examples/progress/trainhook_progress.py over real TLS to the
sweeper's progress endpoint, which verifies the pod's token with the emulator's TokenReview. A
real sweeper decides in a thread against the API emulator.

The cluster's clock is played: real time, moved ahead by the test where a wait would be (the
stall timeout is a minute at least). The sweeper, the progress endpoint and the kubelets all read
it, as a cluster's components read one clock.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from tests.support.emulator import EmulatorThread, emulator
from tests.support.sweeping import Running, sweeping
from tests.support.waiting import eventually
from webhook.certs.material import generate
from webhook.cli import main
from webhook.core import contract
from webhook.core.job.progress import ProgressEndpoint
from webhook.core.job.restart_in_place import BARRIER, RESTARTER
from webhook.kube.resources import EVENTS, PODS
from webhook.sweeper.serving.progress import Limits, ProgressDesk

from .in_place_node import PlayedNode
from .test_progress import REPORTER, admitted, controller_pods, point_clients_at, serving_desk

pytestmark = pytest.mark.e2e

NAMESPACE = "ml"
JOB = "hang"

# Runs until it is killed; saves a checkpoint every 20 steps, and resumes from it when the pod
# restarted in place (TRAINHOOK_ATTEMPT set), as a script restarted by RestartAllContainers does.
TRAINING = """
import os, sys, time, torch
from datetime import datetime, timedelta, timezone
import trainhook_progress
from trainhook_progress import Progress

def played_now():  # the node's clock is the played cluster's (see PlayedClock)
    with open(os.environ["PLAYED_CLOCK"]) as ahead:
        moment = datetime.now(timezone.utc) + timedelta(seconds=float(ahead.read()))
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")

trainhook_progress._now = played_now

checkpoint, start = sys.argv[1], 0
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
if os.environ.get("TRAINHOOK_ATTEMPT") and os.path.exists(checkpoint):
    saved = torch.load(checkpoint)
    model.load_state_dict(saved["model"])
    start = saved["step"]
    print("attempt", os.environ["TRAINHOOK_ATTEMPT"], "resumes at step", start, flush=True)
x, y = torch.randn(64, 4), torch.randn(64, 1)
progress = Progress(every_seconds=0.2, start_step=start)
for step in range(start + 1, 1_000_000):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    progress.step(loss=loss.item())
    if step % 20 == 0:
        torch.save({"model": model.state_dict(), "step": step}, checkpoint)
        progress.checkpoint()
    time.sleep(0.05)
"""


class PlayedClock:
    """Real time, moved ahead by `advance`: what every component of the played cluster reads,
    the training processes through `file` (how far ahead, in seconds)."""

    def __init__(self, file: Path) -> None:
        self._ahead = timedelta()
        self._lock = threading.Lock()
        self.file = file
        file.write_text("0")

    def now(self) -> datetime:
        with self._lock:
            return datetime.now(UTC) + self._ahead

    def advance(self, seconds: float) -> None:
        with self._lock:
            self._ahead += timedelta(seconds=seconds)
            staged = self.file.with_suffix(".new")
            staged.write_text(str(self._ahead.total_seconds()))
            staged.replace(self.file)


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The emulator, the progress endpoint over TLS on the played clock, and `trainhook
    describe` pointed at the emulator."""
    certs = tmp_path / "certs"
    generate(certs, "trainhook-progress", "trainhook")  # names 127.0.0.1 too
    clock = PlayedClock(tmp_path / "played-clock")
    with emulator() as api:
        point_clients_at(api, tmp_path, monkeypatch)
        limits = Limits(burst=50, reports_per_second=20, write_interval=0.3)
        desk = ProgressDesk(api.api(), limits, wall=clock.now)
        with serving_desk(desk, certs) as endpoint:
            yield {"api": api, "endpoint": endpoint, "clock": clock}


def create_job(api: EmulatorThread, endpoint: ProgressEndpoint) -> list[dict[str, Any]]:
    """The job's StatefulSet and its two pods, as its controller creates them, admitted."""
    annotations = {
        contract.STALL_TIMEOUT: "1m",
        contract.FAILURE_POLICY: "stalled -> restart-in-place max=3",
    }
    pods = []
    for raw in controller_pods(api, endpoint, JOB, 2, annotations):
        pod = admitted(raw, endpoint)
        # The webhook's in-place plumbing, which the played kubelet runs.
        assert [c["name"] for c in pod["spec"]["initContainers"]] == [RESTARTER, BARRIER]
        pods.append(api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod))
    return pods


def node_for(
    api: EmulatorThread, pod: dict[str, Any], index: int, workdir: Path, clock: PlayedClock
) -> PlayedNode:
    directory = workdir / pod["metadata"]["name"]
    base_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(directory),
        "PYTHONPATH": str(REPORTER),
        "PLAYED_CLOCK": str(clock.file),
    }
    command = [sys.executable, "-c", TRAINING, str(directory / "checkpoint.pt")]
    return PlayedNode(
        api, pod["metadata"]["name"], f"gpu-{index}", directory, command, base_env, clock.now
    )


def summary(api: EmulatorThread) -> dict[str, Any]:
    workload = api.read(f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/{JOB}")
    raw = (workload["metadata"].get("annotations") or {}).get(contract.PROGRESS)
    return json.loads(raw) if raw else {}


def status_of(api: EmulatorThread) -> dict[str, Any]:
    workload = api.read(f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/{JOB}")
    raw = (workload["metadata"].get("annotations") or {}).get(contract.STATUS)
    return json.loads(raw) if raw else {}


def restarting(api: EmulatorThread) -> list[str]:
    return [e["message"] for e in api.objects(EVENTS, NAMESPACE) if e["reason"] == "Restarting"]


def pods_seen(api: EmulatorThread) -> dict[str, tuple[str, str]]:
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"].get("nodeName", ""))
        for p in api.objects(PODS, NAMESPACE)
    }


def step_of(api: EmulatorThread) -> int:
    step = summary(api).get("step")
    return step if isinstance(step, int) else -1


def test_a_training_process_stopped_with_sigstop_is_judged_stalled_and_restarted_in_place(
    cluster: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api: EmulatorThread = cluster["api"]
    clock: PlayedClock = cluster["clock"]
    rank0, rank1 = create_job(api, cluster["endpoint"])
    before = pods_seen(api)
    with (
        node_for(api, rank0, 0, tmp_path, clock) as node0,
        node_for(api, rank1, 1, tmp_path, clock) as node1,
        sweeping(api.api(), clock=clock.now) as sweeper,
    ):
        nodes = (node0, node1)

        def healthy() -> bool:
            for node in nodes:
                assert node.error is None, f"kubelet of {node.name}: {node.error!r}"
            return True

        # Rank 0 trains and reports; rank 1 stays pending (its node has not started it).
        node0.start()
        eventually(lambda: healthy() and step_of(api) >= 5, 120, what="rank 0 reporting steps")
        # Longer than the stall timeout passes with rank 1 pending: the timer stands still.
        clock.advance(120)
        looked_at(sweeper)
        assert restarting(api) == []
        assert status_of(api).get("restarts", 0) == 0
        assert healthy()

        node1.start()
        eventually(lambda: healthy() and node1.training is not None, 60, what="rank 1 started")
        started = step_of(api)
        eventually(
            lambda: healthy() and step_of(api) >= max(25, started + 5),
            120,
            what="both ranks running, new steps and a checkpoint reported",
        )
        # The hang: rank 0's process exists and reports nothing. It is let go on while its last
        # report is its checkpoint's (saved every 20 steps) or the step after: the resumed run's
        # first report (the checkpoint's step + 1) must be lower than the last one before the
        # hang for its reports to show a restart.
        assert node0.training is not None
        hung = node0.training
        for _ in range(5):
            os.kill(hung.pid, signal.SIGSTOP)
            stopped_at = quiet_step(api)
            if stopped_at % 20 >= 2:
                break
            os.kill(hung.pid, signal.SIGCONT)
            eventually(partial(going_on, api, stopped_at + 2), 30, what="rank 0 going on")
        assert stopped_at % 20 >= 2, stopped_at
        since = summary(api)["stepSince"]
        clock.advance(61)  # past the stall timeout, with every pod running
        looked_at(sweeper)
        eventually(lambda: restarting(api) != [], 30, what="the stall acted on")
        (event,) = restarting(api)
        assert event == (
            "restarting all 2 pod(s) of the job in place (attempt 1) (restart 1): no new step "
            f"for 60s (trainhook.io/stall-timeout): step {stopped_at} last reported, the timer "
            f"started at {since}; failure-policy rule 1 (stalled -> restart-in-place max=3)"
        )
        # The kubelets restart every container for attempt 1 (the stopped process is killed),
        # the sweeper releases the barrier once both ranks wait at it, training resumes from
        # the checkpoint, and reports come again with new steps.
        eventually(
            lambda: healthy() and node0.runs == 2 and node1.runs == 2,
            60,
            what="both pods' training started again",
        )
        eventually(lambda: healthy() and step_of(api) > stopped_at, 120, what="new steps reported")
        assert hung.returncode == -signal.SIGKILL
        assert node0.killed == [-signal.SIGKILL] and node1.killed == [-signal.SIGKILL]
        resumed = (tmp_path / "hang-0" / "training-1.log").read_text()
        assert "attempt 1 resumes at step " in resumed, resumed
        restart = summary(api)["restart"]
        assert restart["reachedStep"] >= stopped_at
        assert restart["checkpointStep"] % 20 == 0 and restart["checkpointStep"] <= stopped_at
        status = status_of(api)
        assert (status["restarts"], status["attempt"], status["inPlace"]) == (1, 1, 2)
        assert status["cause"] == f"stalled/{since}"
        assert status["rule"] == "failure-policy rule 1 (stalled -> restart-in-place max=3)"
        assert status["fired"] == {"policy/1": 1}
        assert status["releasedAt"] >= status["restartedAt"]
        assert main(["describe", "-n", NAMESPACE, JOB]) == 0
        described = capsys.readouterr().out
    # In place: the same pods, by name and uid, on the nodes they were bound to; none deleted.
    assert pods_seen(api) == {
        name: (uid, f"gpu-{index}") for index, (name, (uid, _)) in enumerate(before.items())
    }
    lines = described.splitlines()
    (shown,) = [line for line in lines if "Restarting" in line]
    assert re.fullmatch(r"  \S+ ago +Warning +Restarting +StatefulSet/hang +(.*)", shown)
    assert shown.endswith(f"StatefulSet/hang  {event}")
    assert "Rule fired:   failure-policy rule 1 (stalled -> restart-in-place max=3)" in lines
    (goodput,) = [line for line in lines if line.startswith("Goodput:")]
    assert "stalled 60s" in goodput, goodput
    (lost,) = [line for line in lines if line.startswith("Lost work:")]
    assert lost.endswith(
        f"lost {restart['lostSteps']} steps (step {restart['reachedStep']} reached, last "
        f"checkpoint step {restart['checkpointStep']})"
    ), lost


def looked_at(sweeper: Running) -> None:
    """Have the sweeper look at the job now, as it would when its timer came due: the clock
    moved ahead, the sweeper's queue waits in real seconds."""
    sweeper.reconciled(NAMESPACE, JOB, times=2, timeout=30)


def going_on(api: EmulatorThread, past: int) -> bool:
    return step_of(api) > past


def quiet_step(api: EmulatorThread) -> int:
    """The step a stopped job last reported, once no report changes it for two seconds."""
    last = step_of(api)
    while True:
        time.sleep(2.0)  # the endpoint writes a job's last report within a second
        now = step_of(api)
        if now == last:
            return now
        last = now
