"""The progress endpoint judges the step times a job's ranks report, with the tokens their pods
really hold (the emulator's TokenReview): the slow rank is named on the job's workloads with its
pod and node, counted on /metrics, and forgotten with the job; a rank's report of its step time
alone leaves the job's progress as it was."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.support.emulator import EmulatorThread
from webhook.core import contract
from webhook.core.job.progress import status_path
from webhook.kube.client import Kube
from webhook.sweeper.serving.metrics import StragglerFigures
from webhook.sweeper.serving.progress import Limits, ProgressDesk

from .test_progress import Clock, token_for

START = datetime(2026, 1, 23, 10, 0, 0, tzinfo=UTC)
STS = "/apis/apps/v1/namespaces/ml/statefulsets"


class Wall:
    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def desk(kube: Kube, wall: Wall, clock: Clock) -> ProgressDesk:
    limits = Limits(burst=100, reports_per_second=100.0, write_interval=0.0)
    return ProgressDesk(kube, limits, clock=clock, wall=wall)


def make_job(
    emulator: EmulatorThread, job: str, pods: int, threshold: str | None = "1.5"
) -> list[tuple[str, str]]:
    """A reporting StatefulSet and its pods, pod i with rank i on node gpu-i."""
    annotations = {contract.REPORT_PROGRESS: "true"}
    if threshold is not None:
        annotations[contract.STRAGGLER_THRESHOLD] = threshold
    sts = emulator.create(
        STS,
        {
            "metadata": {
                "name": job,
                "labels": {contract.FRAMEWORK: "pytorch"},
                "annotations": annotations,
            },
            "spec": {
                "replicas": pods,
                "template": {
                    "metadata": {"annotations": annotations},
                    "spec": {"containers": [{"name": "t"}]},
                },
            },
        },
    )
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": job, "controller": True}
    made = []
    for i in range(pods):
        pod = emulator.create(
            "/api/v1/namespaces/ml/pods",
            {
                "metadata": {
                    "name": f"{job}-{i}",
                    "labels": {
                        contract.FRAMEWORK: "pytorch",
                        contract.JOB: job,
                        contract.RANK: str(i),
                    },
                    "annotations": annotations,
                    "ownerReferences": [owner | {"uid": sts["metadata"]["uid"]}],
                },
                "spec": {"containers": [{"name": "t"}], "nodeName": f"gpu-{i}"},
            },
        )
        made.append((pod["metadata"]["name"], pod["metadata"]["uid"]))
    return made


def step_time(seconds: float, **more: Any) -> bytes:
    metrics = [{"name": "stepTimeSeconds", "value": str(seconds)}]
    metrics += [{"name": k, "value": str(v)} for k, v in more.items()]
    return json.dumps({"trainerStatus": {"metrics": metrics}}).encode()


def send(desk: ProgressDesk, job: str, token: str, body: bytes) -> int:
    answer = desk.handle(status_path("ml", job), {"Authorization": f"Bearer {token}"}, body)
    return answer.status


def marks_of(emulator: EmulatorThread, job: str) -> dict[str, str]:
    found: dict[str, str] = emulator.read(f"{STS}/{job}")["metadata"].get("annotations", {})
    return found


def rounds(
    desk: ProgressDesk, wall: Wall, job: str, tokens: list[str], times: list[float], count: int
) -> None:
    for _ in range(count):
        wall.now += timedelta(seconds=10)
        for token, seconds in zip(tokens, times, strict=True):
            assert send(desk, job, token, step_time(seconds)) == 200
        desk.flush()


def test_the_slow_rank_is_named_on_the_job_with_its_pod_and_node_after_three_reports(
    emulator: EmulatorThread, desk: ProgressDesk, wall: Wall
) -> None:
    pods = make_job(emulator, "pt", 4)
    tokens = [token_for(emulator, "pt", pod) for pod in pods]
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 1.1, 2.2], 2)
    assert contract.STRAGGLERS not in marks_of(emulator, "pt")
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 1.1, 2.2], 1)
    assert marks_of(emulator, "pt")[contract.STRAGGLERS] == (
        '{"count":1,"ranks":4,"threshold":1.5,"flagged":[{"pod":"pt-3","node":"gpu-3",'
        '"rank":3,"ratio":2.2,"since":"2026-01-23T10:00:30Z"}]}'
    )
    registry = CollectorRegistry()
    registry.register(StragglerFigures(desk.straggling))
    assert (
        registry.get_sample_value("trainhook_job_stragglers", {"namespace": "ml", "job": "pt"}) == 1
    )
    # Back to speed: unflagged after three normal reports, and the annotation removed.
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 1.1, 1.0], 2)
    assert contract.STRAGGLERS in marks_of(emulator, "pt")
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 1.1, 1.0], 1)
    assert contract.STRAGGLERS not in marks_of(emulator, "pt")
    assert (
        registry.get_sample_value("trainhook_job_stragglers", {"namespace": "ml", "job": "pt"}) == 0
    )


def test_the_annotation_is_written_when_it_changes_not_at_every_report(
    emulator: EmulatorThread, desk: ProgressDesk, wall: Wall
) -> None:
    pods = make_job(emulator, "pt", 3)
    tokens = [token_for(emulator, "pt", pod) for pod in pods]
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 3.0], 3)
    writes = desk.writes
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 3.0], 10)
    assert desk.writes == writes


def test_a_ranks_step_time_alone_leaves_the_jobs_progress_as_it_was(
    emulator: EmulatorThread, desk: ProgressDesk, wall: Wall
) -> None:
    pods = make_job(emulator, "pt", 2)
    rank0, rank1 = (token_for(emulator, "pt", pod) for pod in pods)
    assert send(desk, "pt", rank0, step_time(1.0, currentStep=450, totalSteps=1000)) == 200
    desk.flush()
    before = marks_of(emulator, "pt")[contract.PROGRESS]
    assert json.loads(before)["step"] == 450
    assert send(desk, "pt", rank1, step_time(1.0)) == 200
    desk.flush()
    assert marks_of(emulator, "pt")[contract.PROGRESS] == before


def test_a_job_without_a_threshold_judges_no_rank(
    emulator: EmulatorThread, desk: ProgressDesk, wall: Wall
) -> None:
    pods = make_job(emulator, "pt", 3, threshold=None)
    tokens = [token_for(emulator, "pt", pod) for pod in pods]
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 9.0], 5)
    assert contract.STRAGGLERS not in marks_of(emulator, "pt")
    assert desk.straggling() == []


def test_a_job_gone_is_forgotten_with_its_ranks(
    emulator: EmulatorThread, desk: ProgressDesk, wall: Wall
) -> None:
    pods = make_job(emulator, "pt", 3)
    tokens = [token_for(emulator, "pt", pod) for pod in pods]
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 3.0], 3)
    assert desk.straggling() == [(("ml", "pt"), 1)]
    emulator.delete(f"{STS}/pt")
    # Its slow rank recovers as the job goes: the annotation is due, and the job found gone.
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 1.0], 3)
    assert desk.straggling() == [] and desk.stragglers.jobs == {}


def test_a_job_the_sweeper_saw_go_is_forgotten_at_once(
    emulator: EmulatorThread, desk: ProgressDesk, wall: Wall
) -> None:
    pods = make_job(emulator, "pt", 2)
    rounds(desk, wall, "pt", [token_for(emulator, "pt", pod) for pod in pods], [1.0, 1.0], 1)
    assert desk.straggling() == [(("ml", "pt"), 0)]
    desk.forget(("ml", "pt"))
    assert desk.straggling() == []


def test_ranks_that_stop_reporting_are_forgotten_and_their_flag_removed(
    emulator: EmulatorThread, desk: ProgressDesk, wall: Wall, clock: Clock
) -> None:
    pods = make_job(emulator, "pt", 3)
    tokens = [token_for(emulator, "pt", pod) for pod in pods]
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 3.0], 3)
    assert contract.STRAGGLERS in marks_of(emulator, "pt")
    wall.now += timedelta(minutes=3)
    clock.now += 180
    desk.flush()
    assert contract.STRAGGLERS not in marks_of(emulator, "pt")
    assert desk.stragglers.jobs == {}


def test_the_example_reporter_sends_a_ranks_step_time_alone_from_the_other_pods(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from .test_progress import example_module

    reporter = example_module()
    sent: list[tuple[Any, ...]] = []

    def send(*args: Any, **kw: Any) -> bool:
        sent.append((args, kw))
        return True

    monkeypatch.setattr(reporter, "send", send)
    monkeypatch.setenv("TRAINHOOK_WORLD_SIZE", "4")
    for rank, local_rank in (("3", "0"), ("0", "0"), ("5", "1")):
        monkeypatch.setenv("RANK", rank)
        monkeypatch.setenv("LOCAL_RANK", local_rank)
        progress = reporter.Progress(total_steps=10, step_times=True)
        assert progress.every_seconds == 15.0  # max(15, 1.5 x 4 pods)
        progress.every_seconds = 0.0
        for seconds in (0.5, 1.5):
            progress.step(loss=1.0, step_seconds=seconds)
    first = sent[2]
    assert sent[0] == ((), {"metrics": {"stepTimeSeconds": "0.5"}})
    assert sent[1] == ((), {"metrics": {"stepTimeSeconds": "1.5"}})
    assert first[0][2]["stepTimeSeconds"] == "0.5" and first[0][2]["currentStep"] == "1"
    assert len(sent) == 4  # the pod's second process (LOCAL_RANK 1) sends nothing


def test_a_second_replica_that_flags_the_same_rank_leaves_the_record_as_it_is(
    emulator: EmulatorThread, kube: Kube, desk: ProgressDesk, wall: Wall, clock: Clock
) -> None:
    # Every replica serves the endpoint and judges the reports it receives.
    other = ProgressDesk(
        kube, Limits(burst=100, reports_per_second=100.0, write_interval=0.0), clock=clock,
        wall=wall,
    )  # fmt: skip
    pods = make_job(emulator, "pt", 3)
    tokens = [token_for(emulator, "pt", pod) for pod in pods]
    rounds(desk, wall, "pt", tokens, [1.0, 1.0, 3.0], 3)
    first = marks_of(emulator, "pt")[contract.STRAGGLERS]
    rounds(other, wall, "pt", tokens, [1.0, 1.0, 3.3], 4)
    assert other.writes == 0
    assert marks_of(emulator, "pt")[contract.STRAGGLERS] == first  # flagged when it first was
    rounds(other, wall, "pt", tokens, [1.0, 1.0, 1.0], 3)  # back to speed, as this one sees it
    assert contract.STRAGGLERS not in marks_of(emulator, "pt")
