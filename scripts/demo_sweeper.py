"""The sweeper's side of `make demo`: one job's life, through a real `trainhook sweep` process.

examples/pytorch.yaml (a master and two workers) runs in namespace `ml` of the API emulator with
`trainhook.io/restart-policy: RestartJob`. Its StatefulSets, and every pod the StatefulSet
controller creates, are admitted by the webhook that `make demo` serves; the controller, the
scheduler and the kubelet are played against the emulator (tests/support/played_job.py). A
`trainhook sweep` process watches the namespace through a kubeconfig naming the emulator, and
`trainhook status` (the CLI, as a process of its own) shows the job at each step: its pods run,
one rank exits with code 1, the sweeper restarts the whole job, every rank exits 0 and the job
has succeeded. Every wait is bounded; the sweeper and the played components stop at the end.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

from tests.support.emulator import EmulatorThread
from tests.support.played_cluster import NAMESPACE
from tests.support.played_job import PlayedJob
from tests.support.reviews import EXAMPLES, encoded, patched, review
from tests.support.serving import Webhook
from webhook.core import contract
from webhook.kube.client import Kube
from webhook.kube.resources import PODS, SERVICES, STATEFULSETS
from webhook.sweeper.report.status import read_rows

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = EXAMPLES / "pytorch.yaml"
JOB = "pytorch-mnist"
USER = "alice"  # who applies the manifest
WAIT_SECONDS = 40.0  # the most any one step may take (a failure waits 10 s to count)


class DemoFailed(RuntimeError):
    """A step of the job's life that did not come, or a process that failed."""


def play_a_job(api: EmulatorThread, webhook: Webhook, config: Path, scratch: Path) -> None:
    """Play the job's life and print it, the processes pointed at the emulator by the kubeconfig
    `config`; DemoFailed (with the sweeper's log) if a step does not happen in time."""
    started = time.monotonic()
    env = {**os.environ, "KUBECONFIG": str(config)}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    log = scratch / "sweep.log"
    kube = api.api()
    _say(
        f"The sweeper's side: {EXAMPLE.relative_to(ROOT)} in namespace {NAMESPACE}, with "
        f"{contract.RESTART_POLICY}: RestartJob (a failed rank restarts the whole job). Its "
        "StatefulSets, and the pods their controller creates, go through the webhook above; the "
        "StatefulSet controller, the scheduler and the kubelet are played against the emulator."
    )
    _admit_workloads(_admitter(webhook), kube)
    with _sweeping(env, log) as sweeper, PlayedJob(api, kube, _admitter(webhook)) as cluster:

        def until(check: Callable[[], bool], what: str) -> None:
            deadline = time.monotonic() + WAIT_SECONDS
            while not check():
                if cluster.error is not None:
                    raise DemoFailed(f"the played cluster stopped: {cluster.error}")
                if sweeper.poll() is not None:
                    raise DemoFailed(
                        f"trainhook sweep exited ({sweeper.returncode}):\n{_tail(log)}"
                    )
                if time.monotonic() > deadline:
                    raise DemoFailed(f"not within {WAIT_SECONDS:.0f} s: {what}\n{_tail(log)}")
                time.sleep(0.1)

        def shows(phase: str, reason: str, restarts: int, roles: str = "") -> bool:
            """Whether `trainhook status` would show the job so now."""
            found = [r for r in read_rows(kube, NAMESPACE) if r.job == JOB]
            return bool(found) and (
                (found[0].phase, found[0].reason, found[0].restarts)
                == (phase, reason, str(restarts))
                and found[0].roles.startswith(roles)
            )

        def step(number: int, what: str) -> None:
            _say(f"{number}. [{time.monotonic() - started:.0f} s] {what}", indent="   ")
            _status(env)

        def running() -> bool:
            made = [s["metadata"]["name"] for s in api.objects(SERVICES, NAMESPACE)]
            return made == [JOB] and shows("Running", "Running", 0, "master 1/1, worker 2/2")

        until(running, "the job running")
        step(
            1,
            f"The sweeper has made the job's headless Service {JOB} and recorded the job as "
            "Running: its three pods run.",
        )

        first = _pod_uids(api)
        failing = f"{JOB}-worker-1"
        cluster.exit([failing], 1)
        until(lambda: shows("Restarting", "Error", 0), "the failure seen")
        step(
            2,
            f"The kubelet reports that {failing}'s training container exited with code 1. The "
            "sweeper records the job as Restarting.",
        )

        def restarted() -> bool:
            uids = _pod_uids(api)
            new = len(uids) == 3 and not uids & first
            return new and shows("Running", "Running", 1, "master 1/1, worker 2/2")

        until(restarted, "the whole job restarted")
        step(
            3,
            "Once the failure is 10 s old (a rank's crash may come just before the master's "
            "success), the sweeper restarts the whole job: it deletes all three pods, the "
            "StatefulSet controller creates them again through the webhook, and they run: "
            "RESTARTS 1.",
        )

        cluster.exit(sorted(p["metadata"]["name"] for p in api.objects(PODS, NAMESPACE)), 0)
        until(lambda: shows("Succeeded", "Completed", 1), "the job succeeded")
        step(
            4,
            "Every rank exits 0. The master's success completes a PyTorch job: the sweeper "
            "records Succeeded and scales the StatefulSets to 0.",
        )
    seconds = time.monotonic() - started
    print(
        f"The job's life took {seconds:.0f} s; the sweeper and the played cluster have stopped.\n"
    )


def _say(text: str, indent: str = "") -> None:
    print(textwrap.fill(text, width=100, subsequent_indent=indent))


def _admitter(webhook: Webhook) -> Callable[[dict[str, Any]], Mapping[str, Any]]:
    """Send reviews over a connection of their own, as one of the API server's."""
    connection = webhook.connect()

    def send(document: dict[str, Any]) -> Mapping[str, Any]:
        status, answer, _ = webhook.post(encoded(document), connection=connection)
        if status != 200:
            raise DemoFailed(f"the webhook answered {status}: {answer}")
        return answer

    return send


def _admit_workloads(send: Callable[[dict[str, Any]], Mapping[str, Any]], kube: Kube) -> None:
    """`kubectl apply` of the example by USER, with the restart policy: each StatefulSet admitted
    and stored, then admitted again as an update once both exist (the sweeper's topology pass
    causes that update in a cluster), so both stamps count both roles."""
    documents = [doc for doc in yaml.safe_load_all(EXAMPLE.read_text()) if doc]
    for workload in documents:
        workload["metadata"]["namespace"] = NAMESPACE
        workload["metadata"]["annotations"][contract.RESTART_POLICY] = "RestartJob"
        kube.create(STATEFULSETS, NAMESPACE, patched(workload, _allowed(send, workload)))
    for workload in documents:
        current = kube.get(STATEFULSETS, NAMESPACE, workload["metadata"]["name"])
        update = patched(current, _allowed(send, current, old=current))
        kube.patch(STATEFULSETS, NAMESPACE, current["metadata"]["name"], update)


def _allowed(
    send: Callable[[dict[str, Any]], Mapping[str, Any]],
    workload: dict[str, Any],
    old: dict[str, Any] | None = None,
) -> Mapping[str, Any]:
    document = review(
        workload, operation="UPDATE" if old else "CREATE", namespace=NAMESPACE, old=old
    )
    document["request"]["userInfo"] = {"username": USER}
    answer = send(document)
    if not answer["response"]["allowed"]:
        raise DemoFailed(f"the webhook refused {workload['metadata']['name']}: {answer}")
    return answer


@contextlib.contextmanager
def _sweeping(env: dict[str, str], log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`trainhook sweep` for the namespace, as the chart runs it; stopped with SIGTERM."""
    command = [
        "sweep",
        f"--namespace={NAMESPACE}",
        "--lease-namespace=trainhook-system",
        "--identity=trainhook-sweeper-0",
    ]
    print(f"\n$ KUBECONFIG=<the emulator's> trainhook {' '.join(command)} &\n")
    with log.open("wb") as output:
        process = subprocess.Popen(
            [sys.executable, "-m", "webhook.cli", *command],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
        try:
            yield process
        finally:
            process.terminate()
            try:
                code = process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait(timeout=15)
    if code != 0:
        raise DemoFailed(f"trainhook sweep exited with {code} on SIGTERM:\n{_tail(log)}")


def _status(env: dict[str, str]) -> None:
    """`trainhook status -n ml`, run and shown."""
    command = ["status", "-n", NAMESPACE]
    shown = subprocess.run(
        [sys.executable, "-m", "webhook.cli", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if shown.returncode != 0:
        raise DemoFailed(f"trainhook status failed: {shown.stderr}")
    print(f"   $ trainhook {' '.join(command)}")
    print("\n".join(f"   {line}" for line in shown.stdout.splitlines()) + "\n")


def _pod_uids(api: EmulatorThread) -> set[str]:
    return {pod["metadata"]["uid"] for pod in api.objects(PODS, NAMESPACE)}


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
