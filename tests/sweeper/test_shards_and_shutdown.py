"""Several `trainhook sweep` processes sharing the jobs through shard Leases, and how one stops."""

from __future__ import annotations

import time
from functools import partial

from tests.support.cutoff import Cutoff
from tests.support.emulator import EmulatorThread, kubeconfig
from tests.support.shards import (
    create_job,
    created_services,
    creator,
    holders,
    jobs_of_shard,
    services,
)
from tests.support.sweeping import LEASE_NAMESPACE, SweeperProcess, sweeping
from tests.support.waiting import eventually
from webhook.kube.resources import LEASES
from webhook.sweeper.lease import shard_of


def renew_time(emulator: EmulatorThread) -> str:
    found = [
        lease["spec"].get("renewTime", "")
        for lease in emulator.objects(LEASES, LEASE_NAMESPACE)
        if lease["metadata"]["name"] == "trainhook-sweeper"
    ]
    return found[0] if found else ""


def renewed_since(emulator: EmulatorThread, renew_time_before: str) -> bool:
    return renew_time(emulator) != renew_time_before


def test_three_replicas_split_three_shards_and_a_killed_ones_shard_is_taken_over(
    emulator, kube, tmp_path
):
    config = kubeconfig(tmp_path / "kubeconfig", emulator.url)
    # Leases of 6 s: a loaded machine does not make a replica miss its renewals.
    shards = ("--shards=3", "--replicas=3", "--lease-duration-seconds=6")
    logs = [tmp_path / f"{name}.log" for name in "abc"]
    sweepers = [
        SweeperProcess(config, f"sweeper-{name}", log, *shards)
        for name, log in zip("abc", logs, strict=True)
    ]
    try:
        leases = ["trainhook-sweeper", "trainhook-sweeper-1", "trainhook-sweeper-2"]
        eventually(
            lambda: (
                sorted(holders(emulator)) == leases
                and sorted(holders(emulator).values()) == ["sweeper-a", "sweeper-b", "sweeper-c"]
            ),
            timeout=60,
            what="one shard each",
        )
        jobs = [f"job{i}" for i in range(9)]
        for job in jobs:
            create_job(kube, job)
        eventually(lambda: services(emulator) == set(jobs), timeout=60, what="every Service")
        # Each job was acted on once, by the replica holding its shard: the jobs of one shard
        # by one replica, the three shards by three.
        assert created_services(logs) == sorted(jobs)
        creators = {job: creator(logs, job) for job in jobs}
        by_shard: dict[int, set[str]] = {}
        for job in jobs:
            by_shard.setdefault(shard_of(("ml", job), 3), set()).add(creators[job])
        assert all(len(found) == 1 for found in by_shard.values())
        assert len(set(creators.values())) == len(by_shard)

        dead = holders(emulator)["trainhook-sweeper-1"]
        sweepers["abc".index(dead[-1])].kill()
        later = jobs_of_shard(1, 3, 2, "late")
        for job in later:
            create_job(kube, job)
        eventually(
            lambda: holders(emulator)["trainhook-sweeper-1"] not in ("", dead),
            timeout=60,
            what="the dead replica's shard taken over",
        )
        eventually(lambda: set(later) <= services(emulator), timeout=60, what="its jobs served")
        eventually(  # a replica logs an action once it is applied: wait for the lines too
            lambda: set(later) <= set(created_services(logs)), timeout=10, what="their log lines"
        )
        assert created_services(logs) == sorted(jobs + later)  # nothing done twice
    finally:
        for sweeper in sweepers:
            if sweeper.process.poll() is None:
                sweeper.terminate()


def test_sigterm_gives_the_lease_up_so_a_standby_takes_over_at_once(emulator, kube, tmp_path):
    config = kubeconfig(tmp_path / "kubeconfig", emulator.url)
    leader = SweeperProcess(config, "sweeper-a", tmp_path / "a.log", "--lease-duration-seconds=30")
    eventually(
        lambda: holders(emulator).get("trainhook-sweeper") == "sweeper-a", timeout=60, what="leads"
    )
    with sweeping(kube, "sweeper-b", lease_duration_seconds=30) as standby:
        for _ in range(2):  # the standby tries every 0.1 s while the leader renews
            renewed = renew_time(emulator)
            eventually(partial(renewed_since, emulator, renewed), timeout=10, what="a renewal")
        assert not standby.leads()
        began = time.monotonic()
        assert leader.terminate() == 0
        stopped = time.monotonic() - began
        eventually(standby.leads, timeout=5, what="takeover of the released lease")
        took_over = time.monotonic() - began
    assert stopped < 3.0 and took_over < 5.0  # the lease lasts 30 s
    assert "released lease trainhook/trainhook-sweeper" in (tmp_path / "a.log").read_text()


def test_sigterm_stops_within_seconds_when_the_api_server_stops_answering(emulator, tmp_path):
    relay = Cutoff(int(emulator.url.rsplit(":", 1)[1]))
    try:
        config = kubeconfig(tmp_path / "kubeconfig", relay.url)
        leader = SweeperProcess(config, "sweeper-a", tmp_path / "a.log")
        eventually(
            lambda: holders(emulator).get("trainhook-sweeper") == "sweeper-a",
            timeout=60,
            what="leads",
        )
        relay.cut()
        time.sleep(1.0)  # the lease loop is now waiting on a request that gets no answer
        began = time.monotonic()
        assert leader.terminate() == 0
        assert time.monotonic() - began < 5.0
    finally:
        relay.close()
