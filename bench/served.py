"""The served benchmark: `trainhook serve` and a do-nothing app on the same stack, same run.

Every server is the real command (gunicorn, gthread workers with keep-alive, TLS with a CA
and serving certificate from `webhook.certs.material`) on 127.0.0.1: ours, ours with the
admission replaced by a replay of its own answer (`bench.replayapp`, which splits the gap
between the other two), and the do-nothing one with its app swapped (`bench.nullapp`). They
run side by side and are measured in rotation, so a burst of load from elsewhere on the
machine touches all of them.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.inprocess import answer, body_of
from bench.load import Latency, LoadError, Rate, Tools
from bench.reviews import Case
from tests.support import serving as running
from tests.support.serving import Webhook

PATH = "/mutate?timeout=10s"
OURS, REPLAY, NULL = "trainhook serve", "admission replayed", "do-nothing app"

if TYPE_CHECKING:
    from bench.burst import Burst


@dataclass
class Server:
    name: str
    webhook: Webhook

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.webhook.port}{PATH}"

    def post(self, body: bytes) -> tuple[int, Any]:
        status, answer, _ = self.webhook.post(body, path=PATH)
        return status, answer

    def workers(self) -> list[int]:
        return self.webhook.workers()

    def cpu_seconds(self) -> float:
        """User and system CPU time of the master and its workers so far."""
        ticks = 0
        for pid in [self.webhook.process.pid, *self.workers()]:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")


@contextmanager
def serving(name: str, module: str, certs: Path, log: Path, workers: int) -> Iterator[Server]:
    """`python -m <module>` with serve's arguments, bound by address on 127.0.0.1 as in a
    cluster (each worker listens on its own socket), ready when this yields."""
    with running.serving(certs, log, f"--workers={workers}", module=module) as webhook:
        yield Server(name, webhook)


def check_answers(ours: Server, replay: Server, null: Server, case: Case) -> None:
    """Our server, and ours replaying, answer exactly as the handler does in-process; the
    do-nothing one allows."""
    body = body_of(case)
    expected = answer(case, lookup=False)
    for server in (ours, replay, replay):  # the replay server's first answer, then a replayed one
        status, got = server.post(body)
        if status != 200 or got != expected.body:
            raise SystemExit(f"bench: {case.name}: {server.name} answered {status} {got}")
    status, got = null.post(body)
    uid = case.review["request"]["uid"]
    if status != 200 or got["response"] != {"uid": uid, "allowed": True}:
        raise SystemExit(f"bench: the do-nothing app answered {status} {got}")


@dataclass
class Served:
    case: str
    ours: Rate
    replay: Rate  # ours with the admission replaced by a replay of its answer
    null: Rate
    ours_latency: Latency
    null_latency: Latency
    ours_cpu_us: float  # server CPU per request (all processes), median over the runs
    replay_cpu_us: float
    null_cpu_us: float
    runs: list[tuple[str, float]] = field(default_factory=list)  # every saturation run, in order

    @property
    def ratio(self) -> float:
        return self.ours.requests_per_second / self.null.requests_per_second

    @property
    def paired_ratio(self) -> float:
        """The median over the rounds of ours / do-nothing, each pair measured in one round."""
        ours = [rate for name, rate in self.runs if name == OURS]
        null = [rate for name, rate in self.runs if name == NULL]
        return statistics.median(a / b for a, b in zip(ours, null, strict=True))


def measure(
    tools: Tools,
    servers: Servers,
    case: Case,
    body: Path,
    *,
    connections: int,
    seconds: float,
    rounds: int,
) -> Served:
    """Best of `rounds` alternating saturation runs each; then latency at half our best rate."""
    ours, replay, null = servers
    check_answers(ours, replay, null, case)
    body.write_bytes(body_of(case))
    for server in servers:  # warm every worker before anything counts
        tools.saturate(server.url, body, connections, 1)
    best: dict[str, Rate] = {}
    runs: list[tuple[str, float]] = []
    cpu: dict[str, list[float]] = {server.name: [] for server in servers}
    for turn in range(rounds):
        order = servers[turn % 3 :] + servers[: turn % 3]
        if turn % 2:
            order = order[::-1]
        for server in order:
            before = server.cpu_seconds()
            rate = tools.saturate(server.url, body, connections, seconds)
            if rate.failed:
                raise LoadError(f"{server.name}: {rate.failed} failed requests under load")
            cpu[server.name].append((server.cpu_seconds() - before) / rate.requests * 1e6)
            runs.append((server.name, rate.requests_per_second))
            if rate.requests_per_second > best.get(server.name, Rate(0, 0, 0)).requests_per_second:
                best[server.name] = rate
    half = best[ours.name].requests_per_second / 2
    latencies = {}
    for server in (null, ours):
        latency = tools.at_rate(server.url, body, half, seconds * 1.5)
        if latency.failed:
            raise LoadError(f"{server.name}: {latency.failed} failed requests at {half:.0f}/s")
        latencies[server.name] = latency
    return Served(
        case.name,
        best[ours.name],
        best[replay.name],
        best[null.name],
        latencies[ours.name],
        latencies[null.name],
        statistics.median(cpu[ours.name]),
        statistics.median(cpu[replay.name]),
        statistics.median(cpu[null.name]),
        runs,
    )


@dataclass(frozen=True)
class Memory:
    server: str
    pid: int
    rss_mib: float
    private_mib: float  # pages this worker does not share with the master or its siblings


def memory(server: Server) -> list[Memory]:
    rows = []
    for pid in server.workers():
        status = _kib_fields(Path(f"/proc/{pid}/status").read_text())
        rollup = _kib_fields(Path(f"/proc/{pid}/smaps_rollup").read_text())
        private = rollup.get("Private_Clean", 0) + rollup.get("Private_Dirty", 0)
        rows.append(Memory(server.name, pid, status["VmRSS"] / 1024, private / 1024))
    return rows


def _kib_fields(text: str) -> dict[str, int]:
    fields = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB":
            fields[name.strip()] = int(parts[0])
    return fields


Servers = tuple[Server, Server, Server]  # ours, ours replaying its answers, do-nothing


@contextmanager
def all_servers(workdir: Path, workers: int) -> Iterator[Servers]:
    from webhook.certs.material import generate

    certs = workdir / "certs"
    generate(certs, "trainhook", "trainhook-system")
    with ExitStack() as stack:
        ours = stack.enter_context(
            serving(OURS, "webhook.cli", certs, workdir / "serve.log", workers)
        )
        replay = stack.enter_context(
            serving(REPLAY, "bench.replayapp", certs, workdir / "replay.log", workers)
        )
        null = stack.enter_context(
            serving(NULL, "bench.nullapp", certs, workdir / "null.log", workers)
        )
        yield ours, replay, null


def served(
    tools: Tools,
    cases: Sequence[Case],
    workdir: Path,
    *,
    workers: int,
    connections: int,
    seconds: float,
    rounds: int,
    burst_sizes: Sequence[int] = (),
) -> tuple[list[Served], list[Memory], list[tuple[Burst, Burst]]]:
    """Each case saturating the three servers in rotation, then a burst of each size of job
    through ours and the do-nothing app; the workers' memory after all that."""
    from bench.burst import bursts

    with all_servers(workdir, workers) as servers:
        results = [
            measure(
                tools,
                servers,
                case,
                workdir / "body.json",
                connections=connections,
                seconds=seconds,
                rounds=rounds,
            )
            for case in cases
        ]
        ours, _, null = servers
        burst = bursts(ours, null, burst_sizes)
        return results, memory(ours) + memory(null), burst
