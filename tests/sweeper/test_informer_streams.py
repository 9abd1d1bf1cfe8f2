"""An informer against the emulator: lists read in pages, watches resumed, relists only on 410."""

from __future__ import annotations

from typing import Any

from tests.support.emulator import EmulatorThread
from tests.support.waiting import eventually
from webhook.kube.client import LIST_PAGE, Kube
from webhook.kube.informer import Informer
from webhook.kube.resources import CONFIGMAPS, PODS, SERVICES


def service(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "web"}},
        "spec": {"clusterIP": "None"},
    }


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ml", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "main", "image": "x", "env": [{"name": "A"}] * 20}]},
    }


def calls(emulator: EmulatorThread, path: str) -> list[dict[str, str]]:
    return [dict(r.params) for r in emulator.requests() if r.url.path == path]


def informer_of(kube: Kube, resource: Any, changed: list[Any], **options: Any) -> Informer[str]:
    return Informer(
        kube,
        resource,
        namespace=None,
        selector="app=web",
        index=lambda obj: obj["metadata"]["name"],
        on_change=changed.append,
        resync_seconds=options.pop("resync_seconds", 1.0),
        backoff_base=0.05,
        **options,
    ).start()


def test_a_large_list_is_read_a_page_at_a_time_and_each_page_kept_slim(emulator, kube):
    count = 2 * LIST_PAGE + 7
    emulator.call(lambda: emulator.emulator.load(PODS, [pod(f"p{i:04}") for i in range(count)]))
    seen: list[dict[str, Any]] = []

    def keep(obj: dict[str, Any]) -> dict[str, Any]:
        seen.append(obj)
        return {"metadata": {k: obj["metadata"][k] for k in ("name", "namespace")}}

    informer = informer_of(kube, PODS, [], keep=keep, resync_seconds=30)
    try:
        eventually(informer.synced.is_set, what="listed")
        lists = [p for p in calls(emulator, "/api/v1/pods") if p.get("watch") != "true"]
        assert [p["limit"] for p in lists] == [str(LIST_PAGE)] * 3
        assert "continue" not in lists[0] and lists[1]["continue"] and lists[2]["continue"]
        assert len(seen) == count and informer.get("ml", "p1006") == {
            "metadata": {"name": "p1006", "namespace": "ml"}
        }
    finally:
        informer.stop(timeout=5)


def test_a_watch_that_ends_resumes_from_its_last_version_without_listing_again(emulator, kube):
    kube.create(SERVICES, "ml", service("a"))
    changed: list[str] = []
    informer = informer_of(kube, SERVICES, changed)
    try:
        eventually(informer.synced.is_set, what="listed")
        emulator.emulator.end_watches()
        kube.create(SERVICES, "ml", service("b"))
        eventually(lambda: informer.get("ml", "b") is not None, what="b seen")
        # The watch times out after the resync period and is resumed from the bookmark.
        eventually(lambda: informer.watches >= 4, timeout=8, what="watches resumed")
        watches = [p for p in calls(emulator, "/api/v1/services") if p.get("watch") == "true"]
        assert informer.lists == 1
        assert all(p["allowWatchBookmarks"] == "true" for p in watches)
        versions = [int(p["resourceVersion"]) for p in watches]
        assert versions == sorted(versions) and versions[-1] == emulator.emulator.version
        # Every resync hands every held key over again, from the cache.
        eventually(lambda: changed.count("a") >= 3, timeout=8, what="keys resynced")
        assert informer.lists == 1
    finally:
        informer.stop(timeout=5)


def test_a_watch_from_a_version_the_api_server_has_forgotten_lists_again(emulator, kube):
    kube.create(SERVICES, "ml", service("a"))
    informer = informer_of(kube, SERVICES, [], resync_seconds=30)
    try:
        eventually(informer.synced.is_set, what="listed")
        kube.create(CONFIGMAPS, "ml", {"metadata": {"name": "other"}})  # newer than it saw
        emulator.call(emulator.emulator.compact)
        kube.create(SERVICES, "ml", service("b"))  # a change the compaction hid from the watch
        emulator.emulator.end_watches()
        eventually(lambda: informer.lists == 2, what="relist after 410 Gone")
        eventually(lambda: informer.get("ml", "b") is not None, what="b read by the list")
    finally:
        informer.stop(timeout=5)


def test_a_pod_change_the_sweeper_does_not_keep_hands_no_job_over(emulator, kube):
    from webhook.sweeper.informers import same_pod, slim_pod

    running = pod("p0")
    running["status"] = {
        "phase": "Running",
        "podIP": "10.0.0.1",
        "containerStatuses": [{"name": "main", "restartCount": 0, "state": {"running": {}}}],
    }
    kube.create(PODS, "ml", running)
    changed: list[str] = []
    informer = informer_of(
        kube, PODS, changed, keep=slim_pod, unchanged=same_pod, resync_seconds=30
    )
    try:
        eventually(informer.synced.is_set, what="listed")
        changed.clear()
        kube.patch(PODS, "ml", "p0", {"status": {"podIP": "10.0.0.2"}})  # kept by nobody
        eventually(lambda: informer.watches and _version(informer, "p0") == "2", what="seen")
        assert changed == []
        restarted = [{"name": "main", "restartCount": 1, "state": {"running": {}}}]
        kube.patch(PODS, "ml", "p0", {"status": {"containerStatuses": restarted}})
        eventually(lambda: changed == ["p0"], what="a restart handed over")
    finally:
        informer.stop(timeout=5)


def _version(informer: Informer[str], name: str) -> str:
    held = informer.get("ml", name) or {}
    return str(held.get("metadata", {}).get("resourceVersion"))
