"""Ending a Kueue pod group when its job ends, so the group's Workload frees its quota.

Kueue counts a plain pod group finished when every pod of it has Succeeded, or when no pod of it
is active and one carries `kueue.x-k8s.io/retriable-in-group: "false"` (Kueue's pod controller,
`Finished`). A StatefulSet's pods never reach Succeeded (they are restarted, then scaled away),
so without the marker the Workload would keep holding its quota after the job has ended.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core import contract
from webhook.kube.resources import PODS
from webhook.sweeper.actions import Action, Patch
from webhook.sweeper.state import JobState

NOT_RETRIABLE = "false"


def finished_marker(state: JobState) -> Iterable[Action]:
    """Mark one pod of a finished Kueue job (one is enough; another once that one is gone)."""
    if state.setting("scheduler") != "kueue":
        return
    pods = [p for p in state.pods if p.owner_kind in ("StatefulSet", "Job", "Pod")]
    if not pods or any(
        p.annotations.get(contract.KUEUE_RETRIABLE_IN_GROUP) == NOT_RETRIABLE for p in pods
    ):
        return
    first = min(pods, key=lambda p: (p.terminating, p.name))
    yield Patch(
        PODS,
        state.namespace,
        first.name,
        {"metadata": {"annotations": {contract.KUEUE_RETRIABLE_IN_GROUP: NOT_RETRIABLE}}},
    )
