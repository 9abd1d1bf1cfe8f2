"""`trainhook.io/success-policy: role=<role>`: the job succeeds once every pod of that role has
exited 0, whatever the other roles do (Volcano's TaskCompleted → CompleteJob on a task)."""

from typing import Any

from tests.support.stored import pod, stamped, statefulset
from webhook.core import contract
from webhook.core.errors import InvalidSetting
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.job.settings import read_settings
from webhook.sweeper.decide.policy import Verdict, judge

from .helpers import state_of


def generic_job(policy: str) -> list[dict[str, Any]]:
    annotations = {contract.SUCCESS_POLICY: policy}
    return stamped(
        statefulset("vc-ps", framework="generic", role="ps", job="vc", annotations=annotations),
        statefulset(
            "vc-worker",
            framework="generic",
            role="worker",
            job="vc",
            replicas=2,
            annotations=annotations,
        ),
    )


def test_a_job_whose_success_is_a_role_succeeds_when_every_pod_of_it_exits_0_while_others_run():
    ps, workers = generic_job("role=worker")
    one = [pod(ps, 0), pod(workers, 0, exit_code=0), pod(workers, 1)]
    assert judge(state_of("vc", [ps, workers], one)) is None
    both = [pod(ps, 0), pod(workers, 0, exit_code=0), pod(workers, 1, exit_code=0)]
    assert judge(state_of("vc", [ps, workers], both)) == Verdict(
        "Succeeded",
        "Completed",
        "every worker succeeded (success policy: trainhook.io/success-policy role=worker)",
    )


def test_a_success_role_that_is_no_role_name_is_refused_in_one_line() -> None:
    try:
        read_settings({contract.SUCCESS_POLICY: "role=Not A Role"}, FRAMEWORKS["generic"])
    except InvalidSetting as error:
        assert str(error) == (
            "trainhook.io/success-policy: invalid value 'role=Not A Role': one of all, rank0, "
            "any-worker, role=<role>"
        )
    else:
        raise AssertionError("admitted")
