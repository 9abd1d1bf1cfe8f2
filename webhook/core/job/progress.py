"""Training progress, as Kubeflow Trainer v2 reports it: what a reporting pod is given, what it
sends, and the compact summary the sweeper writes on the job.

A pod of a job with `trainhook.io/report-progress: "true"` gets Trainer v2's three variables
(KUBEFLOW_TRAINER_SERVER_URL, _CA_CERT, _TOKEN) and one projected volume at Trainer's path: a
service-account token whose audience names the job, and the endpoint's CA (projected from the
pod's own `trainhook.io/progress-ca` annotation, so no per-namespace ConfigMap is needed). A
script written for Trainer v2 POSTs `{"trainerStatus": {...}}` to that URL unchanged.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.shape.pods import add_volume, equipped, mount

ENV_URL: Final = "KUBEFLOW_TRAINER_SERVER_URL"
ENV_CA_CERT: Final = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
ENV_TOKEN: Final = "KUBEFLOW_TRAINER_SERVER_TOKEN"
MOUNT_PATH: Final = "/var/run/secrets/kubeflow/trainer"
VOLUME: Final = "trainhook-progress"
TOKEN_SECONDS: Final = 3600
# The claims the API server puts in a pod-bound token's TokenReview (user.extra).
POD_NAME_CLAIM: Final = "authentication.kubernetes.io/pod-name"
POD_UID_CLAIM: Final = "authentication.kubernetes.io/pod-uid"

MAX_BODY: Final = 64 * 1024  # as Trainer's status server
MAX_METRICS: Final = 64  # in one report
MAX_NAME: Final = 128
MAX_VALUE: Final = 256
SUMMARY_METRICS: Final = 8  # in the annotation: the first ones reported, besides the counters
INT32_MAX: Final = 2**31 - 1

# Metric names with a meaning of their own: the summary's step, epoch and checkpoint.
COUNTERS: Final = {
    "currentStep": "step",
    "totalSteps": "totalSteps",
    "currentEpoch": "epoch",
    "totalEpochs": "totalEpochs",
    "lastCheckpointStep": "checkpointStep",
}
CHECKPOINT_TIME: Final = "lastCheckpointTime"
# A rank's own time per step, in seconds (trainhook.io/straggler-threshold compares the ranks'):
# kept per rank, never in the job's summary.
STEP_TIME: Final = "stepTimeSeconds"
MAX_STEP_SECONDS: Final = 86400.0
CA_FIELD: Final = f"metadata.annotations['{contract.PROGRESS_CA}']"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class ProgressEndpoint:
    """Where pods report: the endpoint's base URL (https://host:port) and its CA (PEM)."""

    url: str
    ca: str


# What `trainhook render` shows a reporting pod: the endpoint of the chart installed as in
# docs/install.md, and a stand-in for the CA only the cluster knows.
RENDERED_PROGRESS: Final = ProgressEndpoint(
    "https://trainhook-progress.trainhook.svc:8444", "(the progress endpoint's CA)\n"
)


def audience(namespace: str, job: str) -> str:
    """The audience of a job's tokens: a token of one job is refused for any other."""
    return f"trainhook.io/{namespace}/{job}"


def status_path(namespace: str, job: str) -> str:
    return f"/apis/trainhook.io/v1/namespaces/{namespace}/jobs/{job}/status"


STATUS_PATH = re.compile(r"^/apis/trainhook\.io/v1/namespaces/([^/]+)/jobs/([^/]+)/status$")


def add_progress(
    draft: Draft,
    pod: Mapping[str, Any],
    namespace: str,
    job: str,
    endpoint: ProgressEndpoint | None,
    training: int | None,
) -> dict[str, str]:
    """Give a reporting pod its token and CA volume, mounted where the job's env goes (the
    training and init containers); the variables to add to that env."""
    if endpoint is None:
        raise Refused(
            f"{contract.REPORT_PROGRESS}: this Trainhook serves no progress endpoint (install "
            "the chart with progress.enabled=true, or remove the annotation)"
        )
    draft.dict_at("metadata", "annotations")[contract.PROGRESS_CA] = endpoint.ca
    add_volume(
        draft,
        {
            "name": VOLUME,
            "projected": {
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": audience(namespace, job),
                            "expirationSeconds": TOKEN_SECONDS,
                            "path": "token",
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "ca.crt",
                                    "fieldRef": {"fieldPath": CA_FIELD},
                                }
                            ]
                        }
                    },
                ]
            },
        },
    )
    for field_name, position, container in equipped(pod, training):
        mount(draft, field_name, position, container, VOLUME, MOUNT_PATH)
    return {
        ENV_URL: endpoint.url.rstrip("/") + status_path(namespace, job),
        ENV_CA_CERT: f"{MOUNT_PATH}/ca.crt",
        ENV_TOKEN: f"{MOUNT_PATH}/token",
    }


class BadReport(Exception):
    """A report refused: the HTTP status and one line saying what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(message)


@dataclass(frozen=True)
class Report:
    """One trainerStatus, validated."""

    progress: int | None = None
    eta_seconds: int | None = None
    metrics: tuple[tuple[str, str], ...] = ()
    updated: str | None = None
    echo: dict[str, Any] = field(default_factory=dict)  # what Trainer answers: the request


def parse_report(body: bytes) -> Report | None:
    """The report in a request body; None for one without a trainerStatus (nothing to write,
    as Trainer). Raises BadReport (400 not JSON, 413 too large, 422 a wrong field)."""
    if len(body) > MAX_BODY:
        raise BadReport(413, f"the body is {len(body)} bytes; at most {MAX_BODY} are read")
    try:
        data = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise BadReport(400, 'the body is not JSON: send {"trainerStatus": {...}}') from None
    if not isinstance(data, dict):
        raise BadReport(422, 'the body must be a JSON object: {"trainerStatus": {...}}')
    status = data.get("trainerStatus")
    if status is None:
        return None
    if not isinstance(status, dict):
        raise BadReport(422, f"trainerStatus: {_shown(status)}; an object is allowed")
    progress = _whole(status, "progressPercentage", 100)
    eta = _whole(status, "estimatedRemainingSeconds", INT32_MAX)
    metrics = _metrics(status.get("metrics"))
    updated = status.get("lastUpdatedTime")
    if updated is not None and not (isinstance(updated, str) and RFC3339.match(updated)):
        raise BadReport(
            422, f"trainerStatus.lastUpdatedTime: {_shown(updated)}; an RFC 3339 time is allowed"
        )
    for name, value in metrics:
        if name == CHECKPOINT_TIME and not RFC3339.match(value):
            raise BadReport(
                422, f"metric {CHECKPOINT_TIME}: {_shown(value)}; an RFC 3339 time is allowed"
            )
        if name in COUNTERS and _count(value) is None:
            raise BadReport(
                422, f"metric {name}: {_shown(value)}; a whole number from 0 is allowed"
            )
        if name == STEP_TIME and _seconds(value) is None:
            raise BadReport(
                422,
                f"metric {STEP_TIME}: {_shown(value)}; a number of seconds above 0, at most "
                f"{MAX_STEP_SECONDS:g}, is allowed",
            )
    return Report(progress, eta, metrics, updated, {"trainerStatus": status})


def _whole(status: Mapping[str, Any], key: str, top: int) -> int | None:
    value = status.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != int(value):
        raise BadReport(422, f"trainerStatus.{key}: {_shown(value)}; a whole number is allowed")
    if not 0 <= value <= top:
        raise BadReport(422, f"trainerStatus.{key}: {_shown(value)}; from 0 to {top} is allowed")
    return int(value)


def _metrics(raw: object) -> tuple[tuple[str, str], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise BadReport(422, f"trainerStatus.metrics: {_shown(raw)}; a list is allowed")
    if len(raw) > MAX_METRICS:
        raise BadReport(
            422, f"trainerStatus.metrics: {len(raw)} metrics; at most {MAX_METRICS} are allowed"
        )
    found: list[tuple[str, str]] = []
    for position, item in enumerate(raw):
        where = f"trainerStatus.metrics[{position}]"
        name = item.get("name") if isinstance(item, dict) else None
        value = item.get("value") if isinstance(item, dict) else None
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise BadReport(
                422, f"{where}.name: {_shown(name)}; a string of 1 to {MAX_NAME} characters"
            )
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not math.isfinite(value):
                raise BadReport(422, f"{where}.value: {_shown(value)}; a finite number")
            value = str(value)  # Trainer's schema wants a string; a number is kept readable
        if not isinstance(value, str) or not 0 < len(value) <= MAX_VALUE:
            raise BadReport(
                422, f"{where}.value: {_shown(value)}; a string of 1 to {MAX_VALUE} characters"
            )
        found.append((name, value))
    return tuple(found)


def _count(value: str) -> int | None:
    try:
        number = float(value)
    except ValueError:
        return None
    if not math.isfinite(number) or number < 0 or number != int(number) or number > 2**53:
        return None
    return int(number)


def _seconds(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) and 0 < number <= MAX_STEP_SECONDS else None


def step_seconds(report: Report) -> float | None:
    """The rank's own time per step the report carries (`stepTimeSeconds`), if any."""
    found = [value for name, value in report.metrics if name == STEP_TIME]
    return _seconds(found[-1]) if found else None


def timing_only(report: Report) -> bool:
    """Whether the report carries a rank's step time and nothing else for the job's summary:
    the reports of ranks other than the one that reports the job's progress."""
    return (
        report.progress is None
        and report.eta_seconds is None
        and bool(report.metrics)
        and all(name == STEP_TIME for name, _ in report.metrics)
    )


def _shown(value: object) -> str:
    text = json.dumps(value) if not isinstance(value, str) else repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def summary(
    report: Report, received: datetime, previous: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The compact `trainhook.io/progress` of a job: progress, ETA, step and epoch, a few
    metrics and the last checkpoint (kept from `previous` when this report names none)."""
    out: dict[str, Any] = {}
    if report.progress is not None:
        out["progress"] = report.progress
    if report.eta_seconds is not None:
        out["etaSeconds"] = report.eta_seconds
    metrics: dict[str, str] = {}
    checkpoint: dict[str, Any] = {}
    for name, value in report.metrics:
        if name in COUNTERS:
            count = _count(value)
            if COUNTERS[name] == "checkpointStep":
                checkpoint["step"] = count
            else:
                out[COUNTERS[name]] = count
        elif name == CHECKPOINT_TIME:
            checkpoint["time"] = value
        elif name == STEP_TIME:
            continue  # the reporting rank's own, not the job's
        elif len(metrics) < SUMMARY_METRICS and name not in metrics:
            metrics[name] = value
    if metrics:
        out["metrics"] = metrics
    earlier = (previous or {}).get("checkpoint")
    if not checkpoint and isinstance(earlier, dict):
        checkpoint = dict(earlier)
    if checkpoint:
        out["checkpoint"] = checkpoint
    now = received.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    restart = _restart(out.get("step"), previous or {}, now)
    if restart is not None:
        out["restart"] = restart
    out["updated"] = report.updated or now
    if isinstance(out.get("step"), int):
        out["stepSince"] = _step_since(out["step"], previous or {}) or out["updated"]
    return out


def _step_since(step: object, previous: Mapping[str, Any]) -> str | None:
    """When the step reported now was first reported (trainhook.io/stall-timeout counts from
    it): kept while the reports repeat the step, None when the step is new."""
    since = previous.get("stepSince")
    if isinstance(step, int) and previous.get("step") == step and isinstance(since, str):
        return since
    return None


def _restart(step: object, previous: Mapping[str, Any], now: str) -> dict[str, Any] | None:
    """What the last restart lost: a step lower than the one reported before means the job
    started again from its checkpoint, and the steps past that checkpoint are to be done again."""
    reached = previous.get("step")
    if not (isinstance(step, int) and isinstance(reached, int) and step < reached):
        earlier = previous.get("restart")
        return earlier if isinstance(earlier, dict) else None
    checkpoint = previous.get("checkpoint") or {}
    saved = checkpoint.get("step") if isinstance(checkpoint.get("step"), int) else None
    lost = reached - saved if saved is not None and saved <= reached else reached
    return {"at": now, "reachedStep": reached, "checkpointStep": saved, "lostSteps": lost}


# --- durations as people write them in annotations: `90s`, `30m`, `1h30m`, `2d` -------------

UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def seconds_of(text: str) -> int | None:
    """The whole seconds of a duration (numbers each followed by s, m, h or d, largest unit
    first, each unit once); None for anything else."""
    if not text or len(text) > 32:
        return None
    total, number, last = 0, "", None
    order = list(UNITS)
    for char in text:
        if char.isdigit() and char.isascii():
            number += char
            continue
        if char not in UNITS or not number:
            return None
        at = order.index(char)
        if last is not None and at >= last:
            return None  # units from the largest down, each once: 1h30m, not 30m1h
        total += int(number) * UNITS[char]
        number, last = "", at
    return None if number else total


def duration(key: str, value: str | None, low: int, high: int) -> int | None:
    """A duration setting in seconds, from `low` to `high`; refused in one line otherwise."""
    if value is None:
        return None
    seconds = seconds_of(value.strip())
    if seconds is None or not low <= seconds <= high:
        raise InvalidSetting(
            key,
            value,
            f"a duration like 90s, 30m or 1h30m, from {_duration_shown(low)} to "
            f"{_duration_shown(high)}",
        )
    return seconds


def _duration_shown(seconds: int) -> str:
    for unit in ("d", "h", "m"):
        if seconds % UNITS[unit] == 0:
            return f"{seconds // UNITS[unit]}{unit}"
    return f"{seconds}s"


# A stall is judged between progress reports (a few a minute at most): a minute at least.
MIN_STALL: Final = 60
MAX_STALL: Final = 7 * 86400


def stall_timeout(value: str | None) -> int | None:
    """trainhook.io/stall-timeout in seconds."""
    return duration(contract.STALL_TIMEOUT, value, MIN_STALL, MAX_STALL)


# A checkpoint asked for before a planned stop: long enough for a step and a save to finish,
# short enough that a suspended job gives its GPUs back within the hour.
MIN_CHECKPOINT_ON_STOP: Final = 10
MAX_CHECKPOINT_ON_STOP: Final = 3600


def checkpoint_on_stop(value: str | None) -> int | None:
    """trainhook.io/checkpoint-on-stop in seconds."""
    return duration(
        contract.CHECKPOINT_ON_STOP, value, MIN_CHECKPOINT_ON_STOP, MAX_CHECKPOINT_ON_STOP
    )


def needs_reports(
    key: str, value: str | None, report_progress: bool, what: str, remove: str
) -> None:
    """A setting read from the job's progress reports is refused on a job that sends none:
    `what` says what it reads ("the step comes"), `remove` what to remove ("the timeout")."""
    if value is not None and not report_progress:
        raise InvalidSetting(
            key,
            value,
            f"{what} from the job's progress reports: set "
            f'{contract.REPORT_PROGRESS}: "true" too, or remove {remove}',
        )


# A straggler is a rank slower than the threshold times the others' median: from just above 1
# (any rank a little slower) to 100 (only a rank that has all but stopped).
MAX_STRAGGLER_THRESHOLD: Final = 100.0
THRESHOLD = re.compile(r"^\d{1,3}(\.\d{1,3})?$")


def straggler_threshold(value: str | None) -> float | None:
    """trainhook.io/straggler-threshold: a number above 1, like 1.5."""
    if value is None:
        return None
    text = value.strip()
    number = float(text) if THRESHOLD.match(text) else 0.0
    if not 1 < number <= MAX_STRAGGLER_THRESHOLD:
        raise InvalidSetting(
            contract.STRAGGLER_THRESHOLD,
            value,
            "a number above 1 and at most 100, like 1.5: a rank whose step time stays over "
            "that many times the median of the job's other ranks is a straggler",
        )
    return number


def human_duration(seconds: float) -> str:
    """A duration as kubectl shows ages: 45s, 13m, 5h, 2d."""
    whole = max(0, int(seconds))
    if whole < 120:
        return f"{whole}s"
    if whole < 120 * 60:
        return f"{whole // 60}m"
    if whole < 48 * 3600:
        return f"{whole // 3600}h"
    return f"{whole // 86400}d"


def summary_text(summary: Mapping[str, Any]) -> str:
    """The summary in a few words, for where JSON cannot be read (Argo CD's health message):
    `45%, step 450/1000, 13m left, checkpoint at step 400`."""
    parts = []
    if isinstance(summary.get("progress"), int):
        parts.append(f"{summary['progress']}%")
    step, total = summary.get("step"), summary.get("totalSteps")
    if isinstance(step, int):
        parts.append(f"step {step}/{total}" if isinstance(total, int) else f"step {step}")
    if isinstance(summary.get("etaSeconds"), int):
        parts.append(f"{human_duration(summary['etaSeconds'])} left")
    checkpoint = summary.get("checkpoint")
    if isinstance(checkpoint, dict) and isinstance(checkpoint.get("step"), int):
        parts.append(f"checkpoint at step {checkpoint['step']}")
    return ", ".join(parts)


def read_summary(annotations: Mapping[str, str]) -> dict[str, Any] | None:
    """The summary on a workload or pod; None when there is none or it is not ours."""
    raw = annotations.get(contract.PROGRESS)
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
