"""The objects the sweeper makes for a job that its pods mount or claim (a large job's peers
ConfigMap, the SSH Secret, the NVLink ComputeDomain), and the sweeper's record of those it has
proven its own.

A pod that mounts one is created with the owned-objects gate, which the sweeper lifts once it has
proven the object the job's (docs/sweeper.md, "Owned objects proven before use"). Once it has
recorded that proof on the job's StatefulSets and Jobs (`trainhook.io/proven-objects`, which
nobody else may write), a pod created later that mounts and claims only proven objects is
admitted without the gate: a job's start costs a gate's patch only for the pods its controller
created before the proof, however many pods the job has.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from webhook.core import contract
from webhook.core.fabrics.nvlink import COMPUTE_DOMAIN_KIND, compute_domain_name
from webhook.core.objects import annotations_of, field_of, metadata_of

# A record longer than this is not read: the sweeper writes a handful of names (the ConfigMap of
# each stamp the job's pods are created with, its Secret and its ComputeDomain).
MAX_RECORD: Final = 4096
KINDS: Final = ("ConfigMap", "Secret", COMPUTE_DOMAIN_KIND)


def proven_objects(owner: Mapping[str, Any] | None) -> frozenset[str]:
    """The objects the sweeper records as proven on `owner` (a StatefulSet or Job, None when it
    could not be read), as `Kind/name`; none when the record is missing or not one it writes."""
    if owner is None:
        return frozenset()
    value = annotations_of(owner).get(contract.PROVEN_OBJECTS)
    if not isinstance(value, str) or not value or len(value) > MAX_RECORD:
        return frozenset()
    names = value.split(",")
    if not all(name.partition("/")[0] in KINDS and name.partition("/")[2] for name in names):
        return frozenset()
    return frozenset(names)


def proof_record(names: Iterable[str]) -> str:
    """The record of `names` (`Kind/name` each) as the sweeper writes it: sorted, comma-joined."""
    return ",".join(sorted(set(names)))


def needed_objects(job: str, peers: str | None, ssh_keys: bool, nvlink: bool) -> tuple[str, ...]:
    """What a pod of `job` mounts or claims that the sweeper makes: the peers ConfigMap named
    `peers`, the job's SSH Secret, its ComputeDomain."""
    needed = []
    if peers is not None:
        needed.append(f"ConfigMap/{peers}")
    if ssh_keys:
        needed.append(f"Secret/{job}-ssh")
    if nvlink:
        needed.append(f"{COMPUTE_DOMAIN_KIND}/{compute_domain_name(job)}")
    return tuple(needed)


def workload_controller(pod: Mapping[str, Any]) -> tuple[str, str, str] | None:
    """The StatefulSet or Job that controls `pod` (kind, name, uid), whose record of proven
    objects its admission reads; None for a pod of anything else."""
    metadata = field_of(pod, "metadata")
    refs = metadata.get("ownerReferences") if isinstance(metadata, dict) else None
    for ref in refs if isinstance(refs, list) else ():
        if isinstance(ref, dict) and ref.get("controller") is True:
            kind, name, uid = ref.get("kind"), ref.get("name"), ref.get("uid")
            api = _CONTROLLER_APIS.get(kind) if isinstance(kind, str) else None
            if api != ref.get("apiVersion") or not isinstance(name, str) or not name:
                return None
            return str(kind), name, uid if isinstance(uid, str) else ""
    return None


_CONTROLLER_APIS: Final = {"StatefulSet": "apps/v1", "Job": "batch/v1"}


def proven_for(owner: Mapping[str, Any] | None, uid: str) -> frozenset[str]:
    """`proven_objects` of `owner` when it is the workload of uid `uid` (a pod's controller);
    none for another object of that name."""
    if owner is None or not uid or metadata_of(owner).get("uid") != uid:
        return frozenset()
    return proven_objects(owner)
