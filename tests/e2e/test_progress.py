"""A job reports its progress the way a pod in the cluster would, end to end.

The pod is the webhook's: a StatefulSet with `trainhook.io/report-progress` admitted by the core,
its pod made as the StatefulSet controller makes it and admitted too. The kubelet's part is
played here: the container's env from the pod spec (tests/e2e/kubelet.py), and the projected
volume's two files, the token (a TokenRequest bound to the pod, with the audience the pod spec
names, as the kubelet asks for it) and ca.crt (the downward API item the pod spec names). The
training process is real (PyTorch, or Hugging Face Transformers on a tiny model built from a
config: nothing is downloaded) and reports with examples/progress/trainhook_progress.py over
real TLS to the sweeper's endpoint, which verifies the token with the emulator's TokenReview and
writes the annotation `trainhook status` reads.
"""

from __future__ import annotations

import concurrent.futures
import copy
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
from kubernetes.config import kube_config

from tests.support.emulator import EmulatorThread, emulator, kubeconfig
from webhook.certs.material import generate
from webhook.cli import main
from webhook.core.job.progress import MOUNT_PATH, ProgressEndpoint
from webhook.core.mutation.admit import Policy, Request, admit
from webhook.core.render import expand
from webhook.sweeper.serving.progress import Limits, ProgressDesk
from webhook.sweeper.serving.progress_server import serve

from .kubelet import PodStatus, container_env, field_value

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
REPORTER = ROOT / "examples" / "progress"
NAMESPACE = "ml"

TORCH_LOOP = """
import sys, time, torch
from trainhook_progress import Progress

torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
x, y = torch.randn(64, 4), torch.randn(64, 1)
steps, epochs = 60, 3
progress = Progress(total_steps=steps, total_epochs=epochs, every_seconds=0.25)
for step in range(steps):
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    progress.step(epoch=step * epochs // steps, loss=loss.item())
    if step == 39:
        torch.save(model.state_dict(), sys.argv[1])
        progress.checkpoint()
    time.sleep(0.05)
progress.done()
"""

HF_TRAINER = """
import sys, torch
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainingArguments
from trainhook_progress import ProgressCallback

torch.manual_seed(0)
config = BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                    intermediate_size=32, max_position_embeddings=16, num_labels=2)
model = BertForSequenceClassification(config)
data = [{"input_ids": torch.randint(0, 64, (8,)), "labels": torch.tensor(i % 2)}
        for i in range(32)]
args = TrainingArguments(output_dir=sys.argv[1], max_steps=20, per_device_train_batch_size=4,
                         logging_steps=2, save_steps=10, save_strategy="steps", report_to=[],
                         use_cpu=True, disable_tqdm=True)
Trainer(model=model, args=args, train_dataset=data,
        callbacks=[ProgressCallback(every_seconds=0.2)]).train()
"""


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The emulator, the progress endpoint over TLS, and `trainhook status` pointed at both."""
    certs = tmp_path / "certs"
    generate(certs, "trainhook-progress", "trainhook")  # names 127.0.0.1 too
    with emulator() as api:
        point_clients_at(api, tmp_path, monkeypatch)
        desk = ProgressDesk(api.api(), Limits(burst=50, reports_per_second=20, write_interval=0.3))
        with serving_desk(desk, certs) as endpoint:
            yield {"api": api, "endpoint": endpoint, "desk": desk}


def point_clients_at(api: EmulatorThread, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's Kubernetes clients (`trainhook status`, `describe`) read the emulator."""
    monkeypatch.setattr(
        kube_config, "KUBE_CONFIG_DEFAULT_LOCATION", str(kubeconfig(tmp_path / "config", api.url))
    )
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)


@contextmanager
def serving_desk(desk: ProgressDesk, certs: Path) -> Iterator[ProgressEndpoint]:
    """The progress endpoint serving `desk` over TLS on 127.0.0.1, as pods are told of it."""
    server, stop = serve(desk, "127.0.0.1:0", str(certs / "tls.crt"), str(certs / "tls.key"))
    try:
        yield ProgressEndpoint(
            f"https://127.0.0.1:{server.server_address[1]}", (certs / "ca.crt").read_text()
        )
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def admitted(obj: dict[str, Any], endpoint: ProgressEndpoint) -> dict[str, Any]:
    request = Request(obj["kind"], "CREATE", obj, NAMESPACE, username="alice")
    outcome = admit(request, policy=Policy(progress=endpoint))
    assert outcome is not None
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(obj), outcome.patch)
    return result


def controller_pods(
    api: EmulatorThread,
    endpoint: ProgressEndpoint,
    job: str,
    replicas: int,
    annotations: dict[str, str],
) -> list[dict[str, Any]]:
    """A PyTorch StatefulSet reporting progress (with `annotations`), admitted and created; its
    pods as its controller makes them, not admitted yet. Each is owned by the StatefulSet by uid,
    as the controller makes it: only then is it the job's."""
    workload = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {
            "name": job,
            "namespace": NAMESPACE,
            "labels": {"trainhook.io/framework": "pytorch"},
            "annotations": {"trainhook.io/report-progress": "true", **annotations},
        },
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": job}},
            "template": {
                "metadata": {"labels": {"app": job}},
                "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
            },
        },
    }
    workload = admitted(workload, endpoint)
    created = api.create(f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets", workload)
    owner = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": job,
        "uid": created["metadata"]["uid"],
        "controller": True,
    }
    pods = expand(workload, NAMESPACE)
    for pod in pods:
        pod["metadata"]["ownerReferences"] = [dict(owner)]
    return pods


def start_pod(api: EmulatorThread, job: str, endpoint: ProgressEndpoint, workdir: Path) -> Any:
    """The job's one pod as the cluster starts it; its container's env and projected files."""
    [pod] = controller_pods(api, endpoint, job, 1, {})
    pod = api.create(f"/api/v1/namespaces/{NAMESPACE}/pods", admitted(pod, endpoint))
    return start_pod_files(api, pod, workdir)


def start_pod_files(api: EmulatorThread, pod: dict[str, Any], workdir: Path) -> Any:
    """What the kubelet gives a created pod's container: its env and projected files."""
    status = PodStatus(pod_ip="127.0.0.1", uid=pod["metadata"]["uid"])
    env = container_env(pod, pod["spec"]["containers"][0], status)
    [volume] = [v for v in pod["spec"]["volumes"] if v["name"] == "trainhook-progress"]
    files = workdir / "projected"
    files.mkdir()
    for source in volume["projected"]["sources"]:
        if "serviceAccountToken" in source:
            wanted = source["serviceAccountToken"]
            answer = api.create(
                f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default/token",
                {
                    "spec": {
                        "audiences": [wanted["audience"]],
                        "expirationSeconds": wanted["expirationSeconds"],
                        "boundObjectRef": {
                            "kind": "Pod",
                            "name": pod["metadata"]["name"],
                            "uid": pod["metadata"]["uid"],
                        },
                    }
                },
            )
            (files / wanted["path"]).write_text(answer["status"]["token"])
        for item in (source.get("downwardAPI") or {}).get("items") or []:
            value = field_value(pod, status, item["fieldRef"]["fieldPath"])
            (files / item["path"]).write_text(value)
    # The volume is mounted at MOUNT_PATH in the container; here it is a directory of the test's.
    env = {k: v.replace(MOUNT_PATH, str(files)) for k, v in env.items()}
    return env


def run_training(script: str, env: dict[str, str], workdir: Path) -> subprocess.Popen[bytes]:
    process_env = {
        "PATH": os.environ["PATH"],
        "HOME": str(workdir),
        "PYTHONPATH": str(REPORTER),
        "HF_HUB_OFFLINE": "1",
        **env,
    }
    return subprocess.Popen(
        [sys.executable, "-c", script, str(workdir / "out")],
        env=process_env,
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def status_line(capsys: pytest.CaptureFixture[str], job: str) -> dict[str, str]:
    assert main(["status", "-n", NAMESPACE, job]) == 0
    header, row = capsys.readouterr().out.splitlines()[:2]
    columns = list(re.finditer(r"\S+", header))
    ends = [column.start() for column in columns[1:]] + [None]
    return {
        column.group(): row[column.start() : end].strip()
        for column, end in zip(columns, ends, strict=True)
    }


def watch(
    process: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str], job: str
) -> list[dict[str, str]]:
    """`trainhook status` of the job, read while the training runs and once after."""
    seen = []
    deadline = time.monotonic() + 300
    while process.poll() is None and time.monotonic() < deadline:
        seen.append(status_line(capsys, job))
        time.sleep(0.3)
    output = process.communicate(timeout=60)[0].decode(errors="replace")
    assert process.returncode == 0, output
    time.sleep(1.0)  # the endpoint writes a job's last report within its write interval
    seen.append(status_line(capsys, job))
    return seen


def test_a_pytorch_loop_reports_progress_that_trainhook_status_shows_moving(
    cluster: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = start_pod(cluster["api"], "linear", cluster["endpoint"], tmp_path)
    assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
        cluster["endpoint"].url + "/apis/trainhook.io/v1/namespaces/ml/jobs/linear/status"
    )
    seen = watch(run_training(TORCH_LOOP, env, tmp_path), capsys, "linear")
    progress = [row["PROGRESS"] for row in seen if row["PROGRESS"] != "-"]
    assert len(set(progress)) >= 3, progress  # it moved while the loop ran
    assert seen[-1]["PROGRESS"] == "100%"
    assert seen[-1]["CHECKPOINT"].startswith("step 40, ")
    assert (tmp_path / "out").exists()


def test_a_hugging_face_trainer_reports_through_the_callback(
    cluster: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = start_pod(cluster["api"], "bert-tiny", cluster["endpoint"], tmp_path)
    seen = watch(run_training(HF_TRAINER, env, tmp_path), capsys, "bert-tiny")
    assert seen[-1]["PROGRESS"] == "100%"
    assert seen[-1]["CHECKPOINT"].startswith("step 20, ")
    sts = cluster["api"].read(f"/apis/apps/v1/namespaces/{NAMESPACE}/statefulsets/bert-tiny")
    assert "loss" in sts["metadata"]["annotations"]["trainhook.io/progress"]


def post(env: dict[str, str], url: str, body: bytes) -> int:
    """One report as the reporter sends it, with the pod's own token and CA; the status."""
    context = ssl.create_default_context(cafile=env["KUBEFLOW_TRAINER_SERVER_CA_CERT"])
    token = Path(env["KUBEFLOW_TRAINER_SERVER_TOKEN"]).read_text()
    request = urllib.request.Request(url, body, {"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, context=context, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def test_a_pod_cannot_report_for_another_job_and_a_flood_is_cut_to_the_jobs_rate(
    cluster: dict[str, Any], tmp_path: Path
) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    pod_a = start_pod(cluster["api"], "job-a", cluster["endpoint"], tmp_path / "a")
    pod_b = start_pod(cluster["api"], "job-b", cluster["endpoint"], tmp_path / "b")
    report = b'{"trainerStatus": {"progressPercentage": 10}}'
    assert post(pod_a, pod_b["KUBEFLOW_TRAINER_SERVER_URL"], report) == 403
    assert post(pod_b, pod_b["KUBEFLOW_TRAINER_SERVER_URL"], report) == 200
    desk: ProgressDesk = cluster["desk"]
    writes = desk.writes
    url = pod_a["KUBEFLOW_TRAINER_SERVER_URL"]
    started = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(lambda _: post(pod_a, url, report), range(400)))
    elapsed = time.monotonic() - started
    # Every answer is a 200 or a "slow down" (or a 503 when all 16 slots are busy): nothing else,
    # and no more reports taken than the burst and the rate allow.
    assert set(codes) <= {200, 429, 503}, sorted(set(codes))
    assert codes.count(200) <= 50 + 20 * elapsed + 1
    assert 429 in codes
    # One write of job A's annotation per 0.3 s write interval, at most (+1 for the last).
    time.sleep(1.0)
    assert desk.writes - writes <= (elapsed + 1.0) / 0.3 + 2
    # And it still serves.
    assert post(pod_b, pod_b["KUBEFLOW_TRAINER_SERVER_URL"], report) == 200
