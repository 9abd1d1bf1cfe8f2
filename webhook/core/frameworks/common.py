"""The variables every framework's pods receive."""

from webhook.core.frameworks.base import Placement
from webhook.core.shape.peers import env_key, file_path, host_list


def common_env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    env = {
        "TRAINHOOK_JOB": topology.job,
        "TRAINHOOK_ROLE": placement.role,
        "TRAINHOOK_ROLE_INDEX": str(placement.index),
        "TRAINHOOK_RANK": str(placement.rank),
        "TRAINHOOK_WORLD_SIZE": str(topology.total),
    }
    for role in topology.roles:
        key = f"TRAINHOOK_{env_key(role.name)}_HOSTS"
        if placement.peers:
            env[f"{key}_FILE"] = file_path(key)
        else:
            env[key] = host_list(topology, role.name)
        env[f"TRAINHOOK_{env_key(role.name)}_NUM"] = str(role.replicas)
    env["PYTHONUNBUFFERED"] = "1"
    return env
