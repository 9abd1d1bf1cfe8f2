"""TensorFlow: TF_CONFIG as tf.distribute's cluster resolvers read it."""

from functools import lru_cache

from webhook.core import jsoncodec
from webhook.core.frameworks.base import Framework, Placement, Success
from webhook.core.shape.peers import file_path
from webhook.core.shape.topology import Topology


def cluster(topology: Topology, port: int | None) -> dict[str, list[str]]:
    """Every role's hosts, each on its role's port (`port` when the roles share one)."""
    result = {}
    for role in topology.roles:
        own = role.port if role.port is not None else port  # as Placement.endpoint
        suffix = "" if own is None else f":{own}"
        result[role.name] = [host + suffix for host in topology.hosts(role.name)]
    return result


@lru_cache(maxsize=8)
def lists(topology: Topology, port: int | None) -> dict[str, str]:
    """The file of a large job: TF_CONFIG without its task, which each pod adds from
    TRAINHOOK_ROLE and TRAINHOOK_ROLE_INDEX before TensorFlow starts."""
    config = {"cluster": cluster(topology, port), "environment": "cloud"}
    return {"TF_CONFIG": jsoncodec.dumps(config).decode()}


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    if topology.total <= 1:
        return {}
    if placement.peers:
        return {"TF_CONFIG_FILE": file_path("TF_CONFIG")}
    tf_config = {
        "cluster": cluster(topology, placement.port),
        "task": {"type": placement.role, "index": placement.index},
        "environment": "cloud",
    }
    # Compact JSON, as json.dumps(..., separators=(",", ":")) writes it for the ASCII host names
    # Kubernetes allows.
    return {"TF_CONFIG": jsoncodec.dumps(tf_config).decode()}


FRAMEWORK = Framework(
    name="tensorflow",
    roles=("chief", "master", "ps", "worker", "evaluator"),
    default_role="worker",
    port=2222,
    container="tensorflow",
    env=env,
    success=Success(first_of=("chief", "master", "worker")),
    key_vars=("TF_CONFIG",),
    lists=lists,
    single=("chief", "master"),
    # Parameter servers and an evaluator serve or watch a training task; they never train.
    needs={"ps": ("chief", "master", "worker"), "evaluator": ("chief", "master", "worker")},
)
