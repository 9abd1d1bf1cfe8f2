"""The ValidatingAdmissionPolicy that confines the sweeper's writes, evaluated with a CEL
implementation (cel-python) the way the API server evaluates it: matchConditions, then the
variables in order, then each validation, on the request, object and oldObject."""

from __future__ import annotations

from typing import Any

import celpy
import pytest
from celpy.adapter import json_to_cel

from tests.chart.rendering import render

SWEEPER = "system:serviceaccount:trainhook:trainhook-sweeper"


def policy(values: dict[str, Any] | None = None) -> dict[str, Any]:
    document: dict[str, Any] = render(values, kube_version="1.31.0").one(
        "ValidatingAdmissionPolicy"
    )
    return document


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    environment = celpy.Environment()
    return environment.program(environment.compile(expression)).evaluate(activation)


def admit(
    user: str, operation: str, resource: str, obj: dict[str, Any] | None, old: dict[str, Any] | None
) -> str | None:
    """None when the policy lets the write through, else the message the client would get."""
    spec = policy()["spec"]
    target = obj if operation == "CREATE" else old
    assert target is not None
    request = {
        "operation": operation,
        "userInfo": {"username": user},
        "resource": {"resource": resource},
        "namespace": "ml",
    }
    activation: dict[str, Any] = {
        "request": json_to_cel(request),
        "object": json_to_cel(obj),
        "oldObject": json_to_cel(old),
    }
    for condition in spec["matchConditions"]:
        if not evaluate(condition["expression"], activation):
            return None
    variables: dict[str, Any] = {}
    for variable in spec["variables"]:
        activation["variables"] = celpy.celtypes.MapType(
            {celpy.celtypes.StringType(k): v for k, v in variables.items()}
        )
        variables[variable["name"]] = evaluate(variable["expression"], activation)
    activation["variables"] = celpy.celtypes.MapType(
        {celpy.celtypes.StringType(k): v for k, v in variables.items()}
    )
    for validation in spec["validations"]:
        if not evaluate(validation["expression"], activation):
            return str(evaluate(validation["messageExpression"], activation))
    return None


def thing(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ml", "labels": labels}}


MADE = {"app.kubernetes.io/managed-by": "trainhook"}
FRAMEWORK = {"trainhook.io/framework": "pytorch"}


@pytest.mark.parametrize(
    ("operation", "resource", "before", "after"),
    [
        ("UPDATE", "pods", thing("pt-worker-0", **{"trainhook.io/job": "pt"}), None),
        ("DELETE", "pods", thing("pt-worker-0", **{"trainhook.io/job": "pt"}), None),
        ("UPDATE", "statefulsets", thing("pt-worker", **FRAMEWORK), None),
        ("DELETE", "jobs", thing("hvd-launcher", **{"trainhook.io/framework": "mpi"}), None),
        ("CREATE", "services", None, thing("pt", **MADE)),
        ("DELETE", "services", thing("pt", **MADE), None),
        ("CREATE", "secrets", None, thing("hvd-ssh", **MADE)),
        ("DELETE", "secrets", thing("hvd-ssh", **MADE), None),
        ("CREATE", "podgroups", None, thing("pt", **MADE)),
        ("CREATE", "configmaps", None, thing("pt-peers-0123456789", **MADE)),
        ("DELETE", "configmaps", thing("pt-peers-0123456789", **MADE), None),
    ],
)  # fmt: skip
def test_the_sweeper_may_write_training_jobs_and_what_it_made(
    operation: str, resource: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    assert admit(SWEEPER, operation, resource, after or before, before) is None


@pytest.mark.parametrize(
    ("operation", "resource", "before", "after"),
    [
        ("DELETE", "pods", thing("postgres-0"), None),
        ("UPDATE", "statefulsets", thing("postgres"), None),
        ("DELETE", "jobs", thing("nightly-backup"), None),
        ("UPDATE", "services", thing("api"), None),
        ("CREATE", "secrets", None, thing("db-password")),
        ("DELETE", "secrets", thing("db-password"), None),
        ("DELETE", "secrets", thing("db-password", **MADE), None),
        ("CREATE", "secrets", None, thing("api-token", **MADE)),
        ("DELETE", "podgroups", thing("someone-elses"), None),
        ("DELETE", "configmaps", thing("app-config"), None),
        ("DELETE", "configmaps", thing("app-config", **MADE), None),
        ("UPDATE", "configmaps", thing("pt-peers-0123456789"), None),
    ],
)  # fmt: skip
def test_the_sweeper_may_not_write_anything_else(
    operation: str, resource: str, before: dict[str, Any] | None, after: dict[str, Any] | None
) -> None:
    target = after if operation == "CREATE" else before
    assert target is not None
    message = admit(SWEEPER, operation, resource, after or before, before)
    assert message == (
        "the Trainhook sweeper may write only training jobs' objects and those it made; "
        f"{resource} ml/{target['metadata']['name']} is neither"
    )


def test_the_policy_leaves_everyone_but_the_sweeper_alone() -> None:
    someone = "system:serviceaccount:default:builder"
    assert admit(someone, "DELETE", "secrets", thing("db-password"), thing("db-password")) is None


def test_the_policy_follows_the_sweepers_service_account_and_needs_kubernetes_1_30() -> None:
    values = {"sweeper": {"serviceAccount": {"create": False, "name": "platform-sweeper"}}}
    (condition,) = policy(values)["spec"]["matchConditions"]
    assert condition["expression"] == (
        'request.userInfo.username == "system:serviceaccount:trainhook:platform-sweeper"'
    )
    binding = render(kube_version="1.31.0").one("ValidatingAdmissionPolicyBinding")["spec"]
    assert binding == {"policyName": "trainhook-sweeper-writes", "validationActions": ["Deny"]}
    assert render(kube_version="1.29.0").of_kind("ValidatingAdmissionPolicy") == []
    off = {"sweeper": {"admissionPolicy": {"enabled": False}}}
    assert render(off, kube_version="1.31.0").of_kind("ValidatingAdmissionPolicy") == []
