"""One job's pods as the sweeper decides on them, kept up to date pod event by pod event.

A watch hands each pod change to the job's table (`changed`, through informers.PodTables, which
hands them over from the watches' threads); the reconcile of the job reads the table (`read`),
which reads again only the pods that changed since (or all of a workload's, when what their
reading takes from it changed) and updates the job's PodFacts as it goes. A pod event costs its
own reading, not the job's.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import chain
from typing import Any, overload

from webhook.core import contract
from webhook.core.frameworks import Framework
from webhook.core.objects import labels_of, metadata_of
from webhook.sweeper.job.pods import (
    PodFacts,
    PodOwner,
    PodView,
    Retired,
    controller_of,
    controller_uid,
    is_plain,
    is_quiet,
    is_unschedulable,
    plain_replica,
    pod_peers,
    read_pod_once,
    stopped_from_outside,
)
from webhook.sweeper.job.recorded import FailedRuns

Controller = tuple[str, str]  # (kind, name) of the controller owning a pod
# What proves a pod its workload's: the uid its owner reference names, and the job the webhook
# labelled it with.
Proof = tuple[str, str]


class PodTable:
    """The pods of one job: the objects the watch holds, their readings, and their facts."""

    def __init__(self, pods: Iterable[Mapping[str, Any]] = ()) -> None:
        self._pending: dict[str, Mapping[str, Any] | None] = {}
        self._objects: dict[str, Mapping[str, Any]] = {}
        self._controller: dict[str, Controller] = {}
        self._by_controller: dict[Controller, set[str]] = {}
        self._proof: dict[str, Proof] = {}
        self._proofs: dict[Controller, dict[Proof, int]] = {}  # pods per proof, per controller
        # The readings, in name order, and what they were read with.
        self._names: list[str] = []
        self._views: list[PodView] = []
        # The readings as the last look handed them over, in chunks of CHUNK: a look after a
        # few pod events makes again only the chunks they changed.
        self._chunks: list[tuple[PodView, ...]] = []
        self._stale_chunks: set[int] = set()
        self._reshaped = False  # a pod came or went: every chunk is made again
        self._snapshot: Readings | None = None
        self._framework = ""
        self._owners: dict[Controller, tuple[str, str, int]] = {}
        self._dirty: set[str] = set()
        # The facts, kept as the readings change.
        self._notable: set[str] = set()
        self._plain = 0
        self._running = 0
        self._plain_running: dict[tuple[str, int], int] = {}
        self._unschedulable: list[PodView] = []  # plain ones, in name order
        self._topologies: dict[str | None, int] = {}
        self._peers: dict[str | None, int] = {}
        self._uid8s: dict[str, frozenset[str]] = {}
        self._mounting: dict[str, int] = {}  # pods (terminating ones too) per peers ConfigMap
        self._mounts: dict[str, str] = {}  # the peers ConfigMap each pod held mounts, if any
        # Quiet pods (pods.is_quiet), and those of them whose workload's ledger counts their
        # failed runs in full: retired, counted as plain pods (PodFacts.retired). The ledgers
        # they were retired against, per workload; the quiet pods to look at again.
        self._quiet: set[str] = set()
        self._retired: dict[Controller, dict[str, PodView]] = {}
        self._retired_names: set[str] = set()
        self._retired_runs: list[tuple[Any, str, str, str]] = []
        self._ledgers: dict[Controller, FailedRuns] = {}
        self._ledger_others: dict[Controller, set[str]] = {}
        self._recheck: set[str] = set()
        # Retirements undone or done since the table was made (a pod event's reading of a
        # quiet pod undoes and redoes its own): what the tests observe.
        self.retirements = 0
        # By uid, the last version of each pod stopped from outside that is gone since: seen
        # at the event that took it away, so a look after it knows the disruption it was.
        self._gone: dict[str, Mapping[str, Any]] = {}
        for pod in pods:
            self.changed(metadata_of(pod).get("name") or "", pod)

    def changed(self, name: str, pod: Mapping[str, Any] | None) -> None:
        """A pod's new version (None: it is gone). The same object again changes nothing. A
        pod stopped from outside that goes (deleted, or replaced under its name) is
        remembered as it was."""
        last = self._pending[name] if name in self._pending else self._objects.get(name)
        if last is not None and stopped_from_outside(last) and _uid(pod) != _uid(last):
            self._gone[str(_uid(last))] = last
            while len(self._gone) > GONE_KEPT:
                del self._gone[next(iter(self._gone))]
        self._pending[name] = pod

    def __len__(self) -> int:
        self._apply()
        return len(self._objects)

    # --- read by the reconcile ---------------------------------------------------------------

    def controllers(self) -> list[Controller]:
        """The controllers of the job's pods (("Pod", name) for a bare pod), the pending
        changes applied first."""
        self._apply()
        return sorted(self._by_controller)

    def mounting(self) -> Mapping[str, int]:
        """How many pods mount each of the job's peers ConfigMaps, the pending changes applied
        first (a copy: the few names a job's pods mount)."""
        self._apply()
        return dict(self._mounting)

    def objects_of(self, controller: Controller) -> list[Mapping[str, Any]]:
        """The pods of one controller, by name."""
        return [self._objects[name] for name in sorted(self._by_controller.get(controller, ()))]

    def unproven(self, controller: Controller, proof: Proof) -> list[Mapping[str, Any]]:
        """The pods naming `controller` whose proof is not `proof` (another uid, none, or not
        the job's label), by name; costs nothing while every pod has it."""
        proofs = self._proofs.get(controller, {})
        if not proofs or set(proofs) == {proof}:
            return []
        return [
            self._objects[name]
            for name in sorted(self._by_controller.get(controller, ()))
            if self._proof.get(name) != proof
        ]

    def read(
        self,
        framework: Framework | None,
        owners: Mapping[Controller, PodOwner],
        leave_out: set[Controller],
        leave_out_pods: frozenset[str] = frozenset(),
    ) -> tuple[Readings, PodFacts]:
        """Every pod's reading in name order, and their facts; those of the controllers in
        `leave_out` (not the job's), and the pods named in `leave_out_pods`, left out."""
        self._apply()
        self._reread_if_owners_changed(framework, owners)
        for name in sorted(self._dirty):
            pod = self._objects.get(name)
            if pod is None:
                self._forget_view(name)
            else:
                self._put_view(name, read_pod_once(pod, framework, owners))
        self._dirty.clear()
        self._settle(owners)
        left_out = [c for c in leave_out if self._by_controller.get(c)]
        if left_out or leave_out_pods:  # rare: pods of others carrying the job's label, or of
            # a role going away
            kept = tuple(  # counted afresh: nothing retired
                v
                for v in self._views
                if (v.owner_kind, v.owner_name) not in leave_out and v.name not in leave_out_pods
            )
            return Readings((kept,)), PodFacts.of(kept)
        return self._readings(), self._facts()

    def with_gone(
        self,
        facts: PodFacts,
        framework: Framework | None,
        owners: Mapping[Controller, PodOwner],
        leave_out: set[Controller],
    ) -> PodFacts:
        """`facts` with the pods stopped from outside that are gone since (PodFacts.gone), of
        the job's workloads (`owners`, by the uid their owner reference names) only."""
        if not self._gone:
            return facts
        views = []
        for uid, obj in self._gone.items():
            live = self._objects.get(metadata_of(obj).get("name") or "")
            if live is not None and _uid(live) == uid:
                continue
            controller = controller_of(obj)
            owner = owners.get(controller)
            if owner is None or controller in leave_out or controller[0] == "Pod":
                continue
            if _owner_uid(obj) != getattr(owner, "uid", _owner_uid(obj)):
                continue
            views.append(read_pod_once(obj, framework, owners))
        if not views:
            return facts
        return replace(facts, gone=tuple(sorted(views, key=lambda v: (v.name, v.uid))))

    # --- keeping it ----------------------------------------------------------------------------

    def _apply(self) -> None:
        pending, self._pending = self._pending, {}
        for name, pod in pending.items():
            if pod is not None and self._objects.get(name) is pod:
                continue
            old = self._mounts.pop(name, None)
            new = pod_peers(pod) if pod is not None else None
            if old != new:
                if old is not None:
                    _bump(self._mounting, old, -1)
                if new is not None:
                    _bump(self._mounting, new, 1)
            if new is not None:
                self._mounts[name] = new
            controller = controller_of(pod) if pod is not None else None
            proof = (controller_uid(pod), labels_of(pod).get(contract.JOB) or "") if pod else None
            before = self._controller.get(name)
            if before != controller or self._proof.get(name) != proof:  # seldom: a pod event
                # most often changes its status alone
                self._unplace(name)
                if controller is not None and proof is not None:
                    self._controller[name] = controller
                    self._by_controller.setdefault(controller, set()).add(name)
                    self._proof[name] = proof
                    _bump(self._proofs.setdefault(controller, {}), proof, 1)
            if pod is None:
                self._objects.pop(name, None)
            else:
                self._objects[name] = pod
            self._dirty.add(name)

    def _unplace(self, name: str) -> None:
        """Forget which controller a pod names and what proves it its."""
        before = self._controller.pop(name, None)
        if before is None:
            return
        names = self._by_controller[before]
        names.discard(name)
        if not names:
            del self._by_controller[before]
        _bump(self._proofs[before], self._proof.pop(name), -1)
        if not self._proofs[before]:
            del self._proofs[before]

    def _reread_if_owners_changed(
        self, framework: Framework | None, owners: Mapping[Controller, PodOwner]
    ) -> None:
        reader = framework.name if framework else ""
        facts = {
            controller: (owner.name, owner.role, owner.ordinal_start)
            for controller, owner in owners.items()
        }
        if reader != self._framework:
            self._dirty.update(self._objects)
        else:
            for controller in set(facts) | set(self._owners):
                if facts.get(controller) != self._owners.get(controller):
                    self._dirty.update(self._by_controller.get(controller, ()))
        self._framework, self._owners = reader, facts

    def _forget_view(self, name: str) -> None:
        at = bisect_left(self._names, name)
        if at == len(self._names) or self._names[at] != name:
            return
        view = self._views[at]
        del self._names[at]
        del self._views[at]
        self._snapshot, self._reshaped = None, True
        self._count(view, -1)

    def _put_view(self, name: str, view: PodView) -> None:
        """A pod's new reading, in place of the one held under its name (a pod event most
        often changes a pod the table holds: its reading is replaced where it is)."""
        at = bisect_left(self._names, name)
        self._snapshot = None
        if at < len(self._names) and self._names[at] == name:
            held = self._views[at]
            self._views[at] = view
            self._stale_chunks.add(at // CHUNK)
            if _counted_alike(held, view):  # a plain pod's Ready flip, or its probe's message
                if is_unschedulable(view):
                    waiting = self._unschedulable
                    waiting[bisect_left(waiting, name, key=_name)] = view
                return
            self._count(held, -1)
        else:
            self._names.insert(at, name)
            self._views.insert(at, view)
            self._reshaped = True
        self._count(view, 1)

    def _readings(self) -> Readings:
        """Every reading in name order, as an immutable sequence sharing the chunks no pod
        event changed with the last look's."""
        if self._snapshot is not None:
            return self._snapshot
        views = self._views
        if self._reshaped:
            self._chunks = [tuple(views[at : at + CHUNK]) for at in range(0, len(views), CHUNK)]
        else:
            for number in self._stale_chunks:
                self._chunks[number] = tuple(views[number * CHUNK : (number + 1) * CHUNK])
        self._reshaped = False
        self._stale_chunks.clear()
        self._snapshot = Readings(tuple(self._chunks))
        return self._snapshot

    def _count(self, view: PodView, step: int) -> None:
        _bump(self._topologies, view.topology, step)
        if not view.terminating:
            _bump(self._peers, view.peers, step)
        names = self._uid8s.get(view.uid8, frozenset())
        names = names | {view.name} if step > 0 else names - {view.name}
        if names:
            self._uid8s[view.uid8] = names
        else:
            self._uid8s.pop(view.uid8, None)
        if len(names) > 1 or (step < 0 and names):  # short uids meeting, or parting
            self._recheck.update(names & self._quiet)
        if is_plain(view):
            self._count_plain(view, step)
            return
        if step < 0 and view.name in self._retired_names:
            self._unretire(view)
        if step > 0:
            self._notable.add(view.name)
            if is_quiet(view):
                self._quiet.add(view.name)
                self._recheck.add(view.name)
        else:
            self._notable.discard(view.name)
            self._quiet.discard(view.name)

    def _count_plain(self, view: PodView, step: int) -> None:
        self._plain += step
        if view.phase == "Running":
            self._running += step
            _bump(self._plain_running, plain_replica(view), step)
        elif is_unschedulable(view):
            waiting = self._unschedulable
            at = bisect_left(waiting, view.name, key=_name)
            if step > 0:
                waiting.insert(at, view)
            elif at < len(waiting) and waiting[at].name == view.name:
                del waiting[at]

    def _settle(self, owners: Mapping[Controller, PodOwner]) -> None:
        """Retire the quiet pods whose workload's ledger now counts their failed runs in full,
        and bring back those it no longer does: looks only at the pods that changed and the
        short uids a changed ledger names differently."""
        for controller in list(self._ledgers):
            if controller not in owners:  # its workload is not the job's any longer
                del self._ledgers[controller]
                del self._ledger_others[controller]
                self._recheck.update(v.name for v in self._retired.get(controller, {}).values())
        for controller, owner in owners.items():
            ledger = getattr(owner, "failed_runs", None)
            if not isinstance(ledger, FailedRuns):
                continue
            held = self._ledgers.get(controller)
            if held is ledger:
                continue
            before = held.pods.items() if held is not None else {}.items()
            for uid, _ in before ^ ledger.pods.items():
                self._recheck.update(self._uid8s.get(uid, frozenset()) & self._quiet)
            self._ledgers[controller] = ledger
            retired = self._retired.get(controller, {})
            self._ledger_others[controller] = {uid for uid in ledger.pods if uid not in retired}
        runs: list[tuple[Any, str, str, str]] = []  # of the pods retired now
        for name in self._recheck:
            at = bisect_left(self._names, name)
            if at == len(self._names) or self._names[at] != name:
                continue
            view = self._views[at]
            wanted = name in self._quiet and self._counted_in_full(view)
            if wanted and name not in self._retired_names:
                self._retire(view, runs)
            elif not wanted and name in self._retired_names:
                self._unretire(view)
                self._notable.add(name)
        self._recheck.clear()
        if len(runs) <= FEW_RUNS:
            for run in runs:
                insort(self._retired_runs, run)
        else:  # a ledger counting a blip's restarts retires thousands of pods at once
            self._retired_runs.extend(runs)
            self._retired_runs.sort()

    def _counted_in_full(self, view: PodView) -> bool:
        ledger = self._ledgers.get((view.owner_kind, view.owner_name))
        return (
            ledger is not None
            and view.training is not None
            and ledger.pods.get(view.uid8, 0) >= view.training.failures
            and len(self._uid8s.get(view.uid8, ())) == 1
        )

    def _retire(self, view: PodView, runs: list[tuple[Any, str, str, str]]) -> None:
        """Count a quiet pod as plain; its last failed run's time goes into `runs`."""
        controller = (view.owner_kind, view.owner_name)
        self._retired.setdefault(controller, {})[view.uid8] = view
        self._retired_names.add(view.name)
        self._ledger_others[controller].discard(view.uid8)
        self._notable.discard(view.name)
        self._count_plain(view, 1)
        if (run := _last_run_finished(view)) is not None:
            runs.append((run, *controller, view.uid8))
        self.retirements += 1

    def _unretire(self, view: PodView) -> None:
        controller = (view.owner_kind, view.owner_name)
        group = self._retired[controller]
        del group[view.uid8]
        if not group:
            del self._retired[controller]
        self._retired_names.discard(view.name)
        ledger = self._ledgers.get(controller)
        if ledger is not None and view.uid8 in ledger.pods:
            self._ledger_others[controller].add(view.uid8)
        self._count_plain(view, -1)
        if (run := _last_run_finished(view)) is not None:
            entry = (run, *controller, view.uid8)
            at = bisect_left(self._retired_runs, entry)
            if at < len(self._retired_runs) and self._retired_runs[at] == entry:
                del self._retired_runs[at]
        self.retirements += 1

    def _facts(self) -> PodFacts:
        notable = []
        for name in sorted(self._notable):
            notable.append(self._views[bisect_left(self._names, name)])
        return PodFacts(
            notable=tuple(notable),
            plain=self._plain,
            running=self._running,
            plain_running=self._plain_running,
            topologies=frozenset(self._topologies),
            mounted_peers=frozenset(self._peers),
            uid8s=self._uid8s,
            retired={
                controller: Retired(
                    self._ledgers[controller], pods, self._ledger_others[controller]
                )
                for controller, pods in self._retired.items()
            },
            retired_runs=self._retired_runs,
            unschedulable=self._unschedulable,
        )


# Up to this many pods retired by one look have their runs put in order one by one; more are
# sorted in with the rest at once.
FEW_RUNS = 16

# Readings a chunk of a job's readings holds: a pod event's look copies its pod's chunk, not
# the whole job's readings.
CHUNK = 256


class Readings(Sequence[PodView]):
    """A job's pod readings in name order, as a look hands them to the decision: immutable,
    made of chunks (tuples) that the next look shares where no pod of them changed."""

    __slots__ = ("_chunks", "_length", "_starts")

    def __init__(self, chunks: tuple[tuple[PodView, ...], ...] = ()) -> None:
        self._chunks = chunks
        starts = []
        length = 0
        for part in chunks:
            starts.append(length)
            length += len(part)
        self._starts = starts
        self._length = length

    def __len__(self) -> int:
        return self._length

    def __iter__(self) -> Iterator[PodView]:
        return chain.from_iterable(self._chunks)

    @overload
    def __getitem__(self, index: int) -> PodView: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[PodView, ...]: ...

    def __getitem__(self, index: int | slice) -> PodView | tuple[PodView, ...]:
        if isinstance(index, slice):
            return tuple(self)[index]
        if index < 0:
            index += self._length
        if not 0 <= index < self._length:
            raise IndexError("pod reading index out of range")
        number = bisect_left(self._starts, index + 1) - 1
        return self._chunks[number][index - self._starts[number]]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Readings | tuple | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"Readings({list(self)!r})"


def _counted_alike(held: PodView, view: PodView) -> bool:
    """Whether a pod's new reading counts in the job's facts as its held one does: both plain,
    of the same pod, placed and mounting alike."""
    return (
        held.uid8 == view.uid8
        and held.phase == view.phase
        and held.terminating == view.terminating
        and held.topology == view.topology
        and held.peers == view.peers
        and held.role == view.role
        and held.index == view.index
        and is_unschedulable(held) == is_unschedulable(view)
        and is_plain(held)
        and is_plain(view)
    )


def _name(view: PodView) -> str:
    return view.name


def _last_run_finished(view: PodView) -> Any:
    """When a quiet pod's last failed run finished, if it says."""
    training = view.training
    last = training.last if training is not None else None
    return last.finished if last is not None else None


# How many pods stopped from outside and gone since a job's table remembers: the newest.
GONE_KEPT = 32


def _uid(pod: Mapping[str, Any] | None) -> str | None:
    return None if pod is None else str(metadata_of(pod).get("uid") or "")


def _owner_uid(pod: Mapping[str, Any]) -> str:
    for ref in metadata_of(pod).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid") or "")
    return ""


def _bump(counts: dict[Any, int], key: Any, step: int) -> None:
    number = counts.get(key, 0) + step
    if number:
        counts[key] = number
    else:
        counts.pop(key, None)
