"""Failure rules that name the node a rank runs on (`node-condition=TYPE[:STATUS]`,
`node-taint=KEY`) and restarts that keep the recreated pods off it (`exclude-node`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.test_failure_rules import refusal
from webhook.core.job.failure_rules import RESTART_IN_PLACE, Failure, failure_policy, parse_rules

GPU_CLUSTER = """\
node-condition=GpuHealthy:False,Ready:Unknown -> restart-in-place max=5 exclude-node
node-taint=nvidia.com/gpu-unhealthy -> restart-job max=3 exclude-node
"""


def test_a_node_condition_matches_the_condition_with_its_status_true_by_default() -> None:
    (rule,) = parse_rules("node-condition=XidError -> restart-job exclude-node")
    assert rule.exclude_node and rule.match.on_node
    assert rule.match.matches(Failure("worker", node_conditions=(("XidError", "True"),)))
    assert not rule.match.matches(Failure("worker", node_conditions=(("XidError", "False"),)))
    assert not rule.match.matches(Failure("worker", 1))  # no node known: no match


def test_node_terms_match_a_named_status_or_taint_key_and_keep_the_other_terms() -> None:
    policy = failure_policy(parse_rules(GPU_CLUSTER), "RestartJob")
    sick = Failure("worker", node_conditions=(("Ready", "True"), ("GpuHealthy", "False")))
    first = policy.first(sick)
    assert first is not None and (first.number, first.action) == (1, RESTART_IN_PLACE)
    tainted = Failure("worker", node_taints=frozenset({"nvidia.com/gpu-unhealthy"}))
    second = policy.first(tainted)
    assert second is not None and second.number == 2 and second.exclude_node
    (with_exit,) = parse_rules("exit=1-127 node-taint=gpu-check -> restart-job")
    assert not with_exit.match.matches(Failure("worker", 1))
    assert with_exit.match.matches(Failure("worker", 1, node_taints=frozenset({"gpu-check"})))


def test_the_rules_print_as_written_with_their_modifier() -> None:
    assert failure_policy(parse_rules(GPU_CLUSTER), None).lines()[:2] == [
        "1. node-condition=GpuHealthy:False,Ready:Unknown -> restart-in-place max=5 exclude-node",
        "2. node-taint=nvidia.com/gpu-unhealthy -> restart-job max=3 exclude-node",
    ]


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (
            "node-condition=GpuHealthy:Broken -> restart-job",
            "trainhook.io/failure-policy: invalid value 'node-condition=GpuHealthy:Broken -> "
            "restart-job': rule 1: node-condition=GpuHealthy:Broken: a node condition's type, "
            "then :True (the default), :False or :Unknown",
        ),
        (
            "node-taint=bad/key/x -> restart-job",
            "trainhook.io/failure-policy: invalid value 'node-taint=bad/key/x -> restart-job': "
            "rule 1: node-taint=bad/key/x: taint keys (like nvidia.com/gpu-unhealthy), "
            "separated by commas",
        ),
        (
            "node-taint=gpu -> fail exclude-node",
            "trainhook.io/failure-policy: invalid value 'node-taint=gpu -> fail exclude-node': "
            "rule 1: exclude-node is given once, after one of restart-job, restart-job-free, "
            "restart-in-place, restart-role, restart-pod (the restart that recreates the pods "
            "elsewhere)",
        ),
        (
            "node-taint=gpu -> restart-job exclude-node exclude-node",
            "rule 1: exclude-node is given once",
        ),
    ],
)
def test_a_bad_node_rule_is_refused_in_one_line_naming_the_value_and_what_is_allowed(
    policy: str, message: str
) -> None:
    refused = refusal({"trainhook.io/failure-policy": policy})
    assert "\n" not in refused
    assert refused.startswith(message) or message in refused


def test_the_gpu_cluster_rule_set_of_the_guide_is_admitted_as_written() -> None:
    import yaml

    from tests.support.builders import statefulset
    from webhook.core.mutation.admit import Request, admit

    guide = (Path(__file__).resolve().parents[2] / "docs" / "sweeper.md").read_text()
    section = guide.split("### A rule set for a GPU cluster", 1)[1]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    annotations = yaml.safe_load(block)["metadata"]["annotations"]
    rules = parse_rules(annotations["trainhook.io/failure-policy"])
    assert [rule.exclude_node for rule in rules][:5] == [False, True, True, True, True]
    for framework in ("pytorch", "tensorflow", "jax"):
        workload = statefulset("train", framework, role="worker", annotations=annotations)
        assert admit(Request("StatefulSet", "CREATE", workload, "default")) is not None
