"""JAX: what jax.distributed.initialize needs (coordinator, process count, process id).

JAX itself reads `JAX_COORDINATOR_ADDRESS` (`host:port`) when called without a coordinator; the
`JAX_` names are Kubeflow Trainer's, the unprefixed ones the training-operator's JAXJob's.
"""

from webhook.core.frameworks.base import Framework, Placement, Success


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    coordinator = topology.host(topology.roles[0].name, 0)
    port = str(placement.port_of(topology.roles[0].name))
    processes, process_id = str(topology.total), str(placement.rank)
    return {
        "COORDINATOR_ADDRESS": coordinator,
        "COORDINATOR_PORT": port,
        "NUM_PROCESSES": processes,
        "PROCESS_ID": process_id,
        "JAX_COORDINATOR_ADDRESS": f"{coordinator}:{port}",
        "JAX_NUM_PROCESSES": processes,
        "JAX_PROCESS_ID": process_id,
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
