"""The objects a job owns as the sweeper reads them: its Service, PodGroups, SSH Secret and peers
ConfigMaps, each with the uid, owners and digest that prove it the job's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.core.objects import labels_of, metadata_of
from webhook.core.shape.peers import DIGEST_LENGTH, configmap_prefix, content_digest
from webhook.kube.resources import MANAGED_BY, MANAGER


@dataclass(frozen=True)
class Owned:
    """A Service, PodGroup or Secret named after the job."""

    name: str
    uid: str
    resource_version: str
    managed: bool  # created by the sweeper (carries its managed-by label)
    owners: frozenset[str]  # uids in its ownerReferences
    spec: Mapping[str, Any]
    digest: str = ""  # of its data (peers.content_digest), for a Secret or an immutable ConfigMap


def owned_named(
    objects: Iterable[Mapping[str, Any]], name: str, content: bool = False
) -> Owned | None:
    for obj in objects:
        metadata = metadata_of(obj)
        if metadata.get("name") != name or metadata.get("deletionTimestamp"):
            continue
        return as_owned(obj, content)
    return None


# The digest of an object's data by its uid and resourceVersion, with the data it was taken of:
# a job's peers ConfigMap (the host names of 10,000 pods) is dumped and hashed once per version
# the cache holds, not on every look at its job.
_DIGESTS_AT_MOST = 4096
_digests: dict[tuple[str, str], tuple[Mapping[str, Any], tuple[tuple[Any, int], ...], str]] = {}


def data_digest(obj: Mapping[str, Any], data: Mapping[str, Any]) -> str:
    """content_digest(data) of `obj`'s data, kept for the object held (the same data object,
    keys and sizes) under its uid and resourceVersion."""
    metadata = metadata_of(obj)
    key = (str(metadata.get("uid") or ""), str(metadata.get("resourceVersion") or ""))
    shape = tuple((k, len(v) if isinstance(v, str) else -1) for k, v in data.items())
    found = _digests.get(key) if all(key) else None
    if found is not None and found[0] is data and found[1] == shape:
        return found[2]
    digest = content_digest(data)
    if all(key):
        if len(_digests) >= _DIGESTS_AT_MOST:
            _digests.clear()
        _digests[key] = (data, shape, digest)
    return digest


def as_owned(obj: Mapping[str, Any], content: bool = False, sealed: bool = False) -> Owned:
    """`content`: with the digest of its data; `sealed`: only if it is immutable."""
    metadata = metadata_of(obj)
    data = obj.get("data")
    readable = obj.get("immutable") is True or not sealed
    return Owned(
        name=metadata.get("name") or "",
        uid=metadata.get("uid") or "",
        resource_version=metadata.get("resourceVersion") or "",
        managed=labels_of(obj).get(MANAGED_BY) == MANAGER,
        owners=frozenset(ref.get("uid") or "" for ref in metadata.get("ownerReferences") or []),
        spec=obj.get("spec") or {},
        digest=data_digest(obj, data) if content and isinstance(data, Mapping) and readable else "",
    )


def peers_configmaps(
    objects: Iterable[Mapping[str, Any]], job: str, forged: bool = False, managed: bool = True
) -> tuple[Owned, ...]:
    """The job's managed peers ConfigMaps whose content proves them (their names and digests:
    the data stays in the cache); with `forged`, those whose content does not; not `managed`,
    the unlabelled ones whatever their content."""
    found = [
        as_owned(obj, content=True, sealed=True)
        for obj in objects
        if (metadata_of(obj).get("name") or "").startswith(configmap_prefix(job))
        and not metadata_of(obj).get("deletionTimestamp")
        and (_proven(obj, job) != forged or not managed)
    ]
    return tuple(sorted((o for o in found if o.managed == managed), key=lambda o: o.name))


def _proven(obj: Mapping[str, Any], job: str) -> bool:
    """peers.proven, its digest taken once per version held (the name's is the whole one's
    start: both are of the same canonical JSON)."""
    data = obj.get("data")
    if obj.get("immutable") is not True or not isinstance(data, Mapping):
        return False
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in data.items()):
        return False
    name = str(metadata_of(obj).get("name") or "")
    return name == configmap_prefix(job) + data_digest(obj, data)[:DIGEST_LENGTH]
