"""PyTorch (torchrun / env://): the variables Kubeflow's PyTorchJob sets, with and without PET_."""

from webhook.core.frameworks.base import Framework, Placement, Success


def rank0_role(placement: Placement) -> str:
    return "master" if placement.topology.has("master") else "worker"


def rank0_host(placement: Placement) -> str:
    return placement.topology.host(rank0_role(placement), 0)


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    master = rank0_host(placement)
    port = placement.port_of(rank0_role(placement))  # the master's, where every pod connects
    nnodes = (
        f"{placement.elastic[0]}:{placement.elastic[1]}"
        if placement.elastic
        else str(topology.total)
    )
    values = {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(port),
        "NNODES": nnodes,
        "NODE_RANK": str(placement.rank),
        "NPROC_PER_NODE": str(placement.nproc),
    }
    result = {}
    for name, value in values.items():
        result[name] = value
        result[f"PET_{name}"] = value
    # Processes, counted per role: a master may run fewer than the workers, as torchrun allows.
    result["WORLD_SIZE"] = str(placement.processes)
    result["RANK"] = str(placement.first_process)
    if placement.max_restarts is not None:
        result["PET_MAX_RESTARTS"] = str(placement.max_restarts)
    if placement.elastic:
        result["PET_RDZV_BACKEND"] = "c10d"
        result["PET_RDZV_ENDPOINT"] = f"{master}:{port}"
        result["PET_RDZV_ID"] = topology.job
    return result


FRAMEWORK = Framework(
    name="pytorch",
    roles=("master", "worker"),
    default_role="worker",
    port=23456,
    container="pytorch",
    env=env,
    success=Success(first_of=("master",), every="worker"),
    elastic=True,
    key_vars=("MASTER_ADDR", "NODE_RANK", "NNODES", "WORLD_SIZE", "RANK"),
    single=("master",),
)
