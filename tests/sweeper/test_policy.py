"""When a job has succeeded or failed: each framework's default, every override, every failure."""

import pytest

from tests.support.stored import bare_pod, indexed_job, pod, stamped, statefulset
from webhook.core import contract
from webhook.sweeper.decide.policy import Verdict, judge

from .helpers import state_of


def verdict(job, workloads, pods):
    return judge(state_of(job, workloads, pods))


def done(message):
    return Verdict("Succeeded", "Completed", message)


def pytorch(master=True, workers=2, annotations=None):
    found = []
    if master:
        found.append(statefulset("pt-master", role="master", job="pt", annotations=annotations))
    found.append(
        statefulset("pt-worker", role="worker", job="pt", replicas=workers, annotations=annotations)
    )
    return stamped(*found)


# --- each framework's default ---------------------------------------------------------------


def test_pytorch_succeeds_when_master_0_exits_0_while_workers_still_run():
    master, workers = pytorch()
    pods = [pod(master, 0, last_exit_code=0, restarts=1), pod(workers, 0), pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) == done(
        "master 0 succeeded (success policy: the framework default)"
    )


def test_pytorch_without_a_master_waits_for_every_worker():
    (workers,) = pytorch(master=False, workers=3)
    two = [pod(workers, 0, exit_code=0), pod(workers, 1, exit_code=0), pod(workers, 2)]
    assert verdict("pt", [workers], two) is None
    three = [*two[:2], pod(workers, 2, last_exit_code=0, restarts=1)]
    assert verdict("pt", [workers], three) == done(
        "every worker succeeded (success policy: the framework default)"
    )


def tensorflow(*roles):
    return stamped(
        *(
            statefulset(
                f"tf-{r}",
                framework="tensorflow",
                role=r,
                job="tf",
                replicas=2 if r == "worker" else 1,
            )
            for r in roles
        )
    )


@pytest.mark.parametrize(
    ("roles", "decider"),
    [
        (("chief", "ps", "worker"), "chief"),
        (("master", "ps", "worker"), "master"),
        (("ps", "worker"), "worker"),
    ],
)
def test_tensorflow_succeeds_when_its_chief_or_master_or_else_worker_0_exits_0(roles, decider):
    workloads = tensorflow(*roles)
    by_role = dict(zip(roles, workloads, strict=True))
    running = [pod(w, 0) for w in workloads]
    assert verdict("tf", workloads, running) is None
    finished = [pod(w, 0, exit_code=0 if r == decider else None) for r, w in by_role.items()]
    assert verdict("tf", workloads, finished) == done(
        f"{decider} 0 succeeded (success policy: the framework default)"
    )


def test_tensorflow_worker_1_exiting_does_not_finish_a_job_without_chief():
    ps, workers = tensorflow("ps", "worker")
    pods = [pod(ps, 0), pod(workers, 0), pod(workers, 1, exit_code=0)]
    assert verdict("tf", [ps, workers], pods) is None


def test_paddle_succeeds_when_every_worker_exits_0_whatever_the_parameter_servers_do():
    ps, workers = stamped(
        statefulset("pd-ps", framework="paddle", role="ps", job="pd"),
        statefulset("pd-worker", framework="paddle", role="worker", job="pd", replicas=2),
    )
    pods = [pod(ps, 0), pod(workers, 0, exit_code=0), pod(workers, 1)]
    assert verdict("pd", [ps, workers], pods) is None
    pods[2] = pod(workers, 1, exit_code=0)
    assert verdict("pd", [ps, workers], pods) == done(
        "every worker succeeded (success policy: the framework default)"
    )


def test_mindspore_succeeds_when_worker_0_exits_0():
    sched, workers = stamped(
        statefulset("ms-sched", framework="mindspore", role="scheduler", job="ms"),
        statefulset("ms-worker", framework="mindspore", role="worker", job="ms", replicas=4),
    )
    pods = [pod(sched, 0), pod(workers, 0, exit_code=0), *(pod(workers, i) for i in (1, 2, 3))]
    assert verdict("ms", [sched, workers], pods) == done(
        "worker 0 succeeded (success policy: the framework default)"
    )


def mpi(launcher_status=None):
    return stamped(
        indexed_job("hvd-launcher", role="launcher", job="hvd", status=launcher_status),
        statefulset("hvd-worker", framework="mpi", role="worker", job="hvd", replicas=2),
    )


def test_mpi_succeeds_when_the_launcher_pod_succeeds():
    launcher, workers = mpi()
    running = [pod(launcher, 0), pod(workers, 0), pod(workers, 1)]
    assert verdict("hvd", [launcher, workers], running) is None
    running[0] = pod(launcher, 0, phase="Succeeded", exit_code=0)
    assert verdict("hvd", [launcher, workers], running) == done(
        "launcher 0 succeeded (success policy: the framework default)"
    )


def test_mpi_succeeds_when_the_launcher_job_is_complete_even_if_its_pod_is_gone():
    complete = {"conditions": [{"type": "Complete", "status": "True"}], "completedIndexes": "0"}
    launcher, workers = mpi(launcher_status=complete)
    pods = [pod(workers, 0), pod(workers, 1)]
    assert verdict("hvd", [launcher, workers], pods) == done(
        "launcher 0 succeeded (success policy: the framework default)"
    )


def test_xgboost_succeeds_when_master_0_exits_0():
    master, workers = stamped(
        statefulset("xgb-master", framework="xgboost", role="master", job="xgb"),
        statefulset("xgb-worker", framework="xgboost", role="worker", job="xgb", replicas=2),
    )
    pods = [pod(master, 0, exit_code=0), pod(workers, 0, exit_code=1), pod(workers, 1)]
    assert verdict("xgb", [master, workers], pods) == done(
        "master 0 succeeded (success policy: the framework default)"
    )


def test_jax_succeeds_when_every_worker_exits_0():
    (workers,) = stamped(statefulset("jx", framework="jax", replicas=2))
    assert verdict("jx", [workers], [pod(workers, 0, exit_code=0), pod(workers, 1)]) is None
    both = [pod(workers, 0, exit_code=0), pod(workers, 1, exit_code=0)]
    assert verdict("jx", [workers], both) == done(
        "every worker succeeded (success policy: the framework default)"
    )


def test_a_generic_job_succeeds_when_every_pod_of_every_role_exits_0():
    a, b = stamped(
        statefulset("gen-a", framework="generic", role="loader", job="gen"),
        statefulset("gen-b", framework="generic", role="trainer", job="gen", replicas=2),
    )
    pods = [pod(a, 0), pod(b, 0, exit_code=0), pod(b, 1, exit_code=0)]
    assert verdict("gen", [a, b], pods) is None
    pods[0] = pod(a, 0, exit_code=0)
    assert verdict("gen", [a, b], pods) == done(
        "every pod succeeded (success policy: the framework default)"
    )


# --- overrides ----------------------------------------------------------------------------


def test_success_policy_all_waits_for_every_pod_of_a_pytorch_job():
    master, workers = pytorch(annotations={contract.SUCCESS_POLICY: "all"})
    pods = [pod(master, 0, exit_code=0), pod(workers, 0, exit_code=0), pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) is None
    pods[2] = pod(workers, 1, exit_code=0)
    assert verdict("pt", [master, workers], pods) == done(
        "every pod succeeded (success policy: trainhook.io/success-policy all)"
    )


def test_success_policy_rank0_finishes_a_paddle_job_on_its_first_pod():
    (workers,) = stamped(
        statefulset(
            "pd", framework="paddle", annotations={contract.SUCCESS_POLICY: "rank0"}, replicas=3
        )
    )
    pods = [pod(workers, 0, exit_code=0), pod(workers, 1), pod(workers, 2)]
    assert verdict("pd", [workers], pods) == done(
        "rank 0 (worker 0) succeeded (success policy: trainhook.io/success-policy rank0)"
    )


def test_success_policy_any_worker_finishes_when_one_worker_exits_0():
    master, workers = pytorch(workers=3, annotations={contract.SUCCESS_POLICY: "any-worker"})
    pods = [pod(master, 0), pod(workers, 0), pod(workers, 1), pod(workers, 2, exit_code=0)]
    assert verdict("pt", [master, workers], pods) == done(
        "any worker succeeded (success policy: trainhook.io/success-policy any-worker)"
    )
    pods[3] = pod(workers, 2)
    pods[0] = pod(master, 0, exit_code=0)
    assert verdict("pt", [master, workers], pods) is None


def test_bare_pods_succeed_by_their_own_phase():
    pods = [
        bare_pod("bare-0", index=0, topology='{"worker":2}', phase="Succeeded", exit_code=0),
        bare_pod("bare-1", index=1, topology='{"worker":2}'),
    ]
    assert verdict("bare", [], pods) is None
    pods[1] = bare_pod("bare-1", index=1, topology='{"worker":2}', phase="Succeeded", exit_code=0)
    assert verdict("bare", [], pods) == done(
        "every pod succeeded (success policy: the framework default)"
    )


def test_a_job_pod_that_exited_0_but_is_not_succeeded_yet_does_not_count():
    launcher, workers = mpi()
    pods = [pod(launcher, 0, exit_code=0), pod(workers, 0), pod(workers, 1)]
    assert verdict("hvd", [launcher, workers], pods) is None


# --- failure ------------------------------------------------------------------------------


def test_restarts_summed_over_the_job_beyond_the_backoff_limit_fail_it():
    master, workers = pytorch(annotations={contract.BACKOFF_LIMIT: "3"})
    at_limit = [pod(master, 0, restarts=1), pod(workers, 0, restarts=2), pod(workers, 1)]
    assert verdict("pt", [master, workers], at_limit) is None
    beyond = [*at_limit[:2], pod(workers, 1, exit_code=1)]
    assert verdict("pt", [master, workers], beyond) == Verdict(
        "Failed",
        "BackoffLimitExceeded",
        "4 failed runs of the training containers exceed trainhook.io/backoff-limit 3; "
        "last: pod pt-worker-1: container pytorch exited with code 1",
    )


def test_a_restart_after_a_success_is_not_a_failure():
    (workers,) = pytorch(master=False, workers=2, annotations={contract.BACKOFF_LIMIT: "0"})
    pods = [pod(workers, 0, last_exit_code=0, restarts=1), pod(workers, 1)]
    assert verdict("pt", [workers], pods) is None


def test_without_a_backoff_limit_restarts_are_retried_forever():
    master, workers = pytorch()
    pods = [pod(master, 0, restarts=50, last_exit_code=1), pod(workers, 0), pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) is None


def test_restart_policy_exitcode_fails_the_job_at_once_on_an_exit_code_below_128():
    master, workers = pytorch(annotations={contract.RESTART_POLICY: "ExitCode"})
    pods = [pod(master, 0), pod(workers, 0, last_exit_code=3, restarts=1), pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) == Verdict(
        "Failed",
        "ExitCode",
        "pod pt-worker-0: container pytorch exited with code 3; "
        "trainhook.io/restart-policy ExitCode rule 2 (exit=1-127 -> fail)",
        "trainhook.io/restart-policy ExitCode rule 2 (exit=1-127 -> fail)",
    )


def test_restart_policy_exitcode_retries_exit_codes_from_128_within_the_backoff_limit():
    annotations = {contract.RESTART_POLICY: "ExitCode", contract.BACKOFF_LIMIT: "1"}
    master, workers = pytorch(annotations=annotations)
    pods = [pod(master, 0), pod(workers, 0, last_exit_code=137, restarts=1), pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) is None
    pods[2] = pod(workers, 1, exit_code=143)
    assert verdict("pt", [master, workers], pods) == Verdict(
        "Failed",
        "BackoffLimitExceeded",
        "2 failed runs of the training containers exceed trainhook.io/backoff-limit 1; "
        "last: pod pt-worker-0: container pytorch exited with code 137",
    )


def test_restart_policy_never_fails_the_job_on_the_first_failure():
    master, workers = pytorch(annotations={contract.RESTART_POLICY: "Never"})
    pods = [pod(master, 0), pod(workers, 0, exit_code=137), pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) == Verdict(
        "Failed",
        "PodFailed",
        "pod pt-worker-0: container pytorch exited with code 137; "
        "trainhook.io/restart-policy Never rule 2 (* -> fail)",
        "trainhook.io/restart-policy Never rule 2 (* -> fail)",
    )


def test_a_pod_being_deleted_does_not_count_as_a_failure():
    master, workers = pytorch(annotations={contract.RESTART_POLICY: "Never"})
    pods = [pod(master, 0), pod(workers, 0, exit_code=143, terminating=True), pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) is None


def test_an_indexed_job_that_failed_fails_the_training_job():
    failed = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        ]
    }
    launcher, workers = mpi(launcher_status=failed)
    assert verdict("hvd", [launcher, workers], [pod(workers, 0), pod(workers, 1)]) == Verdict(
        "Failed",
        "JobFailed",
        "Job hvd-launcher failed: BackoffLimitExceeded: "
        "Job has reached the specified backoff limit",
    )


def test_a_failed_bare_pod_fails_its_job():
    pods = [
        bare_pod("bare-0", index=0, topology='{"worker":2}', phase="Failed", exit_code=2),
        bare_pod("bare-1", index=1, topology='{"worker":2}'),
    ]
    assert verdict("bare", [], pods) == Verdict(
        "Failed", "PodFailed", "pod bare-0 failed: container main exited with code 2"
    )


def test_success_wins_over_failures_of_peers_that_lost_their_master():
    master, workers = pytorch(annotations={contract.RESTART_POLICY: "ExitCode"})
    pods = [pod(master, 0, exit_code=0), pod(workers, 0, exit_code=1), pod(workers, 1, exit_code=1)]
    assert verdict("pt", [master, workers], pods).phase == "Succeeded"


def test_the_training_container_is_the_one_the_annotation_names():
    master, workers = pytorch(annotations={contract.RESTART_POLICY: "Never"})
    sidecar_failed = pod(workers, 0)
    sidecar_failed["spec"]["containers"].append({"name": "logs", "image": "x"})
    sidecar_failed["status"]["containerStatuses"].append(
        {
            "name": "logs",
            "restartCount": 4,
            "state": {"terminated": {"exitCode": 1}},
            "lastState": {},
        }
    )
    pods = [pod(master, 0), sidecar_failed, pod(workers, 1)]
    assert verdict("pt", [master, workers], pods) is None
    sidecar_failed["metadata"]["annotations"][contract.CONTAINER] = "logs"
    sidecar_failed["metadata"]["resourceVersion"] += "1"  # a changed pod is a new version
    assert verdict("pt", [master, workers], pods).reason == "PodFailed"
