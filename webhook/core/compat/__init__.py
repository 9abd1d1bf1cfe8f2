"""`trainhook.io/compat`: a job's pods also get what its former scheduler or operator gave them.

One module per layer; this registry maps the annotation's value to it.
"""

from __future__ import annotations

from functools import lru_cache

from webhook.core.compat import paddle_operator, volcano
from webhook.core.compat.base import Compat
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.shape.peers import Lists
from webhook.core.shape.topology import Topology

COMPATS: dict[str, Compat] = {
    layer.COMPAT.name: layer.COMPAT for layer in (volcano, paddle_operator)
}


@lru_cache(maxsize=32)
def job_lists(framework: str, compat: str | None) -> Lists | None:
    """The lists of a job past the inline bound: its framework's and its compat layer's. The
    same function for the same pair, so the peers ConfigMap of a topology is made once."""
    own = FRAMEWORKS[framework].lists
    extra = COMPATS[compat].lists if compat is not None else None
    if own is None or extra is None:
        return own or extra

    def both(topology: Topology, port: int | None) -> dict[str, str]:
        return own(topology, port) | extra(topology, port)

    return both


__all__ = ["COMPATS", "Compat", "job_lists"]
