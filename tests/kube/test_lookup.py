"""Sibling lookup against kmock's Kubernetes emulator: cache, watch, miss, outage."""

from __future__ import annotations

import copy
import socket
import time
from collections.abc import Callable, Iterator
from typing import Any

import kmock
import pytest
from kubernetes import client

from tests.support.emulator import EmulatorThread as Emulator
from tests.support.emulator import emulator
from tests.support.waiting import eventually
from webhook.kube.client import Kube, api_client_for
from webhook.kube.lookup import SiblingCache
from webhook.kube.resources import JOBS as JOBS_RESOURCE
from webhook.kube.resources import STATEFULSETS

STS = "/apis/apps/v1/namespaces/{ns}/statefulsets"
JOBS = "/apis/batch/v1/namespaces/{ns}/jobs"


def workload(kind: str, name: str, ns: str = "ml", **labels: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"replicas": 1} if kind == "StatefulSet" else {"completions": 2}
    return {
        "apiVersion": "apps/v1" if kind == "StatefulSet" else "batch/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": spec,
    }


MASTER = workload("StatefulSet", "pt-master", **{"trainhook.io/framework": "pytorch",
                  "trainhook.io/job": "pt", "trainhook.io/role": "master"})  # fmt: skip
WORKER = workload("Job", "pt-worker", **{"trainhook.io/framework": "pytorch",
                  "trainhook.io/job": "pt", "trainhook.io/role": "worker"})  # fmt: skip


def add(api: Emulator, obj: dict[str, Any]) -> None:
    path = STS if obj["kind"] == "StatefulSet" else JOBS
    api.create(path.format(ns=obj["metadata"]["namespace"]), obj)


def stored(api: Emulator, obj: dict[str, Any]) -> Any:
    """The object as the API server stores it (uid, resourceVersion and all), read from the
    emulator's store rather than by a request the tests count."""
    resource = STATEFULSETS if obj["kind"] == "StatefulSet" else JOBS_RESOURCE
    metadata = obj["metadata"]
    [found] = [
        o
        for o in api.objects(resource, metadata["namespace"])
        if o["metadata"]["name"] == metadata["name"]
    ]
    return found


def names(objs: list[dict[str, Any]] | None) -> list[str] | None:
    return None if objs is None else [o["metadata"]["name"] for o in objs]


def watching(cache: SiblingCache, api: Emulator) -> bool:
    """The cache has listed both kinds and its two watches are open."""
    return cache.wait_synced(5) and eventually(
        lambda: sum(r.params.get("watch") == "true" for r in api.requests()) >= 2
    )


def requests_after(api: Emulator, count: int) -> list[str]:
    return [f"{r.method.value} {r.url.path_qs}" for r in api.requests()[count:]]


@pytest.fixture
def api() -> Iterator[Emulator]:
    with emulator() as running:
        yield running


@pytest.fixture
def start_cache() -> Iterator[Callable[[Kube], SiblingCache]]:
    caches: list[SiblingCache] = []

    def start(api_client: Kube) -> SiblingCache:
        cache = SiblingCache(api_client, backoff=(0.05, 0.2)).start()
        caches.append(cache)
        return cache

    yield start
    for cache in caches:
        cache.stop()


@pytest.fixture
def synced(
    api: Emulator, start_cache: Callable[[Kube], SiblingCache]
) -> Callable[..., SiblingCache]:
    """A started cache that has listed these workloads, created in the emulator first."""

    def start(*workloads: dict[str, Any]) -> SiblingCache:
        for obj in workloads:
            add(api, obj)
        cache = start_cache(api.api())
        assert cache.wait_synced(5)
        return cache

    return start


@pytest.fixture
def refused_port() -> Iterator[int]:
    """A port on 127.0.0.1 that is bound but not listening: connections are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield sock.getsockname()[1]


def client_for(port: int) -> Kube:
    return Kube(api_client_for(client.Configuration(host=f"http://127.0.0.1:{port}")))


def test_siblings_of_a_synced_job_come_from_the_cache_without_asking_the_api(
    api: Emulator, start_cache: Callable[[Kube], SiblingCache]
) -> None:
    for obj in (MASTER, WORKER, workload("StatefulSet", "plain"),
                workload("StatefulSet", "pt-master", ns="other", **MASTER["metadata"]["labels"]),
                workload("Job", "tf", **{"trainhook.io/framework": "tensorflow"})):  # fmt: skip
        add(api, obj)
    cache = start_cache(api.api())
    assert watching(cache, api)
    seen = len(api.requests())

    siblings = cache.siblings("ml", "pt", exclude=("StatefulSet", "pt-master"))

    assert siblings == [stored(api, WORKER)]
    assert names(cache.siblings("ml", "pt")) == ["pt-worker", "pt-master"]
    assert names(cache.siblings("other", "pt")) == ["pt-master"]
    assert requests_after(api, seen) == []


def test_cache_lists_then_watches_labelled_statefulsets_and_jobs_of_every_namespace(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    synced()

    assert eventually(lambda: len(api.requests()) == 4)

    calls = sorted(
        ((r.url.path, dict(r.params)) for r in api.requests()),
        key=lambda call: (call[0], "watch" in call[1]),
    )
    timeouts = [int(params.pop("timeoutSeconds", 0)) for _, params in calls]
    selector = {"labelSelector": "trainhook.io/framework"}
    assert [path for path, _ in calls] == ["/apis/apps/v1/statefulsets"] * 2 + [
        "/apis/batch/v1/jobs"
    ] * 2
    assert timeouts[0] == timeouts[2] == 0
    assert 300 <= timeouts[1] <= 330 and 300 <= timeouts[3] <= 330
    listed = {**selector, "limit": "500"}  # a page at a time
    assert [params for _, params in calls] == [
        listed,
        {**selector, "allowWatchBookmarks": "true", "resourceVersion": "0", "watch": "true"},
        listed,
        {**selector, "allowWatchBookmarks": "true", "resourceVersion": "0", "watch": "true"},
    ]


def test_a_sibling_created_after_sync_arrives_through_the_watch(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    cache = synced(MASTER)

    add(api, WORKER)

    assert eventually(lambda: names(cache.siblings("ml", "pt")) == ["pt-worker", "pt-master"])


def test_a_deleted_sibling_leaves_the_job(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    cache = synced(MASTER, WORKER)

    api.delete(JOBS.format(ns="ml") + "/pt-worker")

    assert eventually(lambda: names(cache.siblings("ml", "pt")) == ["pt-master"])
    assert cache.get("ml", "Job", "pt-worker") is None


def test_a_relabelled_workload_moves_to_its_new_job(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    cache = synced(MASTER, WORKER)

    api.merge(
        JOBS.format(ns="ml") + "/pt-worker", {"metadata": {"labels": {"trainhook.io/job": "pt2"}}}
    )

    assert eventually(lambda: names(cache.siblings("ml", "pt")) == ["pt-master"])
    assert names(cache.siblings("ml", "pt2")) == ["pt-worker"]


def test_a_workload_being_deleted_is_no_sibling(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    held = copy.deepcopy(WORKER)
    held["metadata"]["finalizers"] = ["example.com/keep"]
    cache = synced(MASTER, held)

    api.delete(JOBS.format(ns="ml") + "/pt-worker")  # lingers with a deletionTimestamp

    assert eventually(lambda: names(cache.siblings("ml", "pt")) == ["pt-master"])


def test_a_job_the_cache_does_not_hold_is_read_directly_from_its_namespace(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    cache = synced()
    cache.stop()  # nothing reaches the cache any more: the watch is behind
    add(api, MASTER)
    add(api, WORKER)
    add(api, workload("StatefulSet", "plain"))
    seen = len(api.requests())

    siblings = cache.siblings("ml", "pt", exclude=("Job", "pt-worker"))

    assert siblings == [stored(api, MASTER)]
    assert requests_after(api, seen) == [
        "GET /apis/apps/v1/namespaces/ml/statefulsets?labelSelector=trainhook.io/framework"
        "&limit=500",
        "GET /apis/batch/v1/namespaces/ml/jobs?labelSelector=trainhook.io/framework&limit=500",
    ]


def test_a_job_without_workloads_has_no_siblings_rather_than_unknown_ones(
    synced: Callable[..., SiblingCache],
) -> None:
    cache = synced()

    assert cache.siblings("ml", "nothing-here") == []


def test_a_sibling_without_the_job_label_belongs_to_the_job_named_after_it(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    lone = workload("StatefulSet", "pt", **{"trainhook.io/framework": "pytorch"})
    cache = synced(lone, WORKER)

    assert names(cache.siblings("ml", "pt")) == ["pt-worker", "pt"]
    assert names(SiblingCache(api.api()).siblings("ml", "pt")) == ["pt-worker", "pt"]


def test_the_owner_of_a_pod_comes_from_the_cache_or_one_direct_read(
    api: Emulator, start_cache: Callable[[Kube], SiblingCache]
) -> None:
    add(api, MASTER)
    cache = start_cache(api.api())
    assert watching(cache, api)
    seen = len(api.requests())

    cached = cache.get("ml", "StatefulSet", "pt-master")
    unlabelled = workload("StatefulSet", "plain")
    cache.stop()
    add(api, unlabelled)
    read = cache.get("ml", "StatefulSet", "plain")
    missing = cache.get("ml", "Job", "nope")

    assert cached == stored(api, MASTER)
    assert read == stored(api, unlabelled)
    assert missing is None
    assert requests_after(api, seen)[-2:] == [
        "GET /apis/apps/v1/namespaces/ml/statefulsets/plain",
        "GET /apis/batch/v1/namespaces/ml/jobs/nope",
    ]


def test_only_statefulsets_and_jobs_are_looked_up(api: Emulator) -> None:
    with pytest.raises(ValueError, match="kind 'Pod': only StatefulSet, Job are looked up"):
        SiblingCache(api.api()).get("ml", "Pod", "x")


def test_returned_objects_are_not_copied_and_never_change_once_handed_out(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    cache = synced(MASTER)

    first = cache.siblings("ml", "pt")
    assert first is not None
    assert cache.get("ml", "StatefulSet", "pt-master") is first[0]
    as_read = stored(api, MASTER)

    api.merge(STS.format(ns="ml") + "/pt-master", {"spec": {"replicas": 3}})

    assert eventually(
        lambda: (cache.get("ml", "StatefulSet", "pt-master") or {})["spec"]["replicas"] == 3
    )
    assert first == [as_read]  # the object handed out before the change is as it was read


def test_managed_fields_are_not_kept(api: Emulator, synced: Callable[..., SiblingCache]) -> None:
    managed = copy.deepcopy(MASTER)
    managed["metadata"]["managedFields"] = [{"manager": "kubectl", "operation": "Apply"}]
    cache = synced(managed)
    without = stored(api, MASTER)
    del without["metadata"]["managedFields"]

    assert cache.siblings("ml", "pt") == [without]


def test_unreachable_api_gives_unknown_siblings_and_no_owner_at_once(
    refused_port: int, start_cache: Callable[[Kube], SiblingCache]
) -> None:
    cache = start_cache(client_for(refused_port))
    started = time.monotonic()

    siblings = cache.siblings("ml", "pt")
    owner = cache.get("ml", "StatefulSet", "pt-master")

    assert siblings is None
    assert owner is None
    assert time.monotonic() - started < 1.0
    assert not cache.synced()


def test_an_api_that_never_answers_costs_a_lookup_at_most_about_a_second(
    silent_port: int,
) -> None:
    cache = SiblingCache(client_for(silent_port))
    started = time.monotonic()

    siblings = cache.siblings("ml", "pt")

    assert siblings is None
    assert 0.9 <= time.monotonic() - started < 1.3


def test_siblings_known_before_the_api_went_away_are_still_served(
    start_cache: Callable[[Kube], SiblingCache],
) -> None:
    with emulator() as api:
        add(api, MASTER)
        cache = start_cache(api.api())
        assert cache.wait_synced(5)
        as_stored = stored(api, MASTER)

    assert cache.synced()
    assert cache.siblings("ml", "pt", exclude=("Job", "pt-worker")) == [as_stored]
    assert cache.siblings("ml", "other-job") is None


def test_cache_syncs_once_an_unreachable_api_comes_back(
    start_cache: Callable[[Kube], SiblingCache],
) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cache = start_cache(client_for(port))
    time.sleep(0.3)
    assert not cache.synced()

    with emulator(port) as api:
        add(api, MASTER)
        synced = cache.wait_synced(5)
        siblings = cache.siblings("ml", "pt", exclude=("Job", "pt-worker"))
        as_stored = stored(api, MASTER)

    assert synced
    assert siblings == [as_stored]


def test_an_expired_watch_lists_again_and_drops_what_vanished(
    api: Emulator, synced: Callable[..., SiblingCache]
) -> None:
    add(api, MASTER)
    ghost = workload("StatefulSet", "pt-ghost", **MASTER["metadata"]["labels"])
    served: list[str] = []

    def first_list(request: kmock.Request) -> object:
        served.append("list")
        return {"metadata": {"resourceVersion": "1"}, "items": [MASTER, ghost]}

    def first_watch(request: kmock.Request) -> object:
        served.append("watch")
        return b'{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}\n'

    def arrange() -> None:
        statefulsets = kmock.resource("apps", "v1", "statefulsets")
        # kmock's DSL takes callables at run time; its type hints do not say so.
        api.handler[kmock.action.LIST, statefulsets][:1] << first_list  # type: ignore[operator]
        api.handler[kmock.action.WATCH, statefulsets][:1] << first_watch  # type: ignore[operator]

    api.run(arrange)
    cache = synced()

    assert eventually(lambda: names(cache.siblings("ml", "pt")) == ["pt-master"])
    assert served == ["list", "watch"]

    def statefulset_calls() -> list[str]:
        calls = [r for r in requests_after(api, 0) if "statefulsets?" in r]
        return ["watch" if "watch=true" in r else "list" for r in calls]

    assert eventually(lambda: len(statefulset_calls()) == 4)
    assert statefulset_calls() == ["list", "watch", "list", "watch"]


def test_a_cache_given_namespaces_lists_and_watches_only_those_and_serves_their_jobs(
    api: Emulator,
) -> None:
    elsewhere = workload("StatefulSet", "pt-master", ns="other", **MASTER["metadata"]["labels"])
    vision = workload("Job", "vt-worker", ns="vision", **{"trainhook.io/framework": "pytorch",
                      "trainhook.io/job": "vt"})  # fmt: skip
    for obj in (MASTER, WORKER, vision, elsewhere):
        add(api, obj)
    created = len(api.requests())
    cache = SiblingCache(api.api(), namespaces=("ml", "vision"), backoff=(0.05, 0.2)).start()
    try:
        assert cache.wait_synced(5)
        # A list and a watch per kind and namespace, and nothing else.
        assert eventually(lambda: len(api.requests()) == created + 8)
        paths = {r.url.path for r in api.requests()[created:]}
        assert paths == {
            STS.format(ns="ml"), JOBS.format(ns="ml"),
            STS.format(ns="vision"), JOBS.format(ns="vision"),
        }  # fmt: skip
        seen = len(api.requests())
        assert names(cache.siblings("ml", "pt")) == ["pt-worker", "pt-master"]
        assert names(cache.siblings("vision", "vt")) == ["vt-worker"]
        assert requests_after(api, seen) == []
        # A namespace it does not watch is not in its cache: one direct read, as on a miss.
        assert names(cache.siblings("other", "pt")) == ["pt-master"]
        assert [r.split("?")[0] for r in requests_after(api, seen)] == [
            f"GET {STS.format(ns='other')}",
            f"GET {JOBS.format(ns='other')}",
        ]
    finally:
        cache.stop()
