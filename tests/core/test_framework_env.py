"""The exact variables each framework's pods receive, beyond the TRAINHOOK_* ones."""

import json
import re

import pytest

from tests.support.builders import env, indexed_job, mpi_job, statefulset
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.frameworks import mindspore
from webhook.core.job.workload import read_workload
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.render import RenderError, render


def framework_vars(values: dict[str, str]) -> dict[str, str]:
    return {
        k: v
        for k, v in values.items()
        if not k.startswith("TRAINHOOK_") and k != "PYTHONUNBUFFERED"
    }


def test_tensorflow_worker_1_of_one_ps_and_two_workers_gets_tf_config() -> None:
    pods = env(
        statefulset("tf-ps", "tensorflow", role="ps", job="tf"),
        statefulset("tf-worker", "tensorflow", role="worker", job="tf", replicas=2),
    )
    raw = pods["tf-worker-1"]["TF_CONFIG"]
    assert raw == (
        '{"cluster":{"ps":["tf-ps-0.tf.default.svc:2222"],'
        '"worker":["tf-worker-0.tf.default.svc:2222","tf-worker-1.tf.default.svc:2222"]},'
        '"task":{"type":"worker","index":1},"environment":"cloud"}'
    )
    assert framework_vars(pods["tf-ps-0"]) == {
        "TF_CONFIG": raw.replace('"type":"worker","index":1', '"type":"ps","index":0')
    }


def test_tensorflow_roles_are_listed_in_chief_master_ps_worker_evaluator_order() -> None:
    pods = env(
        statefulset("e", "tensorflow", role="evaluator", job="tf"),
        statefulset("w", "tensorflow", role="worker", job="tf"),
        statefulset("c", "tensorflow", role="chief", job="tf"),
    )
    config = json.loads(pods["e-0"]["TF_CONFIG"])
    assert list(config["cluster"]) == ["chief", "worker", "evaluator"]
    assert config["task"] == {"type": "evaluator", "index": 0}
    assert pods["c-0"]["TRAINHOOK_RANK"] == "0"


def test_a_single_replica_tensorflow_job_gets_no_tf_config() -> None:
    assert framework_vars(env(statefulset("mnist", "tensorflow"))["mnist-0"]) == {}


def test_paddle_collective_worker_gets_trainer_endpoints_and_no_ps_variables() -> None:
    pods = env(statefulset("pd", "paddle", replicas=2))
    assert framework_vars(pods["pd-1"]) == {
        "PADDLE_JOB_ID": "pd",
        "PADDLE_NNODES": "2",
        "PADDLE_MASTER": "pd-0.pd.default.svc:36543",
        "PADDLE_TRAINER_ID": "1",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_TRAINER_ENDPOINTS": "pd-0.pd.default.svc:36543,pd-1.pd.default.svc:36543",
        "PADDLE_CURRENT_ENDPOINT": "pd-1.pd.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "pd-1.pd.default.svc",
        "PADDLE_NPROC_PER_NODE": "1",
    }


def test_paddle_collective_pods_start_one_trainer_per_gpu_of_the_container() -> None:
    gpus = [{"name": "paddle", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 4}}}]
    pods = env(statefulset("pd", "paddle", replicas=2, containers=gpus))
    assert (pods["pd-1"]["PADDLE_NPROC_PER_NODE"], pods["pd-1"]["PADDLE_NNODES"]) == ("4", "2")


def test_paddle_ps_mode_gives_servers_and_trainers_their_training_role() -> None:
    pods = env(
        statefulset("wd-ps", "paddle", role="ps", job="wd", replicas=2),
        statefulset("wd-worker", "paddle", role="worker", job="wd", replicas=2),
    )
    servers = "wd-ps-0.wd.default.svc:36543,wd-ps-1.wd.default.svc:36543"
    assert framework_vars(pods["wd-ps-1"]) == {
        "PADDLE_JOB_ID": "wd",
        "PADDLE_NNODES": "4",
        "PADDLE_MASTER": "wd-worker-0.wd.default.svc:36543",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_TRAINER_ENDPOINTS": (
            "wd-worker-0.wd.default.svc:36543,wd-worker-1.wd.default.svc:36543"
        ),
        "PADDLE_CURRENT_ENDPOINT": "wd-ps-1.wd.default.svc:36543",
        "PADDLE_PORT": "36543",
        "POD_IP": "wd-ps-1.wd.default.svc",
        "TRAINING_ROLE": "PSERVER",
        "PADDLE_TRAINING_ROLE": "PSERVER",
        "PADDLE_SERVER_NUM": "1",
        "PADDLE_PSERVERS_IP_PORT_LIST": servers,
    }
    worker = pods["wd-worker-0"]
    assert (worker["TRAINING_ROLE"], worker["PADDLE_TRAINER_ID"]) == ("TRAINER", "0")


def test_a_paddle_master_is_a_parameter_server_as_in_the_training_operators_paddlejob() -> None:
    pods = env(
        statefulset("pj-master", "paddle", role="master", job="pj"),
        statefulset("pj-worker", "paddle", role="worker", job="pj", replicas=2),
    )
    servers = "pj-master-0.pj.default.svc:36543"
    master = framework_vars(pods["pj-master-0"])
    assert {k: master[k] for k in master if k not in ("PADDLE_TRAINER_ENDPOINTS",)} == {
        "PADDLE_JOB_ID": "pj",
        "PADDLE_NNODES": "3",
        "PADDLE_MASTER": "127.0.0.1:36543",
        "PADDLE_TRAINERS_NUM": "2",
        "PADDLE_CURRENT_ENDPOINT": servers,
        "PADDLE_PORT": "36543",
        "POD_IP": "pj-master-0.pj.default.svc",
        "TRAINING_ROLE": "PSERVER",
        "PADDLE_TRAINING_ROLE": "PSERVER",
        "PADDLE_SERVER_NUM": "1",
        "PADDLE_PSERVERS_IP_PORT_LIST": servers,
    }
    worker = pods["pj-worker-1"]
    assert (worker["TRAINING_ROLE"], worker["PADDLE_TRAINER_NUM"], worker["PADDLE_MASTER"]) == (
        "TRAINER",
        "1",
        f"{servers}",
    )
    assert worker["PADDLE_PSERVERS_IP_PORT_LIST"] == servers


def test_paddle_heter_workers_get_heter_endpoints() -> None:
    pods = env(
        statefulset("h-ps", "paddle", role="ps", job="h"),
        statefulset("h-worker", "paddle", role="worker", job="h"),
        statefulset("h-heter", "paddle", role="heter", job="h"),
    )
    heter = pods["h-heter-0"]
    assert heter["TRAINING_ROLE"] == "HETER"
    assert heter["PADDLE_HETER_ENDPOINTS"] == "h-heter-0.h.default.svc:36543"
    assert "PADDLE_TRAINER_ID" not in heter


def test_a_paddle_indexed_job_names_hosts_after_the_job_and_its_index() -> None:
    pods = env(indexed_job("ernie", "paddle", completions=3))
    assert pods["ernie-2"]["PADDLE_CURRENT_ENDPOINT"] == "ernie-2.ernie.default.svc:36543"
    assert pods["ernie-2"]["PADDLE_TRAINER_ID"] == "2"


def test_mindspore_workers_read_the_scheduler_ip_from_its_service_link_and_rank_by_index() -> None:
    pods = env(
        statefulset("ms-sched", "mindspore", role="scheduler", job="ms"),
        statefulset("ms-worker", "mindspore", role="worker", job="ms", replicas=4),
    )
    assert framework_vars(pods["ms-worker-3"]) == {
        "MS_ROLE": "MS_WORKER",
        "MS_SCHED_HOST": "$(MS_MS_SCHEDULER_SERVICE_HOST)",
        "MS_SCHED_PORT": "2222",
        "MS_WORKER_NUM": "4",
        "MS_SERVER_NUM": "0",
        "MS_NODE_ID": "3",
    }


def test_the_mindspore_scheduler_listens_on_its_own_pod_ip() -> None:
    [scheduler] = [
        pod
        for pod in render(
            [
                statefulset("ms-sched", "mindspore", role="scheduler", job="ms"),
                statefulset("ms-worker", "mindspore", role="worker", job="ms", replicas=2),
            ]
        )
        if pod.role == "scheduler"
    ]
    ms_env = [
        item
        for item in scheduler.pod["spec"]["containers"][0]["env"]
        if item["name"].startswith("MS_")
    ]
    assert ms_env == [
        {"name": "MS_ROLE", "value": "MS_SCHED"},
        {"name": "MS_SCHED_PORT", "value": "2222"},
        {"name": "MS_WORKER_NUM", "value": "2"},
        {"name": "MS_SERVER_NUM", "value": "0"},
        {"name": "MS_NODE_ID", "value": "ms-sched-0"},
        {"name": "MS_SCHED_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]


def test_mindspore_with_several_gpus_per_worker_counts_processes_and_leaves_ids_to_msrun() -> None:
    gpus = [{"name": "mindspore", "image": "t", "resources": {"limits": {"nvidia.com/gpu": 8}}}]
    pods = env(
        statefulset("ms-sched", "mindspore", role="scheduler", job="ms"),
        statefulset("ms-worker", "mindspore", role="worker", job="ms", replicas=4, containers=gpus),
    )
    assert {pods[name]["MS_WORKER_NUM"] for name in pods} == {"32"}
    assert "MS_NODE_ID" not in pods["ms-worker-1"]
    assert pods["ms-worker-1"]["TRAINHOOK_ROLE_INDEX"] == "1"  # msrun --node_rank


def test_the_scheduler_service_name_stays_a_dns_label_for_the_longest_job_name() -> None:
    job = "a" + "-b" * 31  # 63 characters, the longest job name
    name = mindspore.scheduler_service(job)
    assert len(name) == 63
    assert re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)
    assert name.endswith("-ms-scheduler")
    assert mindspore.scheduler_service("ms") == "ms-ms-scheduler"
    assert name != mindspore.scheduler_service(job[:-1] + "c")


def test_a_mindspore_pod_without_service_links_is_refused_naming_the_link() -> None:
    worker = statefulset("ms-worker", "mindspore", role="worker", job="ms")
    worker["spec"]["template"]["spec"]["enableServiceLinks"] = False
    with pytest.raises(RenderError) as caught:
        render([statefulset("ms-sched", "mindspore", role="scheduler", job="ms"), worker])
    assert str(caught.value) == (
        "spec.enableServiceLinks: false: pods of MindSpore job ms read scheduler 0's IP from the "
        "Service link $(MS_MS_SCHEDULER_SERVICE_HOST); leave enableServiceLinks unset"
    )


MPI_WORKER_VARS = {
    "K_MPI_JOB_ROLE": "worker",
    "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
    "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
    "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
    "OMPI_MCA_orte_set_default_slots": "4",
    "PRTE_MCA_prte_default_hostfile": "/etc/mpi/hostfile",
    "PRTE_MCA_prte_keep_fqdn_hostnames": "true",
    "PRTE_MCA_plm_ssh_args": "-o ConnectionAttempts=10",
    "PRTE_MCA_prte_set_default_slots": "4",
}


def test_mpi_pods_point_open_mpi_4_and_5_at_the_projected_hostfile_by_default() -> None:
    pods = env(*mpi_job(nproc_per_worker=4))
    assert framework_vars(pods["hv-worker-1"]) == MPI_WORKER_VARS


def test_an_mpi_launcher_without_gpus_has_the_node_gpus_hidden() -> None:
    pods = env(*mpi_job(nproc_per_worker=4))
    assert framework_vars(pods["hv-launcher-0"]) == MPI_WORKER_VARS | {
        "K_MPI_JOB_ROLE": "launcher",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    }


def test_an_mpi_launcher_with_gpus_of_its_own_sees_them() -> None:
    launcher, worker = mpi_job(nproc_per_worker=4)
    launcher["metadata"]["annotations"] = {"trainhook.io/gpus": "1"}
    pods = env(launcher, worker)
    assert "NVIDIA_VISIBLE_DEVICES" not in pods["hv-launcher-0"]
    assert "NVIDIA_VISIBLE_DEVICES" not in pods["hv-worker-0"]


def test_xgboost_worker_gets_master_and_worker_addresses() -> None:
    pods = env(
        statefulset("xg-master", "xgboost", role="master", job="xg"),
        statefulset("xg-worker", "xgboost", role="worker", job="xg", replicas=2),
    )
    assert framework_vars(pods["xg-worker-0"]) == {
        "MASTER_ADDR": "xg-master-0.xg.default.svc",
        "MASTER_PORT": "9999",
        "WORLD_SIZE": "3",
        "RANK": "1",
        "WORKER_PORT": "9999",
        "WORKER_ADDRS": "xg-worker-0.xg.default.svc,xg-worker-1.xg.default.svc",
    }


def test_jax_process_2_knows_the_coordinator_under_both_jobs_names() -> None:
    pods = env(statefulset("jx", "jax", replicas=3))
    assert framework_vars(pods["jx-2"]) == {
        "COORDINATOR_ADDRESS": "jx-0.jx.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "3",
        "PROCESS_ID": "2",
        "JAX_COORDINATOR_ADDRESS": "jx-0.jx.default.svc:6666",
        "JAX_NUM_PROCESSES": "3",
        "JAX_PROCESS_ID": "2",
    }


def test_generic_jobs_get_only_trainhook_variables_with_roles_in_name_order() -> None:
    pods = env(
        statefulset("g-ps", "generic", role="server", job="g", replicas=2),
        statefulset("g-w", "generic", role="client", job="g"),
    )
    assert framework_vars(pods["g-ps-1"]) == {}
    assert pods["g-w-0"]["TRAINHOOK_RANK"] == "0"
    assert pods["g-ps-1"]["TRAINHOOK_RANK"] == "2"
    assert pods["g-ps-1"]["TRAINHOOK_SERVER_HOSTS"] == "g-ps-0.g.default.svc,g-ps-1.g.default.svc"
    assert pods["g-ps-1"]["TRAINHOOK_CLIENT_NUM"] == "1"


def test_role_names_with_dashes_become_underscores_in_variable_names() -> None:
    pods = env(statefulset("g", "generic", role="param-server"))
    assert pods["g-0"]["TRAINHOOK_PARAM_SERVER_HOSTS"] == "g-0.g.default.svc"


def test_the_paddle_master_pod_itself_gets_the_loopback_so_paddle_starts_its_rendezvous() -> None:
    collective = env(statefulset("pd", "paddle", replicas=2))
    assert collective["pd-0"]["PADDLE_MASTER"] == "127.0.0.1:36543"
    with_master = env(
        statefulset("m", "paddle", role="master", job="pm"),
        statefulset("w", "paddle", role="worker", job="pm"),
    )
    assert with_master["m-0"]["PADDLE_MASTER"] == "127.0.0.1:36543"
    assert with_master["w-0"]["PADDLE_MASTER"] == "m-0.pm.default.svc:36543"


def test_a_paddle_parameter_server_job_without_workers_yet_still_gets_its_env() -> None:
    pods = env(statefulset("only-ps", "paddle", role="ps", job="ps-first", replicas=2))
    assert pods["only-ps-1"]["PADDLE_MASTER"] == "only-ps-0.ps-first.default.svc:36543"
    assert pods["only-ps-1"]["PADDLE_TRAINERS_NUM"] == "0"
    assert pods["only-ps-1"]["PADDLE_TRAINER_ENDPOINTS"] == ""


# JAX on TPU. The values are those of the sources a TPU script is written against:
# - GKE's TPU webhook (the GKE docs, "TPU_WORKER_ID: a unique integer for each Pod ... from zero
#   to the number of Pods minus one; TPU_WORKER_HOSTNAMES: a comma-separated list of TPU VM
#   hostnames ... ordered and zero indexed by the TPU_WORKER_ID"), as
#   GoogleCloudPlatform/ai-on-gke ray-on-gke/tpu/kuberay-tpu-webhook/main.go writes them per
#   slice: the slice's own hosts `<pod hostname>.<headless Service>`, the worker's index within
#   its slice, and TPU_NAME naming the slice (`<group>-<slice index>`);
# - kubernetes-sigs/jobset#787: MEGASCALE_NUM_SLICES from jobset.sigs.k8s.io/global-replicas,
#   MEGASCALE_SLICE_ID from jobset.sigs.k8s.io/job-global-index, MEGASCALE_COORDINATOR_ADDRESS
#   from jobset.sigs.k8s.io/coordinator, `<pod hostname>.<headless Service>` of the first pod of
#   the first slice, no port (pkg/controllers/jobset_controller.go, CoordinatorEndpoint).


def tpu_job(replicas: int, slices: str) -> dict[str, dict[str, str]]:
    return env(
        statefulset(
            "v6e", "jax", replicas=replicas, annotations={"trainhook.io/tpu-slices": slices}
        )
    )


def test_a_jax_worker_of_the_second_of_two_tpu_slices_gets_its_slice_and_the_megascale_env() -> (
    None
):
    pods = tpu_job(4, "2")
    assert framework_vars(pods["v6e-3"]) == {
        "COORDINATOR_ADDRESS": "v6e-0.v6e.default.svc",
        "COORDINATOR_PORT": "6666",
        "NUM_PROCESSES": "4",
        "PROCESS_ID": "3",
        "JAX_COORDINATOR_ADDRESS": "v6e-0.v6e.default.svc:6666",
        "JAX_NUM_PROCESSES": "4",
        "JAX_PROCESS_ID": "3",
        "TPU_WORKER_ID": "1",
        "TPU_WORKER_HOSTNAMES": "v6e-2.v6e.default.svc,v6e-3.v6e.default.svc",
        "TPU_NAME": "v6e-slice-1",
        "MEGASCALE_NUM_SLICES": "2",
        "MEGASCALE_SLICE_ID": "1",
        "MEGASCALE_COORDINATOR_ADDRESS": "v6e-0.v6e.default.svc",
    }
    first = framework_vars(pods["v6e-1"])
    assert (first["TPU_WORKER_ID"], first["TPU_NAME"], first["MEGASCALE_SLICE_ID"]) == (
        "1",
        "v6e-slice-0",
        "0",
    )
    assert first["TPU_WORKER_HOSTNAMES"] == "v6e-0.v6e.default.svc,v6e-1.v6e.default.svc"


def test_a_jax_job_on_one_tpu_slice_gets_the_tpu_env_and_no_megascale_env() -> None:
    pods = tpu_job(2, "1")
    tpu = {k: v for k, v in pods["v6e-1"].items() if k.startswith(("TPU_", "MEGASCALE_"))}
    assert tpu == {
        "TPU_WORKER_ID": "1",
        "TPU_WORKER_HOSTNAMES": "v6e-0.v6e.default.svc,v6e-1.v6e.default.svc",
        "TPU_NAME": "v6e-slice-0",
    }


def test_a_jax_job_without_tpu_slices_gets_no_tpu_env() -> None:
    assert not [
        k
        for k in env(statefulset("jx", "jax", replicas=2))["jx-1"]
        if k.startswith(("TPU_", "MEGASCALE_"))
    ]


def test_tpu_slices_that_do_not_divide_the_workers_are_refused_in_one_line() -> None:
    with pytest.raises(RenderError) as caught:
        render(
            [statefulset("v6e", "jax", replicas=4, annotations={"trainhook.io/tpu-slices": "3"})]
        )
    assert str(caught.value) == (
        "trainhook.io/tpu-slices: invalid value '3': job v6e has 4 workers, which 3 slices "
        "cannot share equally: a slice is a whole number of TPU hosts, one worker each"
    )


def test_tpu_slices_on_a_job_other_than_jax_are_refused() -> None:
    with pytest.raises(RenderError) as caught:
        render([statefulset("pt", "pytorch", annotations={"trainhook.io/tpu-slices": "1"})])
    assert str(caught.value) == (
        "trainhook.io/tpu-slices: invalid value '1': read by jax jobs only, not pytorch"
    )


def test_a_generic_job_that_asks_for_ssh_keys_mounts_the_jobs_secret_in_every_pod() -> None:
    keys = {"trainhook.io/ssh-keys": "true", "trainhook.io/ssh-auth-mount-path": "/home/ms/.ssh"}
    pods = render([statefulset("ms", "generic", role="pod", replicas=2, annotations=keys)])
    for pod in pods:
        spec = pod.pod["spec"]
        assert {
            "name": "mpi-ssh",
            "secret": {"secretName": "ms-ssh", "defaultMode": 0o600},
        } in spec["volumes"]
        mount = {"name": "mpi-ssh", "mountPath": "/home/ms/.ssh", "readOnly": True}
        assert mount in spec["containers"][0]["volumeMounts"]
        # Held until the sweeper has made the Secret and proven it the job's own.
        assert spec["schedulingGates"] == [{"name": "trainhook.io/waiting-for-owned-objects"}]
    assert not any(k.startswith(("OMPI_", "K_MPI")) for k in pods[0].env)


def test_ssh_keys_are_refused_off_on_an_mpi_job_and_a_key_path_without_them_elsewhere() -> None:
    with pytest.raises(RenderError) as caught:
        render([statefulset("w", "mpi", annotations={"trainhook.io/ssh-keys": "false"})])
    assert str(caught.value) == (
        "trainhook.io/ssh-keys: invalid value 'false': an mpi job's launcher reaches its workers "
        "over SSH, so it always gets the job's keys"
    )
    path = {"trainhook.io/ssh-auth-mount-path": "/home/u/.ssh"}
    with pytest.raises(RenderError) as caught:
        render([statefulset("g", "generic", annotations=path)])
    assert str(caught.value) == (
        "trainhook.io/ssh-auth-mount-path: invalid value '/home/u/.ssh': read by mpi jobs and "
        'jobs with trainhook.io/ssh-keys: "true" only, not generic'
    )


def test_a_non_root_container_of_a_job_with_ssh_keys_is_refused_at_its_workloads_admission() -> (
    None
):
    job = statefulset("g", "generic", annotations={"trainhook.io/ssh-keys": "true"})
    job["spec"]["template"]["spec"]["securityContext"] = {"runAsUser": 1000}
    # Refused when the StatefulSet is admitted, before any of its pods.
    with pytest.raises(Refused) as caught:
        read_workload(job, "default")
    assert str(caught.value) == (
        "trainhook.io/ssh-auth-mount-path: not set, but container generic runs as user 1000 "
        "(securityContext.runAsUser), who cannot read the job's SSH keys at /root/.ssh: set it "
        "to that user's ~/.ssh, e.g. /home/mpiuser/.ssh"
    )


def test_tpu_slices_that_do_not_divide_the_workers_refuse_the_workload_itself() -> None:
    job = statefulset("v6e", "jax", replicas=4, annotations={"trainhook.io/tpu-slices": "3"})
    with pytest.raises(InvalidSetting) as caught:
        mutate_workload(job, "CREATE", "default")
    assert str(caught.value) == (
        "trainhook.io/tpu-slices: invalid value '3': job v6e has 4 workers, which 3 slices "
        "cannot share equally: a slice is a whole number of TPU hosts, one worker each"
    )
