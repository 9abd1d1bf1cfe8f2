"""The progress endpoint over real TLS, verifying tokens with the emulator's TokenReview."""

from __future__ import annotations

import importlib.util
import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from tests.support.emulator import EmulatorThread
from webhook.certs.material import generate
from webhook.core import contract
from webhook.core.job.progress import audience, status_path
from webhook.kube.client import Kube
from webhook.sweeper.serving.metrics import ProgressFigures
from webhook.sweeper.serving.progress import Limits, ProgressDesk
from webhook.sweeper.serving.progress_server import serve

SERVER_NAME = "127.0.0.1"  # the development certificate names the loopback address too


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("certs")
    generate(directory, "trainhook", "trainhook-system")
    return directory


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def desk(kube: Kube, clock: Clock) -> ProgressDesk:
    return ProgressDesk(kube, Limits(burst=5, reports_per_second=1.0, max_jobs=8), clock=clock)


@pytest.fixture
def endpoint(desk: ProgressDesk, certs: Path) -> Iterator[str]:
    server, stop = serve(desk, "127.0.0.1:0", str(certs / "tls.crt"), str(certs / "tls.key"))
    try:
        yield f"https://{SERVER_NAME}:{server.server_address[1]}"
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def make_job(emulator: EmulatorThread, job: str, report: bool = True) -> tuple[str, str]:
    """A reporting StatefulSet of `job` (`report` False: one that does not report) and its pod
    0, as the webhook admitted them; the pod's name and uid."""
    reports = {contract.REPORT_PROGRESS: "true" if report else "false"}
    sts = emulator.create(
        "/apis/apps/v1/namespaces/ml/statefulsets",
        {
            "metadata": {
                "name": job,
                "labels": {contract.FRAMEWORK: "pytorch"},
                "annotations": reports,
            },
            "spec": {
                "replicas": 1,
                "template": {
                    "metadata": {"annotations": reports},
                    "spec": {"containers": [{"name": "t"}]},
                },
            },
        },
    )
    owner = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": job, "controller": True}
    pod = emulator.create(
        "/api/v1/namespaces/ml/pods",
        {
            "metadata": {
                "name": f"{job}-0",
                "labels": {contract.FRAMEWORK: "pytorch", contract.JOB: job},
                "annotations": reports,
                "ownerReferences": [owner | {"uid": sts["metadata"]["uid"]}],
            },
            "spec": {"containers": [{"name": "t"}]},
        },
    )
    return pod["metadata"]["name"], pod["metadata"]["uid"]


def token_for(emulator: EmulatorThread, job: str, pod: tuple[str, str]) -> str:
    """The projected token the kubelet would write into the pod: bound to it, audience the job."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [audience("ml", job)],
            "expirationSeconds": 3600,
            "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": pod[0], "uid": pod[1]},
        },
    }
    answer = emulator.create("/api/v1/namespaces/ml/serviceaccounts/default/token", request)
    return str(answer["status"]["token"])


def post(
    base: str,
    certs: Path,
    job: str,
    token: str | None,
    body: bytes,
    content_type: str | None = None,
) -> tuple[int, dict[str, Any]]:
    """As Trainer's own example client: urllib, the CA file, the bearer token."""
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    url = base + status_path("ml", job)
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    if content_type:
        headers["Content-Type"] = content_type
    request = urllib.request.Request(url, data=body, headers=headers)
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


REPORT = {
    "trainerStatus": {
        "progressPercentage": 45,
        "estimatedRemainingSeconds": 795,
        "metrics": [
            {"name": "loss", "value": "0.2347"},
            {"name": "currentStep", "value": "450"},
            {"name": "totalSteps", "value": "1000"},
            {"name": "currentEpoch", "value": "2"},
            {"name": "lastCheckpointStep", "value": "400"},
            {"name": "lastCheckpointTime", "value": "2026-01-23T10:30:00Z"},
        ],
        "lastUpdatedTime": "2026-01-23T10:30:45Z",
    }
}


def progress_of(emulator: EmulatorThread, name: str) -> Any:
    sts = emulator.read(f"/apis/apps/v1/namespaces/ml/statefulsets/{name}")
    raw = sts["metadata"].get("annotations", {}).get(contract.PROGRESS)
    return None if raw is None else json.loads(raw)


def test_a_report_lands_on_the_job_as_a_compact_annotation(
    emulator: EmulatorThread, endpoint: str, certs: Path, desk: ProgressDesk
) -> None:
    pod = make_job(emulator, "bert")
    status, body = post(endpoint, certs, "bert", token_for(emulator, "bert", pod),
                        json.dumps(REPORT).encode())  # fmt: skip
    assert (status, body) == (200, REPORT)  # Trainer answers with the report it took
    desk.flush()
    assert progress_of(emulator, "bert") == {
        "progress": 45,
        "etaSeconds": 795,
        "step": 450,
        "totalSteps": 1000,
        "epoch": 2,
        "metrics": {"loss": "0.2347"},
        "checkpoint": {"step": 400, "time": "2026-01-23T10:30:00Z"},
        "updated": "2026-01-23T10:30:45Z",
        "stepSince": "2026-01-23T10:30:45Z",
    }


def test_a_token_of_one_job_cannot_report_for_another(
    emulator: EmulatorThread, endpoint: str, certs: Path, desk: ProgressDesk
) -> None:
    pod_a = make_job(emulator, "job-a")
    make_job(emulator, "job-b")
    token_a = token_for(emulator, "job-a", pod_a)
    status, body = post(endpoint, certs, "job-b", token_a, json.dumps(REPORT).encode())
    assert status == 403
    assert body["message"] == (
        "this token may not report for job job-b: the token is not valid for the job's audience"
    )
    # A token minted with job B's audience, but bound to a pod of job A, is refused too.
    forged = token_for(emulator, "job-b", pod_a)
    assert post(endpoint, certs, "job-b", forged, json.dumps(REPORT).encode())[0] == 403
    desk.flush()
    assert progress_of(emulator, "job-b") is None


def test_no_token_or_an_unknown_one_is_refused(
    emulator: EmulatorThread, endpoint: str, certs: Path
) -> None:
    make_job(emulator, "bert")
    status, body = post(endpoint, certs, "bert", None, b"{}")
    assert (status, body["message"]) == (
        401,
        "send the pod's token: Authorization: Bearer ...",
    )
    assert post(endpoint, certs, "bert", "not-a-token", b"{}")[0] == 403


@pytest.mark.parametrize(
    ("body", "content_type", "code", "message"),
    [
        (b"progress=45", None, 400, 'the body is not JSON: send {"trainerStatus": {...}}'),
        (b"{}", "text/plain", 415, "Content-Type text/plain: send application/json"),
        (
            b'{"trainerStatus": {"progressPercentage": 150}}',
            "application/json",
            422,
            "trainerStatus.progressPercentage: 150; from 0 to 100 is allowed",
        ),
        (
            b'{"trainerStatus": {"metrics": [{"name": "", "value": "1"}]}}',
            "application/json",
            422,
            "trainerStatus.metrics[0].name: ''; a string of 1 to 128 characters",
        ),
        (
            b'{"trainerStatus": {"metrics": [{"name": "currentStep", "value": "-3"}]}}',
            "application/json",
            422,
            "metric currentStep: '-3'; a whole number from 0 is allowed",
        ),
        (
            b"[1, 2]",
            "application/json",
            422,
            'the body must be a JSON object: {"trainerStatus": {...}}',
        ),
    ],
)
def test_a_malformed_report_gets_a_clear_4xx(
    emulator: EmulatorThread,
    endpoint: str,
    certs: Path,
    body: bytes,
    content_type: str | None,
    code: int,
    message: str,
) -> None:
    pod = make_job(emulator, "bert")
    answer = post(endpoint, certs, "bert", token_for(emulator, "bert", pod), body, content_type)
    assert answer == (
        code,
        {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message,
         "reason": answer[1]["reason"], "code": code},
    )  # fmt: skip
    assert progress_of(emulator, "bert") is None


def test_a_body_over_64_kib_is_refused_before_it_is_read(
    emulator: EmulatorThread, endpoint: str, certs: Path
) -> None:
    pod = make_job(emulator, "bert")
    huge = b'{"trainerStatus": {"metrics": []}}' + b" " * 70_000
    status, body = post(endpoint, certs, "bert", token_for(emulator, "bert", pod), huge)
    assert (status, body["message"]) == (413, "the body is 70034 bytes; at most 65536 are read")


def test_a_flood_is_cut_to_a_fixed_rate_of_reports_and_writes(
    emulator: EmulatorThread, endpoint: str, certs: Path, desk: ProgressDesk, clock: Clock
) -> None:
    pod = make_job(emulator, "bert")
    token = token_for(emulator, "bert", pod)
    reviews_before = sum(1 for _, path, _, _ in emulator.handler.log if "tokenreviews" in path)
    codes = []
    for step in range(40):
        report = {"trainerStatus": {"progressPercentage": step % 101}}
        codes.append(post(endpoint, certs, "bert", token, json.dumps(report).encode())[0])
        desk.flush()
    # The burst of 5, then nothing until the clock moves: the rest are told to slow down.
    assert codes == [200] * 5 + [429] * 35
    # One write of the annotation in the write interval, and one TokenReview for one token.
    assert desk.writes == 1
    reviews = sum(1 for _, path, _, _ in emulator.handler.log if "tokenreviews" in path)
    assert reviews - reviews_before == 1
    clock.now += 10.0
    assert post(endpoint, certs, "bert", token, json.dumps(REPORT).encode())[0] == 200
    desk.flush()
    assert desk.writes == 3  # the StatefulSet again, and its pod: the report names a checkpoint
    assert progress_of(emulator, "bert")["progress"] == 45


def test_reports_for_many_jobs_keep_a_bounded_memory(
    emulator: EmulatorThread, endpoint: str, certs: Path, desk: ProgressDesk
) -> None:
    tokens = {}
    for n in range(12):
        job = f"job-{n}"
        tokens[job] = token_for(emulator, job, make_job(emulator, job))
    for job, token in tokens.items():
        assert post(endpoint, certs, job, token, json.dumps(REPORT).encode())[0] == 200
    # max_jobs is 8: the oldest jobs' buckets and summaries are forgotten first.
    recent = {("ml", f"job-{n}") for n in range(4, 12)}
    assert set(desk._buckets) == recent and set(desk._summaries) == recent
    assert set(desk._pending) <= recent


def test_the_example_reporter_reports_a_loop_through_the_pods_files(
    emulator: EmulatorThread,
    endpoint: str,
    certs: Path,
    desk: ProgressDesk,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The copyable module in examples/progress, as a pod runs it: the three variables, the
    token file the kubelet writes, the CA file; through TLS, the TokenReview, the annotation."""
    pod = make_job(emulator, "bert")
    token = tmp_path / "token"
    token.write_text(token_for(emulator, "bert", pod))
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_URL", endpoint + status_path("ml", "bert"))
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_CA_CERT", str(certs / "ca.crt"))
    monkeypatch.setenv("KUBEFLOW_TRAINER_SERVER_TOKEN", str(token))
    monkeypatch.setenv("RANK", "0")
    module = example_module()
    progress = module.Progress(total_steps=200, total_epochs=2)  # step 1, then the checkpoint
    for step in range(50):
        progress.step(epoch=0, loss=1.0 / (step + 1))
        if step == 49:
            progress.checkpoint()
    desk.flush()
    found = progress_of(emulator, "bert")
    assert (found["progress"], found["step"], found["totalSteps"]) == (25, 50, 200)
    assert (found["epoch"], found["totalEpochs"]) == (0, 2)
    assert found["metrics"] == {"loss": "0.02"}
    assert found["checkpoint"]["step"] == 50
    assert found["checkpoint"]["time"] == found["updated"]


def test_the_example_reporter_does_nothing_outside_a_reporting_pod(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBEFLOW_TRAINER_SERVER_URL", raising=False)
    assert example_module().send(progress=10) is False


def test_the_example_reporter_sees_each_new_checkpoint_request_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = example_module()
    request = tmp_path / "requested"
    request.write_text("2026-01-01T00:00:00Z")  # made before the process started: not for it
    ticks = iter(float(n) for n in range(100))
    monkeypatch.setattr(module.time, "monotonic", lambda: next(ticks) * 2)
    progress = module.Progress(request_file=str(request))
    assert progress.checkpoint_requested() is False
    request.write_text("2026-01-01T01:00:00Z")  # the kubelet shows the sweeper's new request
    assert progress.checkpoint_requested() is True
    assert progress.checkpoint_requested() is False
    request.write_text("")  # withdrawn (the job resumed)
    assert progress.checkpoint_requested() is False
    request.write_text("2026-01-01T02:00:00Z")
    assert progress.checkpoint_requested() is True
    assert module.checkpoint_request(str(tmp_path / "absent")) == ""


def example_module() -> Any:
    path = Path(__file__).resolve().parents[2] / "examples" / "progress" / "trainhook_progress.py"
    spec = importlib.util.spec_from_file_location("trainhook_progress", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_progress_and_numeric_metrics_are_gauges_with_bounded_labels(
    emulator: EmulatorThread, endpoint: str, certs: Path, desk: ProgressDesk
) -> None:
    registry = CollectorRegistry()
    registry.register(ProgressFigures(desk.latest))
    pod = make_job(emulator, "bert")
    assert post(endpoint, certs, "bert", token_for(emulator, "bert", pod),
                json.dumps(REPORT).encode())[0] == 200  # fmt: skip
    labels = {"namespace": "ml", "job": "bert"}
    assert registry.get_sample_value("trainhook_job_progress_ratio", labels) == 0.45
    assert registry.get_sample_value("trainhook_job_metric", labels | {"name": "loss"}) == 0.2347
    # Thirty metrics in one report: only the summary's first eight become series.
    many = {"trainerStatus": {"metrics": [{"name": f"m{i}", "value": "1"} for i in range(30)]}}
    assert post(endpoint, certs, "bert", token_for(emulator, "bert", pod),
                json.dumps(many).encode())[0] == 200  # fmt: skip
    series = [s for m in registry.collect() if m.name == "trainhook_job_metric" for s in m.samples]
    assert sorted(s.labels["name"] for s in series) == sorted(f"m{i}" for i in range(8))


def test_metric_series_come_from_the_hundred_jobs_heard_from_last() -> None:
    latest = [(("ml", f"job-{n}"), {"progress": 50, "metrics": {"loss": "1"}}) for n in range(150)]
    registry = CollectorRegistry()
    registry.register(ProgressFigures(lambda: latest))
    families = {m.name: m.samples for m in registry.collect()}
    assert len(families["trainhook_job_progress_ratio"]) == 150
    jobs = {s.labels["job"] for s in families["trainhook_job_metric"]}
    assert jobs == {f"job-{n}" for n in range(50, 150)}


def test_a_checkpoint_is_marked_on_the_pods_and_a_restart_says_what_it_lost(
    emulator: EmulatorThread, endpoint: str, certs: Path, desk: ProgressDesk, clock: Clock
) -> None:
    pod = make_job(emulator, "bert")
    token = token_for(emulator, "bert", pod)
    assert post(endpoint, certs, "bert", token, json.dumps(REPORT).encode())[0] == 200
    desk.flush()
    marked = emulator.read("/api/v1/namespaces/ml/pods/bert-0")["metadata"]["annotations"]
    assert json.loads(marked[contract.LAST_CHECKPOINT]) == {
        "step": 400,
        "time": "2026-01-23T10:30:00Z",
    }
    # The job restarts from its checkpoint at step 400: it reports step 401 next.
    resumed = {"trainerStatus": {"metrics": [{"name": "currentStep", "value": "401"}]}}
    assert post(endpoint, certs, "bert", token, json.dumps(resumed).encode())[0] == 200
    clock.now += 10.0
    desk.flush()
    found = progress_of(emulator, "bert")
    assert found["step"] == 401
    assert found["checkpoint"] == {"step": 400, "time": "2026-01-23T10:30:00Z"}
    restart = found["restart"]
    assert (restart["reachedStep"], restart["checkpointStep"], restart["lostSteps"]) == (
        450,
        400,
        50,
    )
