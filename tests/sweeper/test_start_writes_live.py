"""A large job's start through the real admission, a real sweeper and a played StatefulSet
controller against the API emulator: the sweeper lifts the owned-objects gate only of the pods
created before it recorded the job's peers ConfigMap proven; every pod created after starts
without one. So the start's pod writes do not grow with the job."""

from __future__ import annotations

import collections
import time
from collections.abc import Mapping
from typing import Any

from tests.support import builders
from tests.support.emulator import emulator
from tests.support.played_cluster import NAMESPACE
from tests.support.played_job import PlayedJob
from tests.support.reviews import encoded, patched, review
from tests.support.sweeping import sweeping
from webhook.core import contract
from webhook.kube.lookup import SiblingCache
from webhook.kube.resources import PODS, STATEFULSETS
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to

JSON = "application/json"
# The played controller's pod creations a second: kube-controller-manager's default client rate.
PER_SECOND = 20
INTERVAL = 0.05


class Counted:
    """The webhook in-process, over a lookup that watches the emulator; of the pods it admitted
    that mount the job's peers ConfigMap, in the order they came, whether each was gated."""

    def __init__(self, cache: SiblingCache) -> None:
        self.context = Context(lookup=cache)
        self.gated: list[bool] = []

    def __call__(self, document: dict[str, Any]) -> Mapping[str, Any]:
        answer = answer_to(encoded(document), JSON, self.context)
        assert answer.status == 200, answer.body
        obj = document["request"]["object"]
        if obj["kind"] == "Pod":
            pod = patched(obj, answer.body)
            gates = [g["name"] for g in pod["spec"].get("schedulingGates") or []]
            volumes = pod["spec"].get("volumes") or []
            if any(v.get("configMap", {}).get("name", "").startswith("pt-peers-") for v in volumes):
                self.gated.append(contract.WAITING_FOR_OWNED_OBJECTS in gates)
        return answer.body


def start(workers: int, seconds: float | None = None) -> tuple[list[bool], int]:
    """Start a job of a master and `workers` workers, every pod scheduled within `seconds`;
    whether each pod that mounts its peers ConfigMap was admitted gated, in order, and the pods
    the sweeper patched."""
    with emulator() as api:
        api.handler.keep_requests = False  # its scan of them would slow each create down
        kube = api.api()
        cache = SiblingCache(kube, namespaces=[NAMESPACE]).start()
        try:
            assert cache.wait_synced(10)
            webhook = Counted(cache)
            for name, role, replicas in (
                ("pt-master", "master", 1),
                ("pt-worker", "worker", workers),
            ):
                workload = builders.statefulset(
                    name,
                    "pytorch",
                    role=role,
                    job="pt",
                    replicas=replicas,
                    namespace=NAMESPACE,
                    labelled_template=True,
                )
                answer = webhook(review(workload, namespace=NAMESPACE))
                kube.create(STATEFULSETS, NAMESPACE, patched(workload, answer))
            per_step = int(PER_SECOND * INTERVAL)
            with PlayedJob(api, kube, webhook, interval=INTERVAL, per_step=per_step) as cluster:
                # The sweeper starts once the controller has made the first pod, as when it
                # comes up after the job: that pod at least is admitted before any proof.
                first = time.monotonic() + 10
                while not webhook.gated and time.monotonic() < first:
                    assert cluster.error is None, cluster.error
                    time.sleep(0.01)
                assert webhook.gated, "the played controller made no pod in 10 s"
                with sweeping(kube) as sweeper:
                    deadline = time.monotonic() + (seconds or 30 + workers / PER_SECOND * 3)
                    while time.monotonic() < deadline:
                        pods = api.objects(PODS, NAMESPACE)
                        bound = [p for p in pods if p["spec"].get("nodeName")]
                        if len(bound) == workers + 1:
                            break
                        assert cluster.error is None, cluster.error
                        time.sleep(0.2)
                    else:
                        gates = sum(webhook.gated)
                        raise AssertionError(
                            f"{len(bound)} of {workers + 1} pods scheduled ({len(pods)} created, "
                            f"{gates} gated, {collections.Counter(sweeper.actions).most_common(8)})"
                        )
                    patched_pods = [a for a in sweeper.actions if a.startswith("patch Pod ")]
            return webhook.gated, len(patched_pods)
        finally:
            cache.stop()


def test_a_large_jobs_start_lifts_the_gate_only_of_the_pods_created_before_the_proof() -> None:
    gated, lifted = start(workers=120)
    before = gated.index(False)
    # Every pod from the first ungated one on is ungated: the record, once written, holds.
    assert gated[before:] == [False] * (len(gated) - before)
    assert lifted == before  # one patch for each pod that came gated, none for the others
    assert 0 < before < 500, f"{before} of {len(gated)} pods came gated"
    print(f"{len(gated)} pods at {PER_SECOND}/s: {before} gated, {lifted} gate lifts")
