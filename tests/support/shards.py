"""Jobs spread over several `trainhook sweep` processes: the jobs, the shard Leases and what
each replica logged having created, read back from the emulator and the replicas' logs."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.emulator import EmulatorThread
from tests.support.stored import pod, stamped, statefulset
from webhook.kube.client import Kube
from webhook.kube.resources import LEASES, PODS, SERVICES, STATEFULSETS
from webhook.sweeper.lease import shard_of

NAMESPACE = "ml"
LEASE_NAMESPACE = "trainhook"


def create_job(kube: Kube, job: str) -> None:
    """A PyTorch job of a master and a worker, both pods running."""
    master, worker = stamped(
        statefulset(f"{job}-master", role="master", job=job),
        statefulset(f"{job}-worker", role="worker", job=job, replicas=1),
    )
    master = kube.create(STATEFULSETS, NAMESPACE, master)
    worker = kube.create(STATEFULSETS, NAMESPACE, worker)
    kube.create(PODS, NAMESPACE, pod(master, 0))
    kube.create(PODS, NAMESPACE, pod(worker, 0))


def holders(emulator: EmulatorThread) -> dict[str, str]:
    """Each shard Lease's holder ("" when none)."""
    return {
        lease["metadata"]["name"]: lease["spec"].get("holderIdentity") or ""
        for lease in emulator.objects(LEASES, LEASE_NAMESPACE)
    }


def services(emulator: EmulatorThread) -> set[str]:
    return {obj["metadata"]["name"] for obj in emulator.objects(SERVICES, NAMESPACE)}


def _created(log: Path) -> list[str]:
    return re.findall(rf"create Service {NAMESPACE}/([a-z0-9-]+)", log.read_text())


def created_services(logs: list[Path]) -> list[str]:
    """Every job whose Service a replica logged creating, once per time it did."""
    return sorted(job for log in logs for job in _created(log))


def creator(logs: list[Path], job: str) -> str:
    """The replica (its log's name) that created the job's Service."""
    (found,) = [log.stem for log in logs if job in _created(log)]
    return found


def jobs_of_shard(shard: int, shards: int, count: int, prefix: str) -> list[str]:
    names = (f"{prefix}{i}" for i in range(100_000))
    return [n for n in names if shard_of((NAMESPACE, n), shards) == shard][:count]
