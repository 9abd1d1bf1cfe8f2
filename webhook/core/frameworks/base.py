"""What every framework module provides, and the pod's place in the job it computes env from."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from webhook.core.draft import Draft
from webhook.core.shape.peers import Lists, file_path
from webhook.core.shape.topology import Topology


@dataclass(frozen=True, init=False)
class Placement:
    """One pod's place in a job: what its framework env is computed from."""

    topology: Topology
    role: str
    index: int
    hostname: str
    port: int | None
    nproc: int = 1  # processes in this pod
    elastic: tuple[int, int] | None = None
    gpus: int = 0  # GPUs of the training container
    service_links: bool = True  # the kubelet gives the pod <SERVICE>_SERVICE_HOST variables
    # The job's peers ConfigMap when its lists are files from it rather than env.
    peers: str | None = None
    max_restarts: int | None = None  # torchrun restarts its worker group this often
    mpi_implementation: str = "OpenMPI"  # the MPI that reads the hostfile, as its format
    ssh_auth_mount_path: str | None = None  # where the training container's user finds ~/.ssh
    training: int | None = None  # the training container's position in spec.containers
    tpu_slices: int | None = None  # the TPU slices the job's workers make (trainhook.io/tpu-slices)

    # Written out: mypyc compiles this __init__, not a generated one (docs/architecture.md).
    def __init__(
        self,
        topology: Topology,
        role: str,
        index: int,
        hostname: str,
        port: int | None,
        nproc: int = 1,
        elastic: tuple[int, int] | None = None,
        gpus: int = 0,
        service_links: bool = True,
        peers: str | None = None,
        max_restarts: int | None = None,
        mpi_implementation: str = "OpenMPI",
        ssh_auth_mount_path: str | None = None,
        training: int | None = None,
        tpu_slices: int | None = None,
    ) -> None:
        object.__setattr__(self, "topology", topology)
        object.__setattr__(self, "role", role)
        object.__setattr__(self, "index", index)
        object.__setattr__(self, "hostname", hostname)
        object.__setattr__(self, "port", port)
        object.__setattr__(self, "nproc", nproc)
        object.__setattr__(self, "elastic", elastic)
        object.__setattr__(self, "gpus", gpus)
        object.__setattr__(self, "service_links", service_links)
        object.__setattr__(self, "peers", peers)
        object.__setattr__(self, "max_restarts", max_restarts)
        object.__setattr__(self, "mpi_implementation", mpi_implementation)
        object.__setattr__(self, "ssh_auth_mount_path", ssh_auth_mount_path)
        object.__setattr__(self, "training", training)
        object.__setattr__(self, "tpu_slices", tpu_slices)

    @property
    def rank(self) -> int:
        return self.topology.global_rank(self.role, self.index)

    @property
    def host(self) -> str:
        return self.topology.host(self.role, self.index)

    def nproc_of(self, role: str) -> int:
        """Processes per pod of `role`, as the topology records them, else this pod's own."""
        nproc = self.topology.role(role).nproc if self.topology.has(role) else None
        return nproc if nproc is not None else self.nproc

    @property
    def processes(self) -> int:
        """Processes of the whole job: every pod's, as its role runs them."""
        return sum(r.replicas * self.nproc_of(r.name) for r in self.topology.roles)

    @property
    def first_process(self) -> int:
        """The global rank of this pod's first process: the processes of every pod before it."""
        before = 0
        for role in self.topology.roles:
            if role.name == self.role:
                return before + self.index * self.nproc_of(role.name)
            before += role.replicas * self.nproc_of(role.name)
        raise KeyError(self.role)

    def port_of(self, role: str) -> int | None:
        """The port the pods of `role` listen on: the one the topology records for the role,
        else (all roles on one port) this pod's own."""
        port = self.topology.role(role).port if self.topology.has(role) else None
        return port if port is not None else self.port

    def endpoint(self, host: str, role: str | None = None) -> str:
        """`host:port` on the port of `role` (this pod's own when None)."""
        port = self.port if role is None else self.port_of(role)
        return f"{host}:{port}" if port is not None else host

    def endpoints(self, role: str) -> str:
        return ",".join(self.endpoint(host, role) for host in self.topology.hosts(role))

    def listed(self, name: str, lists: Lists) -> dict[str, str]:
        """A job-wide list: `name` itself while the job is small, else `<name>_FILE`."""
        if self.peers:
            return {f"{name}_FILE": file_path(name)}
        return {name: lists(self.topology, self.port)[name]}


EnvFunction = Callable[[Placement], dict[str, str]]
# Variables the kubelet fills from the pod itself: name -> fieldRef.fieldPath.
FieldEnvFunction = Callable[[Placement], dict[str, str]]


@dataclass(frozen=True)
class ClusterService:
    """A ClusterIP Service a job of the framework needs, besides its headless Service: the
    sweeper creates it, owned by the job's workloads."""

    name: str
    selector: Mapping[str, str]
    port: int


# The Services of a job: from its name, the roles it has and its port.
ServicesFunction = Callable[[str, Iterable[str], int | None], tuple[ClusterService, ...]]
# Pod plumbing beyond env (volumes, mounts, annotations), written into the pod's draft.
# What a framework adds to every pod of a role (volumes, mounts, annotations). It may read only
# the role-wide part of the placement, not the pod's index: the pods of one workload share it.
PodExtras = Callable[[Draft, Mapping[str, Any], Placement], None]


@dataclass(frozen=True)
class Success:
    """When a job of the framework has succeeded, unless trainhook.io/success-policy says
    otherwise: replica 0 of the first of `first_of` roles the job has; else every replica of
    `every`; else (neither present) every pod of the job."""

    first_of: tuple[str, ...] = ()
    every: str | None = None


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
    success: Success = Success()
    pod_extras: PodExtras | None = None
    elastic: bool = False  # takes trainhook.io/elastic (a rendezvous that admits min:max nodes)
    ssh_keys: bool = False  # its pods reach each other over ssh with the job's key Secret
    tpu: bool = False  # takes trainhook.io/tpu-slices (its workers are TPU hosts)
    # Refuses a workload's pod template its pods could not run with, from the template,
    # trainhook.io/ssh-auth-mount-path and the position of its training container; at the
    # workload's admission, before any pod is refused.
    check_template: Callable[[Mapping[str, Any], str | None, int | None], None] | None = None
    field_env: FieldEnvFunction | None = None
    services: ServicesFunction | None = None
    # The framework's job-wide lists (the same for every pod), beyond TRAINHOOK_<ROLE>_HOSTS:
    # in env while the job is small, else files of the job's peers ConfigMap.
    lists: Lists | None = None
    # Roles that have at most one replica (rank 0, the coordinator its peers are pointed at).
    single: tuple[str, ...] = ()
    # Roles that cannot run without another: role -> the roles of which the job needs one.
    needs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def allows(self, role: str) -> bool:
        return not self.roles or role in self.roles

    def order(self, roles: Iterable[str]) -> list[str]:
        present = set(roles)
        if not self.roles:
            return sorted(present)
        return [role for role in self.roles if role in present]
