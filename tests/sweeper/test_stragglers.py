"""Stragglers caught on a played clock: a rank whose own step time stays over the job's
trainhook.io/straggler-threshold times the median of the other ranks is flagged after three slow
reports in a row, not before, and unflagged after three normal ones; a rank that stops reporting
is forgotten, and what the sweeper keeps stays bounded however much the ranks report."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from tests.sweeper.helpers import NOW
from webhook.core import contract
from webhook.core.errors import TrainhookError
from webhook.core.job.progress import (
    BadReport,
    parse_report,
    step_seconds,
    straggler_threshold,
    summary,
    timing_only,
)
from webhook.sweeper.job.stragglers import (
    FLAG_AFTER,
    MAX_LISTED,
    WINDOW,
    JobRanks,
    Stragglers,
    read_stragglers,
    record_text,
    stragglers_line,
)

KEY = ("ml", "pt")
EVERY = timedelta(seconds=10)  # each rank reports every 10 s


def ranks(threshold: float = 1.5) -> JobRanks:
    return JobRanks(threshold)


def round_of(job: JobRanks, times: dict[int, float], at: int) -> None:
    """One report of each rank in `times` (rank i is pod pt-worker-i on node gpu-i)."""
    for i, seconds in times.items():
        job.report(f"pt-worker-{i}", f"uid-{i}", f"gpu-{i}", i, seconds, NOW + at * EVERY)


def flagged(job: JobRanks) -> list[str]:
    return [rank.pod for rank in job.flagged()]


def test_a_rank_is_flagged_after_three_slow_reports_in_a_row_and_not_before() -> None:
    job = ranks()
    for at in range(FLAG_AFTER - 1):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.1, 3: 2.0}, at)
        assert flagged(job) == []
    round_of(job, {0: 1.0, 1: 1.0, 2: 1.1, 3: 2.0}, FLAG_AFTER - 1)
    assert flagged(job) == ["pt-worker-3"]
    (rank,) = job.flagged()
    assert rank.since == NOW + (FLAG_AFTER - 1) * EVERY
    assert rank.ratio == pytest.approx(2.0)


def test_one_slow_report_between_normal_ones_flags_nothing() -> None:
    job = ranks()
    for at, slow in enumerate([2.0, 2.0, 1.0, 2.0, 2.0, 1.0, 2.0]):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: slow}, at)
    assert flagged(job) == []


def test_a_flagged_rank_is_unflagged_after_three_normal_reports() -> None:
    job = ranks()
    for at in range(3):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: 2.0}, at)
    assert flagged(job) == ["pt-worker-3"]
    round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}, 3)
    round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}, 4)
    assert flagged(job) == ["pt-worker-3"]  # hysteresis: still flagged
    round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}, 5)
    assert flagged(job) == []


def test_a_rank_just_under_the_threshold_is_no_straggler() -> None:
    job = ranks(threshold=1.5)
    for at in range(6):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.5}, at)
    assert flagged(job) == []


def test_with_two_ranks_the_slow_one_is_compared_with_the_other_alone() -> None:
    job = ranks()
    for at in range(3):
        round_of(job, {0: 1.0, 1: 1.6}, at)
    assert flagged(job) == ["pt-worker-1"]
    assert job.flagged()[0].ratio == pytest.approx(1.6)


def test_a_rank_alone_is_never_a_straggler() -> None:
    job = ranks()
    for at in range(6):
        round_of(job, {0: 50.0}, at)
    assert flagged(job) == [] and job.ranks["pt-worker-0"].ratio is None


def test_the_median_holds_against_one_fast_rank_among_three() -> None:
    # Against the mean (1.0 + 0.2) / 2 = 0.6, rank 2 would be 2x: against the median of the
    # other ranks' step times it is 1.5x, not over 1.5.
    job = ranks()
    for at in range(5):
        round_of(job, {0: 1.0, 1: 0.2, 2: 1.0, 3: 1.0}, at)
    assert flagged(job) == []


def test_a_rank_that_stops_reporting_keeps_its_flag_until_it_is_forgotten() -> None:
    job = ranks()
    for at in range(4):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: 3.0}, at)
    assert flagged(job) == ["pt-worker-3"]
    # Rank 3 goes quiet; the others report on. Three of its intervals (30 s) are not enough to
    # forget it before two minutes have passed.
    for at in range(4, 15):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0}, at)
        job.expire(NOW + at * EVERY)
    assert flagged(job) == ["pt-worker-3"]
    for at in range(15, 17):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0}, at)
        job.expire(NOW + at * EVERY)
    assert flagged(job) == [] and "pt-worker-3" not in job.ranks


def test_a_rank_that_stopped_reporting_leaves_the_median() -> None:
    job = ranks()
    round_of(job, {0: 1.0, 1: 1.0, 2: 1.0}, 0)
    round_of(job, {3: 0.3}, 0)  # a fast rank, then silent
    for at in range(1, 20):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0}, at)
    job.expire(NOW + 19 * EVERY)
    assert sorted(job.ranks) == ["pt-worker-0", "pt-worker-1", "pt-worker-2"]


def test_a_pod_recreated_under_the_rank_starts_afresh() -> None:
    job = ranks()
    for at in range(3):
        round_of(job, {0: 1.0, 1: 1.0, 2: 2.0}, at)
    assert flagged(job) == ["pt-worker-2"]
    job.report("pt-worker-2", "uid-new", "gpu-9", 2, 2.0, NOW + 3 * EVERY)
    assert flagged(job) == []
    assert job.ranks["pt-worker-2"].node == "gpu-9"


def test_what_is_kept_stays_bounded_however_often_ranks_report() -> None:
    tracker = Stragglers(max_jobs=3)
    for at in range(3000):
        tracker.report(KEY, 1.5, f"p-{at % 7}", "u", "n", at % 7, 1.0 + at % 3, NOW)
    (job,) = tracker.jobs.values()
    assert len(job.ranks) == 7
    assert all(len(rank.times) == WINDOW for rank in job.ranks.values())
    for other in range(5):
        tracker.report(("ml", f"job-{other}"), 1.5, "p-0", "u", "n", 0, 1.0, NOW)
    assert list(tracker.jobs) == [("ml", "job-2"), ("ml", "job-3"), ("ml", "job-4")]


def test_a_job_whose_ranks_all_stopped_is_forgotten_and_said_to_have_changed() -> None:
    tracker = Stragglers(max_jobs=10)
    for at in range(3):
        for i, seconds in enumerate([1.0, 1.0, 2.0]):
            tracker.report(
                KEY, 1.5, f"pt-worker-{i}", "u", f"gpu-{i}", i, seconds, NOW + at * EVERY
            )
    assert tracker.record(KEY) is not None
    assert tracker.expire(NOW + timedelta(minutes=1)) == []
    assert tracker.expire(NOW + timedelta(minutes=5)) == [KEY]
    assert tracker.jobs == {}
    tracker.report(KEY, 1.5, "pt-worker-0", "u", "gpu-0", 0, 1.0, NOW)
    tracker.forget(KEY)
    assert tracker.jobs == {}


def test_the_record_on_the_job_names_rank_pod_node_and_ratio_compactly() -> None:
    job = ranks()
    for at in range(3):
        round_of(job, {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.82}, at)
    assert record_text(job.record()) == (
        '{"count":1,"ranks":4,"threshold":1.5,"flagged":[{"pod":"pt-worker-3","node":"gpu-3",'
        '"rank":3,"ratio":1.8,"since":"2025-01-01T01:00:20Z"}]}'
    )
    assert record_text(ranks().record()) is None


def test_the_record_lists_at_most_eight_ranks_the_slowest_first() -> None:
    job = ranks(threshold=1.2)
    times = {i: 1.0 for i in range(40)} | {i: 2.0 + i / 100 for i in range(40, 52)}
    for at in range(3):
        round_of(job, times, at)
    record = job.record()
    assert record is not None
    assert record["count"] == 12 and len(record["flagged"]) == MAX_LISTED
    assert [entry["rank"] for entry in record["flagged"]] == list(range(51, 43, -1))
    assert len(record_text(record) or "") < 1200
    read = read_stragglers({contract.STRAGGLERS: record_text(record) or ""})
    assert read is not None
    assert stragglers_line(read) == (
        "12 of 52 ranks over 1.2x the others' median step time: "
        "rank 51 (pod pt-worker-51 on node gpu-51, 2.5x), "
        "rank 50 (pod pt-worker-50 on node gpu-50, 2.5x), "
        "rank 49 (pod pt-worker-49 on node gpu-49, 2.5x), "
        "rank 48 (pod pt-worker-48 on node gpu-48, 2.5x), "
        "rank 47 (pod pt-worker-47 on node gpu-47, 2.5x), "
        "rank 46 (pod pt-worker-46 on node gpu-46, 2.5x), "
        "rank 45 (pod pt-worker-45 on node gpu-45, 2.5x), "
        "rank 44 (pod pt-worker-44 on node gpu-44, 2.4x), 4 more"
    )


def test_a_record_someone_garbled_reads_as_none() -> None:
    for raw in ("", "nope", "[]", '{"flagged": 3}', '{"flagged": [{"node": "x"}]}'):
        assert read_stragglers({contract.STRAGGLERS: raw}) is None


# --- what a rank sends -----------------------------------------------------------------------


def report(*metrics: tuple[str, object], **fields: object) -> bytes:
    status = {**fields, "metrics": [{"name": n, "value": v} for n, v in metrics]}
    return json.dumps({"trainerStatus": status}).encode()


def test_a_rank_reports_its_step_time_alone_and_leaves_the_jobs_summary_alone() -> None:
    alone = parse_report(report(("stepTimeSeconds", "0.84")))
    assert alone is not None and step_seconds(alone) == 0.84 and timing_only(alone)
    full = parse_report(report(("currentStep", "40"), ("stepTimeSeconds", 0.5), ("loss", "1")))
    assert full is not None and step_seconds(full) == 0.5 and not timing_only(full)
    assert summary(full, NOW)["metrics"] == {"loss": "1"}  # the rank's time is not the job's


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", "inf", "86401"])
def test_a_step_time_that_is_no_duration_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(BadReport) as refused:
        parse_report(report(("stepTimeSeconds", value)))
    assert refused.value.status == 422
    assert str(refused.value) == (
        f"metric stepTimeSeconds: {value!r}; a number of seconds above 0, at most 86400, is allowed"
    )


@pytest.mark.parametrize("value", ["1", "0.9", "abc", "1e3", "101", "-2", "", "1.5x"])
def test_a_threshold_that_is_no_number_above_1_is_refused_in_one_line(value: str) -> None:
    with pytest.raises(TrainhookError) as refused:
        straggler_threshold(value)
    assert str(refused.value) == (
        f"trainhook.io/straggler-threshold: invalid value {value!r}: a number above 1 and at "
        "most 100, like 1.5: a rank whose step time stays over that many times the median of "
        "the job's other ranks is a straggler"
    )


def test_thresholds_read_as_written() -> None:
    assert [straggler_threshold(v) for v in ("1.5", "2", " 1.05 ", "100", None)] == [
        1.5,
        2.0,
        1.05,
        100.0,
        None,
    ]


# --- the settings, refused at admission in one line --------------------------------------------

RULE_REFUSED = (
    "rule 1: straggler is a term alone and never fires by itself: write it with exclude-node on "
    "one of restart-job, restart-job-free, restart-in-place, without max=; the whole-job "
    "restarts other rules fire then keep the pods off the stragglers' nodes"
)


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        (
            {contract.STRAGGLER_THRESHOLD: "1.5"},
            "trainhook.io/straggler-threshold: invalid value '1.5': the ranks' step times come "
            'from the job\'s progress reports: set trainhook.io/report-progress: "true" too, or '
            "remove the threshold",
        ),
        (
            {contract.STRAGGLER_THRESHOLD: "1", contract.REPORT_PROGRESS: "true"},
            "trainhook.io/straggler-threshold: invalid value '1': a number above 1 and at most "
            "100, like 1.5",
        ),
        (
            {contract.FAILURE_POLICY: "straggler -> restart-job"},
            "trainhook.io/failure-policy: invalid value 'straggler -> restart-job': "
            + RULE_REFUSED,
        ),
        (
            {contract.FAILURE_POLICY: "straggler -> restart-in-place max=3 exclude-node"},
            "trainhook.io/failure-policy: invalid value 'straggler -> restart-in-place max=3 "
            "exclude-node': " + RULE_REFUSED,
        ),
        (
            {contract.FAILURE_POLICY: "straggler role=worker -> restart-job exclude-node"},
            "trainhook.io/failure-policy: invalid value 'straggler role=worker -> restart-job "
            "exclude-node': " + RULE_REFUSED,
        ),
        (
            {contract.FAILURE_POLICY: "straggler -> restart-pod exclude-node"},
            "trainhook.io/failure-policy: invalid value 'straggler -> restart-pod exclude-node': "
            + RULE_REFUSED,
        ),
        (
            {contract.FAILURE_POLICY: "straggler=yes -> restart-job exclude-node"},
            "trainhook.io/failure-policy: invalid value 'straggler=yes -> restart-job "
            "exclude-node': rule 1: write straggler alone, without a value",
        ),
    ],
)
def test_a_bad_straggler_setting_is_refused_in_one_line(
    annotations: dict[str, str], message: str
) -> None:
    from tests.core.test_failure_rules import refusal

    refused = refusal(annotations)
    assert "\n" not in refused
    assert refused == message or refused.startswith(message)


def test_a_straggler_rule_never_matches_a_failure_whatever_it_is() -> None:
    from webhook.core.job.failure_rules import Failure, failure_policy, parse_rules, straggler_rule

    rules = parse_rules("straggler -> restart-job-free exclude-node")
    policy = failure_policy(rules, "RestartJob")
    assert straggler_rule(policy) is rules[0]
    for failure in (Failure(), Failure(exit_code=1, reason="Error"), Failure(stalled=True)):
        assert policy.first(failure) is not rules[0]
    assert policy.first(Failure(exit_code=1)) == policy.rules[2]  # the preset's `* -> restart-job`
