"""trainhook.io/failure-policy: rules parsed, refused in one line, printed, and matched."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.builders import statefulset
from webhook.cli import main
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.job.failure_rules import (
    FAIL,
    IGNORE,
    RESTART_JOB,
    RESTART_JOB_FREE,
    RETRY,
    Failure,
    Rule,
    failure_policy,
    parse_rules,
)
from webhook.core.mutation.admit import Request, admit

POLICY = """\
reason=OOMKilled -> fail
message~"NCCL*timed out|Watchdog caught collective" -> restart-job max=3
pod-reason=UnexpectedAdmissionError -> restart-job-free
condition=DisruptionTarget:PreemptionByScheduler -> restart-job-free max=10
exit=0 role=worker -> ignore
exit=1-127,255 -> fail
"""


def action(rule: Rule | None) -> str:
    assert rule is not None
    return rule.action


def fired(failure: Failure, restart_policy: str | None = "RestartJob") -> str:
    rule = failure_policy(parse_rules(POLICY), restart_policy).first(failure)
    assert rule is not None
    return rule.name


@pytest.mark.parametrize(
    ("failure", "rule"),
    [
        (
            Failure("worker", 137, "OOMKilled", "CUDA out of memory"),
            "failure-policy rule 1 (reason=OOMKilled -> fail)",
        ),
        (
            Failure(
                "worker",
                1,
                "Error",
                "[Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9)",
            ),
            'failure-policy rule 2 (message~"NCCL*timed out|Watchdog caught collective" '
            "-> restart-job max=3)",
        ),
        (
            Failure("worker", 1, "Error", "NCCL communicator was aborted: operation timed out"),
            'failure-policy rule 2 (message~"NCCL*timed out|Watchdog caught collective" '
            "-> restart-job max=3)",
        ),
        (
            Failure("master", None, pod_reason="UnexpectedAdmissionError"),
            "failure-policy rule 3 (pod-reason=UnexpectedAdmissionError -> restart-job-free)",
        ),
        (
            Failure("worker", 143, conditions=(("DisruptionTarget", "PreemptionByScheduler"),)),
            "failure-policy rule 4 (condition=DisruptionTarget:PreemptionByScheduler "
            "-> restart-job-free max=10)",
        ),
        (Failure("worker", 0), "failure-policy rule 5 (exit=0 role=worker -> ignore)"),
        (Failure("master", 2), "failure-policy rule 6 (exit=1-127,255 -> fail)"),
        # the restart policy's preset follows: a drain is free, anything else restarts the job
        (
            Failure("worker", 143, conditions=(("DisruptionTarget", "EvictionByEvictionAPI"),)),
            "trainhook.io/restart-policy RestartJob rule 1 (disrupted=any -> restart-job-free)",
        ),
        (
            Failure("worker", 139, "Error", "Segmentation fault"),
            "trainhook.io/restart-policy RestartJob rule 2 (* -> restart-job)",
        ),
    ],
)
def test_the_first_rule_that_matches_what_the_pod_reports_fires(
    failure: Failure, rule: str
) -> None:
    assert fired(failure) == rule


def test_without_a_restart_policy_the_onfailure_preset_retries_and_ignores_disruptions() -> None:
    policy = failure_policy(None, None)
    node_lost = Failure("worker", None, conditions=(("DisruptionTarget", "DeletionByPodGC"),))
    assert [r.action for r in policy.rules] == [IGNORE, RETRY]
    assert action(policy.first(node_lost)) == IGNORE
    assert action(policy.first(Failure("worker", 1))) == RETRY


@pytest.mark.parametrize(
    ("restart_policy", "actions"),
    [
        ("ExitCode", [IGNORE, FAIL, RETRY]),
        ("Never", [IGNORE, FAIL]),
        ("RestartJob", [RESTART_JOB_FREE, RESTART_JOB]),
    ],
)
def test_each_restart_policy_is_a_preset_of_rules(restart_policy: str, actions: list[str]) -> None:
    assert [r.action for r in failure_policy(None, restart_policy).rules] == actions


def test_exitcode_fails_codes_below_128_and_retries_signals() -> None:
    policy = failure_policy(None, "ExitCode")
    first = policy.first(Failure("worker", 1))
    assert first is not None and first.verdict_reason == "ExitCode"
    assert action(policy.first(Failure("worker", 137))) == RETRY


def test_a_message_pattern_is_matched_without_backtracking_on_hostile_text() -> None:
    # A regular expression like (a*)*b backtracks exponentially on many a's without a b; the
    # pattern's pieces are searched for in order, once each.
    rules = parse_rules('message~"a*a*a*a*a*a*a*a*a*a*a*a*b" -> fail')
    hostile = Failure("worker", 1, message="a" * 100_000)
    assert action(failure_policy(rules, None).first(hostile)) == RETRY
    found = failure_policy(rules, None).first(Failure("worker", 1, message="a" * 12 + "b"))
    assert action(found) == FAIL


def refusal(annotations: dict[str, str], framework: str = "pytorch") -> str:
    with pytest.raises(TrainhookError) as caught:
        admit(
            Request(
                "StatefulSet",
                "CREATE",
                statefulset("t", framework, role="worker", annotations=annotations),
                "default",
            )
        )
    return str(caught.value)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        (
            "reason=OOMKilled -> fail\nexit=1-300 -> fail",
            "trainhook.io/failure-policy: invalid value 'exit=1-300 -> fail': rule 2: exit=1-300: "
            "exit codes 0-255 or ranges like 1-127, separated by commas",
        ),
        (
            "* -> reboot",
            "trainhook.io/failure-policy: invalid value '* -> reboot': rule 1: action 'reboot': "
            "one of fail, restart-job, restart-job-free, restart-in-place, restart-role, "
            "restart-pod, retry, ignore",
        ),
        (
            "exit=1 -> fail max=2",
            "trainhook.io/failure-policy: invalid value 'exit=1 -> fail max=2': rule 1: max= is "
            "for restart-job, restart-job-free, restart-in-place, restart-role, restart-pod; retry "
            "counts against trainhook.io/backoff-limit, fail and ignore need none",
        ),
        (
            "status=Failed -> fail",
            "trainhook.io/failure-policy: invalid value 'status=Failed -> fail': rule 1: unknown "
            "term 'status': one of exit, reason, pod-reason, condition, disrupted, message, role, "
            "node-condition, node-taint",
        ),
        (
            "role=chief -> fail",
            "trainhook.io/failure-policy: invalid value 'role=chief -> fail': rule 1: role chief: "
            "pytorch roles are master, worker",
        ),
        (
            "reason=OOMKilled fail",
            "trainhook.io/failure-policy: invalid value 'reason=OOMKilled fail': rule 1: one `->` "
            "between what it matches and its action; " + "one rule a line",
        ),
        (
            "exit=1 -> restart-role",
            "trainhook.io/failure-policy: invalid value 'exit=1 -> restart-role': rule 1: "
            "restart-role needs a job that takes restarted pods back: elastic pytorch "
            "(trainhook.io/elastic) or a tensorflow or paddle parameter-server job, not a "
            "pytorch job without trainhook.io/elastic",
        ),
        (
            'message~"' + "x" * 300 + '" -> fail',
            "rule 1: a message pattern has at most 256 characters",
        ),
    ],
)
def test_an_invalid_rule_is_refused_at_admission_in_one_line_naming_it(
    policy: str, message: str
) -> None:
    refused = refusal({contract.FAILURE_POLICY: policy})
    assert "\n" not in refused
    assert refused.startswith(message) or message in refused


def test_restart_role_is_admitted_for_an_elastic_pytorch_job_and_parameter_servers() -> None:
    for framework, extra in (("pytorch", {contract.ELASTIC: "1:4"}), ("tensorflow", {})):
        workload = statefulset(
            "t",
            framework,
            role="worker",
            annotations={contract.FAILURE_POLICY: "exit=1-255 -> restart-role max=5", **extra},
        )
        assert admit(Request("StatefulSet", "CREATE", workload, "default")) is not None


def test_render_prints_the_parsed_rules_and_refuses_a_bad_one_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        """\
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: bert
  labels: {trainhook.io/framework: pytorch, trainhook.io/job: bert, trainhook.io/role: worker}
  annotations:
    trainhook.io/restart-policy: RestartJob
    trainhook.io/failure-policy: |
      reason=OOMKilled   ->   fail
      message~"NCCL*timed out" -> restart-job max=3
spec:
  replicas: 1
  selector: {matchLabels: {app: bert}}
  template:
    metadata: {labels: {app: bert}}
    spec: {containers: [{name: pytorch, image: trainer}]}
"""
    )
    assert main(["render", str(job)]) == 0
    out = capsys.readouterr().out
    assert out.split("failure rules (first match wins):\n")[1] == (
        "  1. reason=OOMKilled -> fail\n"
        '  2. message~"NCCL*timed out" -> restart-job max=3\n'
        "  3. disrupted=any -> restart-job-free   [trainhook.io/restart-policy RestartJob]\n"
        "  4. * -> restart-job   [trainhook.io/restart-policy RestartJob]\n"
    )
    job.write_text(job.read_text().replace("-> restart-job max=3", "-> restart-job max=three"))
    assert main(["render", str(job)]) == 1
    assert capsys.readouterr().err == (
        f"trainhook render: {job} document 1 (StatefulSet bert): trainhook.io/failure-policy: "
        "invalid value 'message~\"NCCL*timed out\" -> restart-job max=three': rule 2: after "
        "the action only max=N (a whole number) and exclude-node, not 'max=three'\n"
    )


def test_roles_that_set_different_rules_are_refused_naming_both() -> None:
    from webhook.core.frameworks import FRAMEWORKS
    from webhook.core.job.settings import read_settings
    from webhook.core.job.workload import Member, disagreement

    def member(role: str, policy: str) -> Member:
        settings = read_settings({contract.FAILURE_POLICY: policy}, FRAMEWORKS["pytorch"])
        return Member(role, f"StatefulSet t-{role}", settings)

    line = disagreement(
        "t",
        FRAMEWORKS["pytorch"],
        [member("master", "* -> fail"), member("worker", "reason=OOMKilled -> fail")],
    )
    assert line == (
        "trainhook.io/failure-policy differs between the roles of job t: master (StatefulSet "
        "t-master) '* -> fail', worker (StatefulSet t-worker) 'reason=OOMKilled -> fail'; set one "
        "value on every workload of the job (the sweeper applies one to the whole job)"
    )
