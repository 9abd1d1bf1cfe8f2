"""XGBoost (Rabit / collective tracker): the variables Kubeflow's XGBoostJob sets."""

from webhook.core.frameworks.base import Framework, Placement, Success


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    master = topology.host("master" if topology.has("master") else "worker", 0)
    return {
        "MASTER_ADDR": master,
        "MASTER_PORT": str(placement.port),
        "WORLD_SIZE": str(topology.total),
        "RANK": str(placement.rank),
        "WORKER_PORT": str(placement.port),
        "WORKER_ADDRS": ",".join(topology.hosts("worker")),
    }


FRAMEWORK = Framework(
    name="xgboost",
    roles=("master", "worker"),
    default_role="worker",
    port=9999,
    container="xgboost",
    env=env,
    success=Success(first_of=("master",)),
    key_vars=("MASTER_ADDR", "WORLD_SIZE", "RANK"),
)
