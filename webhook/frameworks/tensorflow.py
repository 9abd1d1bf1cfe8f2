"""TensorFlow: TF_CONFIG as tf.distribute's cluster resolvers read it."""

import json

from webhook.frameworks.base import Framework, Placement


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    if topology.total <= 1:
        return {}
    cluster = {
        role.name: [placement.endpoint(host) for host in topology.hosts(role.name)]
        for role in topology.roles
    }
    tf_config = {
        "cluster": cluster,
        "task": {"type": placement.role, "index": placement.index},
        "environment": "cloud",
    }
    return {"TF_CONFIG": json.dumps(tf_config, separators=(",", ":"))}


FRAMEWORK = Framework(
    name="tensorflow",
    roles=("chief", "master", "ps", "worker", "evaluator"),
    default_role="worker",
    port=2222,
    container="tensorflow",
    env=env,
    key_vars=("TF_CONFIG",),
)
