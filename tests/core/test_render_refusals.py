"""`trainhook render` refuses what the API server would, in its words, and what a folder must
not hold twice; it warns about what is legal but seldom meant."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.builders import indexed_job, statefulset
from webhook.cli import main


def render(tmp_path: Path, capsys: pytest.CaptureFixture[str], *docs: dict[str, Any]):
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump_all(docs))
    code = main(["render", str(path)])
    out, err = capsys.readouterr()
    return code, out, err.strip().splitlines(), str(path)


def with_policy(obj: dict[str, Any], policy: str | None) -> dict[str, Any]:
    spec = obj["spec"]["template"]["spec"]
    spec.pop("restartPolicy", None)
    if policy is not None:
        spec["restartPolicy"] = policy
    return obj


@pytest.mark.parametrize(
    ("obj", "line"),
    [
        (
            with_policy(statefulset("pt", "pytorch"), "OnFailure"),
            'StatefulSet.apps "pt" is invalid: spec.template.spec.restartPolicy: Unsupported '
            'value: "OnFailure": supported values: "Always"',
        ),
        (
            with_policy(indexed_job("hv", "mpi", completions=1), None),
            'Job.batch "hv" is invalid: spec.template.spec.restartPolicy: Unsupported value: '
            '"Always": supported values: "OnFailure", "Never"',
        ),
        (
            indexed_job("h" * 64, "mpi", completions=1),
            f'Job.batch "{"h" * 64}" is invalid: metadata.name: Invalid value: "{"h" * 64}": '
            "must be no more than 63 characters",
        ),
    ],
)
def test_what_the_api_server_refuses_is_refused_with_its_line(tmp_path, capsys, obj, line):
    code, out, err, path = render(tmp_path, capsys, obj)
    name = obj["metadata"]["name"]
    assert (code, out) == (1, "")
    assert err == [f"trainhook render: {path} document 1 ({obj['kind']} {name}): {line}"]


def test_a_label_value_the_api_server_refuses_is_refused(tmp_path, capsys):
    obj = statefulset("pt", "pytorch")
    obj["spec"]["template"]["metadata"] = {"labels": {"team": "vision/ml"}}
    _, _, err, _ = render(tmp_path, capsys, obj)
    assert err[0].endswith(
        'StatefulSet.apps "pt" is invalid: spec.template.metadata.labels: Invalid value: '
        '"vision/ml": a valid label must be an empty string or consist of alphanumeric '
        "characters, '-', '_' or '.', and must start and end with an alphanumeric character "
        "(e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is "
        "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
    )


def test_the_same_workload_twice_in_a_folder_is_refused_not_merged(tmp_path, capsys):
    first = statefulset("pt", "pytorch")
    again = statefulset("pt", "pytorch", replicas=3)
    code, _, err, path = render(tmp_path, capsys, first, again)
    assert code == 1
    assert err == [
        f"trainhook render: {path} document 2 (StatefulSet pt): StatefulSet default/pt appears "
        "twice (documents 1 and 2): each workload once, or kubectl apply keeps only the last"
    ]


def test_two_jobs_of_one_name_are_refused(tmp_path, capsys):
    one = statefulset("a-workers", "pytorch", job="train", role="worker")
    other = statefulset("b-workers", "pytorch", job="train", role="worker")
    code, _, err, path = render(tmp_path, capsys, one, other)
    assert code == 1
    assert err == [
        f"trainhook render: {path} document 2 (StatefulSet b-workers): job train has two "
        "workloads for role worker (StatefulSet a-workers and StatefulSet b-workers): two jobs "
        "of one name, or one role written twice; give each job its own trainhook.io/job and "
        "each role one workload"
    ]


def test_a_job_name_in_two_namespaces_and_shm_beside_a_dev_shm_mount_are_warned(tmp_path, capsys):
    here = statefulset("train", "pytorch", annotations={"trainhook.io/shm-size": "1Gi"})
    container = here["spec"]["template"]["spec"]["containers"][0]
    container["volumeMounts"] = [{"name": "shm", "mountPath": "/dev/shm"}]
    here["spec"]["template"]["spec"]["volumes"] = [{"name": "shm", "emptyDir": {}}]
    there = statefulset("train", "pytorch", namespace="team-b")
    code, _, err, _ = render(tmp_path, capsys, here, there)
    assert code == 0
    assert err == [
        "warning: StatefulSet train: trainhook.io/shm-size 1Gi is not mounted in container "
        "pytorch, which mounts /dev/shm itself (volume shm); remove one of the two",
        "warning: job train has workloads in namespaces default, team-b: a job never spans "
        "namespaces, so each namespace runs a separate job of that name",
    ]
