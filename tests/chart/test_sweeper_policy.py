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


WRITES = "trainhook-sweeper-writes"  # what the sweeper may write
MARKS = "trainhook-sweeper-marks"  # what only the sweeper may write


def policy(values: dict[str, Any] | None = None, name: str = WRITES) -> dict[str, Any]:
    document: dict[str, Any] = render(values, kube_version="1.31.0").named(
        "ValidatingAdmissionPolicy", name
    )
    return document


def _join(items: Any, separator: Any = "") -> Any:
    """`list.join(separator)` of the CEL strings extension the API server's CEL includes."""
    return celpy.celtypes.StringType(str(separator).join(str(item) for item in items))


def evaluate(expression: str, activation: dict[str, Any]) -> Any:
    environment = celpy.Environment()
    program = environment.program(environment.compile(expression), functions={"join": _join})
    return program.evaluate(activation)


def admit(
    user: str,
    operation: str,
    resource: str,
    obj: dict[str, Any] | None,
    old: dict[str, Any] | None,
    namespace: str = "ml",
    name: str = WRITES,
) -> str | None:
    """None when the policy `name` lets the write through, else the message the client would
    get."""
    spec = policy(name=name)["spec"]
    target = obj if operation == "CREATE" else old
    assert target is not None
    request = {
        "operation": operation,
        "userInfo": {"username": user},
        "name": target["metadata"]["name"],
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
        ("CREATE", "computedomains", None, thing("pt-nvlink", {"numNodes": 2}, **MADE, **JOB)),
        ("DELETE", "computedomains", thing("pt-nvlink", {"numNodes": 2}, **MADE, **JOB), None),
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
        ("DELETE", "computedomains", thing("someone-elses-nvlink"), None),
        ("CREATE", "computedomains", None, thing("pt", {"numNodes": 2}, **MADE, **JOB)),
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
    rendered = render(kube_version="1.31.0")
    for name in (WRITES, MARKS):
        binding = rendered.named("ValidatingAdmissionPolicyBinding", name)["spec"]
        assert binding == {"policyName": name, "validationActions": ["Deny"]}
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


# --- the marks only the sweeper writes ------------------------------------------------------

SOMEONE = "system:serviceaccount:ml:default"  # anyone allowed to update pods
RESTARTED = {"trainhook.io/attempt": "2026-01-01T00:00:00Z"}
RELEASED = {**RESTARTED, "trainhook.io/released-attempt": "2026-01-01T00:00:00Z"}
STAMP = {"trainhook.io/topology": '{"master":1,"worker":2}'}
ASKED = {"trainhook.io/checkpoint-requested": "2026-01-01T00:00:00Z"}
CA = {"trainhook.io/progress-ca": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"}


def pod(annotations: dict[str, str] | None = None, **labels: str) -> dict[str, Any]:
    """A pod of job pt as the API server holds it, with these annotations."""
    found = thing("pt-worker-0", POD_SPEC, **JOB, **labels)
    if annotations is not None:
        found["metadata"]["annotations"] = dict(annotations)
    return found


@pytest.mark.parametrize(
    ("before", "after", "marks"),
    [
        (pod(), pod(RESTARTED), "trainhook.io/attempt"),  # a restart in place forged
        (pod(RESTARTED), pod(RELEASED), "trainhook.io/released-attempt"),  # a barrier opened
        (pod(RELEASED), pod(RESTARTED), "trainhook.io/released-attempt"),  # ... or held shut
        (pod(STAMP), pod({"trainhook.io/topology": '{"master":1,"worker":9}'}),
         "trainhook.io/topology"),  # the pod made stale, for the sweeper to delete
        (pod(STAMP), pod({}), "trainhook.io/topology"),
        (pod(CA), pod({"trainhook.io/progress-ca": "evil"}), "trainhook.io/progress-ca"),
        (pod(), pod({"trainhook.io/last-checkpoint": '{"step":9}'}),
         "trainhook.io/last-checkpoint"),
        (pod(STAMP), pod({"trainhook.io/attempt": "x", "trainhook.io/topology": "{}"}),
         "trainhook.io/attempt, trainhook.io/topology"),
        (pod(), pod(ASKED), "trainhook.io/checkpoint-requested"),  # every rank stops to save
        (pod(ASKED), pod({}), "trainhook.io/checkpoint-requested"),  # ... or a request withdrawn
    ],
)  # fmt: skip
def test_no_one_but_the_sweeper_adds_changes_or_removes_a_sweeper_mark_on_a_pod(
    before: dict[str, Any], after: dict[str, Any], marks: str
) -> None:
    message = admit(SOMEONE, "UPDATE", "pods", after, before, name=MARKS)
    assert message == (
        f"only the Trainhook sweeper writes {marks} on a pod; this UPDATE of pod "
        f"ml/pt-worker-0 by {SOMEONE} may not"
    )
    assert admit(SWEEPER, "UPDATE", "pods", after, before, name=MARKS) is None


def test_a_pod_created_with_an_attempt_is_refused_and_one_with_the_webhooks_marks_is_not() -> None:
    message = admit(SOMEONE, "CREATE", "pods", pod({**STAMP, **RELEASED}), None, name=MARKS)
    assert message == (
        "only the Trainhook sweeper writes trainhook.io/attempt, trainhook.io/released-attempt "
        f"on a pod; this CREATE of pod ml/pt-worker-0 by {SOMEONE} may not"
    )
    message = admit(SOMEONE, "CREATE", "pods", pod({**STAMP, **ASKED}), None, name=MARKS)
    assert message == (
        "only the Trainhook sweeper writes trainhook.io/checkpoint-requested on a pod; this "
        f"CREATE of pod ml/pt-worker-0 by {SOMEONE} may not"
    )
    # The webhook's stamp and CA are written inside the request that creates the pod.
    assert admit(SOMEONE, "CREATE", "pods", pod({**STAMP, **CA}), None, name=MARKS) is None


@pytest.mark.parametrize(
    ("before", "after"),
    [
        (pod(STAMP), pod({**STAMP, "team": "a"})),  # other annotations
        (pod({**STAMP, **RELEASED, **CA}), pod({**STAMP, **RELEASED, **CA}, team="a")),  # labels
        (pod(), pod({"team": "a"})),
        (pod(None), pod(None, team="a")),
    ],
)  # fmt: skip
def test_updates_that_leave_the_marks_as_they_were_pass(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    assert admit(SOMEONE, "UPDATE", "pods", after, before, name=MARKS) is None
