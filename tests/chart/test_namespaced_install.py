"""A namespaced install (`namespaces: [ml, vision]`): every read and write on a namespaced kind is a
Role in a listed namespace (or the release namespace's own), only what no Role can grant stays a
ClusterRole, and the webhook is called for the listed namespaces alone.

What the rendered RBAC allows is asked of it as the API server would (tests/support/rbac.py), so
"the sweeper cannot list pods cluster-wide" is a statement about the rendered objects, not about
their spelling."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest

from tests.chart.apiserver import selected
from tests.chart.rendering import (
    CHART,
    NEWEST_KUBERNETES,
    OLDEST_KUBERNETES,
    Document,
    Rendered,
    render,
    render_error,
    run_helm,
    validate_strictly,
)
from tests.support.rbac import Authorizer

NAMESPACED = {"namespaces": ["ml", "vision"], "progress": {"enabled": True}}
SWEEPER = ("trainhook", "trainhook-sweeper")
WEBHOOK = ("trainhook", "trainhook-webhook")


def rules_of(rendered: Rendered, kind: str) -> dict[tuple[str, str | None], list[Document]]:
    return {
        (role["metadata"]["name"], role["metadata"].get("namespace")): role["rules"]
        for role in rendered.of_kind(kind)
    }


def bindings_of(rendered: Rendered, kind: str) -> dict[tuple[str, str | None], tuple[str, str]]:
    """(binding name, namespace) -> (role kind/name, subject) of every binding."""
    found = {}
    for binding in rendered.of_kind(kind):
        (subject,) = binding["subjects"]
        assert (subject["kind"], subject["namespace"]) == ("ServiceAccount", "trainhook")
        ref = binding["roleRef"]
        key = (binding["metadata"]["name"], binding["metadata"].get("namespace"))
        found[key] = (f"{ref['kind']}/{ref['name']}", subject["name"])
    return found


def by_name(verbs: list[str], group: str, resource: str, name: str) -> Document:
    return {"apiGroups": [group], "resources": [resource], "resourceNames": [name], "verbs": verbs}


CONFIGURATION = ("admissionregistration.k8s.io", "mutatingwebhookconfigurations", "trainhook")


def test_a_namespaced_install_keeps_cluster_wide_only_what_no_role_can_grant() -> None:
    rendered = render(NAMESPACED)

    assert rules_of(rendered, "ClusterRole") == {
        # Its own MutatingWebhookConfiguration, by name, for the CA bundle (self mode).
        ("trainhook-webhook", None): [by_name(["get", "list", "watch", "patch"], *CONFIGURATION)],
        # Nodes are cluster-scoped, read for the failure rules that name their conditions.
        ("trainhook-sweeper-nodes", None): [
            {"apiGroups": [""], "resources": ["nodes"], "verbs": ["list", "watch"]}
        ],
        # TokenReviews are cluster-scoped: the progress endpoint verifies pods' tokens.
        ("trainhook-sweeper-progress", None): [
            {
                "apiGroups": ["authentication.k8s.io"],
                "resources": ["tokenreviews"],
                "verbs": ["create"],
            }
        ],
        # The hooks: turning the webhook off on uninstall, and helm test reading it.
        ("trainhook-uninstall", None): [by_name(["delete"], *CONFIGURATION)],
        ("trainhook-test", None): [by_name(["get"], *CONFIGURATION)],
    }
    accounts = {
        "trainhook-webhook": "trainhook-webhook",
        "trainhook-sweeper-nodes": "trainhook-sweeper",
        "trainhook-sweeper-progress": "trainhook-sweeper",
        "trainhook-uninstall": "trainhook-uninstall",
        "trainhook-test": "trainhook-test",
    }
    assert bindings_of(rendered, "ClusterRoleBinding") == {
        (name, None): (f"ClusterRole/{name}", account) for name, account in accounts.items()
    }


def test_a_namespaced_install_grants_roles_only_in_the_listed_namespaces_and_its_own() -> None:
    rendered = render(NAMESPACED)
    roles = rules_of(rendered, "Role")
    lookup = [
        {"apiGroups": ["apps"], "resources": ["statefulsets"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["batch"], "resources": ["jobs"], "verbs": ["get", "list", "watch"]},
    ]

    assert set(roles) == {
        ("trainhook-sweeper", "ml"),
        ("trainhook-sweeper", "vision"),
        ("trainhook-webhook", "ml"),
        ("trainhook-webhook", "vision"),
        ("trainhook-test", "ml"),  # helm test's dry-run Pod, in the first listed namespace
        ("trainhook-sweeper-lease", "trainhook"),
        ("trainhook-webhook", "trainhook"),  # its certificate's Secret
        ("trainhook-uninstall", "trainhook"),
    }
    assert roles["trainhook-webhook", "ml"] == roles["trainhook-webhook", "vision"] == lookup
    assert roles["trainhook-sweeper", "ml"] == roles["trainhook-sweeper", "vision"]
    assert roles["trainhook-test", "ml"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}
    ]
    assert bindings_of(rendered, "RoleBinding") == {
        (name, namespace): (f"Role/{name}", name.removesuffix("-lease"))
        for name, namespace in roles
    }


def test_the_namespaced_rbac_lets_the_sweeper_read_and_write_the_listed_namespaces_only() -> None:
    rbac = Authorizer(render(NAMESPACED).documents)

    for namespace in ("ml", "vision"):
        pods = f"/api/v1/namespaces/{namespace}/pods"
        assert (
            rbac.refusal(SWEEPER, "GET", pods, "watch=true&labelSelector=trainhook.io/job") is None
        )
        assert rbac.refusal(SWEEPER, "DELETE", f"{pods}/pt-worker-0") is None
        assert rbac.refusal(SWEEPER, "POST", f"/api/v1/namespaces/{namespace}/services") is None
    assert rbac.refusal(SWEEPER, "GET", "/api/v1/pods") == (
        'User "system:serviceaccount:trainhook:trainhook-sweeper" cannot list pods cluster-wide'
    )
    assert rbac.refusal(SWEEPER, "GET", "/api/v1/namespaces/research/secrets/db-password") == (
        'User "system:serviceaccount:trainhook:trainhook-sweeper" cannot get secrets '
        "'db-password' in namespace research"
    )
    assert rbac.refusal(SWEEPER, "GET", "/api/v1/configmaps") is not None
    assert rbac.refusal(SWEEPER, "GET", "/apis/apps/v1/statefulsets", "watch=true") is not None
    # What stays cluster-wide: Nodes (read only) and TokenReviews.
    assert rbac.refusal(SWEEPER, "GET", "/api/v1/nodes", "watch=true") is None
    assert rbac.refusal(SWEEPER, "PATCH", "/api/v1/nodes/gpu-1") is not None
    assert rbac.refusal(SWEEPER, "POST", "/apis/authentication.k8s.io/v1/tokenreviews") is None


def test_the_namespaced_rbac_lets_the_webhook_read_workloads_of_the_listed_namespaces_only() -> (
    None
):
    rbac = Authorizer(render(NAMESPACED).documents)
    configurations = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"

    assert rbac.refusal(WEBHOOK, "GET", "/apis/apps/v1/namespaces/ml/statefulsets") is None
    assert rbac.refusal(WEBHOOK, "GET", "/apis/batch/v1/namespaces/vision/jobs/pt-0") is None
    assert rbac.refusal(WEBHOOK, "GET", "/apis/apps/v1/statefulsets") is not None
    assert rbac.refusal(WEBHOOK, "GET", "/apis/batch/v1/namespaces/research/jobs") is not None
    assert rbac.refusal(WEBHOOK, "PATCH", "/apis/apps/v1/namespaces/ml/statefulsets/pt") is not None
    # Its own configuration, watched by name; no other, and no list of them all.
    assert rbac.refusal(WEBHOOK, "PATCH", f"{configurations}/trainhook") is None
    watch = "fieldSelector=metadata.name%3Dtrainhook&watch=true"
    assert rbac.refusal(WEBHOOK, "GET", configurations, watch) is None
    assert rbac.refusal(WEBHOOK, "GET", configurations) is not None
    assert rbac.refusal(WEBHOOK, "PATCH", f"{configurations}/other") is not None


def test_objects_outside_the_listed_namespaces_never_reach_the_webhook() -> None:
    hook = render(NAMESPACED).webhook_hook()
    pod = {"metadata": {"labels": {"trainhook.io/framework": "pytorch"}}}

    name = "kubernetes.io/metadata.name"
    assert hook["namespaceSelector"] == {
        "matchExpressions": [
            {"key": name, "operator": "NotIn", "values": ["kube-system", "trainhook"]},
            {"key": name, "operator": "In", "values": ["ml", "vision"]},
        ]
    }
    served = {ns for ns in ("ml", "vision", "research", "default", "kube-system", "trainhook")
              if selected(hook, ns, pod)}  # fmt: skip
    assert served == {"ml", "vision"}


@pytest.mark.parametrize("major", ["3", "4"])
def test_a_namespaced_install_passes_helm_lint_strict(major: str) -> None:
    result = run_helm(["lint", "--strict", str(CHART)], NAMESPACED, major)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


@pytest.mark.parametrize("kube_version", [OLDEST_KUBERNETES, NEWEST_KUBERNETES])
def test_a_namespaced_install_passes_strict_kubernetes_validation(kube_version: str) -> None:
    rendered = render(NAMESPACED, kube_version=kube_version)
    for document in rendered.documents:
        try:
            validate_strictly(document, kube_version)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{document['kind']}/{document['metadata']['name']}: {error.message}")


@pytest.mark.parametrize(
    ("namespaces", "said"),
    [
        (["ml", "ml"], "namespaces: array items[0,1] must be unique"),
        (["ML_team"], "namespaces.0: Does not match pattern '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$'"),
        (["a" * 64], "namespaces.0: String length must be less than or equal to 63"),
        ("ml", "namespaces: Invalid type. Expected: array, given: string"),
        (
            ["ml", "kube-system"],
            'namespaces: "kube-system" is also in webhookConfiguration.namespaceSelector.'
            "excludeNamespaces, so it would never be served; list it in one of the two",
        ),
    ],
)
def test_a_namespace_list_the_chart_cannot_serve_is_refused_in_one_line_naming_it(
    namespaces: object, said: str
) -> None:
    lines = render_error({"namespaces": namespaces}).splitlines()
    assert [line for line in lines if said in line] != [], lines


def test_a_namespace_excluded_by_the_values_is_refused_when_listed_too() -> None:
    error = render_error(
        {
            "namespaces": ["ml", "batch"],
            "webhookConfiguration": {"namespaceSelector": {"excludeNamespaces": ["batch"]}},
        }
    )
    assert 'namespaces: "batch" is also in webhookConfiguration.namespaceSelector' in error


INSTALL = CHART.parent.parent / "docs" / "install.md"
# How the install guide's table of cluster-wide grants names each cluster-scoped resource.
CLUSTER_SCOPED = {
    "mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
    "nodes": "Nodes",
    "tokenreviews": "TokenReviews",
}


def test_the_install_guide_names_every_grant_a_namespaced_install_keeps_cluster_wide() -> None:
    text = INSTALL.read_text()
    start = text.index("| grant | who | why it cannot be a Role |")
    documented = set()
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        grant, holder, _ = (cell.strip() for cell in line.strip("|").split("|"))
        words = set(re.findall(r"[A-Za-z]+", grant))
        verbs = words & {"get", "list", "watch", "patch", "create", "delete"}
        (resource,) = [r for r, word in CLUSTER_SCOPED.items() if word in words]
        documented |= {(holder, resource, verb) for verb in verbs}

    rendered = render(NAMESPACED)
    who = {
        "webhook": "webhook",
        "sweeper": "sweeper",
        "uninstall": "uninstall hook",
        "test": "helm test",
    }
    granted = {
        (who[role["metadata"]["name"].split("-")[1]], resource, verb)
        for role in rendered.of_kind("ClusterRole")
        for rule in role["rules"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert documented == granted
