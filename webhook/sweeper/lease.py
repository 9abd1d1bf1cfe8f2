"""Which sweeper acts on which job: shards of the cluster's jobs, each held through a
coordination.k8s.io Lease.

Jobs are hashed by namespace/name into `shards` shards; shard 0's Lease is `--lease-name`, shard
i's `<lease-name>-<i>`, so one shard (the default) is the single leader Lease of before. A
replica holds at most its share of the shards (shards / replicas, rounded up) while the others
run; a shard left free (released, or not renewed for its duration, measured on the candidate's
own clock from when it last saw the Lease change, so clocks need not agree) is taken at once by
a replica below its share; one its holder stopped renewing is taken by any replica as soon as it
has expired, so the shards of a replica that died are served again within about one lease
duration, and one given up by its holder (holder cleared) by any replica once it has stayed
free for a further lease duration. A holder that cannot renew for the renew deadline (shorter
than the duration) stops acting on that shard.

Each Lease records the shard count it was taken with. A replica acts only while every Lease it
reads that is held and renewed carries its own count, so replicas of two shard counts (during a
rollout that changes `--shards`) never both act on one job; they stand by until the others are
gone.
"""

from __future__ import annotations

import logging
import math
import threading
import time
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from webhook.kube.client import CONNECT_TIMEOUT, ApiError, Kube
from webhook.kube.resources import LEASES, MANAGED_BY, MANAGER

log = logging.getLogger("trainhook.sweeper")

SHARDS_ANNOTATION = "trainhook.io/shards"
# How long giving the Leases up may take on shutdown, however slow the API server is: a pod's
# termination grace period must cover it.
RELEASE_SECONDS = 2.0


def shard_of(key: tuple[str, str], shards: int) -> int:
    """The shard of a job (namespace, name): the same in every process (not Python's hash)."""
    if shards <= 1:
        return 0
    return zlib.crc32(f"{key[0]}/{key[1]}".encode()) % shards


def lease_name(base: str, shard: int) -> str:
    return base if shard == 0 else f"{base}-{shard}"


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration_seconds: int
    acquire_time: str | None
    transitions: int
    resource_version: str
    shards: int = 1


def read_lease(obj: Mapping[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    metadata = obj.get("metadata") or {}
    shards = str((metadata.get("annotations") or {}).get(SHARDS_ANNOTATION) or "1")
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str(metadata.get("resourceVersion") or ""),
        shards=int(shards) if shards.isdigit() else 1,
    )


def next_step(
    record: LeaseRecord | None,
    identity: str,
    unchanged_for: float,
    *,
    holding: int = 0,
    share: int = 1,
    grace: float = 0.0,
) -> str:
    """create, renew, acquire or wait: what a candidate does with a shard's lease as it finds it.
    `unchanged_for`: seconds since this candidate first saw the lease in its current version (or
    missing); `holding`: shards it holds already, `share` how many it takes before the others
    have had `grace` more seconds to take a free one. A lease whose holder stopped renewing it
    (died, or cut off) is taken by any replica once expired: the shard was served a moment ago
    and its jobs wait; one given up (no holder) or never created goes first to a replica below
    its share, which keeps the shards spread over the replicas as they start and stop."""
    if record is not None and record.holder == identity:
        return "renew"
    abandoned = record is not None and bool(record.holder)
    expired_for = (
        unchanged_for - record.duration_seconds
        if record is not None and record.holder
        else unchanged_for
    )
    if expired_for < 0 or (holding >= share and not abandoned and expired_for < grace):
        return "wait"
    return "create" if record is None else "acquire"


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(
    *,
    name: str,
    namespace: str,
    holder: str,
    duration_seconds: int,
    now: datetime,
    acquire_time: str | None,
    transitions: int,
    resource_version: str = "",
    shards: int = 1,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_BY: MANAGER},
        "annotations": {SHARDS_ANNOTATION: str(shards)},
    }
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": LEASES.api_version,
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_seconds,
            "acquireTime": acquire_time or micro_time(now),
            "renewTime": micro_time(now),
            "leaseTransitions": transitions,
        },
    }


@dataclass
class _Shard:
    name: str
    record: LeaseRecord | None = None
    seen_version: str | None = None  # "" once seen missing, None before it was read
    seen_at: float = 0.0
    renewed_at: float | None = None  # when this replica last wrote it as its holder


class ShardElector:
    """Holds this replica's share of the shard Leases; `owns(job)` says whether to act on it."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
        shards: int = 1,
        replicas: int = 1,
        duration_seconds: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        monotonic: Callable[[], float] = time.monotonic,
        wallclock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.shards = shards
        self.share = math.ceil(shards / max(1, replicas))
        self.duration_seconds = duration_seconds
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.monotonic = monotonic
        self.wallclock = wallclock
        # Every request of the lease loop ends within the renew deadline, so an API server that
        # does not answer costs the lease, not the loop.
        self.timeout = (min(CONNECT_TIMEOUT, renew_deadline), renew_deadline)
        self._shards = [_Shard(lease_name(name, i)) for i in range(shards)]
        self._agreed = True  # no live lease carries another shard count
        self._released = threading.Event()
        self._stop = threading.Event()

    # --- what this replica may do ----------------------------------------------------------

    def held(self) -> frozenset[int]:
        """The shards this replica leads now."""
        if not self._agreed or self._released.is_set():
            return frozenset()
        now = self.monotonic()
        return frozenset(
            i
            for i, shard in enumerate(self._shards)
            if shard.renewed_at is not None and now - shard.renewed_at < self.renew_deadline
        )

    def is_leader(self) -> bool:
        """Whether it leads any shard (the only one, with one shard)."""
        return bool(self.held())

    def owns(self, key: tuple[str, str]) -> bool:
        return shard_of(key, self.shards) in self.held()

    # --- the loop --------------------------------------------------------------------------

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:
                for shard in self._shards:
                    shard.renewed_at = None
                log.exception("leases %s/%s: unexpected error", self.namespace, self.name)
            self._stop.wait(self.retry_period)

    def stop(self) -> None:
        self._stop.set()

    def step(self) -> None:
        before = self.held()
        readable = [shard for shard in self._shards if self._read(shard)]
        now = self.monotonic()
        self._agreed = all(
            shard.record is None
            or shard.record.shards == self.shards
            or not shard.record.holder
            or now - shard.seen_at >= shard.record.duration_seconds
            for shard in readable
        )
        for shard in readable:
            holding = sum(
                1 for other in self._shards if other is not shard and other.renewed_at is not None
            )
            step = next_step(
                shard.record,
                self.identity,
                now - shard.seen_at,
                holding=holding,
                share=self.share,
                grace=float(self.duration_seconds),
            )
            if step == "wait":
                shard.renewed_at = None
                continue
            self._write(shard, step, now)
        self._log_change(before, self.held())

    def _read(self, shard: _Shard) -> bool:
        """Read a shard's lease; False when it could not be read (then nothing is written to
        it, and a hold on it lapses at the renew deadline)."""
        try:
            obj = self.kube.get(LEASES, self.namespace, shard.name, timeout=self.timeout)
            # A holder is given no longer than this replica's own duration: the replicas all
            # write that one, so a Lease claiming more (made by another party, for years) keeps
            # the shard from being served no longer than a lease of ours would.
            record = read_lease(obj)
            shard.record = replace(
                record, duration_seconds=min(record.duration_seconds, self.duration_seconds)
            )
        except ApiError as error:
            if error.status != 404:
                log.warning("lease %s/%s: %s", self.namespace, shard.name, error)
                return False
            shard.record = None
        version = shard.record.resource_version if shard.record else ""
        if version != shard.seen_version:
            shard.seen_version, shard.seen_at = version, self.monotonic()
        return True

    def _write(self, shard: _Shard, step: str, now: float) -> None:
        record = shard.record
        body = lease_body(
            name=shard.name,
            namespace=self.namespace,
            holder=self.identity,
            duration_seconds=self.duration_seconds,
            now=self.wallclock(),
            acquire_time=record.acquire_time if record and step == "renew" else None,
            transitions=(record.transitions if record else 0) + (step == "acquire"),
            resource_version=record.resource_version if record else "",
            shards=self.shards,
        )
        if self._released.is_set():  # shutting down: take nothing back
            return
        try:
            if record is None:
                written = self.kube.create(LEASES, self.namespace, body, timeout=self.timeout)
            else:
                written = self.kube.replace(
                    LEASES, self.namespace, shard.name, body, timeout=self.timeout
                )
        except ApiError as error:
            shard.renewed_at = None
            if error.status not in (409,):  # 409: another candidate wrote first
                log.warning("lease %s/%s: %s", self.namespace, shard.name, error)
            return
        shard.record = read_lease(written)
        shard.seen_version, shard.seen_at = shard.record.resource_version, now
        shard.renewed_at = now

    def _log_change(self, before: frozenset[int], after: frozenset[int]) -> None:
        if after == before:
            return
        if not self._agreed:
            log.warning(
                "%s stands by: a live lease of %s/%s was taken with another shard count than %d",
                self.identity,
                self.namespace,
                self.name,
                self.shards,
            )
        gained, lost = sorted(after - before), sorted(before - after)
        if gained:
            log.info("%s leads %s", self.identity, self._names(gained))
        if lost:
            log.warning("%s lost %s; stops acting on them", self.identity, self._names(lost))

    def _names(self, shards: list[int]) -> str:
        return ", ".join(f"lease {self.namespace}/{self._shards[i].name}" for i in shards)

    # --- shutdown --------------------------------------------------------------------------

    def release(self, budget: float = RELEASE_SECONDS) -> None:
        """Give every held lease up at once (holder cleared), so another replica need not wait
        for it to expire; within `budget` seconds whatever the API server does."""
        self._released.set()
        deadline = self.monotonic() + budget
        for shard in self._shards:
            if shard.renewed_at is None or shard.record is None:
                continue
            shard.renewed_at = None
            for _attempt in range(2):  # again once, if a renewal in flight wrote first
                left = deadline - self.monotonic()
                if left <= 0.05 or shard.record is None or shard.record.holder != self.identity:
                    break
                try:
                    self._give_up(shard, shard.record, (min(1.0, left), left))
                    break
                except ApiError as error:
                    if error.status != 409 or not self._read(shard):
                        log.warning("releasing lease %s/%s: %s", self.namespace, shard.name, error)
                        break

    def _give_up(self, shard: _Shard, record: LeaseRecord, timeout: tuple[float, float]) -> None:
        body = lease_body(
            name=shard.name,
            namespace=self.namespace,
            holder="",
            duration_seconds=1,
            now=self.wallclock(),
            acquire_time=record.acquire_time,
            transitions=record.transitions,
            resource_version=record.resource_version,
            shards=self.shards,
        )
        self.kube.replace(LEASES, self.namespace, shard.name, body, timeout=timeout)
        log.info("%s released lease %s/%s", self.identity, self.namespace, shard.name)
