"""`trainhook migrate` field by field: what each operator field becomes, the one line a field
without equivalent gets, and the one line that refuses what cannot work."""

from __future__ import annotations

from typing import Any

import kubernetes_validate
import pytest

from tests.support.builders import paddle_operator, pytorchjob, template
from tests.support.pod_files import pod_files
from webhook.core import contract
from webhook.core.migrate import Migration, MigrationError, is_source, migrate, migrate_one
from webhook.core.render import render_all

# What a PyTorchJob on pods without GPUs and without nprocPerNode is told: training-operator 1.9
# defaults it to `auto`, which torchrun reads there as the node's CPU count.
CPU_AUTO = (
    "spec.nprocPerNode: absent (the operator's default 'auto') → 1 process per pod: torchrun "
    "reads 'auto' on a pod without GPUs as os.cpu_count(), the CPUs of the node it lands on; set "
    "trainhook.io/nproc-per-node to the processes per pod the job ran"
)


def annotations_of(migration: Migration) -> list[dict[str, str]]:
    return [o["metadata"].get("annotations", {}) for o in migration.objects]


def job_wide(migration: Migration) -> dict[str, str]:
    (value,) = {tuple(sorted(a.items())) for a in annotations_of(migration)}
    return dict(value)


def refused(source: dict[str, Any], framework: str | None = None) -> str:
    with pytest.raises(MigrationError) as error:
        migrate_one(source, framework)
    return str(error.value)


def test_a_pytorchjob_becomes_one_statefulset_per_replica_type_named_as_the_operators_pods() -> (
    None
):
    migration = migrate_one(pytorchjob())
    assert [
        (o["kind"], o["metadata"]["name"], o["spec"]["replicas"]) for o in migration.objects
    ] == [
        ("StatefulSet", "pt-master", 1),
        ("StatefulSet", "pt-worker", 2),
    ]
    assert [o["metadata"]["labels"] for o in migration.objects] == [
        {contract.FRAMEWORK: "pytorch", contract.JOB: "pt", contract.ROLE: role}
        for role in ("master", "worker")
    ]
    assert [o["metadata"]["namespace"] for o in migration.objects] == ["ml", "ml"]
    assert migration.notes == [CPU_AUTO]
    pods = render_all(migration.objects).pods
    assert [p.name for p in pods] == ["pt-master-0", "pt-worker-0", "pt-worker-1"]


def test_every_workload_of_a_job_with_several_roles_names_them_all_in_role_order() -> None:
    migration = migrate_one(
        pytorchjob(
            Worker={"replicas": 2, "template": template()},
            Master={"replicas": 1, "template": template()},
        )
    )
    assert annotations_of(migration) == [{contract.ROLES: "master,worker"}] * 2


def test_a_job_of_one_role_has_no_roles_annotation() -> None:
    migration = migrate_one(
        pytorchjob({"elasticPolicy": {}}, Worker={"replicas": 2, "template": template()})
    )
    assert annotations_of(migration) == [{}]


def test_run_policy_becomes_the_lifecycle_annotations_on_every_workload() -> None:
    run_policy = {
        "cleanPodPolicy": "All",
        "backoffLimit": 4,
        "activeDeadlineSeconds": 3600,
        "ttlSecondsAfterFinished": 60,
        "suspend": True,
        "schedulingPolicy": {"queue": "research", "minAvailable": 3, "priorityClass": "high"},
    }
    migration = migrate_one(pytorchjob({"runPolicy": run_policy}))
    assert job_wide(migration) == {
        contract.CLEAN_POD_POLICY: "All",
        contract.BACKOFF_LIMIT: "3",  # the operator fails at the 4th restart, Trainhook after 3
        contract.ACTIVE_DEADLINE_SECONDS: "3600",
        contract.TTL_SECONDS_AFTER_FINISHED: "60",
        contract.SUSPEND: "true",
        contract.SCHEDULER: "volcano",
        contract.QUEUE: "research",
        contract.ROLES: "master,worker",
    }
    assert {o["spec"]["template"]["spec"]["priorityClassName"] for o in migration.objects} == {
        "high"
    }
    assert migration.notes == [
        "spec.runPolicy.schedulingPolicy: gang scheduling with trainhook.io/scheduler: 'volcano' "
        "(the templates name no gang scheduler)",
        CPU_AUTO,
    ]


def test_a_schedule_timeout_is_coscheduling_and_a_smaller_gang_is_its_min_available() -> None:
    policy = {"schedulingPolicy": {"scheduleTimeoutSeconds": 120, "minAvailable": 2}}
    migration = migrate_one(pytorchjob({"runPolicy": policy}))
    assert job_wide(migration) == {
        contract.SCHEDULER: "coscheduling",
        contract.SCHEDULE_TIMEOUT_SECONDS: "120",
        contract.MIN_AVAILABLE: "2",
        contract.ROLES: "master,worker",
    }
    assert not [n for n in migration.notes if "minAvailable" in n]
    [podgroup] = render_all(migration.objects).podgroups
    assert podgroup["spec"]["minMember"] == 2


def test_a_gang_minimum_no_gang_can_take_is_a_note() -> None:
    for policy, note in (
        (
            {"minAvailable": 2},
            "2 has no equivalent: the job names no gang scheduler",
        ),
        (
            {"queue": "q", "minAvailable": 4},
            "4 has no equivalent: a gang's minimum is from 1 to the job's 3 pod(s)",
        ),
        (
            {"queue": "q", "minAvailable": 0},
            "0 has no equivalent: a gang's minimum is from 1 to the job's 3 pod(s)",
        ),
    ):
        migration = migrate_one(pytorchjob({"runPolicy": {"schedulingPolicy": policy}}))
        assert contract.MIN_AVAILABLE not in job_wide(migration)
        assert f"spec.runPolicy.schedulingPolicy.minAvailable: {note}" in migration.notes


def test_an_elastic_jobs_gang_minimum_is_its_minimum_of_nodes() -> None:
    spec = {
        "elasticPolicy": {"minReplicas": 2, "maxReplicas": 4},
        "runPolicy": {"schedulingPolicy": {"queue": "q", "minAvailable": 2}},
    }
    migration = migrate_one(pytorchjob(spec, Worker={"replicas": 3, "template": template()}))
    assert job_wide(migration)[contract.ELASTIC] == "2:4"
    assert not [n for n in migration.notes if "minAvailable" in n]
    # A gang smaller than the elastic minimum says so itself.
    smaller = dict(spec, runPolicy={"schedulingPolicy": {"queue": "q", "minAvailable": 1}})
    migration = migrate_one(pytorchjob(smaller, Worker={"replicas": 3, "template": template()}))
    assert job_wide(migration)[contract.MIN_AVAILABLE] == "1"
    assert not [n for n in migration.notes if "minAvailable" in n]


def test_restart_policies_that_differ_per_replica_type_keep_the_first_roles_with_a_note() -> None:
    migration = migrate_one(
        pytorchjob(
            Master={"replicas": 1, "restartPolicy": "ExitCode", "template": template()},
            Worker={"replicas": 1, "restartPolicy": "Never", "template": template()},
        )
    )
    assert job_wide(migration) == {
        contract.RESTART_POLICY: "ExitCode",
        contract.ROLES: "master,worker",
    }
    assert migration.notes == [
        "spec.pytorchReplicaSpecs: restart policies differ per replica type (master: ExitCode, "
        "worker: Never); trainhook.io/restart-policy is one per job: 'ExitCode', the first role's",
        CPU_AUTO,
    ]


def test_a_statefulset_template_loses_a_restart_policy_the_api_server_would_refuse() -> None:
    migration = migrate_one(
        pytorchjob(
            {"elasticPolicy": {}},
            Worker={"replicas": 2, "template": template(restartPolicy="OnFailure")},
        )
    )
    (workload,) = migration.objects
    assert "restartPolicy" not in workload["spec"]["template"]["spec"]
    assert migration.notes[1].startswith(
        "spec.pytorchReplicaSpecs.Worker.template.spec.restartPolicy: 'OnFailure' → removed"
    )


def test_elastic_policy_maps_to_elastic_max_restarts_nproc_and_the_rendezvous_conf() -> None:
    elastic = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "maxRestarts": 5,
        "nProcPerNode": 2,
        "rdzvConf": [{"key": "join_timeout", "value": "600"}],
        "rdzvBackend": "etcd-v2",
    }
    migration = migrate_one(
        pytorchjob(
            {"elasticPolicy": elastic},
            Worker={"replicas": 2, "template": template()},
        )
    )
    assert job_wide(migration) == {
        contract.ELASTIC: "1:4",
        contract.MAX_RESTARTS: "5",
        contract.NPROC_PER_NODE: "2",
    }
    (workload,) = migration.objects
    assert workload["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "PET_RDZV_CONF", "value": "join_timeout=600"}
    ]
    assert migration.notes == [
        "spec.elasticPolicy.rdzvBackend: 'etcd-v2' → 'c10d': torchrun's own rendezvous on pod 0"
    ]
    (pod, _) = render_all(migration.objects).pods
    assert (pod.env["PET_NNODES"], pod.env["PET_MAX_RESTARTS"]) == ("1:4", "5")


@pytest.mark.parametrize(
    ("value", "annotation", "note"),
    [
        ("4", "4", None),
        ("auto", "auto", "'auto' → 1 process per pod: torchrun reads 'auto' on a pod without GPUs"),
        ("gpu", "auto", "'gpu' → 'auto'"),
        ("cpu", None, "'cpu' has no equivalent"),
    ],
)
def test_nproc_per_node(value: str, annotation: str | None, note: str | None) -> None:
    migration = migrate_one(pytorchjob({"nprocPerNode": value}))
    assert job_wide(migration).get(contract.NPROC_PER_NODE) == annotation
    assert [n for n in migration.notes if n.startswith("spec.nprocPerNode")] == (
        [] if note is None else [n for n in migration.notes if note in n]
    )


def test_nproc_per_node_auto_on_pods_with_gpus_is_trainhooks_auto_without_a_note() -> None:
    gpu = template()
    gpu["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": 4}}
    for spec in ({}, {"nprocPerNode": "auto"}):
        replicas = {"replicas": 1, "template": gpu}
        migration = migrate_one(pytorchjob(spec, Master=replicas, Worker=replicas))
        assert not [n for n in migration.notes if n.startswith("spec.nprocPerNode")]
        pods = render_all(migration.objects).pods
        assert [(p.env["PET_NPROC_PER_NODE"], p.env["WORLD_SIZE"]) for p in pods] == [
            ("4", "8"),
            ("4", "8"),
        ]


def test_a_pytorchjob_of_workers_only_not_elastic_is_refused_as_the_operator_cannot_run_it() -> (
    None
):
    assert refused(pytorchjob(Worker={"replicas": 2, "template": template()})) == (
        "spec.pytorchReplicaSpecs: Workers without a Master or an elasticPolicy: the "
        "training-operator gives their pods no MASTER_ADDR, RANK or WORLD_SIZE, so torchrun's "
        "nodes never meet; add a Master of one replica (rank 0) or an elasticPolicy"
    )


def test_lower_case_replica_types_are_the_operators_own_roles() -> None:
    migration = migrate_one(
        pytorchjob(
            master={"replicas": 1, "template": template()},
            worker={"replicas": 2, "template": template()},
        )
    )
    assert [(o["metadata"]["name"], o["spec"]["replicas"]) for o in migration.objects] == [
        ("pt-master", 1),
        ("pt-worker", 2),
    ]
    assert refused(
        pytorchjob(
            Master={"replicas": 1, "template": template()},
            master={"replicas": 1, "template": template()},
        )
    ) == (
        "spec.pytorchReplicaSpecs.master: a second master replica type; the operator keeps one "
        "of them"
    )


@pytest.mark.parametrize(
    ("api", "kind", "why"),
    [
        (
            "kubeflow.org/v1alpha2",
            "MPIJob",
            "an API version it does not read; rewrite the job as kubeflow.org/v1 or "
            "kubeflow.org/v2beta1 (the fields that moved are in its operator's upgrade notes)",
        ),
        (
            "kubeflow.org/v1beta2",
            "TFJob",
            "an API version it does not read; rewrite the job as kubeflow.org/v1 (the fields "
            "that moved are in its operator's upgrade notes)",
        ),
        (
            "leaderworkerset.x-k8s.io/v1",
            "LeaderWorkerSet",
            "a LeaderWorkerSet serves (a group of pods per replica, restarted as one), it is no "
            "training job that ends; label its pods' StatefulSets yourself if they train",
        ),
    ],
)
def test_an_operators_job_in_a_version_or_kind_migrate_does_not_read_is_refused_in_one_line(
    api: str, kind: str, why: str
) -> None:
    source = {"apiVersion": api, "kind": kind, "metadata": {"name": "j"}, "spec": {}}
    assert is_source(source)
    assert refused(source) == f"{kind} ({api}): not read by trainhook migrate: {why}"
    assert not is_source({"apiVersion": "kubeflow.org/v1beta1", "kind": "Experiment"})


def test_a_field_migrate_does_not_know_is_named_never_dropped_silently() -> None:
    source = pytorchjob({"somethingNew": {"a": 1}, "runPolicy": {"fancy": True}})
    source["extra"] = 1
    notes = migrate_one(source).notes
    for path in ("spec.somethingNew", "spec.runPolicy.fancy", "extra"):
        assert f"{path}: not a field trainhook migrate knows; not carried over" in notes


@pytest.mark.parametrize(
    ("source", "line"),
    [
        (
            {"apiVersion": "kubeflow.org/v1", "kind": "MXJob", "metadata": {"name": "x"}},
            "MXJob (kubeflow.org/v1): not a kind trainhook migrate reads (",
        ),
        (
            pytorchjob(Chief={"replicas": 1, "template": template()}),
            "spec.pytorchReplicaSpecs.Chief: unknown replica type for PyTorchJob (Master, Worker)",
        ),
        (
            pytorchjob({"runPolicy": {"cleanPodPolicy": "Sometimes"}}),
            "spec.runPolicy.cleanPodPolicy: invalid value 'Sometimes': All, Running or None",
        ),
        (
            pytorchjob({"runPolicy": {"backoffLimit": -1}}),
            "spec.runPolicy.backoffLimit: invalid value -1: a whole number >= 0",
        ),
        (
            pytorchjob(Worker={"replicas": 1, "template": {"spec": {}}}),
            "spec.pytorchReplicaSpecs.Worker.template.spec.containers: at least one container",
        ),
        (
            pytorchjob(Worker={"replicas": 1, "restartPolicy": "Maybe", "template": template()}),
            "spec.pytorchReplicaSpecs.Worker.restartPolicy: invalid value 'Maybe': OnFailure, "
            "ExitCode, Never or Always",
        ),
    ],
)
def test_what_cannot_work_is_refused_in_one_line(source: dict[str, Any], line: str) -> None:
    message = refused(source)
    assert message.startswith(line)
    assert "\n" not in message


@pytest.mark.parametrize(
    ("policy", "annotation", "note"),
    [
        ("Always", "All", None),
        ("OnCompletion", "All", None),
        # The operator's default: an empty policy cleans a completed job's pods.
        (None, "All", None),
        ("Never", "None", None),
        ("OnFailure", None, "'OnFailure' (clean failed jobs only) has no equivalent"),
        # Any other value the operator takes, and cleans no pod.
        ("OnFailed", None, "'OnFailed' is none of the operator's"),
    ],
)
def test_paddle_operator_clean_pod_policy(
    policy: str | None, annotation: str | None, note: str | None
) -> None:
    migration = migrate_one(paddle_operator(cleanPodPolicy=policy))
    assert job_wide(migration).get(contract.CLEAN_POD_POLICY) == annotation
    assert job_wide(migration)[contract.PORT] == "36000"
    assert [n for n in migration.notes if n.startswith("spec.cleanPodPolicy")] == (
        [] if note is None else [n for n in migration.notes if note in n]
    )
    assert len([n for n in migration.notes if n.startswith("spec.cleanPodPolicy")]) == (
        note is not None
    )


def test_a_job_whose_workloads_the_webhook_would_refuse_is_refused_with_the_webhooks_line() -> None:
    source = pytorchjob(
        {"runPolicy": {"schedulingPolicy": {"queue": "bad queue!"}}},
    )
    line = refused(source)
    assert line.startswith("the workloads it becomes would be refused: trainhook.io/queue: ")
    assert "'bad queue!'" in line


def test_paddle_operator_host_network_is_refused() -> None:
    assert refused(paddle_operator(intranet="Host")).startswith(
        "spec.intranet: 'Host' cannot be migrated"
    )


def volcano(
    plugins: dict[str, list[str]],
    tasks: list[dict[str, Any]],
    namespace: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    metadata = {"name": "vc"} if namespace is None else {"name": "vc", "namespace": namespace}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": metadata,
        "spec": {"plugins": plugins, "tasks": tasks, **spec},
    }


def task(name: str, replicas: int, **extra: Any) -> dict[str, Any]:
    return {"name": name, "replicas": replicas, "template": template(), **extra}


def test_a_volcano_mpi_plugin_names_the_roles_and_the_launcher_runs_as_an_indexed_job() -> None:
    migration = migrate_one(
        volcano(
            {"mpi": ["--master=head", "--worker=node"], "ssh": []},
            [task("head", 1), task("node", 2)],
            policies=[{"event": "PodFailed", "action": "RestartJob"}],
            maxRetry=2,
            queue="q1",
        )
    )
    assert [
        (o["kind"], o["metadata"]["name"], o["metadata"]["labels"][contract.ROLE])
        for o in migration.objects
    ] == [
        ("StatefulSet", "vc-node", "worker"),
        ("Job", "vc-head", "launcher"),
    ]
    assert job_wide(migration) == {
        contract.RESTART_POLICY: "RestartJob",
        contract.BACKOFF_LIMIT: "2",
        contract.SCHEDULER: "volcano",
        contract.QUEUE: "q1",
        contract.COMPAT: "volcano",  # the mpi plugin's MPI_HOST
        contract.ROLES: "launcher,worker",
    }
    assert migration.notes == []


RESTART_JOB = [{"event": "PodFailed", "action": "RestartJob"}]


@pytest.mark.parametrize(
    ("given", "policies", "limit", "notes"),
    [
        # Volcano's admission webhook gives an absent maxRetry 3: three whole-job restarts.
        ({}, RESTART_JOB, "3", []),
        (
            {"maxRetry": 0},
            RESTART_JOB,
            "3",
            ["spec.maxRetry: 0 → 3: Volcano's admission takes 0 as unset and makes it 3"],
        ),
        ({"maxRetry": 5}, RESTART_JOB, "5", []),
        # Without a policy that restarts the job, Volcano's default budgets nothing: containers
        # restart as long as the kubelet restarts them, and so they do under Trainhook.
        ({}, [], None, []),
        ({"maxRetry": 2}, [], "2", []),
    ],
)
def test_volcanos_max_retry_is_the_backoff_limit_and_its_default_of_3_budgets_job_restarts(
    given: dict[str, Any], policies: list[dict[str, str]], limit: str | None, notes: list[str]
) -> None:
    migration = migrate_one(
        volcano({"pytorch": []}, [task("master", 1), task("worker", 2)], policies=policies, **given)
    )
    assert job_wide(migration).get(contract.BACKOFF_LIMIT) == limit
    assert migration.notes == notes


@pytest.mark.parametrize(
    ("framework", "task_policies", "job_policies", "rules", "notes"),
    [
        # An eviction restarts the job, as Volcano's examples ask; it counts against maxRetry.
        (
            "pytorch",
            [],
            [{"event": "PodEvicted", "action": "RestartJob"}],
            "disrupted=any -> restart-job",
            [],
        ),
        # A task's policies are tried before the job's, so its rules come first.
        (
            "tensorflow",
            [
                {"exitCode": 3, "action": "RestartTask"},
                {"event": "PodEvicted", "action": "AbortJob"},
            ],
            [{"events": ["PodEvicted", "PodFailed"], "action": "RestartJob"}],
            "exit=3 role=worker -> restart-role\n"
            "disrupted=any role=worker -> fail\n"
            "disrupted=any -> restart-job",
            [],
        ),
        # PyTorch without elastic cannot take one restarted pod back.
        (
            "pytorch",
            [{"event": "PodEvicted", "action": "RestartPod"}],
            [],
            None,
            [
                "spec.tasks[1].policies[0]: PodEvicted → RestartPod has no equivalent: pytorch "
                "does not take a restarted pod back; restart the job instead"
            ],
        ),
        (
            "pytorch",
            [],
            [{"event": "Unknown", "action": "RestartJob"}],
            None,
            [
                "spec.policies[0]: Unknown → RestartJob has no equivalent: "
                "trainhook.io/restart-policy and trainhook.io/failure-policy decide what a "
                "failure does"
            ],
        ),
    ],
)
def test_volcanos_eviction_and_exit_code_policies_become_failure_rules_in_volcanos_order(
    framework: str,
    task_policies: list[dict[str, Any]],
    job_policies: list[dict[str, Any]],
    rules: str | None,
    notes: list[str],
) -> None:
    roles = ("master", "worker") if framework == "pytorch" else ("ps", "worker")
    source = volcano(
        {framework: []},
        [task(roles[0], 1), task(roles[1], 2, policies=task_policies)],
        policies=job_policies,
    )
    migration = migrate_one(source)
    assert job_wide(migration).get(contract.FAILURE_POLICY) == rules
    assert migration.notes == notes
    # Volcano budgets the restarts its policies make: maxRetry's default of 3.
    assert job_wide(migration).get(contract.BACKOFF_LIMIT) == (
        "3" if rules and "restart-job" in rules else None
    )
    render_all(migration.objects)  # what migrate writes, the webhook admits


def test_volcano_env_and_svc_variables_and_files_are_named_after_the_tasks_not_the_roles() -> None:
    source = volcano({"env": [], "svc": []}, [task("param-ps", 1), task("worker", 2)])
    migration = migrate_one(source, "tensorflow")
    assert job_wide(migration) == {
        contract.SCHEDULER: "volcano",
        contract.COMPAT: "volcano",
        contract.ROLES: "ps,worker",
    }
    assert migration.notes == []
    pods = {p.name: p for p in render_all(migration.objects).pods}
    worker = pods["vc-worker-1"]
    assert (worker.env["VK_TASK_INDEX"], worker.env["VC_TASK_INDEX"]) == ("1", "1")
    assert worker.env["VC_WORKER_NUM"] == "2"
    assert worker.env["VC_PARAM_PS_NUM"] == "1"
    assert worker.env["VC_PARAM_PS_HOSTS"] == "vc-param-ps-0.vc.default.svc"
    assert "VC_PS_NUM" not in worker.env
    assert pod_files(worker)["/etc/volcano/param_ps.host"] == "vc-param-ps-0.vc.default.svc"
    assert sorted(pod_files(worker)) == ["/etc/volcano/param_ps.host", "/etc/volcano/worker.host"]


def test_a_volcano_mpi_job_of_ssh_and_svc_is_an_mpi_job_whose_script_finds_its_task_files() -> None:
    # Volcano's own MPI example: `cat /etc/volcano/mpiworker.host`, then mpiexec over ssh.
    source = volcano(
        {"ssh": [], "svc": []},
        [task("mpimaster", 1), task("mpiworker", 2)],
    )
    migration = migrate_one(source)
    assert [(o["kind"], o["metadata"]["name"]) for o in migration.objects] == [
        ("StatefulSet", "vc-mpiworker"),
        ("Job", "vc-mpimaster"),
    ]
    assert {o["metadata"]["labels"][contract.FRAMEWORK] for o in migration.objects} == {"mpi"}
    assert migration.notes == [
        "spec.plugins.ssh: the job is an mpi job (a launcher task that reaches its worker task "
        "over SSH): its pods get the job's SSH keys at /root/.ssh as Volcano gave them, the "
        "launcher runs to completion as an Indexed Job; --framework generic keeps it generic, "
        "with the keys"
    ]
    pods = {p.name: p for p in render_all(migration.objects).pods}
    for pod in pods.values():
        files = pod_files(pod)
        assert files["/etc/volcano/mpiworker.host"] == (
            "vc-mpiworker-0.vc.default.svc\nvc-mpiworker-1.vc.default.svc"
        )
        assert files["/etc/volcano/mpimaster.host"] == "vc-mpimaster-0.vc.default.svc"
        assert files["/root/.ssh/id_rsa"] == "<Secret vc-ssh: id_rsa>"
        assert files["/root/.ssh/authorized_keys"] == "<Secret vc-ssh: authorized_keys>"
        assert pod.env["VC_MPIWORKER_NUM"] == "2"


def test_a_volcano_ssh_plugin_on_a_job_that_is_not_mpi_gives_its_pods_the_jobs_keys() -> None:
    migration = migrate_one(volcano({"ssh": [], "svc": []}, [task("pod", 2)]))
    assert {o["metadata"]["labels"][contract.FRAMEWORK] for o in migration.objects} == {"generic"}
    assert job_wide(migration)[contract.SSH_KEYS] == "true"
    assert migration.notes == []
    for pod in render_all(migration.objects).pods:
        files = pod_files(pod)
        assert files["/root/.ssh/id_rsa"] == "<Secret vc-ssh: id_rsa>"
        assert files["/root/.ssh/authorized_keys"] == "<Secret vc-ssh: authorized_keys>"


def test_a_volcano_ssh_plugins_key_path_on_a_job_that_is_not_mpi_is_where_the_keys_go() -> None:
    plugins = {"ssh": ["--ssh-key-file-path=/home/ms/.ssh"]}
    migration = migrate_one(volcano(plugins, [task("pod", 2)]))
    assert job_wide(migration)[contract.SSH_AUTH_MOUNT_PATH] == "/home/ms/.ssh"
    files = pod_files(render_all(migration.objects).pods[0])
    assert files["/home/ms/.ssh/id_rsa"] == "<Secret vc-ssh: id_rsa>"


def test_volcanos_svc_plugin_network_policy_is_written_after_the_workloads() -> None:
    migration = migrate_one(volcano({"svc": []}, [task("worker", 2)], namespace="ml"))
    job_pods = {"matchLabels": {contract.JOB: "vc"}}
    assert migration.others == [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": {"name": "vc", "namespace": "ml"},
            "spec": {
                "podSelector": job_pods,
                "ingress": [{"from": [{"podSelector": job_pods}]}],
                "policyTypes": ["Ingress"],
            },
        }
    ]
    kubernetes_validate.validate(migration.others[0], kubernetes_validate.latest_version(), True)
    # The framework plugins imply svc, as Volcano's admission adds it to them.
    implied = migrate_one(volcano({"pytorch": []}, [task("master", 1), task("worker", 1)]))
    assert [o["kind"] for o in implied.others] == ["NetworkPolicy"]
    assert job_wide(implied)[contract.COMPAT] == "volcano"


def test_volcanos_svc_flags_disable_the_network_policy_or_are_trainhooks_own_service() -> None:
    flags = ["--publish-not-ready-addresses", "--disable-network-policy=true", "--other=1"]
    migration = migrate_one(volcano({"svc": flags}, [task("worker", 2)]))
    assert migration.others == []
    assert migration.notes == ["spec.plugins.svc: --other=1 has no equivalent"]


def test_volcanos_ssh_key_file_path_is_where_an_mpi_jobs_keys_are_mounted() -> None:
    source = volcano(
        {"ssh": ["--ssh-key-file-path=/home/mpi/.ssh"], "svc": []},
        [task("mpimaster", 1), task("mpiworker", 1)],
    )
    source["spec"]["tasks"][0]["template"]["spec"]["securityContext"] = {
        "runAsUser": 1000,
        "fsGroup": 1000,
    }
    source["spec"]["tasks"][1]["template"]["spec"]["securityContext"] = {
        "runAsUser": 1000,
        "fsGroup": 1000,
    }
    migration = migrate_one(source)
    assert job_wide(migration)[contract.SSH_AUTH_MOUNT_PATH] == "/home/mpi/.ssh"
    assert "/home/mpi/.ssh/id_rsa" in pod_files(render_all(migration.objects).pods[0])


def test_a_volcano_task_whose_completion_ends_the_job_is_the_success_policy_of_its_role() -> None:
    completes = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    source = volcano({"env": [], "svc": []}, [task("ps", 1), task("worker", 2, policies=completes)])
    migration = migrate_one(source)
    assert job_wide(migration)[contract.SUCCESS_POLICY] == "role=worker"
    assert migration.notes == []
    # TensorFlow's own rule is worker 0's success; Volcano's task waits for every worker.
    told = migrate_one(source, "tensorflow")
    assert job_wide(told)[contract.SUCCESS_POLICY] == "role=worker"
    # Where the framework's own rule is the task's completion, it needs no policy.
    chief = volcano({"tensorflow": []}, [task("chief", 1, policies=completes), task("worker", 2)])
    assert contract.SUCCESS_POLICY not in job_wide(migrate_one(chief))


def test_a_volcano_master_task_of_a_generic_job_ends_it_as_rank_0() -> None:
    completes = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    source = volcano({"svc": []}, [task("master", 1, policies=completes), task("worker", 2)])
    assert job_wide(migrate_one(source))[contract.SUCCESS_POLICY] == "rank0"


def test_two_volcano_tasks_that_each_end_the_job_keep_the_first_and_note_the_second() -> None:
    completes = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    source = volcano(
        {"svc": []},
        [task("eval", 1, policies=completes), task("worker", 2, policies=completes)],
    )
    migration = migrate_one(source)
    assert job_wide(migration)[contract.SUCCESS_POLICY] == "rank0"
    assert migration.notes == [
        "spec.tasks[1].policies[0]: TaskCompleted → CompleteJob has no equivalent: "
        "trainhook.io/success-policy is 'rank0' already: Trainhook ends a job on one success "
        "rule, Volcano on whichever task completes first"
    ]


def test_a_volcano_task_that_is_no_role_of_the_framework_is_refused() -> None:
    source = volcano({"pytorch": []}, [task("master", 1), task("helper", 1)])
    assert refused(source) == (
        "spec.tasks[1].name: task 'helper' is not a role of pytorch (master, worker); name the "
        "task after its role or name it in the plugin's flags"
    )


def test_a_volcano_job_without_a_framework_plugin_is_generic_unless_told() -> None:
    source = volcano({"svc": []}, [task("ps", 1), task("worker", 2)])
    assert {o["metadata"]["labels"][contract.FRAMEWORK] for o in migrate_one(source).objects} == {
        "generic"
    }
    told = migrate_one(source, "tensorflow")
    assert {o["metadata"]["labels"][contract.FRAMEWORK] for o in told.objects} == {"tensorflow"}
    assert refused(volcano({"pytorch": []}, [task("master", 1)]), "mpi") == (
        "spec.plugins.pytorch: the job is pytorch, not mpi"
    )


def test_a_volcano_network_topology_says_which_placement_annotations_carry_it() -> None:
    topology = {"mode": "hard", "highestTierAllowed": 2}
    migration = migrate_one(
        volcano({"svc": []}, [task("worker", 2)], networkTopology=topology), "pytorch"
    )
    assert migration.notes == [
        "spec.networkTopology: {'mode': 'hard', 'highestTierAllowed': 2} is not carried over: "
        "set trainhook.io/placement-topology (the node label that tier's HyperNodes group nodes "
        "by), trainhook.io/placement-tier (the tier) and trainhook.io/placement (hard: required, "
        "soft: preferred) on every workload"
    ]


def test_a_volcano_jobs_smaller_gang_is_its_min_available_in_the_podgroup() -> None:
    source = volcano({"pytorch": []}, [task("master", 1), task("worker", 3)], minAvailable=2)
    migration = migrate_one(source)
    assert job_wide(migration)[contract.MIN_AVAILABLE] == "2"
    assert migration.notes == []
    [podgroup] = render_all(migration.objects).podgroups
    assert podgroup["spec"]["minMember"] == 2


def test_a_paddle_operator_jobs_smaller_gang_is_its_min_available() -> None:
    source = paddle_operator(schedulingPolicy={"queue": "q", "minAvailable": 1})
    migration = migrate_one(source)
    assert job_wide(migration)[contract.MIN_AVAILABLE] == "1"
    assert not [n for n in migration.notes if "minAvailable" in n]


def trainjob(**trainer: Any) -> dict[str, Any]:
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "TrainJob",
        "metadata": {"name": "tj", "namespace": "ml"},
        "spec": {
            "runtimeRef": {"name": "rt", "kind": "ClusterTrainingRuntime"},
            "trainer": {"numNodes": 2, "command": ["torchrun", "train.py"], **trainer},
        },
    }


def runtime(policy: dict[str, Any], *steps: dict[str, Any]) -> dict[str, Any]:
    node = {
        "name": "node",
        "template": {
            "metadata": {"labels": {"trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
            "spec": {"template": {"spec": {"containers": [{"name": "node", "image": "t:1"}]}}},
        },
    }
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "rt"},
        "spec": {
            "mlPolicy": {"numNodes": 1, **policy},
            "template": {"spec": {"replicatedJobs": [*steps, node]}},
        },
    }


def migrated_trainjob(source: dict[str, Any], *documents: dict[str, Any]) -> Migration:
    (migration,) = migrate([source, *documents])
    return migration


def test_a_trainjob_on_a_torch_runtime_is_one_indexed_job_of_its_nodes_named_as_trainers() -> None:
    cpus = {"requests": {"cpu": "2"}, "limits": {"cpu": "4"}}
    migration = migrated_trainjob(trainjob(resourcesPerNode=cpus), runtime({"torch": {}}))
    (workload,) = migration.objects
    assert (workload["kind"], workload["metadata"]["name"]) == ("Job", "tj-node-0")
    assert workload["spec"]["completions"] == 2
    assert migration.notes == []
    pods = render_all(migration.objects).pods
    assert [p.name for p in pods] == ["tj-node-0-0", "tj-node-0-1"]
    # Trainer's auto on pods without GPUs: the CPUs the node requests.
    assert [
        {k: p.env[k] for k in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK", "WORLD_SIZE")}
        for p in pods
    ] == [
        {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0", "WORLD_SIZE": "4"},
        {"PET_NNODES": "2", "PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "1", "WORLD_SIZE": "4"},
    ]
    assert pods[1].env["PET_MASTER_ADDR"] == "tj-node-0-0.tj.ml.svc"
    assert pods[1].env["PET_MASTER_PORT"] == "29500"
    assert pods[0].pod["spec"]["containers"][0]["command"] == ["torchrun", "train.py"]


def test_a_trainjob_with_gpus_runs_one_process_per_gpu_as_torchruns_auto() -> None:
    gpus = {"limits": {"nvidia.com/gpu": 4}}
    migration = migrated_trainjob(trainjob(resourcesPerNode=gpus), runtime({"torch": {}}))
    assert [p.env["PET_NPROC_PER_NODE"] for p in render_all(migration.objects).pods] == ["4", "4"]


def test_a_trainjob_on_a_jax_runtime_gets_trainers_jax_variables() -> None:
    migration = migrated_trainjob(trainjob(), runtime({"jax": {}}))
    pod = render_all(migration.objects).pods[1]
    assert {k: pod.env[k] for k in ("JAX_NUM_PROCESSES", "JAX_PROCESS_ID")} == {
        "JAX_NUM_PROCESSES": "2",
        "JAX_PROCESS_ID": "1",
    }
    assert pod.env["JAX_COORDINATOR_ADDRESS"] == "tj-node-0-0.tj.ml.svc:29500"


def test_a_trainjobs_initializer_steps_are_notes_and_a_missing_runtime_is_refused() -> None:
    initializer = {"name": "dataset-initializer", "template": {"spec": {}}}
    migration = migrated_trainjob(trainjob(), runtime({"torch": {}}, initializer))
    assert migration.notes == [
        "ClusterTrainingRuntime/rt.spec.template.spec.replicatedJobs[0]: 'dataset-initializer' "
        "has no equivalent: Trainhook runs the trainer's pods only; run this step as an init "
        "container of the trainer, or as a Job of its own"
    ]
    assert refused(trainjob()) == (
        "spec.runtimeRef: ClusterTrainingRuntime rt is not in the input: give its manifest with "
        "the TrainJob (kubectl get clustertrainingruntimes NAME -o yaml)"
    )


def jobset_source(*replicated: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {"replicatedJobs": list(replicated), **spec},
    }


def replicated_job(name: str, jobs: int, pods: int) -> dict[str, Any]:
    job_spec = {"completions": pods, "parallelism": pods, "template": template()}
    return {"name": name, "replicas": jobs, "template": {"spec": job_spec}}


def test_each_job_of_a_jobset_is_an_indexed_job_of_its_name_and_a_role_of_a_generic_job() -> None:
    migration = migrate_one(
        jobset_source(replicated_job("driver", 1, 1), replicated_job("slice", 2, 2))
    )
    assert [
        (o["metadata"]["name"], o["metadata"]["labels"][contract.ROLE], o["spec"]["completions"])
        for o in migration.objects
    ] == [("js-driver-0", "driver", 1), ("js-slice-0", "slice-0", 2), ("js-slice-1", "slice-1", 2)]
    assert migration.notes == []
    pods = {p.name: p.pod["metadata"]["annotations"] for p in render_all(migration.objects).pods}
    assert list(pods) == [
        "js-driver-0-0",
        "js-slice-0-0",
        "js-slice-0-1",
        "js-slice-1-0",
        "js-slice-1-1",
    ]
    assert pods["js-slice-1-0"]["jobset.sigs.k8s.io/job-global-index"] == "2"
    assert pods["js-slice-1-0"]["jobset.sigs.k8s.io/global-replicas"] == "3"


def test_a_jobsets_success_and_failure_policies_are_the_jobs_where_they_can_be() -> None:
    migration = migrate_one(
        jobset_source(
            replicated_job("driver", 1, 1),
            replicated_job("workers", 1, 2),
            successPolicy={"operator": "All", "targetReplicatedJobs": ["driver"]},
            failurePolicy={"maxRestarts": 3},
        )
    )
    assert {k: v for k, v in job_wide(migration).items() if k != contract.ROLES} == {
        contract.SUCCESS_POLICY: "role=driver",
        contract.RESTART_POLICY: "RestartJob",
        contract.BACKOFF_LIMIT: "3",
    }
    assert refused(
        jobset_source(
            {
                "name": "w",
                "template": {"spec": {"completions": 4, "parallelism": 2, "template": template()}},
            }
        )
    ) == (
        "spec.replicatedJobs[0].template.spec.parallelism: 2 of 4 completions: a training Job "
        "runs every pod at once"
    )


def mpi_runtime(**mpi: Any) -> dict[str, Any]:
    """A runtime of Trainer's MPI shape (manifests/base/runtimes/deepspeed_distributed.yaml):
    node pods serving SSH as mpiuser, a launcher step that is the trainer."""
    user = {"securityContext": {"runAsUser": 1000}}
    node = {"name": "node", "image": "ds:1", "command": ["/usr/sbin/sshd"], "args": ["-De"], **user}
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": "rt"},
        "spec": {
            "mlPolicy": {
                "numNodes": 1,
                "mpi": {
                    "numProcPerNode": 1,
                    "mpiImplementation": "OpenMPI",
                    "sshAuthMountPath": "/home/mpiuser/.ssh",
                    **mpi,
                },
            },
            "template": {
                "spec": {
                    "network": {"publishNotReadyAddresses": True},
                    "successPolicy": {"operator": "All", "targetReplicatedJobs": ["launcher"]},
                    "replicatedJobs": [
                        {
                            "name": "node",
                            "template": {
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "securityContext": {"fsGroup": 1000},
                                            "containers": [node],
                                        }
                                    }
                                }
                            },
                        },
                        {
                            "name": "launcher",
                            "dependsOn": [{"name": "node", "status": "Ready"}],
                            "template": {
                                "metadata": {
                                    "labels": {
                                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"
                                    }
                                },
                                "spec": {
                                    "template": {
                                        "spec": {
                                            "securityContext": {"fsGroup": 1000},
                                            "containers": [
                                                {"name": "node", "image": "ds:1", **user}
                                            ],
                                        }
                                    }
                                },
                            },
                        },
                    ],
                }
            },
        },
    }


# What Trainer's MPI plugin (pkg/runtime/framework/plugins/mpi/mpi.go, EnforceMLPolicy) gives
# the launcher's node container with OpenMPI; the slots are numProcPerNode.
TRAINER_MPI_ENV = {
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_orte_set_default_slots": "4",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
}
LAUNCHER_WAITS = (
    "ClusterTrainingRuntime/rt.spec.template.spec.replicatedJobs[1].dependsOn: "
    "[{'name': 'node', 'status': 'Ready'}]: the launcher starts with the nodes; mpirun retries "
    "its SSH connections (ConnectionAttempts=10) until their sshd listens"
)


def test_a_trainjob_on_an_mpi_runtime_is_a_launcher_and_its_nodes_with_trainers_mpi_env() -> None:
    source = trainjob(command=["mpirun", "python3", "train.py"], numProcPerNode=4)
    migration = migrated_trainjob(source, mpi_runtime())
    assert [(o["kind"], o["metadata"]["name"]) for o in migration.objects] == [
        ("Job", "tj-launcher-0"),
        ("Job", "tj-node-0"),
    ]
    assert migration.notes == [LAUNCHER_WAITS]
    pods = {p.name: p for p in render_all(migration.objects).pods}
    assert sorted(pods) == ["tj-launcher-0-0", "tj-node-0-0", "tj-node-0-1"]
    launcher = pods["tj-launcher-0-0"]
    assert {k: launcher.env[k] for k in TRAINER_MPI_ENV} == TRAINER_MPI_ENV
    assert launcher.pod["metadata"]["annotations"][contract.HOSTFILE] == (
        "tj-node-0-0.tj.ml.svc slots=4\ntj-node-0-1.tj.ml.svc slots=4\n"
    )
    container = launcher.pod["spec"]["containers"][0]
    assert container["command"] == ["mpirun", "python3", "train.py"]
    # The job's SSH keys where Trainer mounts them: the runtime's sshAuthMountPath, every pod.
    for pod in pods.values():
        mounts = pod.pod["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "mpi-ssh", "mountPath": "/home/mpiuser/.ssh", "readOnly": True} in mounts
    assert pods["tj-node-0-1"].pod["spec"]["containers"][0]["command"] == ["/usr/sbin/sshd"]


def test_an_mpi_runtime_takes_one_slot_per_gpu_as_trainer_does_when_its_nodes_have_several() -> (
    None
):
    gpus = {"limits": {"nvidia.com/gpu": 8}}
    migration = migrated_trainjob(trainjob(resourcesPerNode=gpus), mpi_runtime())
    launcher = {p.name: p for p in render_all(migration.objects).pods}["tj-launcher-0-0"]
    assert launcher.env["OMPI_MCA_orte_set_default_slots"] == "8"


def test_a_launcher_that_runs_as_a_node_becomes_one_worker_more_with_a_note() -> None:
    migration = migrated_trainjob(trainjob(numNodes=3), mpi_runtime(runLauncherAsNode=True))
    assert migration.notes == [
        LAUNCHER_WAITS,
        "ClusterTrainingRuntime/rt.spec.mlPolicy.mpi.runLauncherAsNode: true → the launcher "
        "runs no ranks: Trainer's 3 hosts (the launcher and 2 nodes) are 3 worker pods of the "
        "node step, and the launcher is one pod more, which keeps the trainer's resources",
    ]
    pods = {p.name: p for p in render_all(migration.objects).pods}
    hostfile = pods["tj-launcher-0-0"].pod["metadata"]["annotations"][contract.HOSTFILE]
    assert hostfile.splitlines() == [f"tj-node-0-{i}.tj.ml.svc slots=1" for i in range(3)]


def test_an_mpi_runtime_without_a_node_step_is_refused_in_one_line() -> None:
    runtime_without_nodes = mpi_runtime()
    del runtime_without_nodes["spec"]["template"]["spec"]["replicatedJobs"][0]
    with pytest.raises(MigrationError) as error:
        migrated_trainjob(trainjob(), runtime_without_nodes)
    assert str(error.value) == (
        "ClusterTrainingRuntime/rt.spec.template.spec.replicatedJobs: no node step (a "
        "replicated Job named node): Trainer's MPI runtime runs its ranks there"
    )
