"""Peer lists of large jobs: written once per job in a ConfigMap, not once in every pod.

A job small enough (at most INLINE_MAX_PODS pods whose host names take at most
INLINE_MAX_HOST_BYTES) keeps every list in its pods' env. A larger one gets, in each pod,
`<VAR>_FILE` = /etc/trainhook/<VAR> instead of each list `<VAR>`, and the files come from the
ConfigMap `<job>-peers-<digest>`: the digest is that of its content, so a pod can only ever mount
the lists of its own topology (the kubelet holds the pod until the sweeper has created it), and
the ConfigMap never changes once written (it is immutable).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from webhook.core import contract
from webhook.core.errors import Refused
from webhook.core.shape.topology import Topology

# Up to this many pods, and this many bytes of host names, lists stay in env: with every
# framework's own copy of them (TF_CONFIG, Paddle's endpoints, the MPI hostfile) a pod then
# receives under 8 KiB from Trainhook.
INLINE_MAX_PODS = 64
INLINE_MAX_HOST_BYTES = 2560
PEERS_DATA_LIMIT = contract.CONFIGMAP_DATA_LIMIT
DIGEST_LENGTH = 10

Lists = Callable[[Topology, "int | None"], dict[str, str]]


@dataclass(frozen=True)
class PeerFiles:
    """The ConfigMap of one job topology: its name and its data (file name -> content).

    The name carries the digest of the data, so two are equal when their names are."""

    name: str
    data: dict[str, str] = field(compare=False)
    _digest: str | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_digest", None)  # mypyc's __init__ sets no init=False field

    # Kept in a field, not functools.cached_property: the image compiles this class with mypyc,
    # which makes a cached_property a plain getter that dumps and hashes the data on every read.
    @property
    def digest(self) -> str:
        if self._digest is None:
            digest = content_digest(self.data)
            object.__setattr__(self, "_digest", digest)
            return digest
        return self._digest

    @property
    def size(self) -> int:
        return sum(len(key) + len(value) for key, value in self.data.items())


def env_key(role: str) -> str:
    return role.upper().replace("-", "_")


def host_list(topology: Topology, role: str) -> str:
    return ",".join(topology.hosts(role))


def common_lists(topology: Topology) -> dict[str, str]:
    """TRAINHOOK_<ROLE>_HOSTS of every role."""
    return {
        f"TRAINHOOK_{env_key(role.name)}_HOSTS": host_list(topology, role.name)
        for role in topology.roles
    }


def inline(topology: Topology) -> bool:
    """Whether the job's lists stay in its pods' env (the same answer for every pod of it)."""
    if topology.total > INLINE_MAX_PODS:
        return False
    size = sum(len(host_list(topology, role.name)) for role in topology.roles)
    return size <= INLINE_MAX_HOST_BYTES


def file_path(name: str) -> str:
    return f"{contract.WORKDIR_FILES}/{name}"


def configmap_prefix(job: str) -> str:
    return f"{job}-peers-"


@lru_cache(maxsize=16)
def peer_files(topology: Topology, port: int | None, lists: Lists | None) -> PeerFiles:
    """The ConfigMap holding a job's lists; `lists` gives the framework's own ones.

    Made once per topology and port (cached), so admitting every pod of a large job costs the
    lists once, not once per pod. Raises Refused when they cannot fit one ConfigMap.
    """
    data = common_lists(topology)
    if lists is not None:
        data |= lists(topology, port)
    files = PeerFiles(configmap_prefix(topology.job) + digest_of(data), data)
    if files.size > PEERS_DATA_LIMIT:
        raise Refused(
            f"job {topology.job} has {topology.total} pods whose peer lists take {files.size} "
            f"bytes; one ConfigMap holds at most {PEERS_DATA_LIMIT}: use shorter workload, "
            "Service or namespace names, or fewer pods"
        )
    return files


def digest_of(data: dict[str, str]) -> str:
    """The digest a peers ConfigMap's name ends with: that of its data."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()[:DIGEST_LENGTH]


def content_digest(data: Mapping[str, Any]) -> str:
    """The whole SHA-256 of a ConfigMap's or Secret's data: what the sweeper compares with the
    content it made (the ten characters a peers ConfigMap's name carries could be matched by
    brute force; this cannot)."""
    canonical = json.dumps(dict(data), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(canonical).hexdigest()


def proven(obj: Mapping[str, Any], job: str) -> bool:
    """Whether a ConfigMap named as one of `job`'s peer lists holds what its name says: immutable,
    its data of that digest. Such a one is harmless whoever made it; any other is not the job's."""
    name = str((obj.get("metadata") or {}).get("name") or "")
    data = obj.get("data")
    if obj.get("immutable") is not True or not isinstance(data, Mapping):
        return False
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        return False
    return name == configmap_prefix(job) + digest_of(dict(data))


def configmap(files: PeerFiles, namespace: str) -> dict[str, Any]:
    """The ConfigMap object (labels and owners are the sweeper's to add)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": files.name, "namespace": namespace},
        "immutable": True,
        "data": dict(files.data),
    }
