"""Each component gets exactly the API verbs its code uses, and no more."""

from __future__ import annotations

from tests.chart.rendering import CA_BUNDLE, COMBINATIONS, Document, Rendered, render

Grant = tuple[str, str, str, str]  # (API group, resource, verb, resource name or "*")


def grants(role: Document) -> set[Grant]:
    return {
        (group, resource, verb, name)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in rule.get("resourceNames", ["*"])
    }


def expand(group: str, resource: str, verbs: str, name: str = "*") -> set[Grant]:
    return {(group, resource, verb, name) for verb in verbs.split()}


def bound_subjects(
    rendered: Rendered, binding_kind: str, role_kind: str, role: str
) -> list[Document]:
    bindings = [
        b
        for b in rendered.of_kind(binding_kind)
        if b["roleRef"]
        == {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role}
    ]
    assert len(bindings) == 1, f"{role_kind} {role} is bound {len(bindings)} times"
    subjects: list[Document] = bindings[0]["subjects"]
    return subjects


LOOKUP = expand("apps", "statefulsets", "get list watch") | expand(
    "batch", "jobs", "get list watch"
)
# Only its own configuration, list and watch included (the watch selects it by metadata.name).
SELF_CA_BUNDLE = expand(
    "admissionregistration.k8s.io",
    "mutatingwebhookconfigurations",
    "get list watch patch",
    "trainhook",
)
SELF_SECRET = expand("", "secrets", "create") | expand(
    "", "secrets", "get update patch", "trainhook-webhook-tls"
)
SWEEPER = (
    expand("apps", "statefulsets", "get list watch patch delete")
    | expand("batch", "jobs", "get list watch patch delete")
    | expand("", "pods", "get list watch patch delete")
    | expand("", "services", "get list watch create patch delete")
    | expand("", "secrets", "get create patch delete")
    | expand("", "configmaps", "get list watch create delete")
    | expand("scheduling.volcano.sh", "podgroups", "get list watch create patch delete")
    | expand("scheduling.x-k8s.io", "podgroups", "get list watch create patch delete")
    | expand("scheduling.run.ai", "podgroups", "get list watch create patch delete")
    | expand("scheduling.k8s.io", "podgroups", "get list watch create patch delete")
    | expand("resource.nvidia.com", "computedomains", "list watch create patch delete")
    | expand("", "events", "create")
)
LEASE = expand("coordination.k8s.io", "leases", "create") | expand(
    "coordination.k8s.io", "leases", "get update", "trainhook-sweeper"
)


def test_webhook_in_self_mode_reads_workloads_and_manages_its_ca_bundle_and_secret() -> None:
    rendered = render()
    assert grants(rendered.named("ClusterRole", "trainhook-webhook")) == LOOKUP | SELF_CA_BUNDLE
    role = rendered.named("Role", "trainhook-webhook")
    assert role["metadata"]["namespace"] == "trainhook"
    assert grants(role) == SELF_SECRET


def test_webhook_with_a_given_certificate_only_reads_workloads() -> None:
    values = {"certificates": {"mode": "secret", "secret": {"name": "tls", "caBundle": CA_BUNDLE}}}
    rendered = render(values)
    assert grants(rendered.named("ClusterRole", "trainhook-webhook")) == LOOKUP
    assert "trainhook-webhook" not in rendered.names("Role")


def test_webhook_without_lookup_and_with_a_given_certificate_has_no_permissions_at_all() -> None:
    rendered = render(COMBINATIONS["existing-secret"])
    assert "trainhook-webhook" not in rendered.names("ClusterRole")
    assert "trainhook-webhook" not in rendered.names("ClusterRoleBinding")
    assert "trainhook-webhook" not in rendered.names("Role")
    assert "trainhook-webhook" in rendered.names("ServiceAccount")


def test_webhook_permissions_are_bound_to_its_service_account() -> None:
    rendered = render()
    subject = [{"kind": "ServiceAccount", "name": "trainhook-webhook", "namespace": "trainhook"}]
    assert (
        bound_subjects(rendered, "ClusterRoleBinding", "ClusterRole", "trainhook-webhook")
        == subject
    )
    assert bound_subjects(rendered, "RoleBinding", "Role", "trainhook-webhook") == subject
    pod = rendered.named("Deployment", "trainhook-webhook")["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "trainhook-webhook"


def test_sweeper_gets_exactly_the_verbs_it_uses_in_every_namespace() -> None:
    rendered = render()
    assert grants(rendered.named("ClusterRole", "trainhook-sweeper")) == SWEEPER
    subject = [{"kind": "ServiceAccount", "name": "trainhook-sweeper", "namespace": "trainhook"}]
    assert (
        bound_subjects(rendered, "ClusterRoleBinding", "ClusterRole", "trainhook-sweeper")
        == subject
    )


def test_sweeper_holds_its_lease_only_in_the_release_namespace() -> None:
    rendered = render()
    role = rendered.named("Role", "trainhook-sweeper-lease")
    assert role["metadata"]["namespace"] == "trainhook"
    assert grants(role) == LEASE
    subject = [{"kind": "ServiceAccount", "name": "trainhook-sweeper", "namespace": "trainhook"}]
    assert bound_subjects(rendered, "RoleBinding", "Role", "trainhook-sweeper-lease") == subject


def test_a_namespace_list_grants_the_sweeper_a_role_per_namespace_and_nothing_cluster_wide() -> (
    None
):
    rendered = render({"namespaces": ["ml", "vision"]})
    assert "trainhook-sweeper" not in rendered.names("ClusterRole")
    assert "trainhook-sweeper" not in rendered.names("ClusterRoleBinding")
    roles = [r for r in rendered.of_kind("Role") if r["metadata"]["name"] == "trainhook-sweeper"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["ml", "vision"]
    for role in roles:
        assert grants(role) == SWEEPER
    bindings = [
        b for b in rendered.of_kind("RoleBinding") if b["metadata"]["name"] == "trainhook-sweeper"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["ml", "vision"]
    for binding in bindings:
        assert binding["roleRef"] == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": "trainhook-sweeper",
        }
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "trainhook-sweeper", "namespace": "trainhook"}
        ]
    args = rendered.container("Deployment", "trainhook-sweeper")["args"]
    assert [a for a in args if a.startswith("--namespace")] == [
        "--namespace=ml",
        "--namespace=vision",
    ]


def test_a_disabled_sweeper_has_no_account_and_no_permissions() -> None:
    rendered = render({"sweeper": {"enabled": False}})
    everything = {d["metadata"]["name"] for d in rendered.documents}
    assert not [name for name in everything if "sweeper" in name]


def test_uninstall_hook_may_only_delete_the_configuration_and_the_self_managed_secret() -> None:
    rendered = render()
    assert grants(rendered.named("ClusterRole", "trainhook-uninstall")) == expand(
        "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "delete", "trainhook"
    )
    assert grants(rendered.named("Role", "trainhook-uninstall")) == expand(
        "", "secrets", "delete", "trainhook-webhook-tls"
    )


def test_helm_test_may_only_read_the_configuration() -> None:
    assert grants(render().named("ClusterRole", "trainhook-test")) == expand(
        "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "get", "trainhook"
    )


def test_no_role_anywhere_uses_wildcards_or_escalation_verbs() -> None:
    for values in COMBINATIONS.values():
        rendered = render(values)
        for role in rendered.of_kind("ClusterRole") + rendered.of_kind("Role"):
            for group, resource, verb, _ in grants(role):
                where = f"{role['kind']}/{role['metadata']['name']}"
                assert "*" not in (group, resource, verb), where
                assert verb not in ("escalate", "bind", "impersonate"), where
                assert resource not in ("clusterroles", "roles"), where
                # Nodes are only ever read (the sweeper's node rules); no node subresource.
                assert resource != "nodes" or verb in ("list", "watch"), where
                assert not resource.startswith("nodes/"), where


def test_a_namespace_list_confines_the_webhooks_lookup_to_roles_in_those_namespaces() -> None:
    rendered = render({"namespaces": ["ml", "vision"]})
    # Cluster-wide, only its own configuration (self mode) is left.
    assert grants(rendered.named("ClusterRole", "trainhook-webhook")) == SELF_CA_BUNDLE
    lookup_roles = {
        r["metadata"]["namespace"]: grants(r)
        for r in rendered.of_kind("Role")
        if r["metadata"]["name"] == "trainhook-webhook"
        and r["metadata"]["namespace"] != "trainhook"
    }
    assert lookup_roles == {"ml": LOOKUP, "vision": LOOKUP}
    args = rendered.container("Deployment", "trainhook-webhook")["args"]
    assert [a for a in args if a.startswith("--lookup-namespace")] == [
        "--lookup-namespace=ml",
        "--lookup-namespace=vision",
    ]
    no_lookup = render({"namespaces": ["ml"], "webhook": {"lookup": False}})
    assert not [
        r for r in no_lookup.of_kind("Role") if r["metadata"].get("namespace") == "ml"
        and r["metadata"]["name"] == "trainhook-webhook"
    ]  # fmt: skip
