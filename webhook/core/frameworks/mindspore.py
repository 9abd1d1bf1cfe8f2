"""MindSpore: the MS_* variables of its dynamic networking (scheduler, servers, workers)."""

from webhook.core.frameworks.base import Framework, Placement, Success

MS_ROLES = {"scheduler": "MS_SCHED", "ps": "MS_PSERVER", "worker": "MS_WORKER"}


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    result = {"MS_ROLE": MS_ROLES[placement.role]}
    if topology.has("scheduler"):
        result["MS_SCHED_HOST"] = topology.host("scheduler", 0)
    result |= {
        "MS_SCHED_PORT": str(placement.port),
        "MS_WORKER_NUM": str(topology.replicas("worker")),
        "MS_SERVER_NUM": str(topology.replicas("ps")),
        "MS_NODE_ID": placement.hostname,
    }
    return result


FRAMEWORK = Framework(
    name="mindspore",
    roles=("scheduler", "ps", "worker"),
    default_role="worker",
    port=2222,
    container="mindspore",
    env=env,
    success=Success(first_of=("worker",)),
    key_vars=("MS_ROLE", "MS_SCHED_HOST", "MS_WORKER_NUM", "MS_NODE_ID"),
)
