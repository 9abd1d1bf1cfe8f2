"""A pod of a job that reports progress gets Kubeflow Trainer v2's variables, token and CA."""

from __future__ import annotations

from typing import Any

import jsonpatch
import pytest

from tests.support.builders import bare_pod
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import ProgressEndpoint
from webhook.core.mutation.admit import Policy, Request, admit

ENDPOINT = ProgressEndpoint("https://trainhook-progress.trainhook-system.svc:8444", "CA-PEM\n")


def mutated(
    annotations: dict[str, str], progress: ProgressEndpoint | None = ENDPOINT
) -> dict[str, Any]:
    pod = bare_pod("bert", "pytorch", annotations=annotations)
    pod["spec"]["initContainers"] = [{"name": "fetch", "image": "busybox"}]
    pod["spec"]["containers"].append({"name": "log-shipper", "image": "fluent-bit"})
    request = Request(kind="Pod", operation="CREATE", object=pod, namespace="ml")
    outcome = admit(request, policy=Policy(progress=progress))
    assert outcome is not None
    result: dict[str, Any] = jsonpatch.apply_patch(pod, outcome.patch)
    return result


def test_a_reporting_pod_gets_trainers_three_variables_a_job_token_and_the_ca() -> None:
    pod = mutated({"trainhook.io/report-progress": "true"})
    for container in pod["spec"]["initContainers"] + pod["spec"]["containers"][:1]:
        env = {item["name"]: item.get("value") for item in container["env"]}
        assert env["KUBEFLOW_TRAINER_SERVER_URL"] == (
            "https://trainhook-progress.trainhook-system.svc:8444"
            "/apis/trainhook.io/v1/namespaces/ml/jobs/bert/status"
        )
        assert env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] == "/var/run/secrets/kubeflow/trainer/ca.crt"
        assert env["KUBEFLOW_TRAINER_SERVER_TOKEN"] == "/var/run/secrets/kubeflow/trainer/token"
        assert {
            "name": "trainhook-progress",
            "mountPath": "/var/run/secrets/kubeflow/trainer",
            "readOnly": True,
        } in container["volumeMounts"]
    sidecar = pod["spec"]["containers"][1]
    assert "env" not in sidecar and "volumeMounts" not in sidecar  # sidecars get nothing
    assert pod["metadata"]["annotations"]["trainhook.io/progress-ca"] == "CA-PEM\n"
    assert {
        "name": "trainhook-progress",
        "projected": {
            "sources": [
                {
                    "serviceAccountToken": {
                        "audience": "trainhook.io/ml/bert",
                        "expirationSeconds": 3600,
                        "path": "token",
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {
                                "path": "ca.crt",
                                "fieldRef": {
                                    "fieldPath": "metadata.annotations['trainhook.io/progress-ca']"
                                },
                            }
                        ]
                    }
                },
            ]
        },
    } in pod["spec"]["volumes"]


def test_a_pod_that_does_not_ask_gets_no_token() -> None:
    pod = mutated({"trainhook.io/report-progress": "false"})
    names = {item["name"] for item in pod["spec"]["containers"][0]["env"]}
    assert "KUBEFLOW_TRAINER_SERVER_URL" not in names
    assert "volumes" not in pod["spec"]


def test_asking_without_an_endpoint_is_refused_with_what_to_do() -> None:
    with pytest.raises(TrainhookError) as refused:
        mutated({"trainhook.io/report-progress": "true"}, progress=None)
    assert str(refused.value) == (
        "trainhook.io/report-progress: this Trainhook serves no progress endpoint (install the "
        "chart with progress.enabled=true, or remove the annotation)"
    )


def test_a_value_other_than_true_or_false_names_the_key() -> None:
    with pytest.raises(TrainhookError) as refused:
        mutated({"trainhook.io/report-progress": "yes"})
    assert (
        str(refused.value)
        == "trainhook.io/report-progress: invalid value 'yes': one of true, false"
    )
