"""JAX: what jax.distributed.initialize needs (coordinator, process count, process id)."""

from webhook.core.frameworks.base import Framework, Placement, Success


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    return {
        "COORDINATOR_ADDRESS": topology.host(topology.roles[0].name, 0),
        "COORDINATOR_PORT": str(placement.port_of(topology.roles[0].name)),
        "NUM_PROCESSES": str(topology.total),
        "PROCESS_ID": str(placement.rank),
    }


FRAMEWORK = Framework(
    name="jax",
    roles=("worker",),
    default_role="worker",
    port=6666,
    container="jax",
    env=env,
    success=Success(every="worker"),
    key_vars=("COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID"),
)
