"""`trainhook render` as a user runs it: files and folders in, a table or YAML out."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from webhook.cli import main

PYTORCH_JOB = """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: pt-master
  labels: {trainhook.io/framework: pytorch, trainhook.io/job: pt, trainhook.io/role: master}
spec:
  selector: {matchLabels: {app: pt-master}}
  template:
    metadata: {labels: {app: pt-master}}
    spec: {containers: [{name: pytorch, image: trainer}]}
---
apiVersion: v1
kind: Service
metadata: {name: unrelated}
spec: {ports: [{port: 80}]}
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: pt-worker
  labels: {trainhook.io/framework: pytorch, trainhook.io/job: pt, trainhook.io/role: worker}
spec:
  replicas: 2
  selector: {matchLabels: {app: pt-worker}}
  template:
    metadata: {labels: {app: pt-worker}}
    spec: {containers: [{name: pytorch, image: trainer}]}
"""


@pytest.fixture
def job_file(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(PYTORCH_JOB)
    return path


def test_render_prints_a_table_of_the_jobs_pods_in_rank_order(
    job_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", str(job_file)]) == 0
    assert capsys.readouterr().out == (
        "job pt (pytorch, namespace default, 3 pods)\n"
        "POD          ROLE    INDEX  POD_RANK  MASTER_ADDR                 NODE_RANK  NNODES  "
        "WORLD_SIZE  RANK\n"
        "pt-master-0  master  0      0         pt-master-0.pt.default.svc  0          3       3"
        "           0\n"
        "pt-worker-0  worker  0      1         pt-master-0.pt.default.svc  1          3       3"
        "           1\n"
        "pt-worker-1  worker  1      2         pt-master-0.pt.default.svc  2          3       3"
        "           2\n"
    )


def test_no_column_of_the_table_is_named_twice_for_any_example(
    capsys: pytest.CaptureFixture[str],
) -> None:
    examples = Path(__file__).resolve().parents[2] / "examples"
    assert main(["render", str(examples)]) == 0
    headers = [line.split() for line in capsys.readouterr().out.splitlines() if line[:4] == "POD "]
    assert len(headers) >= 8
    assert [h for h in headers if len(set(h)) != len(h)] == []


def test_render_reads_every_yaml_file_of_a_folder_as_one_set_of_manifests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    master, _, worker = PYTORCH_JOB.split("---\n")
    (tmp_path / "master.yaml").write_text(master)
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "worker.yml").write_text(worker)
    assert main(["render", str(tmp_path)]) == 0
    assert "job pt (pytorch, namespace default, 3 pods)" in capsys.readouterr().out


def test_render_yaml_prints_the_mutated_workloads_then_their_pods(
    job_file: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", "-o", "yaml", str(job_file)]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects] == [
        ("StatefulSet", "pt-master"),
        ("StatefulSet", "pt-worker"),
        ("Pod", "pt-master-0"),
        ("Pod", "pt-worker-0"),
        ("Pod", "pt-worker-1"),
    ]
    assert objects[1]["spec"]["serviceName"] == "pt"
    env = {e["name"]: e["value"] for e in objects[4]["spec"]["containers"][0]["env"]}
    assert env["RANK"] == "2"


def test_render_shows_a_large_jobs_peers_configmap_in_the_table_and_the_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(PYTORCH_JOB.replace("replicas: 2", "replicas: 64"))
    assert main(["render", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "job pt (pytorch, namespace default, 65 pods)"
    name = lines[1].split()[3]
    assert lines[1] == (
        f"lists in ConfigMap {name} at /etc/trainhook: "
        "TRAINHOOK_MASTER_HOSTS, TRAINHOOK_WORKER_HOSTS"
    )
    assert main(["render", "-o", "yaml", str(path)]) == 0
    objects = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [(o["kind"], o["metadata"]["name"]) for o in objects[:4]] == [
        ("StatefulSet", "pt-master"),
        ("StatefulSet", "pt-worker"),
        ("ConfigMap", name),
        ("Pod", "pt-master-0"),
    ]
    workers = ",".join(f"pt-worker-{i}.pt.default.svc" for i in range(64))
    assert objects[2] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": {"trainhook.io/job": "pt"}},
        "immutable": True,
        "data": {
            "TRAINHOOK_MASTER_HOSTS": "pt-master-0.pt.default.svc",
            "TRAINHOOK_WORKER_HOSTS": workers,
        },
    }
    assert objects[3]["spec"]["volumes"] == [
        {"name": "trainhook-peers", "configMap": {"name": name}}
    ]


def test_invalid_input_is_one_line_naming_the_file_document_and_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(PYTORCH_JOB.replace("trainhook.io/role: worker", "trainhook.io/role: chief"))
    assert main(["render", str(path)]) == 1
    assert capsys.readouterr().err == (
        f"trainhook render: {path} document 3 (StatefulSet pt-worker): trainhook.io/role: "
        "invalid value 'chief': pytorch roles are master, worker\n"
    )


def test_yaml_that_does_not_parse_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text("kind: StatefulSet\nmetadata: {name: [\n")
    assert main(["render", str(path)]) == 1
    assert capsys.readouterr().err.startswith(f"trainhook render: {path}: line 3: invalid YAML: ")


def test_a_missing_file_and_a_file_without_labelled_workloads_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["render", str(tmp_path / "nope.yaml")]) == 1
    assert capsys.readouterr().err == (
        f"trainhook render: {tmp_path / 'nope.yaml'}: no such file or folder\n"
    )
    empty = tmp_path / "svc.yaml"
    empty.write_text("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n")
    assert main(["render", str(empty)]) == 1
    assert capsys.readouterr().err == (
        "trainhook render: no labelled StatefulSet, Job or Pod found\n"
    )


def test_warnings_go_to_stderr_naming_the_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(
        PYTORCH_JOB.replace(
            "spec: {containers: [{name: pytorch, image: trainer}]}\n---\napiVersion: v1",
            "spec: {containers: [{name: pytorch, image: trainer, env: [{name: RANK, value: '7'}]}]}"
            "\n---\napiVersion: v1",
            1,
        )
    )
    assert main(["render", str(path)]) == 0
    assert capsys.readouterr().err == (
        "warning: pt-master-0: env RANK in container pytorch was set by the user and is kept\n"
    )


def test_render_shows_the_kubernetes_podgroup_in_the_version_asked_for(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.schemas import custom_resource_problems

    example = Path(__file__).resolve().parents[2] / "examples" / "jax-kubernetes-gang.yaml"
    api = "scheduling.k8s.io/v1alpha2"
    assert main(["render", "-o", "yaml", str(example), "--kubernetes-podgroup-api", api]) == 0
    [podgroup] = [d for d in yaml.safe_load_all(capsys.readouterr().out) if d["kind"] == "PodGroup"]
    assert podgroup["apiVersion"] == api
    assert custom_resource_problems(podgroup) == []  # Kubernetes 1.36's own schema

    with pytest.raises(SystemExit):
        main(["render", str(example), "--kubernetes-podgroup-api", "scheduling.k8s.io/v1"])
    assert "invalid choice: 'scheduling.k8s.io/v1'" in capsys.readouterr().err


def test_a_reader_that_stops_early_ends_render_quietly_as_unix_tools_do() -> None:
    root = Path(__file__).resolve().parents[2]
    process = subprocess.Popen(
        # The YAML of every example (over 100 KB) outlasts the pipe's buffer.
        [sys.executable, "-m", "webhook.cli", "render", str(root / "examples"), "-o", "yaml"],
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # what `| head` does once it has read enough, here before the first line
    errors = process.stderr.read()
    process.wait(timeout=60)

    assert errors == b""
    assert process.returncode == 141
