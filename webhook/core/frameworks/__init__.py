"""One module per framework; this registry maps the `trainhook.io/framework` label to it."""

from webhook.core.frameworks import (
    generic,
    jax,
    mindspore,
    mpi,
    paddle,
    pytorch,
    tensorflow,
    xgboost,
)
from webhook.core.frameworks.base import Framework, Placement

FRAMEWORKS: dict[str, Framework] = {
    module.FRAMEWORK.name: module.FRAMEWORK
    for module in (pytorch, tensorflow, paddle, mindspore, mpi, xgboost, jax, generic)
}

__all__ = ["FRAMEWORKS", "Framework", "Placement"]
