"""A Lease under the sweeper's name that no replica wrote (another party allowed to create
Leases in the release namespace made it, claiming to be held for years, with another shard
count) keeps the jobs unserved no longer than one lease duration of the sweeper's own."""

from __future__ import annotations

from typing import Any

from tests.support.sweeping import LEASE_NAMESPACE, sweeping
from tests.support.waiting import eventually
from webhook.kube.resources import LEASES
from webhook.sweeper.lease import SHARDS_ANNOTATION


def test_a_foreign_lease_held_for_years_is_taken_after_the_sweepers_own_duration(
    emulator: Any, kube: Any
) -> None:
    kube.create(
        LEASES,
        LEASE_NAMESPACE,
        {
            "apiVersion": LEASES.api_version,
            "kind": "Lease",
            "metadata": {
                "name": "trainhook-sweeper",
                "namespace": LEASE_NAMESPACE,
                "annotations": {SHARDS_ANNOTATION: "7"},
            },
            "spec": {
                "holderIdentity": "intruder",
                "leaseDurationSeconds": 2_147_483_647,
                "acquireTime": "2026-01-01T00:00:00.000000Z",
                "renewTime": "2026-01-01T00:00:00.000000Z",
            },
        },
    )
    with sweeping(kube) as sweeper:  # its own lease duration is 2 seconds
        eventually(sweeper.leads, timeout=8, what="the sweeper leading despite the foreign Lease")
    (lease,) = [
        o for o in emulator.objects(LEASES, LEASE_NAMESPACE)
        if o["metadata"]["name"] == "trainhook-sweeper"
    ]  # fmt: skip
    assert lease["spec"].get("holderIdentity") != "intruder"
    assert lease["metadata"]["annotations"][SHARDS_ANNOTATION] == "1"
