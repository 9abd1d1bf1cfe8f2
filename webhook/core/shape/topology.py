"""A job's topology: its roles in order, their replica counts and their pods' stable hostnames."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypedDict

from webhook.core import contract, jsoncodec
from webhook.core.errors import InvalidName, InvalidSetting, Refused
from webhook.core.limits import (
    MAX_INT32,
    MAX_LABEL,
    is_dns_1035_label,
    is_dns_1123_label,
    shown,
)


class HostsEntry(TypedDict, total=False):
    """How one role's pods are named: pod i is `<pod>-<i + start>` under the Service `service`.

    `nproc` (processes per pod, written only when not 1) lets other roles count its slots.
    `port` (the port its pods listen on) is written for every role when the roles' ports
    differ, so each pod reaches each peer on that peer's port; without it a pod uses its own.
    """

    pod: str
    start: int
    service: str
    nproc: int
    port: int


# A job's roles: the frameworks have at most 5; a generic job names its own.
MAX_ROLES = 64


@dataclass(frozen=True)
class Role:
    name: str
    replicas: int
    pod: str
    start: int
    service: str
    nproc: int | None = 1  # None (no hosts entry for the role): as the pod reading the topology
    port: int | None = None  # None: the port of the pod reading the topology

    def hostname(self, index: int) -> str:
        return f"{self.pod}-{index + self.start}"


@dataclass(frozen=True)
class Topology:
    """Every role of a job in the framework's role order, and how to reach each pod."""

    job: str
    namespace: str
    framework: str
    roles: tuple[Role, ...]
    cluster_domain: str = ""
    _by_name: dict[str, Role] = field(init=False, repr=False, compare=False)
    _hosts: dict[str, list[str]] = field(init=False, repr=False, compare=False)
    _hash: int = field(init=False, repr=False, compare=False)
    _total: int = field(init=False, repr=False, compare=False)
    _stamped: dict[str, str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {role.name: role for role in self.roles})
        object.__setattr__(self, "_hosts", {})
        fields = (self.job, self.namespace, self.framework, self.roles, self.cluster_domain)
        object.__setattr__(self, "_hash", hash(fields))
        # What the job's lists will cost is known from the counts and names alone: refuse a
        # job whose host names alone cannot fit its peers ConfigMap before any list is built.
        total = sum(role.replicas for role in self.roles)
        object.__setattr__(self, "_total", total)
        object.__setattr__(self, "_stamped", None)
        if total > contract.MAX_PODS_PER_JOB:
            raise Refused(
                f"job {self.job} has {total} pods; Trainhook supports up to "
                f"{contract.MAX_PODS_PER_JOB} per job (one ConfigMap lists its peers)"
            )
        listed = 0
        for role in self.roles:
            last = role.hostname(max(role.replicas - 1, 0))
            if not is_dns_1123_label(last):
                raise InvalidName(
                    f"job {self.job}: pod hostname {shown(last)} of role {role.name} is not a "
                    f"DNS-1123 label of at most {MAX_LABEL} characters; shorten the name the "
                    "pods are named after (the StatefulSet, the Job or, for bare pods, the job)"
                )
            if not is_dns_1035_label(role.service):
                raise InvalidName(
                    f"job {self.job}: Service {shown(role.service)} of role {role.name} is not a "
                    f"DNS-1035 label of at most {MAX_LABEL} characters (it ends every host name "
                    "of the role); set the StatefulSet's serviceName or the pod's subdomain to one"
                )
            suffix = len(self._fqdn("", role.service))
            listed += role.replicas * (len(role.pod) + 2 + len(str(role.start + role.replicas)))
            listed += role.replicas * suffix
        if listed > contract.CONFIGMAP_DATA_LIMIT:
            raise Refused(
                f"job {self.job}: the host names of its {total} pods take {listed} bytes, more "
                f"than one ConfigMap holds ({contract.CONFIGMAP_DATA_LIMIT}); use fewer "
                "replicas or shorter names"
            )

    def __hash__(self) -> int:
        # Made once: the caches of a job's lists look a topology up for every pod, and a
        # dataclass's own __hash__ runs as Python, hashing every role again.
        return self._hash

    # Kept in fields, not functools.cached_property: the image compiles this class with mypyc,
    # which makes a cached_property a plain getter that computes again on every read.
    @property
    def stamped(self) -> dict[str, str]:
        """`stamp(self)`, made once; read it through `stamp`, which hands out a copy."""
        if self._stamped is None:
            counts = {role.name: role.replicas for role in self.roles}
            ports = len({role.port for role in self.roles}) > 1
            hosts = {role.name: _hosts_entry(role, ports) for role in self.roles}
            # Compact JSON; every name in it is a DNS label, so orjson writes the json module's
            # bytes.
            made = {
                contract.TOPOLOGY: jsoncodec.dumps(counts).decode(),
                contract.HOSTS: jsoncodec.dumps(hosts).decode(),
            }
            object.__setattr__(self, "_stamped", made)
            return made
        return self._stamped

    @property
    def total(self) -> int:
        return self._total

    def role_names(self) -> Iterator[str]:
        return (role.name for role in self.roles)

    def has(self, role: str) -> bool:
        return role in self._by_name

    def replicas(self, role: str) -> int:
        found = self._by_name.get(role)
        return found.replicas if found else 0

    def role(self, name: str) -> Role:
        return self._by_name[name]

    def host(self, role: str, index: int) -> str:
        entry = self._by_name[role]
        return self._fqdn(entry.hostname(index), entry.service)

    def hosts(self, role: str) -> list[str]:
        # Made once per topology: the common env and most frameworks list the same hosts.
        found = self._hosts.get(role)
        if found is None:
            entry = self._by_name.get(role)
            if entry is None:
                return []
            suffix = self._fqdn("", entry.service)
            found = [f"{entry.pod}-{i + entry.start}{suffix}" for i in range(entry.replicas)]
            self._hosts[role] = found
        return list(found)

    def first_rank(self, role: str) -> int:
        rank = 0
        for entry in self.roles:
            if entry.name == role:
                return rank
            rank += entry.replicas
        raise KeyError(role)

    def global_rank(self, role: str, index: int) -> int:
        return self.first_rank(role) + index

    def _fqdn(self, hostname: str, service: str) -> str:
        domain = f".{self.cluster_domain}" if self.cluster_domain else ""
        return f"{hostname}.{service}.{self.namespace}.svc{domain}"


def stamp(topology: Topology) -> dict[str, str]:
    """The annotations that carry a topology on a pod template (compact JSON, role order)."""
    return dict(topology.stamped)


def _hosts_entry(role: Role, ports: bool) -> HostsEntry:
    entry = HostsEntry(pod=role.pod, start=role.start, service=role.service)
    if role.nproc is not None and role.nproc != 1:
        entry["nproc"] = role.nproc
    if ports and role.port is not None:
        entry["port"] = role.port
    return entry


def topology_from_stamp(
    annotations: Mapping[str, str],
    *,
    job: str,
    namespace: str,
    framework: str,
    role_order: Sequence[str],
    cluster_domain: str = "",
) -> Topology | None:
    """Read a stamped topology back; None when the annotations carry none.

    Every pod of a job carries the same stamp, so what was read is kept for the next pods (a
    topology is immutable); a stamp that does not read raises each time.
    """
    raw = annotations.get(contract.TOPOLOGY)
    if raw is None:
        return None
    return _read_stamp(
        raw,
        annotations.get(contract.HOSTS),
        job,
        namespace,
        framework,
        tuple(role_order),
        cluster_domain,
    )


@lru_cache(maxsize=32)
def _read_stamp(
    raw: str,
    raw_hosts: str | None,
    job: str,
    namespace: str,
    framework: str,
    role_order: tuple[str, ...],
    cluster_domain: str,
) -> Topology:
    counts = _json_object(contract.TOPOLOGY, raw, 'a JSON object such as {"master":1,"worker":3}')
    if len(counts) > MAX_ROLES:
        raise InvalidSetting(contract.TOPOLOGY, raw, f"at most {MAX_ROLES} roles")
    replicas: dict[str, int] = {}
    for name, count in counts.items():
        if not is_dns_1035_label(name):
            raise InvalidSetting(
                contract.TOPOLOGY, raw, f"role {shown(name)} must be a DNS-1035 label (<= 63)"
            )
        if not _whole(count, MAX_INT32):
            raise InvalidSetting(
                contract.TOPOLOGY, raw, f"replicas of {name!r} must be from 0 to {MAX_INT32}"
            )
        replicas[name] = count
    if sum(replicas.values()) > contract.MAX_PODS_PER_JOB:
        raise Refused(
            f"job {job} has {sum(replicas.values())} pods; Trainhook supports up to "
            f"{contract.MAX_PODS_PER_JOB} per job (one ConfigMap lists its peers)"
        )
    hosts = (
        _json_object(contract.HOSTS, raw_hosts, 'a JSON object such as {"worker":{"pod":...}}')
        if raw_hosts
        else {}
    )
    names = list(counts) if not role_order else [r for r in role_order if r in counts]
    unknown = [name for name in counts if name not in names]
    if unknown:
        raise InvalidSetting(
            contract.TOPOLOGY, raw, f"roles of {framework} are {', '.join(role_order)}"
        )
    roles = []
    for name in names:
        if replicas[name] == 0:
            continue
        entry = hosts.get(name) or {}
        if not isinstance(entry, dict):
            raise InvalidSetting(contract.HOSTS, raw_hosts, f"{name!r} must map to an object")
        pod = entry.get("pod", f"{job}-{name}")
        start, service, nproc, port = (
            entry.get("start", 0),
            entry.get("service", job),
            entry.get("nproc", 1) if name in hosts else None,
            entry.get("port"),
        )
        if not (
            is_dns_1123_label(pod)
            and is_dns_1035_label(service)
            and _whole(start, MAX_INT32)
            and (nproc is None or (_whole(nproc, MAX_INT32) and nproc >= 1))
            and (port is None or (_whole(port, 65535) and port >= 1))
        ):
            raise InvalidSetting(
                contract.HOSTS,
                raw_hosts,
                "each role maps to pod (a DNS-1123 label), start (0 to 2147483647), service "
                "(a DNS-1035 label), nproc (1 to 2147483647) and port (1 to 65535)",
            )
        roles.append(Role(name, replicas[name], pod, start, service, nproc, port))
    return Topology(job, namespace, framework, tuple(roles), cluster_domain)


def _whole(value: object, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def _json_object(key: str, raw: str, allowed: str) -> dict[str, Any]:
    if len(raw) > contract.ANNOTATIONS_TOTAL_LIMIT:
        raise InvalidSetting(key, raw, f"{allowed}, at most {contract.ANNOTATIONS_TOTAL_LIMIT} B")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # ValueError: numbers over 4,300 digits too
        raise InvalidSetting(key, raw, allowed) from None
    if not isinstance(value, dict):
        raise InvalidSetting(key, raw, allowed)
    return value
