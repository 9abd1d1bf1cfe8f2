"""PaddlePaddle: the launch variables paddle.distributed reads, collective and parameter-server."""

from webhook.frameworks.base import Framework, Placement

TRAINING_ROLES = {"ps": "PSERVER", "worker": "TRAINER", "heter": "HETER"}


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    master = topology.host("master" if topology.has("master") else "worker", 0)
    result = {
        "PADDLE_JOB_ID": topology.job,
        "PADDLE_NNODES": str(topology.total),
        "PADDLE_MASTER": placement.endpoint(master),
    }
    if placement.role == "worker":
        result["PADDLE_TRAINER_ID"] = str(placement.index)
    result |= {
        "PADDLE_TRAINERS_NUM": str(topology.replicas("worker")),
        "PADDLE_TRAINER_ENDPOINTS": placement.endpoints("worker"),
        "PADDLE_CURRENT_ENDPOINT": placement.endpoint(placement.host),
        "PADDLE_PORT": str(placement.port),
        "POD_IP": placement.host,
    }
    parameter_server = topology.has("ps") or topology.has("heter")
    if parameter_server:
        training_role = TRAINING_ROLES.get(placement.role)
        if training_role:
            result["TRAINING_ROLE"] = training_role
            result["PADDLE_TRAINING_ROLE"] = training_role
        result["PADDLE_PSERVERS_IP_PORT_LIST"] = placement.endpoints("ps")
        if topology.has("heter"):
            result["PADDLE_HETER_ENDPOINTS"] = placement.endpoints("heter")
    return result


FRAMEWORK = Framework(
    name="paddle",
    roles=("master", "ps", "worker", "heter"),
    default_role="worker",
    port=36543,
    container="paddle",
    env=env,
    key_vars=("PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT", "TRAINING_ROLE"),
)
