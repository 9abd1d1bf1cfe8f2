"""Node facts in failure rules: a rank whose node shows a condition or taint a rule names
(`node-condition=TYPE[:STATUS]`, `node-taint=KEY`) fires that rule, running or not; and the
nodes a restart excludes (`exclude-node`), recorded with the job's restart.

Kueue replaces nodes on its own (Topology Aware Scheduling replaces a node that is NotReady or
carries an untolerated taint): a job Kueue admits restarts as its rules say, and its nodes are
left to Kueue, never excluded here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from webhook.core.job.failure_rules import Failure, Rule, failure_policy, straggler_rule
from webhook.core.job.node_exclusion import MAX_EXCLUDED, recorded_exclusions
from webhook.sweeper.actions import Emit
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.job.nodes import NodeView
from webhook.sweeper.job.pods import PodView
from webhook.sweeper.job.state import JobState
from webhook.sweeper.job.stragglers import Straggler, read_stragglers

NODE_CONDITION = "NodeCondition"  # the reason of a restart a node's condition caused
NODE_TAINTED = "NodeTainted"


def node_facts(state: JobState, pod: PodView) -> dict[str, Any]:
    """What a failure rule reads of the node `pod` is bound to (none before it is bound, or when
    the sweeper may not read Nodes)."""
    node = state.nodes.get(pod.node) if pod.node else None
    if node is None:
        return {}
    return {"node_conditions": node.conditions, "node_taints": frozenset(node.taints)}


@dataclass(frozen=True)
class SickNode:
    """A pod whose node shows what a rule names."""

    pod: PodView
    rule: Rule
    reason: str
    message: str

    @property
    def key(self) -> str:
        return f"{self.pod.uid8}/node"


def sick_nodes(
    state: JobState, rules: tuple[Rule, ...], skip: Callable[[PodView], bool]
) -> Iterator[SickNode]:
    """Each pod on a node that fires one of the user's node rules: the first that matches."""
    rules = tuple(rule for rule in rules if rule.match.on_node)
    if not rules or not state.nodes:
        return
    for pod in state.pods:
        if not pod.node or pod.terminating or pod.phase in ("Succeeded", "Failed") or skip(pod):
            continue
        node = state.nodes.get(pod.node)
        if node is None:
            continue
        facts = Failure(role=pod.role, **node_facts(state, pod))
        rule = next((rule for rule in rules if rule.match.matches(facts)), None)
        if rule is not None:
            reason, shown = _shown(rule, node)
            yield SickNode(pod, rule, reason, f"pod {pod.name}: its node {node.name} {shown}")


def _shown(rule: Rule, node: NodeView) -> tuple[str, str]:
    """The reason, and what the node shows that the rule names."""
    conditions = [f"{t}={s}" for t, s in rule.match.node_conditions if (t, s) in node.conditions]
    taints = [key for key in node.taints if key in rule.match.node_taints]
    said = []
    if conditions:
        said.append(f"has condition {', '.join(conditions)}")
    if taints:
        said.append(f"is tainted {', '.join(taints)}")
    return (NODE_CONDITION if conditions else NODE_TAINTED), " and ".join(said)


def kueue_replaces_nodes(state: JobState) -> bool:
    """Whether Kueue admits the job, and so replaces its nodes itself."""
    return any(w.settings.scheduler == "kueue" for w in state.workloads)


def excluded_of(recorded: dict[str, Any]) -> tuple[str, ...]:
    """The nodes the job's restarts exclude so far, as its trainhook.io/status records them."""
    return recorded_exclusions(recorded)


def straggler_nodes(state: JobState) -> list[Straggler]:
    """The ranks the job's workloads record as stragglers whose pod still runs on the node the
    record names (a pod recreated or moved since is no straggler there), while the job judges
    its ranks (trainhook.io/straggler-threshold)."""
    if state.settings.straggler_threshold is None:
        return []
    found: dict[str, Straggler] = {}
    for workload in state.workloads:
        record = read_stragglers(workload.annotations)
        for straggler in record.flagged if record is not None else ():
            found.setdefault(straggler.pod, straggler)
    on = {pod.name: pod.node for pod in state.pods if not pod.terminating and pod.node}
    return [s for s in found.values() if s.node and on.get(s.pod) == s.node]


def stragglers_said(
    stragglers: tuple[Straggler, ...], in_place: bool, excluded: tuple[str, ...]
) -> str:
    """What a restart's event says of the stragglers' nodes it excludes too."""
    kept = "its pods are recreated elsewhere" if in_place else "the pods keep off it"
    return "".join(
        f"; straggler node {s.node} excluded "
        f"({f'rank {s.rank}' if s.rank is not None else f'pod {s.pod}'}, {s.ratio:g}x): "
        f"{kept} ({len(excluded)} of at most {MAX_EXCLUDED})"
        for s in stragglers
    )


def with_excluded(excluded: tuple[str, ...], node: str) -> tuple[tuple[str, ...], str]:
    """`excluded` with `node` added last, and the node dropped to keep MAX_EXCLUDED ("": none)."""
    if node in excluded:
        return excluded, ""
    grown = (*excluded, node)
    if len(grown) <= MAX_EXCLUDED:
        return grown, ""
    return grown[-MAX_EXCLUDED:], grown[0]


def exclusion_said(
    state: JobState, node: str | None, in_place: bool, excluded: tuple[str, ...], dropped: str
) -> str:
    """What a restart's event says of the node its rule excludes: kept off, or left to Kueue."""
    if node is None:
        return ""
    if kueue_replaces_nodes(state):
        return f"; node {node} is left to Kueue, which replaces the nodes of the jobs it admits"
    kept = "its pods are recreated elsewhere" if in_place else "the pods keep off it"
    said = f"; node {node} excluded: {kept} ({len(excluded)} of at most {MAX_EXCLUDED})"
    if dropped:
        said += f"; node {dropped} is no longer excluded"
    return said


def dropped_said(dropped: str) -> str:
    """The nodes no longer excluded when a restart's stragglers pushed them out."""
    if not dropped:
        return ""
    return (
        f"; node {dropped} is no longer excluded"
        if "," not in dropped
        else (f"; nodes {dropped} are no longer excluded")
    )


def straggler_events(state: JobState) -> list[Emit]:
    """One `Straggler` Warning per flagging of a rank (named after its pod and when it was
    flagged): what it is, that nothing restarts for it, and what a `straggler` rule does."""
    threshold = state.settings.straggler_threshold
    if not state.workloads or threshold is None:
        return []
    rule = straggler_rule(failure_policy(state.settings.failure_rules, None))
    events = []
    for straggler in straggler_nodes(state):
        message = (
            f"{straggler.said()} is a straggler: its steps take over {threshold:g}x the other "
            "ranks' median; nothing is restarted for it"
        )
        if rule is not None and not kueue_replaces_nodes(state):
            message += (
                f"; the job's next whole-job restart keeps its pods off node {straggler.node} "
                f"({rule.name})"
            )
        key = f"straggler/{straggler.pod}/{straggler.since}"
        events.append(event_on(state, state.workloads[0], "Warning", "Straggler", message, key))
    return events
