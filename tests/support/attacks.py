"""Attacks on a running server, and the healthy traffic measured while they run.

An attacker is any pod that can reach the webhook's Service. The four kinds:

* `partial-handshake`: 11 bytes of a TLS ClientHello, then silence;
* `slow-headers`: a completed handshake, then the request head one byte every 2 s;
* `slow-body`: a complete head announcing a body, then the body one byte every 2 s;
* `silent`: a completed handshake, then nothing.

Attackers run in a child process (asyncio, so hundreds cost one thread) and reconnect whenever
the server closes them, so the pressure holds for the whole run. The healthy traffic is what the
API server and the kubelet send: admissions over one kept-alive connection, admissions each on a
new connection, and `/healthz` and `/readyz` probes each on a new connection. A healthy request
succeeds when it gets its 200 within the webhook's timeout (10 s).

Used by tests/server/test_attacks.py (a few attackers) and `make bench` (200 of each kind).
"""

from __future__ import annotations

import asyncio
import resource
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.client import HTTPSConnection
from typing import Any

from tests.support.reviews import encoded, review
from tests.support.serving import ROOT, Webhook

KINDS = ("partial-handshake", "slow-headers", "slow-body", "silent")
WEBHOOK_TIMEOUT = 10.0  # the API server's ?timeout=10s
TRICKLE_SECONDS = 2.0
# The first bytes of a TLS 1.2 ClientHello record: type, version, length, then part of the body.
CLIENT_HELLO_START = b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"


def _pod() -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "trainer",
            "namespace": "default",
            "labels": {"trainhook.io/framework": "pytorch"},
        },
        "spec": {"containers": [{"name": "pytorch", "image": "trainer:1"}]},
    }


@dataclass
class Outcomes:
    """What one kind of healthy request got: latencies of the successes, and the failures."""

    name: str
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return len(self.latencies) + len(self.failures)

    @property
    def success_rate(self) -> float:
        return len(self.latencies) / self.total if self.total else 0.0

    @property
    def p99_ms(self) -> float:
        if not self.latencies:
            return float("nan")
        ordered = sorted(self.latencies)
        return 1000 * ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


@dataclass
class Report:
    attack: str
    attackers: int
    seconds: float
    outcomes: list[Outcomes]
    workers_before: list[int]
    workers_after: list[int]
    worker_timeouts: int
    attacker_reconnects: int

    @property
    def workers_died(self) -> int:
        return self.worker_timeouts + len(set(self.workers_before) - set(self.workers_after))


# -- attackers, in a child process ----------------------------------------------------------


def _client_context(ca_file: str) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=ca_file)
    context.check_hostname = False
    return context


async def _attacker(
    kind: str, port: int, context: ssl.SSLContext, stop: asyncio.Event, counter: list[int]
) -> None:
    while not stop.is_set():
        with suppress(OSError, ssl.SSLError, asyncio.IncompleteReadError, EOFError):
            await _one_attack(kind, port, context, stop)
        counter[0] += 1
        await asyncio.sleep(0.05)


async def _one_attack(kind: str, port: int, context: ssl.SSLContext, stop: asyncio.Event) -> None:
    """Attack over one connection until the server closes it or the run stops."""
    tls = None if kind == "partial-handshake" else context
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=tls, ssl_handshake_timeout=60 if tls else None
    )
    try:
        closed = asyncio.ensure_future(reader.read(1 << 16))  # EOF (or an answer): cut off
        if kind == "partial-handshake":
            writer.write(CLIENT_HELLO_START)
            trickle = b""
        elif kind == "slow-headers":
            trickle = b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: trainhook\r\nX-Slow: " + (
                b"a" * 4000
            )
        elif kind == "slow-body":
            writer.write(
                b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: trainhook\r\n"
                b"Content-Type: application/json\r\nContent-Length: 4000\r\n\r\n"
            )
            trickle = b" " * 4000
        else:  # silent
            trickle = b""
        await writer.drain()
        sent = 0
        while not stop.is_set() and not closed.done():
            stopped = asyncio.ensure_future(stop.wait())
            await asyncio.wait(
                {closed, stopped}, timeout=TRICKLE_SECONDS, return_when="FIRST_COMPLETED"
            )
            stopped.cancel()
            if sent < len(trickle) and not closed.done():
                writer.write(trickle[sent : sent + 1])
                sent += 1
                await writer.drain()
        closed.cancel()
    finally:
        writer.transport.abort()


async def _attack(kinds: Sequence[str], count: int, port: int, ca_file: str) -> int:
    context = _client_context(ca_file)
    stop = asyncio.Event()
    counter = [0]
    tasks = []
    for kind in kinds:
        for _ in range(count):
            tasks.append(asyncio.ensure_future(_attacker(kind, port, context, stop, counter)))
            await asyncio.sleep(0.002)
    await asyncio.sleep(1.0)  # the handshakes of the TLS kinds are done by now
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # until told
    stop.set()
    await asyncio.wait(tasks, timeout=5)
    for task in tasks:
        task.cancel()
    return counter[0] - len(tasks)  # a reconnect is an attack the server cut off


def main(argv: Sequence[str]) -> None:
    """python -m tests.support.attacks KINDS COUNT PORT CA_FILE: attack until a line on stdin."""
    kinds, count, port, ca_file = argv
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 8192)), hard))
    print(asyncio.run(_attack(kinds.split(","), int(count), int(port), ca_file)), flush=True)


@contextmanager
def attackers(webhook: Webhook, kinds: Sequence[str], count: int) -> Iterator[Callable[[], int]]:
    """`count` attackers of each kind against `webhook` while the block runs; it gets a function
    giving how often the server cut an attacker off (known once the block ends)."""
    arguments = [",".join(kinds), str(count), str(webhook.port), str(webhook.ca_file)]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.attacks", *arguments],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    reconnects = [-1]
    try:
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the attackers did not start")
        yield lambda: reconnects[0]
    finally:
        try:
            process.stdin.write("stop\n")
            process.stdin.flush()
            out, _ = process.communicate(timeout=20)
            reconnects[0] = int(out.split()[-1]) if out.split() else -1
        except (subprocess.TimeoutExpired, OSError, ValueError):
            process.kill()
            process.wait()


# -- healthy traffic, in threads of this process ---------------------------------------------


def _admission_body() -> bytes:
    return encoded(review(_pod()))


def _timed(outcomes: Outcomes, request: Callable[[], int]) -> None:
    started = time.monotonic()
    try:
        status = request()
    except (OSError, ValueError) as error:  # ValueError: a bad status line or body
        outcomes.failures.append(f"{type(error).__name__}: {error}")
        return
    took = time.monotonic() - started
    if status != 200:
        outcomes.failures.append(f"status {status}")
    elif took > WEBHOOK_TIMEOUT:
        outcomes.failures.append(f"took {took:.1f} s")
    else:
        outcomes.latencies.append(took)


def _keep_alive(webhook: Webhook, outcomes: Outcomes, stop: threading.Event, pause: float) -> None:
    connection: HTTPSConnection | None = None

    def admit() -> int:
        nonlocal connection
        if connection is None:
            connection = webhook.connect(timeout=WEBHOOK_TIMEOUT)
        try:
            return webhook.post(_admission_body(), connection=connection)[0]
        except (OSError, ValueError):
            connection.close()
            connection = None
            raise

    while not stop.is_set():
        _timed(outcomes, admit)
        stop.wait(pause)
    if connection is not None:
        connection.close()


def _new_connections(
    webhook: Webhook, outcomes: Outcomes, stop: threading.Event, pause: float
) -> None:
    def admit() -> int:
        return webhook.post(_admission_body(), connection=None)[0]

    while not stop.is_set():
        _timed(outcomes, admit)
        stop.wait(pause)


def _probes(webhook: Webhook, outcomes: Outcomes, stop: threading.Event, pause: float) -> None:
    paths = ("/healthz", "/readyz")
    n = 0
    while not stop.is_set():
        path = paths[n % 2]
        n += 1

        def probe(path: str = path) -> int:
            connection = webhook.connect(timeout=WEBHOOK_TIMEOUT)
            try:
                return webhook.get(path, connection)[0]
            finally:
                connection.close()

        _timed(outcomes, probe)
        stop.wait(pause)


def healthy_traffic(
    webhook: Webhook, seconds: float, *, clients: int = 2, pause: float = 0.05
) -> list[Outcomes]:
    """`clients` of each healthy kind for `seconds`; what each kind got."""
    kinds: list[tuple[str, Callable[[Webhook, Outcomes, threading.Event, float], None]]] = [
        ("keep-alive admissions", _keep_alive),
        ("new-connection admissions", _new_connections),
        ("probes", _probes),
    ]
    stop = threading.Event()
    results = []
    threads = []
    for name, run in kinds:
        outcomes = Outcomes(name)
        results.append(outcomes)
        for _ in range(clients):
            thread = threading.Thread(target=run, args=(webhook, outcomes, stop, pause))
            thread.start()
            threads.append(thread)
    stop.wait(seconds)
    stop.set()
    for thread in threads:
        thread.join(WEBHOOK_TIMEOUT + 5)
    return results


def worker_timeouts(webhook: Webhook) -> int:
    """Workers gunicorn killed for missing their heartbeat, by the log."""
    return sum(
        1
        for line in webhook.log_lines()
        if "WORKER TIMEOUT" in line.get("message", "") or "SIGKILL" in line.get("message", "")
    )


def under_attack(
    webhook: Webhook, kinds: Sequence[str], count: int, seconds: float, **traffic: Any
) -> Report:
    """Healthy traffic measured for `seconds` while `count` attackers of each kind run."""
    workers_before = webhook.workers()
    timeouts_before = worker_timeouts(webhook)
    with attackers(webhook, kinds, count) as reconnects:
        outcomes = healthy_traffic(webhook, seconds, **traffic)
    return Report(
        attack="+".join(kinds),
        attackers=count * len(kinds),
        seconds=seconds,
        outcomes=outcomes,
        workers_before=workers_before,
        workers_after=webhook.workers(),
        worker_timeouts=worker_timeouts(webhook) - timeouts_before,
        attacker_reconnects=reconnects(),
    )


def describe(report: Report) -> str:
    parts = [
        f"{o.name}: {o.success_rate:.1%} of {o.total} (p99 {o.p99_ms:.0f} ms)"
        for o in report.outcomes
    ]
    return (
        f"{report.attack} x{report.attackers}: "
        + "; ".join(parts)
        + f"; workers died: {report.workers_died}; attackers cut off: {report.attacker_reconnects}"
    )


if __name__ == "__main__":
    main(sys.argv[1:])
