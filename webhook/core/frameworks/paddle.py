"""PaddlePaddle: the launch variables paddle.distributed reads, collective and parameter-server."""

from functools import lru_cache

from webhook.core.frameworks.base import Framework, Placement, Success
from webhook.core.shape.topology import Topology

LOOPBACK = "127.0.0.1"
# A `master` is a parameter server, as in the training-operator's PaddleJob (which runs PS mode
# whenever a Master replica exists); `ps` is the paddle-operator's name for the same.
SERVER_ROLES = ("master", "ps")
_PS_ROLES = (*SERVER_ROLES, "heter")
TRAINING_ROLES = {"master": "PSERVER", "ps": "PSERVER", "worker": "TRAINER", "heter": "HETER"}


@lru_cache(maxsize=8)
def lists(topology: Topology, port: int | None) -> dict[str, str]:
    """The endpoint lists, the same for every pod of the job."""

    def endpoints(role: str) -> str:
        own = topology.role(role).port if topology.has(role) else None
        own = own if own is not None else port  # the role's port, as Placement.endpoint
        suffix = "" if own is None else f":{own}"
        return ",".join(host + suffix for host in topology.hosts(role))

    result = {"PADDLE_TRAINER_ENDPOINTS": endpoints("worker")}
    if any(topology.has(role) for role in _PS_ROLES):
        result["PADDLE_PSERVERS_IP_PORT_LIST"] = ",".join(
            endpoints(role) for role in SERVER_ROLES if topology.has(role)
        )
        if topology.has("heter"):
            result["PADDLE_HETER_ENDPOINTS"] = endpoints("heter")
    return result


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    # Master 0, else worker 0; a parameter-server job whose workers are not there yet uses its
    # first role, so its servers still start.
    master_role = next(
        (role for role in ("master", "worker") if topology.has(role)), topology.roles[0].name
    )
    master = topology.host(master_role, 0)
    if (placement.role, placement.index) == (master_role, 0):
        # paddle.distributed.launch starts its rendezvous server only when the master address is
        # 127.0.0.1 or the pod's own IP; a DNS name, even its own, makes every pod wait forever.
        master = LOOPBACK
    result = {
        "PADDLE_JOB_ID": topology.job,
        "PADDLE_NNODES": str(topology.total),
        "PADDLE_MASTER": placement.endpoint(master, master_role),
    }
    if placement.role == "worker":
        result["PADDLE_TRAINER_ID"] = str(placement.index)
    result["PADDLE_TRAINERS_NUM"] = str(topology.replicas("worker"))
    result |= placement.listed("PADDLE_TRAINER_ENDPOINTS", lists)
    result |= {
        "PADDLE_CURRENT_ENDPOINT": placement.endpoint(placement.host, placement.role),
        "PADDLE_PORT": str(placement.port_of(placement.role)),
        "POD_IP": placement.host,
    }
    parameter_server = any(topology.has(role) for role in _PS_ROLES)
    if not parameter_server:
        # Collective: paddle.distributed.launch starts this many trainers in the pod.
        result["PADDLE_NPROC_PER_NODE"] = str(placement.nproc)
        return result
    training_role = TRAINING_ROLES[placement.role]
    result["TRAINING_ROLE"] = training_role
    result["PADDLE_TRAINING_ROLE"] = training_role
    # What launch starts in this pod: one server or one trainer, as the PaddleJob does.
    if training_role == "PSERVER":
        result["PADDLE_SERVER_NUM"] = "1"
    elif training_role == "TRAINER":
        result["PADDLE_TRAINER_NUM"] = "1"
    result |= placement.listed("PADDLE_PSERVERS_IP_PORT_LIST", lists)
    if topology.has("heter"):
        result |= placement.listed("PADDLE_HETER_ENDPOINTS", lists)
    return result


FRAMEWORK = Framework(
    name="paddle",
    roles=("master", "ps", "worker", "heter"),
    default_role="worker",
    port=36543,
    container="paddle",
    env=env,
    success=Success(every="worker"),
    lists=lists,
    key_vars=("PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT", "TRAINING_ROLE"),
    # Servers (master or ps) and heter workers serve the trainers, the workers.
    needs={"master": ("worker",), "ps": ("worker",), "heter": ("worker",)},
)
