"""Shards: several `trainhook sweep` processes sharing a cluster's jobs through shard Leases.

    python -m bench.shards [--replicas N] [--jobs M]

N real `trainhook sweep` processes (`--shards=N --replicas=N`, Leases of 6 s) against the API
emulator, and M jobs of two pods created once every replica holds a shard. Measured: how the
jobs spread over the replicas, the time until every job's Service exists, and, after the
replica holding shard 1 is killed with SIGKILL, the time until another replica holds that
shard and serves the jobs created in it meanwhile. A job acted on twice would show as its
Service created twice in the replicas' logs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bench import tables
from tests.support.emulator import EmulatorThread, kubeconfig
from tests.support.shards import (
    create_job,
    created_services,
    creator,
    holders,
    jobs_of_shard,
    services,
)
from tests.support.sweeping import SweeperProcess
from tests.support.waiting import eventually

LEASE_SECONDS = 6
DEFAULT_REPLICAS = 3
DEFAULT_JOBS = 60
LATE_JOBS = 5  # created in the killed replica's shard after it died
# A dead replica's shard is taken once its Lease has gone unrenewed for a lease duration and
# stayed free for another, each seen at a poll (every duration / 7.5): within three durations.
TAKEOVER_LEASES = 3


@dataclass(frozen=True)
class ShardRun:
    replicas: int
    jobs: int
    jobs_per_replica: list[int]  # by replica, most first
    served_seconds: float  # from the jobs' creation until every Service exists
    takeover_seconds: float  # from the kill until another replica holds the shard
    late_served_seconds: float  # from the kill until the late jobs' Services exist
    acted_twice: int  # Services created more than once

    @property
    def met(self) -> bool:
        """Every job acted on once, by one replica, and a dead replica's shard taken over
        within TAKEOVER_LEASES lease durations."""
        return self.acted_twice == 0 and self.takeover_seconds <= TAKEOVER_LEASES * LEASE_SECONDS


def shard_run(replicas: int = DEFAULT_REPLICAS, jobs: int = DEFAULT_JOBS) -> ShardRun:
    emulator = EmulatorThread()
    # Three replicas renewing Leases and watching send thousands of requests; kmock would scan
    # every one kept on each new one. What was done is read from objects and logs instead.
    emulator.emulator.keep_requests = False
    emulator.start()
    sweepers: list[SweeperProcess] = []
    try:
        with tempfile.TemporaryDirectory(prefix="trainhook-shards-") as directory:
            workdir = Path(directory)
            config = kubeconfig(workdir / "kubeconfig", emulator.url)
            flags = (
                f"--shards={replicas}",
                f"--replicas={replicas}",
                f"--lease-duration-seconds={LEASE_SECONDS}",
                "--log-level=info",
            )
            names = [f"sweeper-{i}" for i in range(replicas)]
            logs = [workdir / f"{name}.log" for name in names]
            sweepers = [
                SweeperProcess(config, name, log, *flags)
                for name, log in zip(names, logs, strict=True)
            ]
            eventually(
                lambda: sorted(v for v in holders(emulator).values() if v) == names,
                timeout=120,
                what="one shard each",
            )
            kube = emulator.api()
            created = [f"job{i}" for i in range(jobs)]
            started = time.monotonic()
            for job in created:
                create_job(kube, job)
            eventually(lambda: services(emulator) >= set(created), timeout=300, what="Services")
            served = time.monotonic() - started

            dead = holders(emulator)["trainhook-sweeper-1"]
            killed = time.monotonic()
            sweepers[names.index(dead)].kill()
            late = jobs_of_shard(1, replicas, LATE_JOBS, "late")
            for job in late:
                create_job(kube, job)
            eventually(
                lambda: holders(emulator)["trainhook-sweeper-1"] not in ("", dead),
                timeout=120,
                what="the shard taken over",
            )
            takeover = time.monotonic() - killed
            eventually(lambda: services(emulator) >= set(late), timeout=120, what="late jobs")
            late_served = time.monotonic() - killed
            eventually(
                lambda: set(created + late) <= set(created_services(logs)),
                timeout=30,
                what="the replicas' log lines",
            )
            per_replica = Counter(creator(logs, job) for job in created)
            twice = sum(n - 1 for n in Counter(created_services(logs)).values() if n > 1)
            return ShardRun(
                replicas,
                jobs,
                sorted(per_replica.values(), reverse=True),
                served,
                takeover,
                late_served,
                twice,
            )
    finally:
        for sweeper in sweepers:
            if sweeper.process.poll() is None:
                sweeper.terminate()
        emulator.stop()


def table(run: ShardRun) -> str:
    header = [
        "replicas",
        "jobs",
        "jobs per replica",
        "all served s",
        "shard taken over s",
        "its new jobs served s",
        "acted on twice",
        f"goal (once each, taken over in <= {TAKEOVER_LEASES * LEASE_SECONDS} s)",
    ]
    row = [
        str(run.replicas),
        str(run.jobs),
        ", ".join(map(str, run.jobs_per_replica)),
        f"{run.served_seconds:.1f}",
        f"{run.takeover_seconds:.1f}",
        f"{run.late_served_seconds:.1f}",
        str(run.acted_twice),
        "met" if run.met else "missed",
    ]
    return tables.table(header, [row])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--replicas", type=int, default=DEFAULT_REPLICAS)
    parser.add_argument("--jobs", type=int, default=DEFAULT_JOBS)
    args = parser.parse_args()
    print(table(shard_run(args.replicas, args.jobs)))


if __name__ == "__main__":
    main()
