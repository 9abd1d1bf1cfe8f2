"""The sweeper's watch of Nodes: read-only, for failure rules that name a node's conditions or
taints. It starts when the sweeper first sees a job with such a rule (a sweeper whose jobs name
no node reads no Node). A node's change is news to the jobs whose pods it runs; a heartbeat is
none (only conditions' type and status and taints' keys are kept).

Reading Nodes takes list and watch on nodes cluster-wide (the chart grants them); without them
the watch keeps retrying, the rules see no node facts, and the sweeper works on otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

from webhook.core.errors import TrainhookError
from webhook.kube.client import Kube
from webhook.kube.informer import Informer
from webhook.kube.resources import NODES
from webhook.sweeper.job.nodes import NodeView, read_node, same_node, slim_node
from webhook.sweeper.job.state import JobKey, JobState

BACKOFF_CAP = 300.0  # seconds between tries while Nodes cannot be read (one warning each)


class NodeWatch:
    def __init__(
        self,
        kube: Kube,
        *,
        on_change: Callable[[JobKey], None],
        resync_seconds: float,
        backoff_base: float,
    ) -> None:
        self._on_change = on_change
        self._lock = threading.Lock()
        self._jobs: dict[str, set[JobKey]] = {}  # node -> the jobs whose pods it runs
        self._nodes: dict[JobKey, frozenset[str]] = {}
        self._started = False
        self.informer: Informer[str] = Informer(
            kube,
            NODES,
            namespace=None,
            selector="",
            index=_node_name,
            on_change=self._changed,
            resync_seconds=resync_seconds,
            backoff_base=backoff_base,
            backoff_cap=BACKOFF_CAP,
            keep=slim_node,
            unchanged=same_node,
        )

    def start(self) -> None:
        """Start watching (once); the first list hands every node's jobs to `on_change`."""
        with self._lock:
            if self._started:
                return
            self._started = True
        self.informer.start("watch-nodes")

    def stop(self) -> None:
        self.informer.stop()

    def views(self, key: JobKey, nodes: Iterable[str], wanted: bool = True) -> dict[str, NodeView]:
        """The nodes a job's pods are bound to, as held now, when the job's rules name nodes
        (`wanted`); the job hears of their changes."""
        if wanted:
            self.start()
        names = frozenset(name for name in nodes if name) if wanted else frozenset()
        with self._lock:
            for gone in self._nodes.get(key, frozenset()) - names:
                jobs = self._jobs.get(gone)
                if jobs is not None:
                    jobs.discard(key)
                    if not jobs:
                        del self._jobs[gone]
            for name in names:
                self._jobs.setdefault(name, set()).add(key)
            if names:
                self._nodes[key] = names
            else:
                self._nodes.pop(key, None)
        found = {}
        for name in names:
            held = self.informer.get("", name)
            if held is not None:
                found[name] = read_node(held)
        return found

    def _changed(self, name: str) -> None:
        with self._lock:
            jobs = list(self._jobs.get(name, ()))
        for key in jobs:
            self._on_change(key)


def names_nodes(state: JobState) -> bool:
    """Whether a job's failure rules name a node's conditions or taints, or the job asks for a
    checkpoint before a node is drained (a job whose roles disagree on their settings names
    none: it is refused before they are read)."""
    try:
        settings = state.settings if state.workloads and not state.problems else None
        if settings is None:
            return False
        rules = settings.failure_rules
        checkpoints = settings.checkpoint_on_stop is not None
    except TrainhookError:
        return False
    return checkpoints or any(rule.match.on_node for rule in rules or ())


def _node_name(node: dict[str, Any]) -> str | None:
    return (node.get("metadata") or {}).get("name") or None
