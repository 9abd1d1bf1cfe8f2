"""The handler with the CPU's caches emptied before each call, part by part.

Served, a worker runs an admission between TLS, gunicorn, Flask and the load generator on the
same cores, and little of the admission's code and data is still in the caches when its next
request comes: there the mutation costs two to three times what it costs in a loop
(docs/performance.md). Writing more memory than the last-level cache holds before each call
measures the other end, where every line a call touches is read from memory. Each part
includes the ones above it, so what a part adds is its own cost:

* the do-nothing app's work: decode the body, encode an answer with its uid;
* the core: the body decoded and read, and what it asks for looked up, as the server does;
  `admit` on its request;
* the handler: `webhook.server.admission.review` and its answer encoded, as `/mutate` does.

Run as `python -m bench.evicted [calls]`; thread CPU time, median of `calls` (default 200).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from bench.inprocess import JSON, body_of, context_of, patch_of
from bench.reviews import Case, headline_cases
from webhook.core import jsoncodec
from webhook.core.mutation.admit import Outcome, admit
from webhook.server.admission import Record, review
from webhook.server.admission import _decode as decode
from webhook.server.admission import _look_up as look_up
from webhook.server.admission import _read_review as read_review

PARTS = ("do-nothing app's work", "+ the core (admit)", "+ the server's answer (handler)")


def last_level_cache_bytes() -> int:
    """The largest CPU cache of this machine, by sysfs; 32 MiB when it does not say."""
    sizes = []
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = index.read_text().strip()
        unit = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        sizes.append(int(text.rstrip("KM")) * unit)
    return max(sizes, default=32 << 20)


class Evictor:
    """Writes one byte per cache line of a buffer one and a half times the last-level cache."""

    def __init__(self) -> None:
        self._buffer = bytearray(last_level_cache_bytes() * 3 // 2)
        self._ones = b"\x01" * (len(self._buffer) // 64)

    def __call__(self) -> None:
        self._buffer[::64] = self._ones


@dataclass(frozen=True)
class Parts:
    nothing: Callable[[], bytes]
    core: Callable[[], Outcome | None]
    handler: Callable[[], bytes]

    def calls(self) -> list[Callable[[], object]]:
        return [self.nothing, self.core, self.handler]


def parts(case: Case) -> Parts:
    """The three parts' calls; fails when the core's patch is not the handler's."""
    body, context = body_of(case), context_of(case)

    def nothing() -> bytes:
        uid = jsoncodec.loads(body)["request"]["uid"]
        return jsoncodec.dumps({"response": {"uid": uid, "allowed": True}})

    def core() -> Outcome | None:
        request = read_review(decode(body, JSON), len(body)).request  # as the server reads it
        assert request is not None
        found = look_up(request, context.lookup, [], Record("allowed"))  # as the server reads
        return admit(request, found, context.policy)

    def handler() -> bytes:
        return jsoncodec.dumps(review(body, JSON, context).body)

    outcome = core()
    if outcome is None or patch_of(review(body, JSON, context)) != outcome.patch:
        raise SystemExit(f"bench: {case.name}: the core alone does not patch as the handler does")
    return Parts(nothing, core, handler)


def median_us(call: Callable[[], object], calls: int, before: Callable[[], None] | None) -> float:
    spent = []
    for _ in range(calls):
        if before is not None:
            before()
        started = time.thread_time_ns()
        call()
        spent.append(time.thread_time_ns() - started)
    return statistics.median(spent) / 1e3


@dataclass(frozen=True)
class PartCosts:
    case: str
    warm_us: list[float]  # each part, cumulative
    evicted_us: list[float]


def measure(cases: Sequence[Case], calls: int) -> list[PartCosts]:
    evict = Evictor()
    results = []
    for case in cases:
        functions = parts(case).calls()
        for function in functions:  # the job's first pod, made once: the rest are later pods
            function()
        warm = [median_us(f, calls, None) for f in functions]
        evicted = [median_us(f, calls, evict) for f in functions]
        results.append(PartCosts(case.name, warm, evicted))
    return results


def main(argv: Sequence[str]) -> int:
    calls = int(argv[0]) if argv else 200
    print(f"last-level cache {last_level_cache_bytes() >> 20} MiB; median of {calls} calls, us")
    for result in measure(headline_cases(), calls):
        print(f"\n{result.case}")
        print(f"  {'part':34} {'warm':>6} {'adds':>6} {'evicted':>8} {'adds':>6}")
        warm_before = evicted_before = 0.0
        for part, warm, evicted in zip(PARTS, result.warm_us, result.evicted_us, strict=True):
            print(
                f"  {part:34} {warm:6.0f} {warm - warm_before:6.0f} "
                f"{evicted:8.0f} {evicted - evicted_before:6.0f}"
            )
            warm_before, evicted_before = warm, evicted
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
