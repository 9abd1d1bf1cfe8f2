"""Report a training job's progress to Trainhook (or to Kubeflow Trainer v2: same protocol).

Copy this file next to your training script; it needs only the standard library (and
Transformers for `ProgressCallback`). In a pod of a job annotated
`trainhook.io/report-progress: "true"`, the webhook sets KUBEFLOW_TRAINER_SERVER_URL,
KUBEFLOW_TRAINER_SERVER_CA_CERT and KUBEFLOW_TRAINER_SERVER_TOKEN; elsewhere every call here
does nothing, so the same script runs on a laptop. A report that fails is logged and dropped:
progress reporting never stops training.

A plain PyTorch loop:

    from trainhook_progress import Progress

    progress = Progress(total_steps=len(loader) * epochs, total_epochs=epochs)
    for epoch in range(epochs):
        for batch in loader:
            loss = train_step(batch)
            progress.step(loss=loss.item(), epoch=epoch)
        torch.save(model.state_dict(), path)
        progress.checkpoint()
    progress.done()

With `trainhook.io/checkpoint-on-stop`, save when the sweeper asks, before a planned stop (a
suspend, a preemption, a drained node), and report it: the stop waits for that report.

    for batch in loader:
        loss = train_step(batch)
        progress.step(loss=loss.item())
        if progress.checkpoint_requested():
            torch.save(model.state_dict(), path)
            progress.checkpoint()

Hugging Face Transformers:

    from trainhook_progress import ProgressCallback

    trainer = Trainer(model=model, args=args, callbacks=[ProgressCallback()], ...)

Only rank 0 reports by default (RANK, as torchrun and Trainhook set it): the job's progress is
one number, and one reporter keeps the endpoint's rate limit for the job free.

For `trainhook.io/straggler-threshold`, `Progress(..., step_times=True)` has every pod report its
own time per step (`stepTimeSeconds`, the mean since its last report): rank 0 with its progress,
the other pods' first process (LOCAL_RANK 0) alone, every max(15, 1.5 x pods) seconds so the
job stays within the endpoint's rate (once a second). The time is measured between `step()`
calls unless given: in a synchronous job every rank waits for the slowest at each collective,
so pass the rank's own work, `progress.step(loss=..., step_seconds=compute_seconds)`.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import time
import urllib.request
from datetime import datetime, timezone  # not datetime.UTC: images may run Python < 3.11
from typing import Any

log = logging.getLogger("trainhook_progress")

URL = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
EVERY_SECONDS = 15.0  # the endpoint writes a job's progress at most every 10 s by default
# trainhook.io/checkpoint-on-stop: the sweeper's request to save a checkpoint, as the kubelet
# shows the pod's trainhook.io/checkpoint-requested (its time; empty while none is open).
REQUEST_FILE = "/etc/trainhook-checkpoint/requested"
STEP_TIME = "stepTimeSeconds"  # a rank's own time per step, for trainhook.io/straggler-threshold


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def send(
    progress: int | None = None,
    eta_seconds: int | None = None,
    metrics: dict[str, Any] | None = None,
) -> bool:
    """POST one report; True when the endpoint took it. Without the variables, does nothing."""
    url = os.environ.get(URL)
    if not url:
        return False
    status: dict[str, Any] = {"lastUpdatedTime": _now()}
    if progress is not None:
        status["progressPercentage"] = max(0, min(100, int(progress)))
    if eta_seconds is not None:
        status["estimatedRemainingSeconds"] = max(0, int(eta_seconds))
    if metrics:
        status["metrics"] = [
            {"name": name, "value": value if isinstance(value, str) else f"{value:.6g}"}
            for name, value in metrics.items()
            if value is not None
        ]
    body = json.dumps({"trainerStatus": status}).encode()
    try:
        with open(os.environ[TOKEN]) as token_file:  # re-read: the kubelet renews it
            token = token_file.read().strip()
        context = ssl.create_default_context(cafile=os.environ.get(CA_CERT))
        request = urllib.request.Request(
            url,
            data=body,
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, context=context, timeout=5) as response:
            return bool(response.status == 200)
    except Exception as error:  # never let reporting stop training
        log.warning("progress report not sent: %s", error)
        return False


def checkpoint_request(path: str = REQUEST_FILE) -> str:
    """The open request to save a checkpoint ("" when none, or outside such a pod)."""
    try:
        with open(path) as request_file:
            return request_file.read().strip()
    except OSError:
        return ""


class Progress:
    """Progress of a loop: steps, epochs, metrics and checkpoints, sent at most every
    `every_seconds` (and always on a checkpoint and at the end)."""

    def __init__(
        self,
        total_steps: int | None = None,
        total_epochs: int | None = None,
        *,
        every_seconds: float | None = None,
        all_ranks: bool = False,
        start_step: int = 0,
        request_file: str = REQUEST_FILE,
        step_times: bool = False,
    ) -> None:
        self.total_steps = total_steps
        self.total_epochs = total_epochs
        pods = int(os.environ.get("TRAINHOOK_WORLD_SIZE", "1") or 1)
        if every_seconds is None:
            every_seconds = max(EVERY_SECONDS, 1.5 * pods) if step_times else EVERY_SECONDS
        self.every_seconds = every_seconds
        self.enabled = all_ranks or os.environ.get("RANK", "0") == "0"
        # The other pods send their step time alone: one report per pod (its token is the pod's).
        self.times_only = (
            step_times and not self.enabled and os.environ.get("LOCAL_RANK", "0") == "0"
        )
        self.step_times = step_times
        self._step_seconds = 0.0  # summed since the last report
        self._timed_steps = 0
        self._last_step_at: float | None = None
        self.steps = start_step
        self.epoch: int | None = None
        self.metrics: dict[str, Any] = {}
        self.checkpoint_step: int | None = None
        self.checkpoint_time: str | None = None
        self._started = time.monotonic()
        self._start_step = start_step
        self._sent_at = float("-inf")
        self.request_file = request_file
        # A request made before this process started is not for it: it has nothing new to save.
        self._answered = checkpoint_request(request_file)
        self._looked_at = time.monotonic()

    def checkpoint_requested(self) -> bool:
        """True once for each new request to save a checkpoint (the file is read at most once
        a second). Every rank may ask; for a checkpoint all ranks write together, let rank 0
        ask and broadcast the answer, so every rank saves at the same step."""
        now = time.monotonic()
        if now - self._looked_at < 1.0:
            return False
        self._looked_at = now
        request = checkpoint_request(self.request_file)
        if not request or request == self._answered:
            return False
        self._answered = request
        return True

    def step(
        self, epoch: int | None = None, step_seconds: float | None = None, **metrics: Any
    ) -> None:
        """One step done, with the metrics it produced (loss=..., lr=...); `step_seconds`: the
        rank's own time for it (else the time since the previous step)."""
        now = time.monotonic()
        if step_seconds is None and self._last_step_at is not None:
            step_seconds = now - self._last_step_at
        self._last_step_at = now
        if step_seconds is not None and step_seconds > 0:
            self._step_seconds += step_seconds
            self._timed_steps += 1
        self.steps += 1
        if epoch is not None:
            self.epoch = epoch
        self.metrics.update(metrics)
        if time.monotonic() - self._sent_at >= self.every_seconds:
            self.report()

    def checkpoint(self, step: int | None = None) -> None:
        """A checkpoint was saved (at `step`, else the current one)."""
        self.checkpoint_step = self.steps if step is None else step
        self.checkpoint_time = _now()
        self.report()

    def done(self) -> None:
        if self.total_steps:
            self.steps = max(self.steps, self.total_steps)
        self.report(finished=True)

    def _step_time(self) -> str | None:
        """The mean step time since the last report, once (None without a timed step)."""
        if not self.step_times or not self._timed_steps:
            return None
        mean = self._step_seconds / self._timed_steps
        self._step_seconds, self._timed_steps = 0.0, 0
        return f"{mean:.6g}"

    def report(self, finished: bool = False) -> bool:
        if self.times_only:
            self._sent_at = time.monotonic()
            seconds = self._step_time()
            return send(metrics={STEP_TIME: seconds}) if seconds and not finished else False
        if not self.enabled:
            return False
        self._sent_at = time.monotonic()
        progress = eta = None
        if finished:
            progress, eta = 100, 0
        elif self.total_steps:
            progress = int(100 * self.steps / self.total_steps)
            done = self.steps - self._start_step
            if done > 0:
                per_step = (time.monotonic() - self._started) / done
                eta = int(per_step * max(0, self.total_steps - self.steps))
        metrics: dict[str, Any] = dict(self.metrics)
        metrics["currentStep"] = str(self.steps)
        if self.total_steps:
            metrics["totalSteps"] = str(self.total_steps)
        if self.epoch is not None:
            metrics["currentEpoch"] = str(self.epoch)
        if self.total_epochs:
            metrics["totalEpochs"] = str(self.total_epochs)
        if self.checkpoint_step is not None:
            metrics["lastCheckpointStep"] = str(self.checkpoint_step)
            metrics["lastCheckpointTime"] = str(self.checkpoint_time)
        seconds = self._step_time()
        if seconds is not None:
            metrics[STEP_TIME] = seconds
        return send(progress, eta, metrics)


def _progress_callback() -> type:
    """The Hugging Face Trainer callback, made on first use: importing Transformers (and the
    torch it imports) takes seconds of CPU, which a plain training loop, or a rank held to a
    fraction of a CPU, should not pay for."""
    from transformers import TrainerCallback

    class ProgressCallback(TrainerCallback):  # type: ignore[misc,valid-type]
        """Hugging Face Trainer callback: reports on every log, on every save, and at the end."""

        def __init__(self, every_seconds: float = EVERY_SECONDS) -> None:
            self.every_seconds = every_seconds
            self.progress: Progress | None = None

        def _progress(self, state: Any) -> Progress:
            if self.progress is None:
                self.progress = Progress(
                    state.max_steps or None,
                    int(state.num_train_epochs) if state.num_train_epochs else None,
                    every_seconds=self.every_seconds,
                    start_step=state.global_step,
                )
                self.progress.enabled = state.is_world_process_zero
            progress = self.progress
            progress.steps = state.global_step
            if state.epoch is not None:
                progress.epoch = int(state.epoch)
            return progress

        def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._progress(state).report()

        def on_log(
            self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any
        ) -> None:
            progress = self._progress(state)
            progress.metrics.update(
                {k: v for k, v in (logs or {}).items() if isinstance(v, (int, float))}
            )
            if time.monotonic() - progress._sent_at >= progress.every_seconds:
                progress.report()

        def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._progress(state).checkpoint(state.global_step)

        def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._progress(state).done()

    return ProgressCallback


def __getattr__(name: str) -> Any:
    """`from trainhook_progress import ProgressCallback` imports Transformers then, not before."""
    if name == "ProgressCallback":
        made = _progress_callback()
        globals()[name] = made
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
