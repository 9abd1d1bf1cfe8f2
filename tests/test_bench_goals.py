"""The goals table `make bench` prints: figures as a reader writes them, a near miss not as 0%."""

from __future__ import annotations

from bench.burst import Burst
from bench.run import Goal, goals, goals_table


def rows(table: str) -> list[list[str]]:
    lines = table.splitlines()[2:]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines]


def test_goal_figures_over_a_hundred_print_whole_and_smaller_ones_in_three_digits() -> None:
    table = goals_table(
        [
            Goal("server CPU per request, TF pod", 1044.67, 890.24, 1.25),
            Goal("handler vs JSON floor, TF pod", 48.64, 73.77, 1.5),
            Goal("sweeper CPU per pod event (ms), burst", 0.1444, 1.0, 1.0),
        ]
    )
    assert rows(table) == [
        ["server CPU per request, TF pod", "1,045", "890", "1.17x", "<= 1.25x", "met"],
        ["handler vs JSON floor, TF pod", "48.6", "73.8", "0.66x", "<= 1.50x", "met"],
        ["sweeper CPU per pod event (ms), burst", "0.144", "1", "0.14x", "<= 1.00x", "met"],
    ]


def test_a_goal_missed_by_under_one_percent_says_by_how_many_tenths() -> None:
    table = goals_table(
        [
            Goal("sweeper CPU per pod event (ms), ready", 1.0035, 1.0, 1.0),
            Goal("server CPU per request, StatefulSet", 1000.19, 775.52, 1.25),
        ]
    )
    assert [row[-1] for row in rows(table)] == ["missed by 0.4%", "missed by 3%"]


def test_burst_goals_read_a_1000_and_an_8192_pod_job() -> None:
    bursts = [
        (Burst("ours", pods, 2.0, 1.0), Burst("do-nothing", pods, 1.0, 1.0))
        for pods in (1_000, 8_192, 18_000, 512)
    ]
    assert [g.goal for g in goals([], [], bursts)] == [
        "burst of a 1,000-pod job, time",
        "burst of an 8,192-pod job, time",
        "burst of an 18,000-pod job, time",
        "burst of a 512-pod job, time",
    ]
