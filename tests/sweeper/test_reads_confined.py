"""What the sweeper reads of Secrets and ConfigMaps: only its own, by name or by its label.

RBAC cannot confine a read to objects of one label, or to names not known in advance
(docs/install.md), so the confinement is the sweeper's own: it never lists or watches Secrets,
it reads a Secret only by the name of a job's SSH keys, and it lists and watches ConfigMaps only
with its managed-by label. Shown on an MPI job and a job large enough for a peers ConfigMap,
run to their pods' start against the emulator, every request the sweeper made read back from
the emulator's log by the sweeper's own user agent.
"""

from __future__ import annotations

from urllib.parse import parse_qs

from tests.support.emulator import EmulatorThread
from tests.support.sweeping import sweeping
from webhook.kube.client import Kube
from webhook.kube.resources import MANAGED_BY, MANAGER

from .conftest import kube_for
from .test_planted_owned_objects import (
    MPI_JOB,
    NAMESPACE,
    Kubelet,
    large_job,
    mpi_job,
    peer_lists,
    run_to_the_end,
    start_without_sweeper,
)

AGENT = "trainhook-sweeper-under-test"


def sweepers_reads(
    emulator: EmulatorThread, plural: str
) -> list[tuple[str, str, dict[str, list[str]]]]:
    """(method, path, query) of every request the sweeper sent for `plural`."""
    return [
        (method, path, parse_qs(query))
        for method, path, query, agent in list(emulator.emulator.asked)
        if agent == AGENT and f"/{plural}" in path
    ]


def test_the_sweeper_reads_secrets_by_name_and_configmaps_by_its_label_only(
    emulator: EmulatorThread, kube: Kube
) -> None:
    large = large_job()
    cluster = Kubelet(kube, emulator)
    start_without_sweeper(cluster, mpi_job() + large)
    sweeper_kube = kube_for(emulator.url)
    sweeper_kube.api.user_agent = AGENT
    with sweeping(sweeper_kube):
        run_to_the_end(cluster, pods=3 + 23)

    secrets = sweepers_reads(emulator, "secrets")
    assert {(m, p) for m, p, _ in secrets if m == "GET"} == {
        ("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{MPI_JOB}-ssh")
    }
    assert {m for m, _, _ in secrets} <= {"GET", "POST", "PATCH", "DELETE"}

    configmaps = sweepers_reads(emulator, "configmaps")
    collections = [(p, q) for m, p, q in configmaps if m == "GET" and p.endswith("/configmaps")]
    assert collections, "the sweeper follows its ConfigMaps"
    for path, query in collections:
        assert query.get("labelSelector") == [f"{MANAGED_BY}={MANAGER}"], (path, query)
    by_name = {p for m, p, _ in configmaps if m == "GET" and not p.endswith("/configmaps")}
    assert by_name <= {f"/api/v1/namespaces/{NAMESPACE}/configmaps/{peer_lists(large).name}"}
