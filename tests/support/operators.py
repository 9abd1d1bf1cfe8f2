"""What each operator puts in its pods' env, written from the operator's own Go source (not from
Trainhook's docs), for the corpus under tests/corpus to be compared with.

Each function takes the job as the operator reads it and returns {(role, index): env}, the
values as the operator computes them. A value the kubelet fills from the pod is written
`<fieldRef:PATH>`; a value the operator picks at random, `<random>`.

Sources (Apache-2.0), at the commits tests/corpus names:
* kubeflow/training-operator release-1.9: pkg/controller.v1/{pytorch/envvar.go, pytorch/master.go,
  pytorch/elastic.go, tensorflow/tensorflow.go, paddlepaddle/envvar.go, xgboost/xgboost.go,
  jax/envvar.go, mpi/mpijob_controller.go};
* kubeflow/mpi-operator: pkg/controller/mpi_job_controller.go (launcher env, hostfile);
* PaddleFlow/paddle-operator: controllers/paddlejob_helper.go (ConfigMap and pod env);
* mindspore-ai/ms-operator: pkg/controllers/v1/msjob_controller.go (SetClusterSpec);
* volcano-sh/volcano: pkg/controllers/job/plugins/{env,svc,distributed-framework/*}.
"""

from __future__ import annotations

import json

Env = dict[str, str]
Pods = dict[tuple[str, int], Env]
POD_IP = "<fieldRef:status.podIP>"
POD_NAME = "<fieldRef:metadata.name>"
RANDOM = "<random>"


def _name(job: str, role: str, index: int) -> str:
    return f"{job}-{role}-{index}"


def pytorchjob(
    job: str,
    replicas: dict[str, int],
    port: int = 23456,
    nproc: str | None = None,
    elastic: tuple[int, int] | None = None,
    max_restarts: int | None = None,
) -> Pods:
    total = sum(replicas.values())
    per_node = int(nproc) if nproc and nproc.isdigit() else 1
    pods: Pods = {}
    for role, count in replicas.items():
        for index in range(count):
            env: Env = {"PYTHONUNBUFFERED": "1"}
            if "master" in replicas:
                master = _name(job, "master", 0)
                rank = index + 1 if role == "worker" else index
                env |= {
                    "MASTER_PORT": str(port),
                    "PET_MASTER_PORT": str(port),
                    "MASTER_ADDR": master,
                    "PET_MASTER_ADDR": master,
                    "WORLD_SIZE": str(total * per_node),
                    "RANK": str(rank),
                    "PET_NODE_RANK": str(rank),
                }
            if nproc is not None:
                env["PET_NPROC_PER_NODE"] = nproc
            if elastic is not None:
                env |= {
                    "PET_RDZV_ENDPOINT": f"{_name(job, 'worker', 0)}:{port}",
                    "PET_RDZV_BACKEND": "c10d",
                    "PET_NNODES": f"{elastic[0]}:{elastic[1]}",
                }
                if max_restarts is not None:
                    env["PET_MAX_RESTARTS"] = str(max_restarts)
            else:
                env["PET_NNODES"] = str(total)
            pods[(role, index)] = env
    return pods


def tfjob(job: str, namespace: str, replicas: dict[str, int], port: int = 2222) -> Pods:
    cluster = {
        role: [f"{_name(job, role, i)}.{namespace}.svc:{port}" for i in range(count)]
        for role, count in replicas.items()
    }
    return {
        (role, index): {
            "TF_CONFIG": json.dumps(
                {
                    "cluster": cluster,
                    "task": {"type": role, "index": index},
                    "environment": "cloud",
                }
            )
        }
        for role, count in replicas.items()
        for index in range(count)
    }


def kubeflow_paddlejob(job: str, workers: int, port: int = 36543) -> Pods:
    """A collective PaddleJob (workers only)."""
    pods: Pods = {}
    for index in range(workers):
        env = {"PYTHONUNBUFFERED": "1", "PADDLE_JOB_ID": job, "PADDLE_NNODES": str(workers)}
        if index == 0:
            env |= {"POD_IP_DUMMY": POD_IP, "PADDLE_MASTER": f"$(POD_IP_DUMMY):{port}"}
        else:
            env["PADDLE_MASTER"] = f"{_name(job, 'worker', 0)}:{port}"
        pods[("worker", index)] = env
    return pods


def xgboostjob(job: str, workers: int, master_port: int, worker_port: int) -> Pods:
    total = workers + 1
    addresses = ",".join(_name(job, "worker", i) for i in range(total - 1))
    pods: Pods = {}
    for role, count in (("master", 1), ("worker", workers)):
        for index in range(count):
            pods[(role, index)] = {
                "MASTER_PORT": str(master_port),
                "MASTER_ADDR": _name(job, "master", 0),
                "WORLD_SIZE": str(total),
                "RANK": str(index + 1 if role == "worker" else index),
                "PYTHONUNBUFFERED": "1",
                "WORKER_PORT": str(worker_port),
                "WORKER_ADDRS": addresses,
            }
    return pods


def jaxjob(job: str, workers: int, port: int = 6666) -> Pods:
    return {
        ("worker", index): {
            "PYTHONUNBUFFERED": "1",
            "COORDINATOR_PORT": str(port),
            "COORDINATOR_ADDRESS": _name(job, "worker", 0),
            "NUM_PROCESSES": str(workers),
            "PROCESS_ID": str(index),
        }
        for index in range(workers)
    }


def training_operator_mpijob(job: str, workers: int, slots: int) -> tuple[Pods, str]:
    """The v1 MPIJob: env on the launcher only, and its hostfile of short worker names."""
    launcher = {
        "OMPI_MCA_plm_rsh_agent": "/etc/mpi/kubexec.sh",
        "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
        "NVIDIA_VISIBLE_DEVICES": "",
        "NVIDIA_DRIVER_CAPABILITIES": "",
    }
    pods: Pods = {("launcher", 0): launcher}
    pods |= {("worker", i): {} for i in range(workers)}
    hostfile = "".join(f"{job}-worker-{i} slots={slots}\n" for i in range(workers))
    return pods, hostfile


def mpi_operator_mpijob(
    job: str, namespace: str, workers: int, slots: int, implementation: str = "OpenMPI"
) -> tuple[Pods, str]:
    """mpi-operator v2beta1: K_MPI_JOB_ROLE everywhere, the implementation's variables on the
    launcher, and a hostfile of the workers' full names."""
    launcher: Env = {"K_MPI_JOB_ROLE": "launcher"}
    if implementation == "OpenMPI":
        launcher |= {
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
            "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
            "OMPI_MCA_orte_set_default_slots": str(slots),
        }
    elif implementation == "Intel":
        launcher |= {
            "I_MPI_HYDRA_HOST_FILE": "/etc/mpi/hostfile",
            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": "-o ConnectionAttempts=10",
            "I_MPI_PERHOST": str(slots),
        }
    else:
        launcher |= {
            "HYDRA_HOST_FILE": "/etc/mpi/hostfile",
            "HYDRA_LAUNCH_EXTRA_ARGS": "-o ConnectionAttempts=10",
        }
    launcher |= {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
    pods: Pods = {("launcher", 0): launcher}
    pods |= {("worker", i): {"K_MPI_JOB_ROLE": "worker"} for i in range(workers)}
    # Open MPI's format, else Hydra's (Intel MPI, MPICH)
    line = "{} slots={}\n" if implementation == "OpenMPI" else "{}:{}\n"
    hostfile = "".join(
        line.format(f"{job}-worker-{i}.{job}.{namespace}.svc", slots) for i in range(workers)
    )
    return pods, hostfile


def paddle_operator_job(job: str, replicas: dict[str, int], port: int = 36000) -> Pods:
    """paddle-operator with intranet Service: the job's ConfigMap (envFrom) and each pod's own
    variables; pods are <job>-<type>-<i>, each its own Service."""
    roles = {"ps": "PSERVER", "worker": "TRAINER", "heter": "HETER"}
    endpoints = {
        role: [f"{_name(job, role, i)}:{port}" for i in range(count)]
        for role, count in replicas.items()
    }
    shared: Env = {"TRAINER_PORTS_NUM": "20", "PADDLE_PORT": RANDOM}
    if "ps" in replicas:
        shared["PADDLE_PSERVERS_IP_PORT_LIST"] = ",".join(endpoints["ps"])
    if "worker" in replicas:
        shared["PADDLE_TRAINER_ENDPOINTS"] = ",".join(endpoints["worker"])
        shared["PADDLE_TRAINERS"] = ",".join(e.rsplit(":", 1)[0] for e in endpoints["worker"])
        shared["PADDLE_TRAINERS_NUM"] = str(replicas["worker"])
    return {
        (role, index): shared
        | {
            "POD_IP": _name(job, role, index),
            "PADDLE_TRAINER_ID": str(index),
            "TRAINING_ROLE": roles[role],
            "PADDLE_TRAINING_ROLE": roles[role],
        }
        for role, count in replicas.items()
        for index in range(count)
    }


def msjob(replicas: dict[str, int], port: int = 2222) -> Pods:
    """ms-operator: the scheduler Service's cluster IP (its own pod IP on the scheduler) and
    port, the pod's name as MS_NODE_ID, the role and the counts."""
    roles = {"scheduler": "MS_SCHED", "ps": "MS_PSERVER", "worker": "MS_WORKER"}
    return {
        (role, index): {
            "MS_SCHED_HOST": POD_IP if role == "scheduler" else "<scheduler Service cluster IP>",
            "MS_NODE_ID": POD_NAME,
            "MS_SCHED_PORT": str(port),
            "MS_SERVER_NUM": str(replicas.get("ps", 0)),
            "MS_WORKER_NUM": str(replicas.get("worker", 0)),
            "MS_ROLE": roles[role],
        }
        for role, count in replicas.items()
        for index in range(count)
    }


def volcano_job(
    job: str,
    tasks: dict[str, int],
    plugins: set[str],
    pytorch: tuple[str, str, int] | None = None,
    mpi: tuple[str, str] | None = None,
) -> dict[tuple[str, int], Env]:
    """Keyed by (task, index). env: VK_TASK_INDEX and VC_TASK_INDEX; svc: every task's hosts
    (<job>-<task>-<i>.<job>) and count; pytorch (master task, worker task, port): MASTER_ADDR,
    MASTER_PORT, WORLD_SIZE, RANK; mpi (master task, worker task): MPI_HOST on the master."""
    pods: dict[tuple[str, int], Env] = {}
    for task, count in tasks.items():
        for index in range(count):
            env: Env = {}
            if "env" in plugins:
                env |= {"VK_TASK_INDEX": str(index), "VC_TASK_INDEX": str(index)}
            if "svc" in plugins:
                for other, n in tasks.items():
                    key = other.replace("-", "_").upper()
                    hosts = ",".join(f"{job}-{other}-{i}.{job}" for i in range(n))
                    env |= {f"VC_{key}_HOSTS": hosts, f"VC_{key}_NUM": str(n)}
            if pytorch is not None:
                master, worker, port = pytorch
                env |= {
                    "MASTER_ADDR": f"{job}-{master}-0.{job}",
                    "MASTER_PORT": str(port),
                    "WORLD_SIZE": str(tasks[master] + tasks[worker]),
                    "RANK": str(index + 1 if task == worker else index),
                }
            if mpi is not None and task == mpi[0]:
                n = tasks[mpi[1]]
                env["MPI_HOST"] = ",".join(f"{job}-{mpi[1]}-{i}.{job}" for i in range(n))
            pods[(task, index)] = env
    return pods
