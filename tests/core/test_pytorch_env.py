from typing import Any

from tests.support.builders import env, statefulset


def master_and_two_workers(**annotations: str) -> dict[str, dict[str, str]]:
    return env(
        statefulset("pt-master", "pytorch", role="master", job="pt", annotations=annotations),
        statefulset(
            "pt-worker", "pytorch", role="worker", job="pt", replicas=2, annotations=annotations
        ),
    )


def test_worker_1_of_a_master_and_two_workers_job_gets_rank_2_and_the_whole_contract() -> None:
    master = "pt-master-0.pt.default.svc"
    assert master_and_two_workers()["pt-worker-1"] == {
        "TRAINHOOK_JOB": "pt",
        "TRAINHOOK_ROLE": "worker",
        "TRAINHOOK_ROLE_INDEX": "1",
        "TRAINHOOK_RANK": "2",
        "TRAINHOOK_WORLD_SIZE": "3",
        "TRAINHOOK_MASTER_HOSTS": master,
        "TRAINHOOK_MASTER_NUM": "1",
        "TRAINHOOK_WORKER_HOSTS": "pt-worker-0.pt.default.svc,pt-worker-1.pt.default.svc",
        "TRAINHOOK_WORKER_NUM": "2",
        "PYTHONUNBUFFERED": "1",
        "MASTER_ADDR": master,
        "PET_MASTER_ADDR": master,
        "MASTER_PORT": "23456",
        "PET_MASTER_PORT": "23456",
        "NNODES": "3",
        "PET_NNODES": "3",
        "NODE_RANK": "2",
        "PET_NODE_RANK": "2",
        "NPROC_PER_NODE": "1",
        "PET_NPROC_PER_NODE": "1",
        "WORLD_SIZE": "3",
        "RANK": "2",
    }


def test_the_master_is_rank_0() -> None:
    master = master_and_two_workers()["pt-master-0"]
    assert (master["RANK"], master["NODE_RANK"], master["TRAINHOOK_ROLE"]) == ("0", "0", "master")


def test_without_a_master_role_worker_0_is_the_master_address() -> None:
    pods = env(statefulset("ddp", "pytorch", replicas=3))
    assert {p["MASTER_ADDR"] for p in pods.values()} == {"ddp-0.ddp.default.svc"}
    assert [pods[f"ddp-{i}"]["RANK"] for i in range(3)] == ["0", "1", "2"]


def test_nproc_per_node_multiplies_world_size_and_rank_but_not_node_rank() -> None:
    pods = env(
        statefulset("ddp", "pytorch", replicas=4, annotations={"trainhook.io/nproc-per-node": "2"})
    )
    third = pods["ddp-3"]
    assert {
        k: third[k]
        for k in (
            "WORLD_SIZE",
            "RANK",
            "NODE_RANK",
            "NNODES",
            "NPROC_PER_NODE",
            "PET_NPROC_PER_NODE",
            "TRAINHOOK_WORLD_SIZE",
        )
    } == {
        "WORLD_SIZE": "8",
        "RANK": "6",
        "NODE_RANK": "3",
        "NNODES": "4",
        "NPROC_PER_NODE": "2",
        "PET_NPROC_PER_NODE": "2",
        "TRAINHOOK_WORLD_SIZE": "4",
    }


def test_nproc_defaults_to_the_gpu_count() -> None:
    pods = env(statefulset("ddp", "pytorch", replicas=2, annotations={"trainhook.io/gpus": "4"}))
    assert (pods["ddp-1"]["NPROC_PER_NODE"], pods["ddp-1"]["WORLD_SIZE"]) == ("4", "8")


def test_elastic_jobs_get_a_node_range_and_a_c10d_rendezvous() -> None:
    pods = env(
        statefulset("el", "pytorch", replicas=3, annotations={"trainhook.io/elastic": "2:4"})
    )
    first = pods["el-0"]
    assert {
        k: v for k, v in first.items() if k.startswith(("PET_RDZV", "PET_NNODES", "NNODES"))
    } == {
        "NNODES": "2:4",
        "PET_NNODES": "2:4",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": "el-0.el.default.svc:23456",
        "PET_RDZV_ID": "el",
    }


def test_the_port_annotation_sets_master_port() -> None:
    pods = master_and_two_workers(**{"trainhook.io/port": "29500"})
    assert pods["pt-worker-0"]["MASTER_PORT"] == "29500"


def test_a_cluster_domain_is_appended_to_every_host() -> None:
    from webhook.core.render import render

    [pod] = render([statefulset("solo", "pytorch")], cluster_domain="cluster.local")
    assert pod.env["MASTER_ADDR"] == "solo-0.solo.default.svc.cluster.local"


def gpu_container(count: int, resource: str = "nvidia.com/gpu") -> list[dict[str, Any]]:
    return [{"name": "pytorch", "image": "t", "resources": {"limits": {resource: count}}}]


def test_a_training_container_gpu_limit_set_the_kubeflow_way_starts_one_process_per_gpu() -> None:
    pods = env(statefulset("ddp", "pytorch", replicas=2, containers=gpu_container(8)))
    assert {k: pods["ddp-1"][k] for k in ("PET_NPROC_PER_NODE", "WORLD_SIZE", "RANK")} == {
        "PET_NPROC_PER_NODE": "8",
        "WORLD_SIZE": "16",
        "RANK": "8",
    }


def test_nproc_per_node_auto_means_one_process_per_gpu_as_in_the_training_operator() -> None:
    pods = env(
        statefulset(
            "ddp",
            "pytorch",
            replicas=2,
            containers=gpu_container(4),
            annotations={"trainhook.io/nproc-per-node": "auto"},
        )
    )
    assert (pods["ddp-0"]["NPROC_PER_NODE"], pods["ddp-0"]["WORLD_SIZE"]) == ("4", "8")


def test_the_configured_gpu_resource_is_the_one_counted() -> None:
    annotations = {"trainhook.io/gpu-resource": "amd.com/gpu"}
    counted = env(
        statefulset(
            "ddp", "pytorch", containers=gpu_container(2, "amd.com/gpu"), annotations=annotations
        )
    )
    other = env(statefulset("ddp", "pytorch", containers=gpu_container(2, "amd.com/gpu")))
    assert (counted["ddp-0"]["NPROC_PER_NODE"], other["ddp-0"]["NPROC_PER_NODE"]) == ("2", "1")


def test_an_explicit_nproc_per_node_wins_over_the_gpu_count() -> None:
    pods = env(
        statefulset(
            "ddp",
            "pytorch",
            containers=gpu_container(8),
            annotations={"trainhook.io/nproc-per-node": "2"},
        )
    )
    assert pods["ddp-0"]["NPROC_PER_NODE"] == "2"
