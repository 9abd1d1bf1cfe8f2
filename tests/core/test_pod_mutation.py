"""What a pod receives at creation besides env: labels, volumes, resources, scheduling."""

import re
from typing import Any

import jsonpatch
import pytest

from tests.support.builders import bare_pod, mpi_job, pods, statefulset
from webhook.core.errors import Refused, TrainhookError
from webhook.core.mutation.admit import Found, Request, admit, owner_to_resolve
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import expand, training_env
from webhook.core.shape.pods import env_by_name


def pod_of(*documents: dict[str, Any], name: str) -> dict[str, Any]:
    return pods(*documents)[name].pod


def raw_pod(workload: dict[str, Any], ordinal: int, *siblings: dict[str, Any]) -> dict[str, Any]:
    """The pod the StatefulSet controller creates, before the webhook mutates it."""
    mutated = mutate_workload(workload, "CREATE", "default", list(siblings)).workload
    return expand(mutated, "default")[ordinal]


def admit_pod(pod: dict[str, Any], **found: Any) -> Any:
    return admit(Request("Pod", "CREATE", pod, "default"), Found(**found))


def test_pods_are_labelled_with_job_role_rank_and_role_index() -> None:
    pod = pod_of(
        statefulset("pt-master", "pytorch", role="master", job="pt"),
        statefulset("pt-worker", "pytorch", role="worker", job="pt", replicas=2),
        name="pt-worker-1",
    )
    labels = pod["metadata"]["labels"]
    assert {k: v for k, v in labels.items() if k.startswith("trainhook.io/")} == {
        "trainhook.io/framework": "pytorch",
        "trainhook.io/job": "pt",
        "trainhook.io/role": "worker",
        "trainhook.io/rank": "2",
        "trainhook.io/role-index": "1",
    }


def test_the_patch_applies_to_the_pod_as_received_and_a_second_pass_is_empty() -> None:
    pod = raw_pod(statefulset("ddp", "pytorch", replicas=2), 1)
    outcome = admit_pod(pod)
    patched = jsonpatch.apply_patch(pod, outcome.patch)
    assert patched["spec"]["containers"][0]["env"][3] == {"name": "TRAINHOOK_RANK", "value": "1"}
    assert admit_pod(patched).patch == []


def test_env_goes_into_the_training_and_init_containers_ahead_of_the_users_own() -> None:
    containers: list[dict[str, Any]] = [
        {"name": "sidecar", "image": "s"},
        {"name": "pytorch", "image": "t", "env": [{"name": "LR", "value": "0.1"}]},
    ]
    sts = statefulset("ddp", "pytorch", replicas=2, containers=containers)
    sts["spec"]["template"]["spec"]["initContainers"] = [{"name": "fetch", "image": "f"}]
    pod = pod_of(sts, name="ddp-0")
    fetch, (sidecar, training) = pod["spec"]["initContainers"][0], pod["spec"]["containers"]
    for container in (fetch, training):
        names = [e["name"] for e in container["env"]]
        assert names[0] == "TRAINHOOK_JOB" and "RANK" in names
    assert training["env"][-1] == {"name": "LR", "value": "0.1"}
    assert sidecar == {"name": "sidecar", "image": "s"}


def test_a_pod_of_15000_sidecars_costs_what_one_container_does() -> None:
    sidecars = [{"name": f"sidecar-{i}", "image": "s"} for i in range(15000)]
    sts = statefulset("ddp", "pytorch", containers=[{"name": "pytorch", "image": "t"}, *sidecars])
    raw = raw_pod(sts, 0)
    outcome = admit_pod(raw, owner=sts)
    touched = {op["path"].split("/")[3] for op in outcome.patch if op["path"].startswith("/spec/c")}
    assert touched == {"0"}


def test_a_pod_with_more_init_containers_than_trainhook_equips_is_refused() -> None:
    sts = statefulset("ddp", "pytorch")
    sts["spec"]["template"]["spec"]["initContainers"] = [
        {"name": f"init-{i}", "image": "i"} for i in range(17)
    ]
    with pytest.raises(Refused) as caught:
        admit_pod(raw_pod(sts, 0), owner=sts)
    assert str(caught.value) == (
        "spec.initContainers: a training pod has at most 16 init containers (each gets the "
        "job's env); this one has 17"
    )


def test_env_the_user_set_is_kept_and_a_warning_names_it() -> None:
    containers = [{"name": "pytorch", "image": "t", "env": [{"name": "MASTER_PORT", "value": "1"}]}]
    rendered = pods(statefulset("ddp", "pytorch", replicas=2, containers=containers))["ddp-1"]
    assert rendered.env["MASTER_PORT"] == "1"
    assert rendered.warnings == [
        "env MASTER_PORT in container pytorch was set by the user and is kept"
    ]
    assert all(len(w) < 120 for w in rendered.warnings)


def test_env_the_user_set_twice_is_read_as_its_last_item() -> None:
    env = [
        {"name": "RANK", "value": "7"},
        {"name": "DATA", "value": "/data"},
        {"name": "RANK", "value": "0"},
        {"value": "nameless"},
    ]

    assert env_by_name(env, {"RANK", "WORLD_SIZE"}) == {"RANK": {"name": "RANK", "value": "0"}}


def test_env_from_a_secret_is_kept_too() -> None:
    secret_ref = {"secretKeyRef": {"name": "s", "key": "k"}}
    containers = [
        {"name": "pytorch", "image": "t", "env": [{"name": "RANK", "valueFrom": secret_ref}]}
    ]
    rendered = pods(statefulset("ddp", "pytorch", containers=containers))["ddp-0"]
    [rank] = [e for e in rendered.pod["spec"]["containers"][0]["env"] if e["name"] == "RANK"]
    assert rank == {"name": "RANK", "valueFrom": secret_ref}


def test_gpus_become_a_limit_and_request_on_the_training_container_only() -> None:
    containers = [{"name": "sidecar", "image": "s"}, {"name": "pytorch", "image": "t"}]
    sts = statefulset(
        "ddp",
        "pytorch",
        containers=containers,
        annotations={"trainhook.io/gpus": "2", "trainhook.io/gpu-resource": "amd.com/gpu"},
    )
    pod = pod_of(sts, name="ddp-0")
    assert "resources" not in pod["spec"]["containers"][0]
    assert pod["spec"]["containers"][1]["resources"] == {
        "limits": {"amd.com/gpu": "2"},
        "requests": {"amd.com/gpu": "2"},
    }


def test_a_gpu_limit_the_user_set_equal_to_the_gpus_annotation_is_kept_as_written() -> None:
    containers = [{"name": "pytorch", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 4}}}]
    rendered = pods(
        statefulset("ddp", "pytorch", containers=containers, annotations={"trainhook.io/gpus": "4"})
    )["ddp-0"]
    assert rendered.pod["spec"]["containers"][0]["resources"] == {"limits": {"nvidia.com/gpu": 4}}
    assert rendered.warnings == []


def test_the_container_annotation_picks_the_training_container() -> None:
    containers = [{"name": "main", "image": "t"}, {"name": "trainer", "image": "s"}]
    sts = statefulset(
        "ddp",
        "pytorch",
        containers=containers,
        annotations={"trainhook.io/gpus": "1", "trainhook.io/container": "trainer"},
    )
    pod = pod_of(sts, name="ddp-0")
    assert "resources" not in pod["spec"]["containers"][0]
    assert pod["spec"]["containers"][1]["resources"]["limits"] == {"nvidia.com/gpu": "1"}


def test_shm_size_mounts_a_memory_volume_at_dev_shm_unless_a_container_mounts_one() -> None:
    containers: list[dict[str, Any]] = [
        {"name": "paddle", "image": "t"},
        {"name": "own", "image": "s", "volumeMounts": [{"name": "mine", "mountPath": "/dev/shm"}]},
    ]
    pod = pod_of(
        statefulset(
            "pd", "paddle", containers=containers, annotations={"trainhook.io/shm-size": "8Gi"}
        ),
        name="pd-0",
    )
    assert pod["spec"]["volumes"] == [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "8Gi"}}
    ]
    assert pod["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "dshm", "mountPath": "/dev/shm"}
    ]
    assert pod["spec"]["containers"][1]["volumeMounts"] == [
        {"name": "mine", "mountPath": "/dev/shm"}
    ]


def test_volcano_gang_scheduling_sets_the_scheduler_and_group_annotations() -> None:
    sts = statefulset("pd", "paddle", job="gang", annotations={"trainhook.io/scheduler": "volcano"})
    pod = pod_of(sts, name="pd-0")
    assert pod["spec"]["schedulerName"] == "volcano"
    annotations = pod["metadata"]["annotations"]
    assert (annotations["scheduling.k8s.io/group-name"], annotations["volcano.sh/task-spec"]) == (
        "gang",
        "worker",
    )


def test_a_scheduler_the_user_chose_is_kept_with_a_warning() -> None:
    sts = statefulset("pd", "paddle", annotations={"trainhook.io/scheduler": "volcano"})
    sts["spec"]["template"]["spec"]["schedulerName"] = "my-scheduler"
    rendered = pods(sts)["pd-0"]
    assert rendered.pod["spec"]["schedulerName"] == "my-scheduler"
    assert rendered.warnings == ["schedulerName my-scheduler was set by the user and is kept"]


def test_the_mpi_launcher_gets_a_projected_hostfile_and_every_pod_the_ssh_secret() -> None:
    job = mpi_job(nproc_per_worker=2)
    launcher = pod_of(*job, name="hv-launcher-0")
    assert launcher["metadata"]["annotations"]["trainhook.io/hostfile"] == (
        "hv-worker-0.hv.default.svc slots=2\nhv-worker-1.hv.default.svc slots=2\n"
    )
    assert launcher["spec"]["volumes"] == [
        {"name": "mpi-ssh", "secret": {"secretName": "hv-ssh", "defaultMode": 0o600}},
        {
            "name": "mpi-hostfile",
            "downwardAPI": {
                "items": [
                    {
                        "path": "hostfile",
                        "fieldRef": {"fieldPath": "metadata.annotations['trainhook.io/hostfile']"},
                    },
                    {
                        "path": "discover_hosts.sh",
                        "fieldRef": {
                            "fieldPath": "metadata.annotations['trainhook.io/discover-hosts']"
                        },
                        "mode": 0o555,
                    },
                ]
            },
        },
    ]
    assert launcher["spec"]["containers"][0]["volumeMounts"] == [
        {"name": "mpi-ssh", "mountPath": "/root/.ssh", "readOnly": True},
        {"name": "mpi-hostfile", "mountPath": "/etc/mpi", "readOnly": True},
    ]
    worker = pod_of(*job, name="hv-worker-0")
    assert [v["name"] for v in worker["spec"]["volumes"]] == ["mpi-ssh"]
    assert "trainhook.io/hostfile" not in worker["metadata"]["annotations"]


def test_a_pod_without_a_topology_stamp_names_its_owner_to_resolve() -> None:
    pod = raw_pod(statefulset("ddp", "pytorch", replicas=2), 1)
    del pod["metadata"]["annotations"]["trainhook.io/topology"]
    assert owner_to_resolve(pod) == ("StatefulSet", "ddp")


def test_a_pod_without_a_stamp_is_refused_when_its_owner_cannot_be_read() -> None:
    pod = raw_pod(statefulset("ddp", "pytorch", replicas=2), 1)
    del pod["metadata"]["annotations"]["trainhook.io/topology"]
    with pytest.raises(TrainhookError) as caught:
        admit_pod(pod)
    assert (str(caught.value), caught.value.status_code) == (
        "pod of job ddp has no trainhook.io/topology annotation and its StatefulSet ddp could "
        "not be read (is the trainhook.io/framework label on the StatefulSet itself, not only "
        "on its pod template?); a wrong world size is worse than a retry",
        403,
    )


def test_a_pod_without_a_stamp_gets_its_topology_from_its_owner_and_siblings() -> None:
    master = statefulset("pt-master", "pytorch", role="master", job="pt")
    worker = statefulset("pt-worker", "pytorch", role="worker", job="pt", replicas=2)
    pod = raw_pod(worker, 1, master)
    del pod["metadata"]["annotations"]["trainhook.io/topology"]
    outcome = admit_pod(pod, owner=worker, siblings=[master])
    env = training_env(jsonpatch.apply_patch(pod, outcome.patch))
    assert (env["RANK"], env["WORLD_SIZE"]) == ("2", "3")


def test_a_pod_beyond_its_stamped_replicas_is_refused_until_the_stamp_catches_up() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2)
    pod = raw_pod(sts, 1)
    pod["metadata"]["name"] = pod["spec"]["hostname"] = "ddp-2"
    pod["metadata"]["labels"]["apps.kubernetes.io/pod-index"] = "2"
    with pytest.raises(TrainhookError) as caught:
        admit_pod(pod)
    assert str(caught.value) == (
        "worker 2 is outside the 2 worker replicas of job ddp (worker=2); the sweeper updates "
        "the stamp, retry"
    )


def test_statefulset_ordinals_start_is_subtracted_from_the_pod_index() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2)
    sts["spec"]["ordinals"] = {"start": 5}
    rendered = pods(sts)
    assert sorted(rendered) == ["ddp-5", "ddp-6"]
    assert rendered["ddp-6"].env["RANK"] == "1"
    assert rendered["ddp-6"].env["MASTER_ADDR"] == "ddp-5.ddp.default.svc"


def test_a_bare_pod_with_an_index_and_a_stamp_gets_hostname_subdomain_and_env() -> None:
    pod = bare_pod(
        "probe-1",
        "jax",
        labels={"trainhook.io/job": "probe", "trainhook.io/index": "1"},
        annotations={"trainhook.io/topology": '{"worker":2}'},
    )
    patched = jsonpatch.apply_patch(pod, admit_pod(pod).patch)
    assert (patched["spec"]["hostname"], patched["spec"]["subdomain"]) == (
        "probe-worker-1",
        "probe",
    )
    env = training_env(patched)
    assert (env["COORDINATOR_ADDRESS"], env["PROCESS_ID"]) == (
        "probe-worker-0.probe.default.svc",
        "1",
    )


def test_a_lone_bare_pod_without_index_or_stamp_is_a_job_of_one() -> None:
    pod = bare_pod("solo", "pytorch")
    env = training_env(jsonpatch.apply_patch(pod, admit_pod(pod).patch))
    assert (env["WORLD_SIZE"], env["RANK"], env["MASTER_ADDR"]) == (
        "1",
        "0",
        "solo-worker-0.solo.default.svc",
    )


def test_a_bare_pod_with_an_index_but_no_stamp_is_refused() -> None:
    pod = bare_pod("p", "jax", labels={"trainhook.io/index": "3"})
    with pytest.raises(
        TrainhookError,
        match=re.escape(
            "pod of job p has no trainhook.io/topology annotation "
            "and a bare pod with trainhook.io/index must carry it; "
        ),
    ):
        admit_pod(pod)


def test_an_invalid_index_label_is_refused() -> None:
    pod = bare_pod("p", "jax", labels={"trainhook.io/index": "first"})
    with pytest.raises(TrainhookError) as caught:
        admit_pod(pod)
    assert (
        str(caught.value)
        == "trainhook.io/index: invalid value 'first': a whole number from 0 to 2147483647"
    )


def test_a_hostname_that_peers_would_not_find_is_refused() -> None:
    pod = raw_pod(statefulset("ddp", "pytorch", replicas=2), 1)
    pod["spec"]["hostname"] = "elsewhere"
    with pytest.raises(TrainhookError) as caught:
        admit_pod(pod)
    assert str(caught.value) == (
        "pod hostname elsewhere does not match ddp-1, the name its peers use for worker 1 of "
        "job ddp"
    )


def test_unlabelled_pods_and_other_operations_are_left_alone() -> None:
    plain = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web"},
        "spec": {"containers": []},
    }
    assert admit_pod(plain) is None
    labelled = raw_pod(statefulset("ddp", "pytorch"), 0)
    assert admit(Request("Pod", "UPDATE", labelled, "default")) is None
    assert admit(Request("Pod", "DELETE", labelled, "default")) is None


def test_label_keys_are_escaped_in_patch_paths_and_the_users_own_labels_left_alone() -> None:
    pod = raw_pod(statefulset("ddp", "pytorch"), 0)
    pod["metadata"]["labels"]["example.com/a~b"] = "x"
    ops = admit_pod(pod).patch
    assert {"op": "add", "path": "/metadata/labels/trainhook.io~1rank", "value": "0"} in ops
    assert not [op for op in ops if "example.com" in op["path"]]
    assert jsonpatch.apply_patch(pod, ops)["metadata"]["labels"]["example.com/a~b"] == "x"


def test_a_stamp_claiming_billions_of_replicas_is_refused_before_any_work() -> None:
    pod = raw_pod(statefulset("ddp", "pytorch", replicas=2), 0)
    pod["metadata"]["annotations"]["trainhook.io/topology"] = '{"worker":2000000000}'
    with pytest.raises(TrainhookError) as caught:
        admit_pod(pod)
    assert str(caught.value) == (
        "job ddp has 2000000000 pods; Trainhook supports up to 10000 per job "
        "(one ConfigMap lists its peers)"
    )


def scaled_pod(replicas: int, ordinal: int, annotations: dict[str, str]) -> dict[str, Any]:
    """Pod `ordinal` of a worker StatefulSet admitted at `replicas`, then scaled up through
    /scale (which the webhook never sees): the pod carries the stamp of the old count."""
    workload = statefulset("el", "pytorch", replicas=replicas, annotations=annotations)
    mutated = mutate_workload(workload, "CREATE", "default", []).workload
    mutated["spec"]["replicas"] = ordinal + 1
    return expand(mutated, "default")[ordinal]


def test_an_elastic_job_scaled_within_its_range_admits_its_new_pods_on_the_old_stamp() -> None:
    pod = scaled_pod(2, 3, {"trainhook.io/elastic": "2:4"})
    assert pod["metadata"]["annotations"]["trainhook.io/topology"] == '{"worker":2}'
    outcome = admit_pod(pod)
    mutated = jsonpatch.apply_patch(pod, outcome.patch)
    env = {e["name"]: e.get("value") for e in mutated["spec"]["containers"][0]["env"]}
    assert (env["PET_NNODES"], env["PET_RDZV_ENDPOINT"]) == ("2:4", "el-0.el.default.svc:23456")
    assert (env["NODE_RANK"], env["TRAINHOOK_ROLE_INDEX"]) == ("3", "3")


def test_a_pod_beyond_an_elastic_jobs_maximum_is_refused_until_the_stamp_says_so() -> None:
    with pytest.raises(TrainhookError, match="worker 4 is outside the 2 worker replicas"):
        admit_pod(scaled_pod(2, 4, {"trainhook.io/elastic": "2:4"}))


def test_max_restarts_becomes_pet_max_restarts() -> None:
    pod = pod_of(
        statefulset(
            "el",
            "pytorch",
            replicas=2,
            annotations={"trainhook.io/elastic": "1:4", "trainhook.io/max-restarts": "3"},
        ),
        name="el-1",
    )
    env = {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}
    assert env["PET_MAX_RESTARTS"] == "3"


def test_a_pod_resolved_through_its_owner_gets_the_jobs_volcano_group_on_the_first_pass() -> None:
    # The job label is on the StatefulSet only: its pods do not carry it until admitted.
    sts = statefulset("ddp-worker", "pytorch", role="worker", job="ddp", replicas=2)
    template = sts["spec"]["template"]["metadata"]
    template["labels"]["trainhook.io/framework"] = "pytorch"
    template["annotations"] = {"trainhook.io/scheduler": "volcano"}
    pod = expand(sts, "default")[0]  # created before the webhook was installed: no stamp

    first = jsonpatch.apply_patch(pod, admit_pod(pod, owner=sts).patch)

    assert first["metadata"]["annotations"]["scheduling.k8s.io/group-name"] == "ddp"
    assert admit_pod(first, owner=sts).patch == []


def test_a_job_name_whose_pod_hostnames_exceed_63_characters_is_refused_in_one_line() -> None:
    job = "j" * 60
    pod = bare_pod("p", "pytorch", labels={"trainhook.io/job": job})

    with pytest.raises(TrainhookError) as caught:
        admit_pod(pod)

    assert caught.value.status_code == 400
    assert str(caught.value) == (
        f"job {job}: pod hostname '{job}-worker-0' of role worker is not a DNS-1123 label of at "
        "most 63 characters; shorten the name the pods are named after (the StatefulSet, the "
        "Job or, for bare pods, the job)"
    )


def test_a_job_name_of_52_characters_still_names_its_bare_pods() -> None:
    job = "j" * 52  # <job>-worker-0 is 61 characters
    outcome = admit_pod(bare_pod("p", "pytorch", labels={"trainhook.io/job": job}))
    patched = jsonpatch.apply_patch(
        bare_pod("p", "pytorch", labels={"trainhook.io/job": job}), outcome.patch
    )
    assert patched["spec"]["hostname"] == f"{job}-worker-0"


def test_a_service_name_that_is_no_dns_label_is_refused_before_any_host_is_named() -> None:
    sts = statefulset("ddp", "pytorch", replicas=2)
    sts["spec"]["serviceName"] = "Bad_Service"

    with pytest.raises(TrainhookError) as caught:
        admit(Request("StatefulSet", "CREATE", sts, "default"))

    assert str(caught.value) == (
        "job ddp: Service 'Bad_Service' of role worker is not a DNS-1035 label of at most 63 "
        "characters (it ends every host name of the role); set the StatefulSet's serviceName or "
        "the pod's subdomain to one"
    )


def test_mpi_slots_are_the_gpus_each_worker_container_limits_itself() -> None:
    launcher = statefulset("hv-launcher", "mpi", role="launcher", job="hv")
    gpus = [{"name": "mpi", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 4}}}]
    workers = statefulset("hv-worker", "mpi", role="worker", job="hv", replicas=2, containers=gpus)
    rendered = pods(launcher, workers)["hv-launcher-0"]
    assert rendered.pod["metadata"]["annotations"]["trainhook.io/hostfile"] == (
        "hv-worker-0.hv.default.svc slots=4\nhv-worker-1.hv.default.svc slots=4\n"
    )
    assert rendered.env["PRTE_MCA_prte_set_default_slots"] == "4"
