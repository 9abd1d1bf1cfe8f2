"""XGBoost (Rabit / collective tracker): the variables Kubeflow's XGBoostJob sets."""

from functools import lru_cache

from webhook.core.frameworks.base import Framework, Placement, Success
from webhook.core.shape.topology import Topology


@lru_cache(maxsize=8)
def lists(topology: Topology, port: int | None) -> dict[str, str]:
    return {"WORKER_ADDRS": ",".join(topology.hosts("worker"))}


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    master_role = "master" if topology.has("master") else "worker"
    return {
        "MASTER_ADDR": topology.host(master_role, 0),
        "MASTER_PORT": str(placement.port_of(master_role)),
        "WORLD_SIZE": str(topology.total),
        "RANK": str(placement.rank),
        "WORKER_PORT": str(placement.port_of("worker")),
    } | placement.listed("WORKER_ADDRS", lists)


FRAMEWORK = Framework(
    name="xgboost",
    roles=("master", "worker"),
    default_role="worker",
    port=9999,
    container="xgboost",
    env=env,
    success=Success(first_of=("master",)),
    lists=lists,
    key_vars=("MASTER_ADDR", "WORLD_SIZE", "RANK"),
    single=("master",),
)
