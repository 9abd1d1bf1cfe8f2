"""The executor against the API emulator: idempotent actions, conflicts reported, not hidden."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.stored import bare_pod, pod, stamped, statefulset
from webhook.kube.client import Kube
from webhook.kube.resources import CONFIGMAPS, EVENTS, PODGROUPS, PODS, SERVICES, STATEFULSETS
from webhook.sweeper.actions import Create, Delete, Emit, ObjectRef, Patch
from webhook.sweeper.executor import Executor, NotLeading, StaleState

from .helpers import decision

NOW = datetime(2025, 1, 1, tzinfo=UTC)

Write = tuple[str, str, bool]  # (kind, name, whether the object is there after the write)


def executor(
    kube: Kube, may_act: Callable[[], bool] = lambda: True, written: list[Write] | None = None
) -> Executor:
    seen: list[Write] = [] if written is None else written
    return Executor(
        kube,
        identity="sweeper-a",
        clock=lambda: NOW,
        may_act=may_act,
        written=lambda resource, namespace, name, obj: seen.append(
            (resource.kind, name, obj is not None)
        ),
    )


SERVICE = {"metadata": {"name": "pt", "namespace": "ml"}, "spec": {"clusterIP": "None"}}


def test_creating_an_object_that_already_exists_counts_as_done(emulator, kube):
    written: list[Write] = []
    run = executor(kube, written=written)
    run.apply([Create(SERVICES, "ml", SERVICE)])
    run.apply([Create(SERVICES, "ml", SERVICE)])
    assert [o["metadata"]["name"] for o in emulator.objects(SERVICES, "ml")] == ["pt"]
    assert written == [("Service", "pt", True)]


def test_a_patch_decided_on_an_older_version_is_refused_and_changes_nothing(emulator, kube):
    created = kube.create(STATEFULSETS, "ml", statefulset("pt-worker"))
    version = created["metadata"]["resourceVersion"]
    kube.patch(STATEFULSETS, "ml", "pt-worker", {"spec": {"replicas": 3}})
    with pytest.raises(StaleState, match="patch StatefulSet ml/pt-worker"):
        executor(kube).apply(
            [Patch(STATEFULSETS, "ml", "pt-worker", {"spec": {"replicas": 0}}, version)]
        )
    (current,) = emulator.objects(STATEFULSETS, "ml")
    assert current["spec"]["replicas"] == 3


def test_a_patch_on_the_current_version_applies(emulator, kube):
    created = kube.create(STATEFULSETS, "ml", statefulset("pt-worker", replicas=2))
    version = created["metadata"]["resourceVersion"]
    executor(kube).apply(
        [Patch(STATEFULSETS, "ml", "pt-worker", {"spec": {"replicas": 0}}, version)]
    )
    (current,) = emulator.objects(STATEFULSETS, "ml")
    assert current["spec"]["replicas"] == 0


def test_deleting_an_object_already_gone_counts_as_done(emulator, kube):
    written: list[Write] = []
    executor(kube, written=written).apply([Delete(PODS, "ml", "pt-worker-0", "some-uid")])
    assert written == [("Pod", "pt-worker-0", False)]


def test_an_object_replaced_under_the_same_name_is_not_deleted(emulator, kube):
    kube.create(SERVICES, "ml", SERVICE)
    with pytest.raises(StaleState, match="delete Service ml/pt"):
        executor(kube).apply([Delete(SERVICES, "ml", "pt", "uid-of-an-older-service")])
    assert len(emulator.objects(SERVICES, "ml")) == 1


def test_an_event_is_recorded_once_under_its_name(emulator, kube):
    event = Emit(
        "ml",
        "pt-master.0123456789ab",
        ObjectRef("apps/v1", "StatefulSet", "pt-master", "u-1"),
        "Normal",
        "Completed",
        "master 0 succeeded",
    )
    executor(kube).apply([event, event])
    (recorded,) = emulator.objects(EVENTS, "ml")
    assert recorded["involvedObject"] == {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "name": "pt-master",
        "namespace": "ml",
        "uid": "u-1",
    }
    assert (recorded["type"], recorded["reason"], recorded["message"]) == (
        "Normal",
        "Completed",
        "master 0 succeeded",
    )
    assert (recorded["reportingInstance"], recorded["firstTimestamp"]) == (
        "sweeper-a",
        "2025-01-01T00:00:00Z",
    )


def test_a_sweeper_that_lost_its_lease_stops_before_its_next_write(emulator, kube):
    leading = iter([True, False])
    run = executor(kube, may_act=lambda: next(leading))
    second = {"metadata": {"name": "other", "namespace": "ml"}, "spec": {}}
    with pytest.raises(NotLeading):
        run.apply([Create(SERVICES, "ml", SERVICE), Create(SERVICES, "ml", second)])
    assert [o["metadata"]["name"] for o in emulator.objects(SERVICES, "ml")] == ["pt"]


def test_without_volcano_a_podgroup_is_skipped_and_the_next_actions_still_run(emulator, kube):
    emulator.emulator.unserved.add("podgroups")
    group = {"metadata": {"name": "pt", "namespace": "ml"}, "spec": {"minMember": 2}}
    executor(kube).apply([Create(PODGROUPS, "ml", group), Create(SERVICES, "ml", SERVICE)])
    assert [o["metadata"]["name"] for o in emulator.objects(SERVICES, "ml")] == ["pt"]


def stray_warnings(job: str, count: int) -> list[Emit]:
    """The Events the sweeper decides for a job of one StatefulSet whose label `count` bare pods
    of someone else carry (anyone allowed to create pods can write them)."""
    (workload,) = stamped(statefulset(f"{job}-worker", role="worker", job=job, replicas=1))
    strays = [bare_pod(f"{job}-stray-{i}", framework="pytorch", job=job) for i in range(count)]
    actions = decision(job, [workload], [pod(workload, 0), *strays]).actions
    warnings = [a for a in actions if isinstance(a, Emit) and a.reason == "NotInJob"]
    assert len(warnings) == count
    return warnings


def event_posts(emulator) -> int:
    return sum(
        r.method.value == "POST" and r.url.path.endswith("/events") for r in emulator.requests()
    )


def test_events_per_job_are_bounded_however_many_pods_carry_its_label(emulator, kube):
    now = [NOW]
    run = Executor(kube, identity="sweeper-a", clock=lambda: now[0])
    strays = stray_warnings("victim", 500)

    for _ in range(3):  # three reconciles within the minute
        run.apply(strays)
    after_a_minute_of_reconciles = event_posts(emulator)
    run.apply(stray_warnings("other", 1))  # another job is not held back by this one's
    now[0] += timedelta(minutes=1)
    run.apply(strays)

    assert after_a_minute_of_reconciles == 20
    assert event_posts(emulator) == 20 + 1 + 20
    recorded = {e["metadata"]["name"] for e in emulator.objects(EVENTS, "ml")}
    assert len(recorded) == 41


def test_an_event_recorded_is_not_posted_again_until_it_may_have_expired(emulator, kube):
    now = [NOW]
    run = Executor(kube, identity="sweeper-a", clock=lambda: now[0])
    (warning,) = stray_warnings("victim", 1)

    for minutes in range(0, 30, 5):
        now[0] = NOW + timedelta(minutes=minutes)
        run.apply([warning])
    posted_within_half_an_hour = event_posts(emulator)
    now[0] = NOW + timedelta(minutes=31)
    run.apply([warning])

    assert (posted_within_half_an_hour, event_posts(emulator)) == (1, 2)


def configmap_posts(emulator) -> int:
    return sum(
        r.method.value == "POST" and r.url.path.endswith("/configmaps") for r in emulator.requests()
    )


def test_a_configmap_planted_under_the_lists_name_costs_one_create_a_minute_and_one_warning(
    emulator, kube
):
    taken = Emit(
        "ml",
        "pt-master.0123456789ab",
        ObjectRef("apps/v1", "StatefulSet", "pt-master", "uid-pt-master"),
        "Warning",
        "ForeignConfigMap",
        "ConfigMap pt-peers-0123456789 was not made by Trainhook",
        job="pt",
    )
    lists = {"metadata": {"name": "pt-peers-0123456789", "namespace": "ml"}, "data": {"A": "b"}}
    kube.create(CONFIGMAPS, "ml", {**lists, "data": {"A": "planted"}})  # no managed-by label
    before = configmap_posts(emulator)
    now = [NOW]
    run = Executor(kube, identity="sweeper-a", clock=lambda: now[0])

    for seconds in range(0, 60, 10):  # six reconciles within the minute
        now[0] = NOW + timedelta(seconds=seconds)
        run.apply([Create(CONFIGMAPS, "ml", lists, on_conflict=taken)])
    within_a_minute = configmap_posts(emulator) - before
    now[0] = NOW + timedelta(minutes=1)
    run.apply([Create(CONFIGMAPS, "ml", lists, on_conflict=taken)])

    assert (within_a_minute, configmap_posts(emulator) - before) == (1, 2)
    warnings = [e for e in emulator.objects(EVENTS, "ml") if e["reason"] == "ForeignConfigMap"]
    assert [(e["type"], e["involvedObject"]["name"]) for e in warnings] == [
        ("Warning", "pt-master")
    ]
    (kept,) = emulator.objects(CONFIGMAPS, "ml")
    assert kept["data"] == {"A": "planted"}
