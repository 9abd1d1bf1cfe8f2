"""One active sweeper: leader election on a coordination.k8s.io Lease.

A follower takes over only after the holder has not renewed for the lease duration, measured
on the follower's own clock from when it last saw the lease change (so clocks need not agree).
A leader that cannot renew for the renew deadline (shorter than the duration) stops acting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import LEASES, MANAGED_BY, MANAGER

log = logging.getLogger("trainhook.sweeper")


@dataclass(frozen=True)
class LeaseRecord:
    holder: str
    duration_seconds: int
    acquire_time: str | None
    transitions: int
    resource_version: str


def read_lease(obj: Mapping[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity") or "",
        duration_seconds=int(spec.get("leaseDurationSeconds") or 0),
        acquire_time=spec.get("acquireTime"),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str((obj.get("metadata") or {}).get("resourceVersion") or ""),
    )


def next_step(record: LeaseRecord | None, identity: str, unchanged_for: float) -> str:
    """create, renew, acquire or wait: what a candidate does with the lease as it finds it.
    `unchanged_for`: seconds since this candidate first saw the lease in its current version."""
    if record is None:
        return "create"
    if record.holder == identity:
        return "renew"
    if not record.holder or unchanged_for >= record.duration_seconds:
        return "acquire"
    return "wait"


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
) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "labels": {MANAGED_BY: MANAGER},
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


class LeaderElector:
    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        name: str,
        identity: str,
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
        self.duration_seconds = duration_seconds
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.monotonic = monotonic
        self.wallclock = wallclock
        self._renewed_at: float | None = None
        self._seen_version = ""
        self._seen_at = 0.0
        self._stop = threading.Event()

    def is_leader(self) -> bool:
        renewed = self._renewed_at
        return renewed is not None and self.monotonic() - renewed < self.renew_deadline

    def run(self) -> None:
        while not self._stop.is_set():
            try:
                self.step()
            except Exception:
                self._renewed_at = None
                log.exception("lease %s/%s: unexpected error", self.namespace, self.name)
            self._stop.wait(self.retry_period)

    def stop(self) -> None:
        self._stop.set()

    def step(self) -> None:
        was_leader = self.is_leader()
        try:
            self._try()
        except ApiError as error:
            log.warning("lease %s/%s: %s", self.namespace, self.name, error)
        leader = self.is_leader()
        if leader and not was_leader:
            log.info("%s leads through lease %s/%s", self.identity, self.namespace, self.name)
        elif was_leader and not leader:
            self._renewed_at = None
            log.warning(
                "%s lost lease %s/%s; stops acting", self.identity, self.namespace, self.name
            )

    def _try(self) -> None:
        try:
            record: LeaseRecord | None = read_lease(
                self.kube.get(LEASES, self.namespace, self.name)
            )
        except ApiError as error:
            if error.status != 404:
                raise
            record = None
        now = self.monotonic()
        if record is not None and record.resource_version != self._seen_version:
            self._seen_version, self._seen_at = record.resource_version, now
        step = next_step(record, self.identity, now - self._seen_at)
        if step == "wait":
            self._renewed_at = None
            return
        body = lease_body(
            name=self.name,
            namespace=self.namespace,
            holder=self.identity,
            duration_seconds=self.duration_seconds,
            now=self.wallclock(),
            acquire_time=record.acquire_time if record and step == "renew" else None,
            transitions=(record.transitions if record else 0) + (step == "acquire"),
            resource_version=record.resource_version if record else "",
        )
        try:
            if record is None:
                self.kube.create(LEASES, self.namespace, body)
            else:
                self.kube.replace(LEASES, self.namespace, self.name, body)
        except ApiError as error:
            if error.status == 409:  # another candidate wrote first
                self._renewed_at = None
                return
            raise
        self._renewed_at = now

    def release(self) -> None:
        """Give the lease up at once, so a follower need not wait for it to expire."""
        if not self.is_leader():
            return
        self._renewed_at = None
        try:
            record = read_lease(self.kube.get(LEASES, self.namespace, self.name))
            if record.holder != self.identity:
                return
            body = lease_body(
                name=self.name,
                namespace=self.namespace,
                holder="",
                duration_seconds=1,
                now=self.wallclock(),
                acquire_time=record.acquire_time,
                transitions=record.transitions,
                resource_version=record.resource_version,
            )
            self.kube.replace(LEASES, self.namespace, self.name, body)
            log.info("%s released lease %s/%s", self.identity, self.namespace, self.name)
        except ApiError as error:
            log.warning("releasing lease %s/%s: %s", self.namespace, self.name, error)
