"""docs/install.md's table of grants names every verb on every resource the rendered chart grants
each component, and nothing it does not: the table cannot drift from the chart."""

from __future__ import annotations

import re
from pathlib import Path

from tests.chart.rendering import COMBINATIONS, render

INSTALL = Path(__file__).resolve().parents[2] / "docs" / "install.md"
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
# How the table names each resource (singular or plural), and each PodGroup's API group.
WORDS = {
    "statefulsets": "StatefulSet",
    "jobs": "Job",
    "pods": "Pod",
    "services": "Service",
    "secrets": "Secret",
    "configmaps": "ConfigMap",
    "podgroups": "PodGroup",
    "computedomains": "ComputeDomain",
    "events": "Event",
    "nodes": "Node",
    "tokenreviews": "TokenReview",
    "leases": "Lease",
    "mutatingwebhookconfigurations": "MutatingWebhookConfiguration",
}
GROUPS = {
    "scheduling.volcano.sh": "Volcano",
    "scheduling.x-k8s.io": "scheduler-plugins",
    "scheduling.run.ai": "KAI",
    "scheduling.k8s.io": "Kubernetes",
}
RENDERINGS = [
    *COMBINATIONS.values(),
    {"progress": {"enabled": True}},
    {"namespaces": ["ml", "vision"]},
    {"namespaces": ["ml"], "progress": {"enabled": True}},
]

Grant = tuple[str, str, str, str, bool]  # (component, API group, resource, verb, by name)


def component(role_name: str) -> str:
    """The table's `who` for a Role or ClusterRole of the chart (`<fullname>-sweeper-lease`)."""
    found = re.search(r"-(webhook|sweeper|test|uninstall)(-lease|-progress|-nodes)?$", role_name)
    assert found, role_name
    return {"test": "helm test", "uninstall": "uninstall hook"}.get(found[1], found[1])


def rendered_grants() -> set[Grant]:
    found: set[Grant] = set()
    for values in RENDERINGS:
        rendered = render(values)
        for kind in ("Role", "ClusterRole"):
            for role in rendered.of_kind(kind):
                who = component(role["metadata"]["name"])
                for rule in role["rules"]:
                    for group in rule["apiGroups"]:
                        for resource in rule["resources"]:
                            for verb in rule["verbs"]:
                                named = bool(rule.get("resourceNames"))
                                found.add((who, group, resource, verb, named))
    return found


def table_rows() -> list[tuple[str, str]]:
    """(who, grant) of every row of the table of permissions."""
    text = INSTALL.read_text()
    start = text.index("| who | grant | where |")
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows.append((cells[0].split(",")[0], cells[1]))
    return rows


def clause_grants(who: str, clause: str) -> set[Grant]:
    """What one clause of a grant cell says: `get, list, watch StatefulSets and Jobs`."""
    words = re.findall(r"[A-Za-z][\w.-]*", clause)
    resources = [r for r, word in WORDS.items() if any(w.rstrip("s") == word for w in words)]
    first = min(
        (i for i, w in enumerate(words) if w.rstrip("s") in WORDS.values()), default=len(words)
    )
    verbs = {w for w in words[:first] if w in VERBS}
    named = "by name" in clause or "resourceNames" in clause or "its own" in clause
    podgroup_groups = [g for g, word in GROUPS.items() if word in words]
    said: set[Grant] = set()
    for resource in resources:
        groups = podgroup_groups if resource == "podgroups" else [_group_of(resource)]
        for verb in verbs:
            for group in groups:
                said.add((who, group, resource, verb, named))
    return said


def _group_of(resource: str) -> str:
    return {
        "statefulsets": "apps",
        "jobs": "batch",
        "tokenreviews": "authentication.k8s.io",
        "leases": "coordination.k8s.io",
        "mutatingwebhookconfigurations": "admissionregistration.k8s.io",
        "computedomains": "resource.nvidia.com",
    }.get(resource, "")


def documented() -> set[Grant]:
    return {
        grant
        for who, cell in table_rows()
        for clause in cell.split(";")
        for grant in clause_grants(who, clause)
    }


def test_the_table_names_every_verb_on_every_resource_the_chart_grants() -> None:
    missing = rendered_grants() - documented()
    assert missing == set(), f"granted but not in docs/install.md's table: {sorted(missing)}"


def test_the_table_names_nothing_the_chart_does_not_grant() -> None:
    extra = documented() - rendered_grants()
    assert extra == set(), f"in docs/install.md's table but never granted: {sorted(extra)}"


def test_the_reading_of_the_table_would_see_a_verb_or_resource_gone_from_it() -> None:
    clause = "get, list, watch, create, patch, delete Volcano, scheduler-plugins, KAI PodGroups"
    said = clause_grants("sweeper", clause)
    assert ("sweeper", "scheduling.k8s.io", "podgroups", "get", False) not in said
    assert ("sweeper", "scheduling.run.ai", "podgroups", "delete", False) in said
    assert clause_grants("webhook", "get, update, patch its own Secret") == {
        ("webhook", "", "secrets", verb, True) for verb in ("get", "update", "patch")
    }
