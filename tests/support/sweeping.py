"""Running sweepers against the emulator: in a thread, or as a `trainhook sweep` process."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any

from tests.support.waiting import eventually
from webhook.kube.client import Kube
from webhook.sweeper.runner import Sweeper, SweeperConfig

LEASE_NAMESPACE = "trainhook"


def fast_config(identity: str, **overrides: Any) -> SweeperConfig:
    settings: dict[str, Any] = {
        "identity": identity,
        "resync_seconds": 5.0,
        "lease_namespace": LEASE_NAMESPACE,
        "lease_duration_seconds": 2,
        "renew_deadline": 1.5,
        "retry_period": 0.1,
        "backoff_base": 0.05,
        "batch_seconds": 0.0,  # tests that count looks or time reactions set their own
    }
    settings.update(overrides)
    return SweeperConfig(**settings)


class Running:
    """A sweeper running in a thread; records every action it applies. `clock`, when given, is
    the time its decisions are made at (a played clock)."""

    def __init__(
        self, kube: Kube, config: SweeperConfig, clock: Callable[[], datetime] | None = None
    ) -> None:
        self.sweeper = Sweeper(kube, config, **({"clock": clock} if clock else {}))
        self.actions: list[str] = []
        apply_one = self.sweeper.executor._apply

        def recording(action: Any) -> bool:
            done = apply_one(action)
            self.actions.append(action.describe())
            return done

        self.sweeper.executor._apply = recording  # type: ignore[method-assign]
        self.reconciles: Counter[tuple[str, str]] = Counter()
        reconcile_one = self.sweeper.reconcile

        def counting(key: tuple[str, str]) -> None:
            try:
                reconcile_one(key)
            finally:
                self.reconciles[key] += 1

        self.sweeper.reconcile = counting  # type: ignore[method-assign]
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.sweeper.run, args=(self.stop_event,))

    def start(self) -> Running:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(timeout=15)
        assert not self.thread.is_alive(), "the sweeper did not stop"

    def leads(self) -> bool:
        return self.sweeper.elector.is_leader()

    def reconciled(self, namespace: str, job: str, times: int = 2, timeout: float = 10.0) -> None:
        """Have the job looked at `times` more times, one after the other, and wait until it has.

        What a check that something did *not* happen waits for: the sweeper has decided on
        everything it was shown, twice over, rather than a guessed number of seconds.
        """
        key = (namespace, job)
        for _ in range(times):
            target = self.reconciles[key] + 1
            self.sweeper.queue.add(key)
            eventually(
                partial(self._reconciled_at_least, key, target),
                timeout,
                what=f"another reconcile of job {namespace}/{job}",
            )

    def _reconciled_at_least(self, key: tuple[str, str], times: int) -> bool:
        return self.reconciles[key] >= times


@contextlib.contextmanager
def sweeping(
    kube: Kube,
    identity: str = "sweeper-a",
    clock: Callable[[], datetime] | None = None,
    **overrides: Any,
) -> Iterator[Running]:
    """A sweeper in a thread; `clock` is the time it decides by (a played clock), else now."""
    running = Running(kube, fast_config(identity, **overrides), clock).start()
    try:
        yield running
    finally:
        running.stop()


class SweeperProcess:
    """`trainhook sweep` as its own process, killed with SIGKILL like a crashed pod."""

    def __init__(self, kubeconfig: Path, identity: str, log: Path, *extra: str) -> None:
        env = {**os.environ, "KUBECONFIG": str(kubeconfig), "POD_NAME": identity}
        env.pop("KUBERNETES_SERVICE_HOST", None)
        self.log = log
        self._log_file = log.open("a")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "webhook.cli",
                "sweep",
                f"--lease-namespace={LEASE_NAMESPACE}",
                "--resync-seconds=5",
                "--lease-duration-seconds=2",
                "--log-level=debug",
                *extra,
            ],
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self._log_file.close()

    def terminate(self) -> int:
        self.process.terminate()
        try:
            return self.process.wait(timeout=15)
        finally:
            self._log_file.close()
