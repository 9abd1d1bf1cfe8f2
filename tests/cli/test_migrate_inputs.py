"""`trainhook migrate` answers every input: what `kubectl get -o yaml` prints, folders with a
file that cannot be migrated, older API versions, and two jobs of one name."""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.cli.test_migrate import run_cli
from tests.support.builders import paddle_operator, pytorchjob


def test_a_kind_list_is_migrated_item_by_item() -> None:
    listed = {"apiVersion": "v1", "kind": "List", "items": [paddle_operator()]}
    done = run_cli("migrate", "-", stdin=yaml.safe_dump(listed))
    assert done.returncode == 0, done.stderr
    assert [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(done.stdout)] == [
        ("StatefulSet", "pd-worker")
    ]


def test_a_folder_with_a_refused_file_names_it_and_still_writes_the_others(
    tmp_path: Path,
) -> None:
    (tmp_path / "a-bad.yaml").write_text(yaml.safe_dump(paddle_operator(intranet="Host")))
    (tmp_path / "b-good.yaml").write_text(yaml.safe_dump(paddle_operator()))
    (tmp_path / "c-broken.yaml").write_text("kind: [\n")
    done = run_cli("migrate", str(tmp_path))
    assert done.returncode == 1
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(done.stdout)] == ["pd-worker"]
    errors = [line for line in done.stderr.splitlines() if line.startswith("trainhook migrate:")]
    assert len(errors) == 2
    assert errors[0].startswith(
        f"trainhook migrate: {tmp_path / 'a-bad.yaml'} document 1 (PaddleJob pd): spec.intranet:"
    )
    assert errors[1].startswith(f"trainhook migrate: {tmp_path / 'c-broken.yaml'}:")


def test_an_older_api_version_is_refused_in_one_line_not_written_unchanged() -> None:
    old = {
        "apiVersion": "kubeflow.org/v1alpha2",
        "kind": "MPIJob",
        "metadata": {"name": "pi"},
        "spec": {"mpiReplicaSpecs": {}},
    }
    done = run_cli("migrate", "-", stdin=yaml.safe_dump(old))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr == (
        "trainhook migrate: - document 1 (MPIJob pi): MPIJob (kubeflow.org/v1alpha2): not read by "
        "trainhook migrate: an API version it does not read; rewrite the job as kubeflow.org/v1 "
        "or kubeflow.org/v2beta1 (the fields that moved are in its operator's upgrade notes)\n"
    )


def test_two_jobs_of_one_name_across_files_are_named_as_a_conflict(tmp_path: Path) -> None:
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(paddle_operator()))
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(paddle_operator()))
    other = pytorchjob()
    other["metadata"] = {"name": "pd", "namespace": "ml"}  # another namespace: another job
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(other))
    done = run_cli("migrate", str(tmp_path))
    assert done.returncode == 1
    assert [d["metadata"]["name"] for d in yaml.safe_load_all(done.stdout)] == [
        "pd-worker",
        "pd-master",
        "pd-worker",
    ]
    assert done.stderr.splitlines()[0] == (
        f"trainhook migrate: {tmp_path / 'b.yaml'} document 1 (PaddleJob pd): job pd is also "
        f"{tmp_path / 'a.yaml'} document 1, and two jobs of one name in one namespace would be "
        "one job; rename one"
    )


def test_a_trainjob_is_migrated_with_its_runtime_from_another_file(tmp_path: Path) -> None:
    corpus = Path(__file__).parent.parent / "corpus" / "trainer"
    trainjob, runtime = yaml.safe_load_all((corpus / "trainjob-torch-multi-node.yaml").read_text())
    (tmp_path / "job.yaml").write_text(yaml.safe_dump(trainjob))
    (tmp_path / "runtime.yaml").write_text(yaml.safe_dump(runtime))
    done = run_cli("migrate", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert [(d["kind"], d["metadata"]["name"]) for d in yaml.safe_load_all(done.stdout)] == [
        ("Job", "multi-node-example-node-0")
    ]
    assert done.stderr == (
        f"note: {tmp_path / 'runtime.yaml'} document 1 (ClusterTrainingRuntime "
        "torch-distributed): a Trainer runtime, read for the TrainJobs that name it; not written\n"
    )
