"""`make bench`: the admission path against what Python on this stack can do, in one run.

    python -m bench.run [--seconds S] [--rounds N] [--tool auto|wrk|k6] [--json [FILE]]
                        [--goals-only]

1. handler cost against the JSON floor, in-process;
2. served throughput and latency of `trainhook serve` against a do-nothing app on the same
   gunicorn/TLS stack, measured in alternation;
2b. a burst of every pod of a 1,000- and an 8,192-pod job, 16 in flight, through both;
3. how cost grows with the size of a TensorFlow job;
4. resident memory per gunicorn worker after the run;
5. healthy admissions and probes while 200 attackers of each kind hold connections open;
6. per framework, jobs of 64 to 8,192 pods: bytes one pod holds, bytes the job writes to the
   API, admission time per pod and the sweeper's memory for the job (bench/sizes.py);
7. the sweeper: its decision time and pod cache for one job of 1,000 and of 5,000 pods and for
   1,000 jobs of 8 pods (bench/sweeper.py, also `python -m bench.sweeper` on its own);
8. a real `trainhook sweep` process holding one job of 10,000 pods and 1,000 jobs of 8: its
   memory after listing, after pod events, after a relist, and at its peak, against the
   chart's limit (bench/sweeper_process.py, also `python -m bench.sweeper_process`);
9. what one pod event costs the sweeper at 10,000 and 1,000 pods, trickled (container restarts,
   pods turning Ready), in a burst, or ignored
   (bench/pod_events.py, also `python -m bench.pod_events`); then what a real `trainhook
   sweep` process pays per event at 10,000 pods for each arrival pattern, in process CPU time
   (bench/sweeper_events.py, also `python -m bench.sweeper_events`).
10. a whole-job restart of 1,000 pods in place and by recreating them: API writes, the sweeper's
    rounds and time until training resumes (bench/restarts.py, `python -m bench.restarts`).
11. the goals, as ratios of figures measured in this one run;
12. three `trainhook sweep` processes sharing 60 jobs through shard Leases, one killed: the
    jobs per replica, the time until its shard is taken over, any job acted on twice
    (bench/shards.py, also `python -m bench.shards`).

`--goals-only` runs what the goals need (sections 1, 2, 2b and 9). With `--json`, every figure goes
to a file (bench-results.json unless named), with the date, commit and load it was taken at.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from bench.burst import IN_FLIGHT, Burst
from bench.burst import SIZES as BURST_SIZES
from bench.inprocess import Growth, HandlerCost, growth, handler_costs
from bench.load import load_tools
from bench.pod_events import GOAL_MS as EVENT_GOAL_MS
from bench.pod_events import EventCost, event_costs, events_table
from bench.restarts import restart_costs
from bench.restarts import table as restarts_table
from bench.reviews import headline_cases
from bench.served import Memory, Served, served
from bench.shards import shard_run
from bench.shards import table as shards_table
from bench.sizes import job_sizes
from bench.sizes import table as sizes_table
from bench.sweeper import sweeper_costs, sweeper_table
from bench.sweeper_events import process_events, process_events_table
from bench.sweeper_process import process_memory, process_table
from bench.tables import table
from bench.wsgi import AppCost, app_costs
from tests.support.attacks import KINDS, Report, under_attack
from tests.support.serving import serving
from webhook.certs.material import generate

GROWTH_SIZES = (8, 64, 512, 2048, 4096)


def handler_table(costs: Sequence[HandlerCost]) -> str:
    rows = [
        [
            c.case,
            f"{c.body_bytes:,}",
            f"{c.patch_bytes:,}",
            f"{c.handler_us:.0f}",
            f"{c.cold_us:.0f}",
            f"{c.floor_us:.0f}",
            f"{c.ratio:.2f}x",
            "-" if c.orjson_floor_us is None else f"{c.orjson_floor_us:.0f}",
            "-" if c.orjson_ratio is None else f"{c.orjson_ratio:.1f}x",
        ]
        for c in costs
    ]
    header = [
        "review",
        "body B",
        "patch B",
        "handler us",
        "first pod of job us",
        "floor us (json)",
        "vs floor",
        "floor us (orjson)",
        "vs orjson floor",
    ]
    return table(header, rows)


def served_table(results: Sequence[Served]) -> str:
    rows = []
    for r in results:
        rate = r.ours_latency.requests_per_second
        rows.append(
            [
                r.case,
                f"{r.ours.requests_per_second:.0f}",
                f"{r.null.requests_per_second:.0f}",
                f"{r.ratio:.0%} / {r.paired_ratio:.0%}",
                f"{r.replay.requests_per_second / r.null.requests_per_second:.0%}",
                f"{r.ours_cpu_us:.0f} / {r.replay_cpu_us:.0f} / {r.null_cpu_us:.0f}",
                f"{rate:.0f}",
                f"{r.ours_latency.p50_ms:.1f} / {r.ours_latency.p99_ms:.1f}",
                f"{r.null_latency.p50_ms:.1f} / {r.null_latency.p99_ms:.1f}",
            ]
        )
    header = [
        "review",
        "ours req/s",
        "do-nothing req/s",
        "ours / do-nothing (best / paired median)",
        "admission replayed / do-nothing (best)",
        "server CPU us/req, ours / replayed / do-nothing",
        "half our peak, req/s",
        "ours p50 / p99 ms",
        "do-nothing p50 / p99 ms",
    ]
    return table(header, rows)


def app_table(costs: Sequence[AppCost], handlers: Sequence[HandlerCost]) -> str:
    rows = []
    for c, h in zip(costs, handlers, strict=True):
        rows.append(
            [
                c.case,
                f"{c.null_us:.0f}",
                f"{c.ours_us:.0f}",
                f"{c.ours_us - c.ours_without_log_line_us:.0f}",
                f"{h.handler_us:.0f}",
                f"{c.ours_without_log_line_us - c.null_us - h.handler_us:.0f}",
            ]
        )
    header = [
        "review",
        "do-nothing app us",
        "our app us",
        "of which the log line",
        "the handler (table 1)",
        "the rest (metrics, response)",
    ]
    return table(header, rows)


def growth_table(rows: Sequence[Growth]) -> str:
    lines = []
    previous: Growth | None = None
    for g in rows:
        added = (
            "-"
            if previous is None or g.refused
            else f"{(g.pod_us - previous.pod_us) / (g.pods - previous.pods):.2f} / "
            f"{(g.cold_pod_us - previous.cold_pod_us) / (g.pods - previous.pods):.2f}"
        )
        lines.append(
            [
                f"{g.workers:,}",
                f"{g.pod_us:,.0f} / {g.cold_pod_us:,.0f}",
                added,
                f"{g.statefulset_us:,.0f}",
                f"{g.tf_config_bytes:,}" if not g.refused else "-",
                f"{g.env_bytes:,}" if not g.refused else "-",
                f"{g.patch_bytes:,}" if not g.refused else "-",
                f"{', '.join(g.files)} ({g.file_bytes:,} B)" if g.files else "-",
                "refused (below)" if g.refused else "mutated",
            ]
        )
        previous = g
    header = [
        "workers",
        "pod handler us (later / first pod)",
        "us per added pod (later / first)",
        "StatefulSet handler us",
        "TF_CONFIG B",
        "env B",
        "patch B",
        "moved to files",
        "pod",
    ]
    notes = [
        f"\n{g.workers:,} workers, refused in {g.pod_us:,.0f} us: {g.refused}"
        for g in rows
        if g.refused
    ]
    return table(header, lines) + "".join(notes)


def memory_table(rows: Sequence[Memory]) -> str:
    return table(
        ["server", "worker pid", "RSS MiB", "private MiB"],
        [[m.server, str(m.pid), f"{m.rss_mib:.1f}", f"{m.private_mib:.1f}"] for m in rows],
    )


def attack_table(reports: Sequence[Report]) -> str:
    rows = []
    for r in reports:
        rows.append(
            [
                f"{r.attack} x{r.attackers}",
                *(f"{o.success_rate:.1%} of {o.total} / {o.p99_ms:.0f}" for o in r.outcomes),
                str(r.workers_died),
                str(r.attacker_reconnects),
            ]
        )
    header = [
        "attack",
        *(f"{o.name}: success / p99 ms" for o in reports[0].outcomes),
        "workers died",
        "attackers cut off",
    ]
    return table(header, rows)


def attacks(workdir: Path, workers: int, count: int, seconds: float) -> list[Report]:
    """One server; each kind of attack in turn with healthy traffic measured during it."""
    certs = workdir / "attack-certs"
    certs.mkdir()
    generate(certs, "trainhook", "trainhook-system")
    reports = []
    with serving(certs, workdir / "attack.log", f"--workers={workers}") as webhook:
        for kind in KINDS:
            reports.append(under_attack(webhook, [kind], count, seconds))
    return reports


def _short(message: str) -> str:
    return message if len(message) < 70 else message[:67] + "..."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench", description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3, help="one load run (3)")
    parser.add_argument("--rounds", type=int, default=8, help="rotating load runs (8)")
    parser.add_argument("--inprocess-rounds", type=int, default=30, help="timed blocks (30)")
    parser.add_argument("--connections", type=int, default=16, help="keep-alive connections")
    parser.add_argument("--workers", type=int, default=2, help="gunicorn workers per server")
    parser.add_argument("--tool", choices=("auto", "wrk", "k6"), default="auto")
    parser.add_argument("--attackers", type=int, default=200, help="of each kind (200)")
    parser.add_argument("--attack-seconds", type=float, default=15, help="per attack (15)")
    parser.add_argument(
        "--json",
        type=Path,
        nargs="?",
        const=Path("bench-results.json"),
        help="also write every figure to this file (bench-results.json)",
    )
    parser.add_argument("--goals-only", action="store_true", help="sections 1, 2, 2b and 9")
    parser.add_argument(
        "--burst-sizes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=list(BURST_SIZES),
        help="pods of each job sent in a burst (1000,8192)",
    )
    args = parser.parse_args(argv)
    load_at_start = _load()

    started = time.monotonic()
    python = platform.python_version()
    print(f"machine: {os.cpu_count()} CPUs, load average {_load()}, Python {python}")
    print(f"admission path: {admission_build()}")
    cases = headline_cases()

    print("\n## 1. Handler cost against the JSON floor (in-process)\n", flush=True)
    costs = handler_costs(cases, args.inprocess_rounds)
    print(handler_table(costs), flush=True)
    print("\nThe Flask apps called in-process, as gunicorn calls them (no sockets, no TLS):\n")
    print(app_table(app_costs(cases, args.inprocess_rounds), costs), flush=True)

    with tempfile.TemporaryDirectory(prefix="trainhook-bench-") as directory:
        workdir = Path(directory)
        tools = load_tools(workdir, args.tool)
        print(f"\n## 2. Served: trainhook serve against a do-nothing app ({tools.name})\n")
        print(
            f"{args.workers} gunicorn workers each, TLS, keep-alive, {args.connections} "
            f"connections; best of {args.rounds} rotating {args.seconds:g} s runs (server CPU: "
            f"median); latency over {args.seconds * 1.5:g} s at half our best rate, the same "
            "rate for both. 'Admission replayed' is ours with the admission replaced by a replay "
            "of its own answer: everything else our app does, without the mutation.\n",
            flush=True,
        )
        results, memory, bursts = served(
            tools,
            cases,
            workdir,
            workers=args.workers,
            connections=args.connections,
            seconds=args.seconds,
            rounds=args.rounds,
            burst_sizes=args.burst_sizes,
        )
        print(served_table(results), flush=True)
        print(
            f"\n## 2b. A burst of one job's pods, {IN_FLIGHT} in flight (as the StatefulSet "
            "controller sends them)\n"
        )
        print(burst_table(bursts), flush=True)

    reached = goals(costs, results, bursts)
    if args.goals_only:
        print("\n## 9. What a pod event costs the sweeper at 10,000 and 1,000 pods\n")
        events = [*event_costs(10_000), *event_costs(1_000)]
        print(events_table(events), flush=True)
        reached += event_goals(events)
        print("\n## 10. Goals, measured in this run\n")
        print(goals_table(reached))
        print(f"\nload average {_load()}; took {time.monotonic() - started:.0f} s")
        if args.json:
            _write_json(
                args.json,
                load_at_start,
                costs,
                results,
                bursts,
                reached,
                {"pod_events": [dataclasses.asdict(e) for e in events]},
            )
        return 0

    print("\n## 3. How cost grows: a TF worker pod of 1 chief, 4 ps and N workers\n", flush=True)
    rows = growth(GROWTH_SIZES, args.inprocess_rounds)
    print(growth_table(rows))

    print("\n## 4. Resident memory per gunicorn worker after the run\n")
    print(memory_table(memory))

    print(f"\n## 5. Under attack: {args.attackers} attackers of each kind, one kind at a time\n")
    print(
        f"{args.workers} workers; for {args.attack_seconds:g} s per attack, 2 clients each of "
        "admissions over one kept-alive connection, admissions on new connections and "
        "/healthz and /readyz probes on new connections; success is a 200 within the "
        "webhook's 10 s timeout.\n",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="trainhook-attack-") as directory:
        reports = attacks(Path(directory), args.workers, args.attackers, args.attack_seconds)
    print(attack_table(reports))
    print("\n## 6. What a job costs the API server and the sweeper, 64 to 8,192 pods\n")
    sizes = job_sizes()
    print(sizes_table(sizes), flush=True)
    print("\n## 7. The sweeper: deciding on large jobs and many, and its pod cache\n", flush=True)
    sweeper = sweeper_costs(max(3, args.inprocess_rounds // 6))
    print(sweeper_table(sweeper))
    print("\n## 8. A trainhook sweep process at 10,000 pods and at 1,000 jobs\n", flush=True)
    process = process_memory()
    print(process_table(process))
    print("\n## 9. What a pod event costs the sweeper at 10,000 and 1,000 pods\n", flush=True)
    events = [*event_costs(10_000), *event_costs(1_000)]
    print(events_table(events))
    reached += event_goals(events)
    print("\n## 9b. What a pod event costs a trainhook sweep process\n", flush=True)
    sweep_events = process_events()
    print(process_events_table(sweep_events))
    print("\n## 10. A whole-job restart of 1,000 pods: in place against recreated\n", flush=True)
    restarts = restart_costs()
    print(restarts_table(restarts))
    print("\n## 11. Goals, measured in this run\n")
    print(goals_table(reached))
    print("\n## 12. Shards: three sweeper processes, one killed\n", flush=True)
    shards = shard_run()
    print(shards_table(shards))
    print(f"\nload average {_load()}; took {time.monotonic() - started:.0f} s")

    if args.json:
        more = {
            "shards": dataclasses.asdict(shards) | {"met": shards.met},
            "growth": [dataclasses.asdict(g) for g in rows],
            "memory": [dataclasses.asdict(m) for m in memory],
            "sweeper": [dataclasses.asdict(c) for c in sweeper],
            "sweep_process": [dataclasses.asdict(p) for p in process],
            "pod_events": [dataclasses.asdict(e) for e in events],
            "sweep_events": [dataclasses.asdict(e) for e in sweep_events],
            # asdict would rebuild a Counter from its (key, count) pairs, counting the pairs
            "restarts": [
                dataclasses.asdict(c)
                | {
                    "sweeper_writes": dict(c.sweeper_writes),
                    "cluster_writes": dict(c.cluster_writes),
                }
                for c in restarts
            ],
            "attacks": [
                {
                    "attack": r.attack,
                    "attackers": r.attackers,
                    "workers_died": r.workers_died,
                    "attackers_cut_off": r.attacker_reconnects,
                    "healthy": {
                        o.name: {
                            "success_rate": o.success_rate,
                            "total": o.total,
                            "p99_ms": o.p99_ms,
                        }
                        for o in r.outcomes
                    },
                }
                for r in reports
            ],
            "sizes": [dataclasses.asdict(j) for j in sizes],
            "tools": tools.name,
        }
        _write_json(args.json, load_at_start, costs, results, bursts, reached, more)
    return 0


@dataclasses.dataclass(frozen=True)
class Goal:
    goal: str
    ours: float
    reference: float
    bar: float

    @property
    def ratio(self) -> float:
        return self.ours / self.reference

    @property
    def met(self) -> bool:
        return self.ratio <= self.bar


def goals(
    costs: Sequence[HandlerCost],
    results: Sequence[Served],
    bursts: Sequence[tuple[Burst, Burst]],
) -> list[Goal]:
    """The goals as ratios of figures of this run: server CPU per request against the
    do-nothing app's, a job's burst against the do-nothing app's time, the handler against the
    JSON floor."""
    found = [
        Goal(f"server CPU per request, {r.case}", r.ours_cpu_us, r.null_cpu_us, 1.25)
        for r in results
    ]
    found += [
        Goal(
            f"burst of {_article(ours.pods)} {ours.pods:,}-pod job, time",
            ours.seconds,
            null.seconds,
            1.25,
        )
        for ours, null in bursts
    ]
    found += [
        Goal(f"handler vs JSON floor, {c.case}", c.handler_us, c.floor_us, 1.5) for c in costs
    ]
    return found


def _article(number: int) -> str:
    """The article read before a number: "an 8,192", "an 18", "an 800", "a 1,000"."""
    spoken = str(number)
    eleven_or_eighteen = len(spoken) % 3 == 2 and spoken[:2] in ("11", "18")
    return "an" if spoken[0] == "8" or eleven_or_eighteen else "a"


def event_goals(events: Sequence[EventCost]) -> list[Goal]:
    """CPU per pod event against the 1 ms goal, for each pattern that reaches a decision."""
    return [
        Goal(
            f"sweeper CPU per pod event (ms), {e.pattern} at {e.pods:,} pods",
            e.per_event_ms,
            EVENT_GOAL_MS,
            1.0,
        )
        for e in events
        if e.pattern != "ignored"
    ]


def goals_table(reached: Sequence[Goal]) -> str:
    rows = [
        [
            g.goal,
            _figure(g.ours),
            _figure(g.reference),
            f"{g.ratio:.2f}x",
            f"<= {g.bar:.2f}x",
            "met" if g.met else f"missed by {_excess(g.ratio / g.bar - 1)}",
        ]
        for g in reached
    ]
    return table(["goal", "ours", "reference", "ratio", "bar", "result"], rows)


def _figure(value: float) -> str:
    """Three significant digits, whole numbers from 100 up (1,045 rather than 1.04e+03)."""
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def _excess(fraction: float) -> str:
    """How far over its bar a goal is; under 1% in tenths, so a miss never reads as 0%."""
    return f"{fraction:.0%}" if fraction >= 0.01 else f"{fraction:.1%}"


def burst_table(pairs: Sequence[tuple[Burst, Burst]]) -> str:
    rows = [
        [
            f"{ours.pods:,}",
            f"{ours.seconds:.2f} / {null.seconds:.2f}",
            f"{ours.seconds / null.seconds:.2f}x",
            f"{ours.pods / ours.seconds:,.0f} / {null.pods / null.seconds:,.0f}",
            f"{ours.cpu_us_per_pod:,.0f} / {null.cpu_us_per_pod:,.0f}",
        ]
        for ours, null in pairs
    ]
    header = [
        "pods",
        "seconds, ours / do-nothing",
        "ours / do-nothing",
        "pods/s, ours / do-nothing",
        "server CPU us/pod, ours / do-nothing",
    ]
    return table(header, rows)


def _write_json(
    path: Path,
    load_at_start: str,
    costs: Sequence[HandlerCost],
    results: Sequence[Served],
    bursts: Sequence[tuple[Burst, Burst]],
    reached: Sequence[Goal],
    more: Mapping[str, object],
) -> None:
    figures = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "commit": _commit(),
        "build": admission_build(),
        "load_average": {"start": load_at_start, "end": _load()},
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "handler": [dataclasses.asdict(c) for c in costs],
        "served": [dataclasses.asdict(r) for r in results],
        "bursts": [[dataclasses.asdict(b) for b in pair] for pair in bursts],
        "goals": [dataclasses.asdict(g) | {"ratio": g.ratio, "met": g.met} for g in reached],
        **more,
    }
    path.write_text(json.dumps(figures, indent=2) + "\n")
    print(f"figures written to {path}")


def admission_build() -> str:
    """Which build of the admission path this run measures: the image's (compiled) or the tree's."""
    import webhook.core.mutation.admit as admit

    if str(admit.__file__).endswith(".so"):
        return "compiled with mypyc, as the image runs it"
    return "plain Python (the image compiles it: `make bench` measures that build)"


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return done.stdout.strip() + (" (with uncommitted changes)" if dirty else "")


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    sys.exit(main())
