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
    user: str,
    operation: str,
    resource: str,
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None,
    namespace: str = "ml",
) -> str | None:
    """None when the policy lets the write through, else the message the client would get."""
    spec = policy()["spec"]
    target = obj if operation == "CREATE" else old
    assert target is not None
    request = {
        "operation": operation,
        "userInfo": {"username": user},
        "resource": {"resource": resource},
        "namespace": namespace,
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


def thing(name: str, spec: dict[str, Any] | None = None, /, **labels: str) -> dict[str, Any]:
    found: dict[str, Any] = {"metadata": {"name": name, "namespace": "ml", "labels": labels}}
    if spec is not None:
        found["spec"] = spec
    return found


MADE = {"app.kubernetes.io/managed-by": "trainhook"}
FRAMEWORK = {"trainhook.io/framework": "pytorch"}
JOB = {"trainhook.io/job": "pt"}
POD_SPEC = {"containers": [{"name": "pytorch", "image": "trainer:1"}]}
WORKLOAD_SPEC = {"replicas": 2, "template": {"spec": POD_SPEC}}
HEADLESS = {"clusterIP": "None", "selector": {"trainhook.io/job": "pt"}}
SCHEDULER = {"type": "ClusterIP", "selector": {"trainhook.io/job": "pt", "trainhook.io/role": "s"}}


def secret(name: str, kind: str = "Opaque", /, **labels: str) -> dict[str, Any]:
    return {**thing(name, **labels), "type": kind}


def changed(obj: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {**obj, "spec": {**obj["spec"], **spec}}


@pytest.mark.parametrize(
    ("operation", "resource", "before", "after"),
    [
        ("UPDATE", "pods", thing("pt-worker-0", POD_SPEC, **JOB), None),
        ("DELETE", "pods", thing("pt-worker-0", POD_SPEC, **JOB), None),
        ("UPDATE", "statefulsets", thing("pt-worker", WORKLOAD_SPEC, **FRAMEWORK),
         changed(thing("pt-worker", WORKLOAD_SPEC, **FRAMEWORK), replicas=0)),
        ("DELETE", "jobs", thing("hvd-launcher", **{"trainhook.io/framework": "mpi"}), None),
        ("CREATE", "services", None, thing("pt", HEADLESS, **MADE, **JOB)),
        ("CREATE", "services", None, thing("pt-ms-scheduler", SCHEDULER, **MADE, **JOB)),
        ("UPDATE", "services", thing("pt", HEADLESS, **MADE, **JOB), None),
        ("DELETE", "services", thing("pt", HEADLESS, **MADE, **JOB), None),
        ("CREATE", "secrets", None, secret("pt-ssh", **MADE, **JOB)),
        ("DELETE", "secrets", secret("pt-ssh", **MADE, **JOB), None),
        ("CREATE", "podgroups", None, thing("pt", {"minMember": 2}, **MADE, **JOB)),
        ("CREATE", "configmaps", None, thing("pt-peers-0123456789", **MADE, **JOB)),
        ("DELETE", "configmaps", thing("pt-peers-0123456789", **MADE, **JOB), None),
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
        ("CREATE", "secrets", None, secret("api-ssh", **MADE)),
        ("CREATE", "secrets", None, secret("db-password", **MADE, **JOB)),
        ("DELETE", "podgroups", thing("someone-elses"), None),
        ("CREATE", "podgroups", None, thing("someone-elses", {}, **MADE, **JOB)),
        ("DELETE", "configmaps", thing("app-config"), None),
        ("DELETE", "configmaps", thing("app-config", **MADE), None),
        ("DELETE", "configmaps", thing("app-config", **MADE, **JOB), None),
        ("UPDATE", "configmaps", thing("pt-peers-0123456789"), None),
        ("CREATE", "services", None, thing("api", HEADLESS, **MADE, **JOB)),
        # Labels stripped by the write itself: the object after it is checked too.
        ("UPDATE", "statefulsets", thing("pt-worker", WORKLOAD_SPEC, **FRAMEWORK),
         thing("pt-worker", WORKLOAD_SPEC)),
        ("UPDATE", "pods", thing("pt-worker-0", POD_SPEC, **JOB), thing("pt-worker-0", POD_SPEC)),
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


SA_TOKEN = {
    **secret("x-ssh", "kubernetes.io/service-account-token", **MADE, **{"trainhook.io/job": "x"}),
    "metadata": {
        "name": "x-ssh",
        "namespace": "kube-system",
        "labels": {**MADE, "trainhook.io/job": "x"},
        "annotations": {"kubernetes.io/service-account.name": "clusterrole-aggregation-controller"},
    },
}
LOAD_BALANCER = thing(
    "x",
    {"type": "LoadBalancer", "selector": {"k8s-app": "kube-dns"}},
    **MADE,
    **{"trainhook.io/job": "x"},
)
ANY_PODS = thing(
    "x",
    {"clusterIP": "None", "selector": {"k8s-app": "kube-dns"}},
    **MADE,
    **{"trainhook.io/job": "x"},
)
EXPOSED = thing("pt", {**HEADLESS, "externalIPs": ["203.0.113.7"]}, **MADE, **JOB)
WORKER = thing("pt-worker", WORKLOAD_SPEC, **FRAMEWORK)
NEW_IMAGE = {"template": {"spec": {"containers": [{"name": "pytorch", "image": "evil:1"}]}}}


@pytest.mark.parametrize(
    ("operation", "resource", "before", "after", "namespace"),
    [
        ("CREATE", "secrets", None, SA_TOKEN, "kube-system"),
        ("CREATE", "services", None, LOAD_BALANCER, "kube-system"),
        ("CREATE", "services", None, ANY_PODS, "kube-system"),
        ("UPDATE", "services", thing("pt", HEADLESS, **MADE, **JOB), EXPOSED, "ml"),
        ("UPDATE", "statefulsets", WORKER, changed(WORKER, **NEW_IMAGE), "ml"),
        ("UPDATE", "jobs", WORKER, changed(WORKER, **NEW_IMAGE), "ml"),
        ("UPDATE", "pods", thing("pt-worker-0", POD_SPEC, **JOB),
         thing("pt-worker-0", NEW_IMAGE["template"]["spec"], **JOB), "ml"),
        ("CREATE", "pods", None, thing("pt-worker-9", POD_SPEC, **JOB), "ml"),
    ],
)  # fmt: skip
def test_the_sweeper_may_not_turn_a_jobs_objects_into_a_way_in(
    operation: str,
    resource: str,
    before: dict[str, Any] | None,
    after: dict[str, Any],
    namespace: str,
) -> None:
    message = admit(SWEEPER, operation, resource, after, before, namespace)
    assert message == (
        "the Trainhook sweeper creates no pods, StatefulSets or Jobs and never changes their "
        "containers, and makes only Opaque Secrets and ClusterIP Services selecting their job's "
        f"pods; this {operation} of {resource} {namespace}/{after['metadata']['name']} "
        "would"
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


OWNED_GATE = {"name": "trainhook.io/waiting-for-owned-objects"}
ROLES_GATE = {"name": "trainhook.io/waiting-for-roles"}
KUEUE_GATE = {"name": "kueue.x-k8s.io/admission"}


def gated(*gates: dict[str, str], **spec: Any) -> dict[str, Any]:
    """A pod of the job with these scheduling gates (none: the field left out)."""
    pod = thing("pt-worker-0", {**POD_SPEC, **spec}, **JOB)
    if gates:
        pod["spec"]["schedulingGates"] = list(gates)
    return pod


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (gated(KUEUE_GATE, ROLES_GATE, OWNED_GATE), gated(KUEUE_GATE, ROLES_GATE)),
        (gated(KUEUE_GATE, ROLES_GATE, OWNED_GATE), gated(KUEUE_GATE)),
        (gated(OWNED_GATE), gated()),
        (gated(ROLES_GATE, OWNED_GATE, tolerations=[{"key": "gpu"}]),
         gated(OWNED_GATE, tolerations=[{"key": "gpu"}])),
    ],
)  # fmt: skip
def test_the_sweeper_may_lift_trainhooks_own_scheduling_gates(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    assert admit(SWEEPER, "UPDATE", "pods", after, before) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (gated(KUEUE_GATE, OWNED_GATE), gated(OWNED_GATE)),  # another's gate
        (gated(OWNED_GATE), gated(OWNED_GATE, KUEUE_GATE)),  # a gate added
        (gated(OWNED_GATE), gated(ROLES_GATE)),  # one of its own added
        (gated(OWNED_GATE), gated(**NEW_IMAGE["template"]["spec"])),  # with a new image
        (gated(OWNED_GATE), gated(tolerations=[{"operator": "Exists"}])),  # run anywhere
        (gated(OWNED_GATE), gated(nodeSelector={"kubernetes.io/hostname": "n1"})),
        (gated(OWNED_GATE), gated(affinity={"nodeAffinity": {}})),
        (gated(OWNED_GATE), gated(activeDeadlineSeconds=1)),
        (gated(OWNED_GATE), gated(initContainers=[{"name": "x", "image": "evil:1"}])),
    ],
)  # fmt: skip
def test_the_sweeper_may_lift_no_other_gate_nor_change_anything_with_its_own(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    message = admit(SWEEPER, "UPDATE", "pods", after, before)
    assert message == (
        "the Trainhook sweeper creates no pods, StatefulSets or Jobs and never changes their "
        "containers, and makes only Opaque Secrets and ClusterIP Services selecting their job's "
        "pods; this UPDATE of pods ml/pt-worker-0 would"
    )
