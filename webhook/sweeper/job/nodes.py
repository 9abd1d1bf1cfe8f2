"""A node as the sweeper reads it: the conditions and taints a failure rule may name
(`node-condition=TYPE[:STATUS]`, `node-taint=KEY`), set by node-problem-detector, NVSentinel or a
GPU health agent."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NodeView:
    name: str
    conditions: tuple[tuple[str, str], ...] = ()  # (type, status), in the node's order
    taints: tuple[str, ...] = ()  # the keys of its taints, in the node's order
    # Why its pods are about to be stopped ("" when they are not): cordoned for a drain
    # (spec.unschedulable, the node.kubernetes.io/unschedulable taint) or a NoExecute taint.
    draining: str = ""

    def condition(self, kind: str) -> str | None:
        """The status of one condition, None when the node does not report it."""
        return next((status for t, status in self.conditions if t == kind), None)


def read_node(node: Mapping[str, Any]) -> NodeView:
    metadata = node.get("metadata") or {}
    status = node.get("status") or {}
    spec = node.get("spec") or {}
    return NodeView(
        name=str(metadata.get("name") or ""),
        conditions=tuple(
            (str(c.get("type") or ""), str(c.get("status") or ""))
            for c in status.get("conditions") or []
            if c.get("type")
        ),
        taints=tuple(str(t.get("key") or "") for t in spec.get("taints") or [] if t.get("key")),
        draining=_draining(spec),
    )


UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def _draining(spec: Mapping[str, Any]) -> str:
    taints = [t for t in spec.get("taints") or [] if isinstance(t, Mapping)]
    if spec.get("unschedulable") is True or any(
        t.get("key") == UNSCHEDULABLE_TAINT for t in taints
    ):
        return "it is unschedulable (cordoned)"
    evicting = [t for t in taints if t.get("effect") == "NoExecute" and t.get("key")]
    if evicting:
        return f"it is tainted {evicting[0]['key']}:NoExecute"
    return ""


def slim_node(node: dict[str, Any]) -> dict[str, Any]:
    """What the sweeper keeps of a node: its name, conditions' type and status, taints' key and
    effect; a heartbeat (lastHeartbeatTime, every few seconds) changes nothing kept."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    status = node.get("status") or {}
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            key: metadata[key] for key in ("name", "uid", "resourceVersion") if key in metadata
        },
        "spec": {
            "taints": [
                {k: t[k] for k in ("key", "value", "effect") if k in t}
                for t in spec.get("taints") or []
            ],
            "unschedulable": spec.get("unschedulable") is True,
        },
        "status": {
            "conditions": [
                {k: c[k] for k in ("type", "status", "reason") if k in c}
                for c in status.get("conditions") or []
            ]
        },
    }


def same_node(held: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether two held nodes (slim_node) differ in their resourceVersion alone."""
    return {**held.get("spec", {}), **held.get("status", {})} == {
        **new.get("spec", {}),
        **new.get("status", {}),
    }


def node_views(nodes: Iterable[Mapping[str, Any]]) -> dict[str, NodeView]:
    views = (read_node(node) for node in nodes)
    return {view.name: view for view in views if view.name}
