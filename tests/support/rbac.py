"""Kubernetes RBAC as the API server applies it, for the Roles and bindings a chart renders.

A request is reduced to the attributes the API server's RequestInfo gives it (verb, API group,
resource and subresource, namespace, name) and allowed when a rule of a Role or ClusterRole bound
to the ServiceAccount matches them: a RoleBinding's rules apply in its own namespace only, a
ClusterRoleBinding's everywhere. As in the API server, `list` and `watch` carry a name only
through a `metadata.name` field selector (which is what lets `resourceNames` limit them), a
`create` has no name (so a rule with `resourceNames` never allows one), and the discovery paths
(`/api`, `/apis/<group>/<version>`, `/version`) are open to every authenticated user, as the
default `system:discovery` ClusterRole makes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

Document = Mapping[str, Any]


@dataclass(frozen=True)
class Attributes:
    verb: str
    group: str
    resource: str  # "pods", or "pods/status" for a subresource
    namespace: str  # "" for a cluster-scoped request
    name: str

    def __str__(self) -> str:
        where = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        what = f"{self.resource}.{self.group}" if self.group else self.resource
        named = f" {self.name!r}" if self.name else ""
        return f"{self.verb} {what}{named} {where}"


def attributes(method: str, path: str, query: str = "") -> Attributes | None:
    """What RBAC sees of a request; None for a discovery path (no resource)."""
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif parts[:1] == ["apis"] and len(parts) >= 3:
        group, rest = parts[1], parts[3:]
    else:
        return None
    if not rest:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource, name = rest[0], rest[1] if len(rest) > 1 else ""
    if len(rest) > 2:
        resource = f"{resource}/{rest[2]}"
    asked = parse_qs(query)
    if method in ("GET", "HEAD"):
        if name:
            verb = "get"
        else:
            verb = "watch" if asked.get("watch", [""])[0] in ("true", "1") else "list"
            for selector in asked.get("fieldSelector", []):
                for term in selector.split(","):
                    if term.startswith("metadata.name="):
                        name = term.removeprefix("metadata.name=")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, "")
        if method == "DELETE":
            verb = "delete" if name else "deletecollection"
    return Attributes(verb, group, resource, namespace, name)


def _matches(rule: Document, asked: Attributes) -> bool:
    def has(key: str, value: str) -> bool:
        values = rule.get(key) or []
        return value in values or "*" in values

    if not (has("apiGroups", asked.group) and has("resources", asked.resource)):
        return False
    if not has("verbs", asked.verb):
        return False
    names = rule.get("resourceNames") or []
    return not names or asked.name in names


class Authorizer:
    """The rendered RBAC of one release, asked on behalf of its ServiceAccounts."""

    def __init__(self, documents: Iterable[Document]) -> None:
        self.documents = list(documents)

    def _roles(self, kind: str, name: str, namespace: str) -> list[Document]:
        return [
            d
            for d in self.documents
            if d["kind"] == kind
            and d["metadata"]["name"] == name
            and (kind == "ClusterRole" or d["metadata"].get("namespace") == namespace)
        ]

    def rules_for(self, account: tuple[str, str], namespace: str) -> list[Document]:
        """Every rule that applies to ServiceAccount (namespace, name) for a request in
        `namespace` ("" for a cluster-scoped request)."""
        rules: list[Document] = []
        for binding in self.documents:
            kind = binding["kind"]
            if kind not in ("RoleBinding", "ClusterRoleBinding"):
                continue
            if kind == "RoleBinding" and binding["metadata"].get("namespace") != namespace:
                continue
            subjects = binding.get("subjects") or []
            if not any(
                s.get("kind") == "ServiceAccount" and (s.get("namespace"), s.get("name")) == account
                for s in subjects
            ):
                continue
            ref = binding["roleRef"]
            where = binding["metadata"].get("namespace", "")
            for role in self._roles(ref["kind"], ref["name"], where):
                rules.extend(role.get("rules") or [])
        return rules

    def refusal(
        self, account: tuple[str, str], method: str, path: str, query: str = ""
    ) -> str | None:
        """None when the request is allowed, else the API server's reason for its 403."""
        asked = attributes(method, path, query)
        if asked is None:
            return None
        if any(_matches(rule, asked) for rule in self.rules_for(account, asked.namespace)):
            return None
        namespace, name = account
        return f'User "system:serviceaccount:{namespace}:{name}" cannot {asked}'
