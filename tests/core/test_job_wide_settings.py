"""A job is one thing: settings its pods depend on mean the same for every pod, or are refused."""

import json
from typing import Any

import pytest

from tests.support.builders import bare_pod, env, pods, statefulset
from webhook.core.errors import TrainhookError
from webhook.core.job.settings import JobSettings, Settings, job_settings
from webhook.core.mutation.admit import Found, Request, admit
from webhook.core.render import RenderError, render_all

VOLCANO = {"trainhook.io/scheduler": "volcano"}


def pytorch(master: dict[str, str] | None = None, worker: dict[str, str] | None = None) -> Any:
    return (
        statefulset("pt-master", "pytorch", role="master", job="pt", annotations=master),
        statefulset(
            "pt-worker", "pytorch", role="worker", job="pt", replicas=2, annotations=worker
        ),
    )


def test_a_port_on_the_master_only_is_the_master_port_of_every_pod() -> None:
    rendered = env(*pytorch(master={"trainhook.io/port": "29500"}))

    assert {name: e["MASTER_PORT"] for name, e in rendered.items()} == {
        "pt-master-0": "29500",
        "pt-worker-0": "29500",
        "pt-worker-1": "29500",
    }
    assert {e["PET_MASTER_PORT"] for e in rendered.values()} == {"29500"}


def test_roles_on_different_ports_record_each_port_in_the_hosts_stamp() -> None:
    master, _ = pytorch(master={"trainhook.io/port": "29500"})
    rendering = render_all(list(pytorch(master={"trainhook.io/port": "29500"})))

    stamps = [
        w["spec"]["template"]["metadata"]["annotations"]["trainhook.io/hosts"]
        for w in rendering.workloads
    ]
    assert (
        stamps
        == [
            '{"master":{"pod":"pt-master","start":0,"service":"pt","port":29500},'
            '"worker":{"pod":"pt-worker","start":0,"service":"pt","port":23456}}'
        ]
        * 2
    )
    assert "trainhook.io/hosts" not in master["metadata"].get("annotations", {})


def test_a_tensorflow_port_on_ps_only_lists_every_role_on_its_own_port_for_every_pod() -> None:
    chief = statefulset("tf-chief", "tensorflow", role="chief", job="tf")
    ps = statefulset(
        "tf-ps", "tensorflow", role="ps", job="tf", annotations={"trainhook.io/port": "5000"}
    )
    worker = statefulset("tf-worker", "tensorflow", role="worker", job="tf", replicas=2)

    configs = {name: json.loads(e["TF_CONFIG"]) for name, e in env(chief, ps, worker).items()}

    assert {json.dumps(c["cluster"]) for c in configs.values()} == {
        json.dumps(
            {
                "chief": ["tf-chief-0.tf.default.svc:2222"],
                "ps": ["tf-ps-0.tf.default.svc:5000"],
                "worker": ["tf-worker-0.tf.default.svc:2222", "tf-worker-1.tf.default.svc:2222"],
            }
        )
    }


@pytest.mark.parametrize(
    ("framework", "coordinator", "other", "wanted"),
    [
        ("xgboost", "master", "worker", {"MASTER_PORT": "9000", "WORKER_PORT": "9999"}),
        ("mindspore", "scheduler", "worker", {"MS_SCHED_PORT": "9000"}),
    ],
)
def test_every_pod_reaches_the_coordinator_on_the_coordinators_port(
    framework: str, coordinator: str, other: str, wanted: dict[str, str]
) -> None:
    short = framework[:2]
    rendered = env(
        statefulset(
            f"{short}-{coordinator}",
            framework,
            role=coordinator,
            job=short,
            annotations={"trainhook.io/port": "9000"},
        ),
        statefulset(f"{short}-{other}", framework, role=other, job=short),
    )

    for name, variables in rendered.items():
        assert {key: variables[key] for key in wanted} == wanted, name


def test_paddle_pods_point_at_the_master_on_its_port_and_list_workers_on_theirs() -> None:
    rendered = env(
        statefulset(
            "pd-master",
            "paddle",
            role="master",
            job="pd",
            annotations={"trainhook.io/port": "9000"},
        ),
        statefulset("pd-worker", "paddle", role="worker", job="pd"),
    )

    assert rendered["pd-worker-0"]["PADDLE_MASTER"] == "pd-master-0.pd.default.svc:9000"
    assert rendered["pd-master-0"]["PADDLE_MASTER"] == "127.0.0.1:9000"
    assert rendered["pd-worker-0"]["PADDLE_CURRENT_ENDPOINT"] == (
        "pd-worker-0.pd.default.svc:36543"
    )


def test_a_master_running_fewer_processes_than_its_workers_counts_every_process_once() -> None:
    rendered = env(*pytorch(worker={"trainhook.io/gpus": "2"}))

    assert {name: (e["WORLD_SIZE"], e["RANK"]) for name, e in rendered.items()} == {
        "pt-master-0": ("5", "0"),
        "pt-worker-0": ("5", "1"),
        "pt-worker-1": ("5", "3"),
    }


SCHEDULER_ON_WORKERS = (
    "trainhook.io/scheduler: job 'pt' is one gang, so every role must say the same: not set on "
    "StatefulSet pt-master but 'volcano' on StatefulSet pt-worker"
)


def test_a_scheduler_on_the_workers_only_is_refused_naming_both_roles() -> None:
    master, worker = pytorch(worker=VOLCANO)

    with pytest.raises(TrainhookError) as caught:
        admit(Request("StatefulSet", "CREATE", worker, "default"), Found([master]))

    assert (str(caught.value), caught.value.status_code) == (SCHEDULER_ON_WORKERS, 403)


def test_render_refuses_the_scheduler_on_the_workers_only_with_the_same_line() -> None:
    with pytest.raises(RenderError) as caught:
        render_all(list(pytorch(worker=VOLCANO)))

    assert str(caught.value) == SCHEDULER_ON_WORKERS


def test_an_update_that_leaves_roles_disagreeing_is_admitted_with_the_line_as_a_warning() -> None:
    """An update is how roles are brought back in line, one workload at a time."""
    master, worker = pytorch(master=VOLCANO, worker=VOLCANO)
    del worker["metadata"]["annotations"]

    outcome = admit(Request("StatefulSet", "UPDATE", worker, "default"), Found([master]))

    assert outcome is not None
    assert outcome.warnings == [
        "trainhook.io/scheduler: the roles of job pt disagree; set the same value on every "
        "workload of the job"
    ]


def test_every_warning_fits_the_120_characters_kubectl_and_argo_cd_show() -> None:
    job = "j" * 63
    master = statefulset("m" * 60, "pytorch", role="master", job=job, annotations=VOLCANO)
    worker = statefulset("w" * 60, "pytorch", role="worker", job=job)
    worker["spec"]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "MASTER_PORT", "value": "1"}
    ]
    worker["spec"]["template"]["spec"]["containers"][0]["name"] = "c" * 63

    outcome = admit(Request("StatefulSet", "UPDATE", worker, "default"), Found([master]))

    assert outcome is not None and outcome.warnings
    assert all(len(warning) <= 120 for warning in outcome.warnings), outcome.warnings


@pytest.mark.parametrize(
    ("master", "worker", "line"),
    [
        (
            {**VOLCANO, "trainhook.io/queue": "research"},
            VOLCANO,
            "trainhook.io/queue: job 'pt' is one gang, so every role must say the same: "
            "'research' on StatefulSet pt-master but 'default' on StatefulSet pt-worker",
        ),
        (
            {"trainhook.io/elastic": "1:3"},
            None,
            "trainhook.io/elastic differs between the roles of job pt: master (StatefulSet "
            "pt-master) 1:3, worker (StatefulSet pt-worker) unset; set one value on every "
            "workload of the job (every pod joins one rendezvous)",
        ),
        (
            {"trainhook.io/ttl-seconds-after-finished": "60"},
            {"trainhook.io/ttl-seconds-after-finished": "3600"},
            "trainhook.io/ttl-seconds-after-finished differs between the roles of job pt: "
            "master (StatefulSet pt-master) 60, worker (StatefulSet pt-worker) 3600; set one "
            "value on every workload of the job (the sweeper applies one to the whole job)",
        ),
    ],
)
def test_every_job_wide_setting_is_refused_when_roles_disagree(
    master: dict[str, str], worker: dict[str, str] | None, line: str
) -> None:
    with pytest.raises(RenderError) as caught:
        render_all(list(pytorch(master=master, worker=worker)))

    assert str(caught.value) == line


def test_a_lifecycle_setting_on_one_role_only_is_the_jobs() -> None:
    rendered = pods(*pytorch(master={"trainhook.io/ttl-seconds-after-finished": "60"}))

    assert len(rendered) == 3


@pytest.mark.parametrize(
    ("key", "master", "worker"),
    [
        ("trainhook.io/success-policy", "rank0", "all"),
        ("trainhook.io/clean-pod-policy", "All", "None"),
        ("trainhook.io/backoff-limit", "1", "2"),
        ("trainhook.io/restart-policy", "Never", "RestartJob"),
    ],
)
def test_each_lifecycle_setting_set_differently_on_two_roles_is_refused(
    key: str, master: str, worker: str
) -> None:
    with pytest.raises(RenderError) as caught:
        render_all(list(pytorch(master={key: master}, worker={key: worker})))

    shown = (repr(master), repr(worker)) if not master.isdigit() else (master, worker)
    assert str(caught.value) == (
        f"{key} differs between the roles of job pt: master (StatefulSet pt-master) "
        f"{shown[0]}, worker (StatefulSet pt-worker) {shown[1]}; set one value on every "
        "workload of the job (the sweeper applies one to the whole job)"
    )


@pytest.mark.parametrize(
    ("key", "master", "worker"),
    [
        ("trainhook.io/suspend", "false", "true"),
        ("trainhook.io/active-deadline-seconds", "60", "3600"),
    ],
)
def test_a_suspension_or_deadline_may_be_set_on_any_role(
    key: str, master: str, worker: str
) -> None:
    rendered = pods(*pytorch(master={key: master}, worker={key: worker}))

    assert sorted(rendered) == ["pt-master-0", "pt-worker-0", "pt-worker-1"]


def test_the_jobs_settings_are_each_the_first_set_in_role_order() -> None:
    master = Settings(backoff_limit=2, suspend=None)
    worker = Settings(backoff_limit=2, suspend=True, active_deadline_seconds=60)

    assert job_settings([master, worker]) == JobSettings(
        backoff_limit=2, suspend=True, active_deadline_seconds=60
    )
    assert job_settings([worker, master]).suspend is True
    assert job_settings([Settings(suspend=False), worker]).suspend is False


def test_per_role_settings_may_differ_between_roles() -> None:
    rendered = pods(
        *pytorch(
            master={"trainhook.io/shm-size": "1Gi", "trainhook.io/container": "pytorch"},
            worker={"trainhook.io/gpus": "2", "trainhook.io/gpu-resource": "amd.com/gpu"},
        )
    )

    limits = rendered["pt-worker-0"].pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits == {"amd.com/gpu": "2"}
    assert "resources" not in rendered["pt-master-0"].pod["spec"]["containers"][0]


def bare_worker(index: int, annotations: dict[str, str]) -> dict[str, Any]:
    return bare_pod(
        f"tf-worker-{index}",
        "tensorflow",
        labels={"trainhook.io/job": "tf", "trainhook.io/index": str(index)},
        annotations={
            "trainhook.io/topology": '{"ps":1,"worker":2}',
            "trainhook.io/hosts": '{"ps":{"pod":"tf-ps","port":5000},"worker":{"pod":"tf-worker",'
            '"port":2222}}',
            **annotations,
        },
    )


def test_bare_pods_reach_each_role_on_the_port_their_hosts_annotation_records() -> None:
    rendered = env(bare_worker(1, {}))

    assert json.loads(rendered["tf-worker-1"]["TF_CONFIG"])["cluster"] == {
        "ps": ["tf-ps-0.tf.default.svc:5000"],
        "worker": ["tf-worker-0.tf.default.svc:2222", "tf-worker-1.tf.default.svc:2222"],
    }


def test_a_bare_pod_whose_port_is_not_the_one_its_peers_use_is_refused() -> None:
    with pytest.raises(RenderError) as caught:
        render_all([bare_worker(0, {"trainhook.io/port": "3333"})])

    assert str(caught.value) == (
        "trainhook.io/port: invalid value '3333': trainhook.io/hosts gives role worker port "
        "2222, where its peers reach it: set the same"
    )


def test_bare_pods_stamped_with_two_pytorch_masters_are_refused() -> None:
    pod = bare_pod(
        "pt-master-1",
        "pytorch",
        labels={"trainhook.io/job": "pt", "trainhook.io/role": "master", "trainhook.io/index": "1"},
        annotations={"trainhook.io/topology": '{"master":2,"worker":1}'},
    )
    with pytest.raises(RenderError) as caught:
        render_all([pod])

    assert str(caught.value) == (
        "trainhook.io/topology: role master has 2 replicas; a pytorch job has one master, which "
        "the other pods connect to: run the others as workers"
    )


RACK = {"trainhook.io/placement-topology": "cloud.example.com/rack"}


@pytest.mark.parametrize(
    ("master", "worker", "line"),
    [
        (
            RACK,
            {},
            "trainhook.io/placement-topology: job 'pt' is placed as one, so every role must say "
            "the same: 'cloud.example.com/rack' on StatefulSet pt-master but not set on "
            "StatefulSet pt-worker",
        ),
        (
            RACK,
            {**RACK, "trainhook.io/placement": "preferred"},
            "trainhook.io/placement: job 'pt' is placed as one, so every role must say the same: "
            "'required' on StatefulSet pt-master but 'preferred' on StatefulSet pt-worker",
        ),
        (
            {**VOLCANO, **RACK, "trainhook.io/placement-tier": "1"},
            {**VOLCANO, **RACK, "trainhook.io/placement-tier": "2"},
            "trainhook.io/placement-tier: job 'pt' is placed as one, so every role must say the "
            "same: '1' on StatefulSet pt-master but '2' on StatefulSet pt-worker",
        ),
    ],
)
def test_roles_that_disagree_on_the_placement_are_refused_in_one_line(
    master: dict[str, str], worker: dict[str, str], line: str
) -> None:
    with pytest.raises(RenderError) as caught:
        render_all(list(pytorch(master=master, worker=worker)))

    assert str(caught.value) == line


def test_an_explicit_required_placement_agrees_with_the_default() -> None:
    rendering = render_all(
        list(pytorch(master=RACK, worker={**RACK, "trainhook.io/placement": "required"}))
    )

    assert len(rendering.pods) == 3
