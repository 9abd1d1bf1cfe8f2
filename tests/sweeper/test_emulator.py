"""The emulator covers what kmock leaves out and the sweeper relies on, like the API server."""

from __future__ import annotations

import pytest

from tests.support.emulator import selector_matches
from webhook.kube.client import ApiError
from webhook.kube.resources import PODS, SERVICES, STATEFULSETS


def service(name, labels=None, owners=None):
    metadata = {"name": name, "labels": labels or {}}
    if owners:
        metadata["ownerReferences"] = owners
    return {"metadata": metadata, "spec": {"clusterIP": "None"}}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("", True),
        ("app", True),
        ("!app", False),
        ("app=web", True),
        ("app==web", True),
        ("app=db", False),
        ("app!=db", True),
        ("app=web,tier", False),
        ("app=web,!tier", True),
    ],
)
def test_label_selectors_match_like_the_api_server(selector, matches):
    assert selector_matches(selector, {"app": "web"}) is matches


def test_lists_honour_label_selectors_and_carry_a_resource_version(emulator, kube):
    kube.create(SERVICES, "ml", service("a", {"app": "web"}))
    kube.create(SERVICES, "ml", service("b", {"app": "db"}))
    items, version = kube.list(SERVICES, None, "app=web")
    assert [i["metadata"]["name"] for i in items] == ["a"]
    assert version == "2"


def test_a_watch_from_a_resource_version_replays_what_happened_since_then(emulator, kube):
    kube.create(SERVICES, "ml", service("a"))
    _, version = kube.list(SERVICES, "ml")
    kube.create(SERVICES, "ml", service("b"))
    kube.delete(SERVICES, "ml", "a", {})
    events = list(kube.watch(SERVICES, "ml", "", version, timeout_seconds=1))
    assert [(e["type"], e["object"]["metadata"].get("name")) for e in events] == [
        ("ADDED", "b"),
        ("DELETED", "a"),
        ("BOOKMARK", None),  # where to resume from, as the watch times out
    ]
    assert events[-1]["object"]["metadata"]["resourceVersion"] == "3"


def test_writes_on_a_stale_resource_version_conflict(emulator, kube):
    created = kube.create(SERVICES, "ml", service("a"))
    assert created["metadata"]["resourceVersion"] == "1" and created["metadata"]["uid"]
    kube.patch(SERVICES, "ml", "a", {"metadata": {"labels": {"x": "1"}}})
    with pytest.raises(ApiError) as stale:
        kube.patch(SERVICES, "ml", "a", {"metadata": {"resourceVersion": "1"}})
    assert stale.value.status == 409
    replaced = dict(created, spec={"clusterIP": "None", "ports": []})
    with pytest.raises(ApiError) as stale_put:
        kube.replace(SERVICES, "ml", "a", replaced)
    assert stale_put.value.status == 409


def test_deleting_an_owner_deletes_what_it_owns(emulator, kube):
    owner = kube.create(STATEFULSETS, "ml", {"metadata": {"name": "w"}, "spec": {"replicas": 1}})
    ref = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "w",
        "uid": owner["metadata"]["uid"],
    }
    kube.create(PODS, "ml", {"metadata": {"name": "w-0", "ownerReferences": [ref]}, "spec": {}})
    kube.create(SERVICES, "ml", service("kept"))
    kube.delete(STATEFULSETS, "ml", "w", {"propagationPolicy": "Background"})
    assert emulator.objects(PODS, "ml") == []
    assert [s["metadata"]["name"] for s in emulator.objects(SERVICES, "ml")] == ["kept"]
