"""The sweeper reads Nodes, and only reads them: cluster-wide, whatever the namespace list, for
the failure rules that name a node's conditions and taints."""

from __future__ import annotations

import pytest

from tests.chart.rendering import render
from tests.chart.test_rbac import bound_subjects, expand, grants

NODES = expand("", "nodes", "list watch")


@pytest.mark.parametrize("values", [{}, {"namespaces": ["ml", "vision"]}])
def test_the_sweeper_lists_and_watches_nodes_cluster_wide_and_nothing_more(
    values: dict[str, object],
) -> None:
    rendered = render(values)
    assert grants(rendered.named("ClusterRole", "trainhook-sweeper-nodes")) == NODES
    subject = [{"kind": "ServiceAccount", "name": "trainhook-sweeper", "namespace": "trainhook"}]
    assert (
        bound_subjects(rendered, "ClusterRoleBinding", "ClusterRole", "trainhook-sweeper-nodes")
        == subject
    )


def test_without_the_sweeper_nothing_reads_nodes() -> None:
    rendered = render({"sweeper": {"enabled": False}})
    assert "trainhook-sweeper-nodes" not in rendered.names("ClusterRole")
