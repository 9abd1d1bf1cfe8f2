"""Any other program: only the TRAINHOOK_* variables, any role names."""

from webhook.core.frameworks.base import Framework, Placement


def env(placement: Placement) -> dict[str, str]:
    return {}


FRAMEWORK = Framework(
    name="generic",
    roles=(),
    default_role="worker",
    port=None,
    container=None,
    env=env,
    key_vars=("TRAINHOOK_RANK", "TRAINHOOK_WORLD_SIZE"),
)
