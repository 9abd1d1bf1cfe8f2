"""The pods a failed-runs ledger counts are retired by a look right after the one that wrote it,
not by whichever pod event comes next (after a blip of a large job, thousands of pods at once):
a sweeper against the API emulator."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.support.sweeping import sweeping
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.kube.resources import STATEFULSETS
from webhook.sweeper.job.recorded import FailedRuns

from .test_failure_rules_live import exited, status_of
from .test_sweeper_api import annotations_on, create_pytorch_job


def test_the_pods_a_written_ledger_counts_are_retired_without_another_pod_event(emulator, kube):
    _, _, pods = create_pytorch_job(kube, {contract.BACKOFF_LIMIT: "5"})
    uid8 = pods[2]["metadata"]["uid"].replace("-", "")[:8]
    # Decided a minute on, when the job's start has settled, and no relist: no look but those
    # the sweeper schedules itself.
    later = lambda: datetime.now(UTC) + timedelta(minutes=1)  # noqa: E731
    with sweeping(kube, clock=later, resync_seconds=600.0) as sweeper:
        eventually(lambda: status_of(emulator).get("state") == "Running", what="Running")
        retired: list[int] = []  # the job's retirements after each look, read by the look's thread
        look = sweeper.sweeper.reconcile

        def looking(key: tuple[str, str]) -> None:
            look(key)
            retired.append(sweeper.sweeper.pod_tables.of(key).retirements)

        sweeper.sweeper.reconcile = looking  # type: ignore[method-assign]
        sweeper.reconciled("ml", "pt", times=1)
        eventually(lambda: retired, what="a look")
        assert retired[-1] == 0
        exited(kube, "pt-worker-1", 1)  # its container failed long ago and runs again
        recorded = eventually(
            lambda: annotations_on(emulator, STATEFULSETS, "pt-worker").get(contract.FAILED_RUNS),
            what="the failed run recorded",
        )
        assert FailedRuns.parse(recorded).pods == {uid8: 1}
        eventually(lambda: retired[-1] == 1, timeout=5, what="pt-worker-1 retired")
        assert status_of(emulator)["state"] == "Running"
