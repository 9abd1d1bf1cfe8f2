"""The variables every framework's pods receive."""

from webhook.core.frameworks.base import Placement


def env_key(role: str) -> str:
    return role.upper().replace("-", "_")


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
        key = env_key(role.name)
        env[f"TRAINHOOK_{key}_HOSTS"] = ",".join(topology.hosts(role.name))
        env[f"TRAINHOOK_{key}_NUM"] = str(role.replicas)
    env["PYTHONUNBUFFERED"] = "1"
    return env
