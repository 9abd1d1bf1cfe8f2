"""What every framework module provides, and the pod's place in the job it computes env from."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from webhook.topology import Topology


@dataclass(frozen=True)
class Placement:
    """One pod's place in a job: what its framework env is computed from."""

    topology: Topology
    role: str
    index: int
    hostname: str
    port: int | None
    nproc: int = 1
    elastic: tuple[int, int] | None = None

    @property
    def rank(self) -> int:
        return self.topology.global_rank(self.role, self.index)

    @property
    def host(self) -> str:
        return self.topology.host(self.role, self.index)

    def endpoint(self, host: str) -> str:
        return f"{host}:{self.port}" if self.port is not None else host

    def endpoints(self, role: str) -> str:
        return ",".join(self.endpoint(host) for host in self.topology.hosts(role))


EnvFunction = Callable[[Placement], dict[str, str]]


@dataclass(frozen=True)
class Framework:
    """A framework's conventions: role order, defaults, and the env its pods receive."""

    name: str
    roles: tuple[str, ...]  # in rank order; empty means any role, in the order they are listed
    default_role: str
    port: int | None
    container: str | None
    env: EnvFunction
    key_vars: tuple[str, ...] = ()  # what `trainhook render` shows per pod

    def allows(self, role: str) -> bool:
        return not self.roles or role in self.roles

    def order(self, roles: Iterable[str]) -> list[str]:
        present = set(roles)
        if not self.roles:
            return sorted(present)
        return [role for role in self.roles if role in present]
