"""What a compatibility layer provides: the variables and files a scheduler or operator gave
its pods, so that scripts written for it run unchanged on a Trainhook job."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from webhook.core.frameworks.base import Framework, Placement, PodExtras
from webhook.core.shape.peers import Lists

# The variables of one pod, from its framework (what it may read of its conventions) and place.
CompatEnv = Callable[[Framework, Placement], dict[str, str]]


@dataclass(frozen=True)
class Compat:
    name: str  # the value of trainhook.io/compat
    env: CompatEnv
    frameworks: tuple[str, ...] = ()  # the frameworks whose jobs it serves; empty: every one
    # Job-wide lists it adds, beyond the framework's: env while the job is small, else files of
    # the job's peers ConfigMap.
    lists: Lists | None = None
    pod_extras: PodExtras | None = None
    key_vars: tuple[str, ...] = ()  # what `trainhook render` shows per pod, after the framework's

    def allows(self, framework: Framework) -> bool:
        return not self.frameworks or framework.name in self.frameworks
