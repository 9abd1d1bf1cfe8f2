"""In-process timings: the admission handler against the JSON floor, and how cost grows.

The handler is what the server runs for one request body: `webhook.server.admission.review`
(parse, workload view, topology, env, patch, response) and the encoding of the answer, exactly
as `/mutate` encodes it. The floor is the least any webhook does with the same body: decode it
and encode it again. Both run in alternating rounds on the same machine and the fastest round
of each counts, so a burst of load from elsewhere spoils a round, not the ratio.
"""

from __future__ import annotations

import base64
import gc
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench.reviews import Case, apply, tensorflow_statefulset, tensorflow_worker_pod
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.jsoncodec import dumps as encode  # as /mutate encodes its answer
from webhook.core.mutation import pod_patches
from webhook.core.mutation.pod_mutation import mutate_pod
from webhook.core.shape import peers, topology
from webhook.server.admission import Answer, Context, review

JSON = "application/json"
BLOCK_SECONDS = 0.02  # one timed block: long enough for the clock, short enough to dodge bursts


class StoredWorkloads:
    """The lookup the server would have: the job's workloads, already in its cache."""

    def __init__(self, workloads: Sequence[Mapping[str, Any]]) -> None:
        self._workloads = list(workloads)

    def siblings(
        self, namespace: str, job: str, *, exclude: tuple[str, str] | None = None
    ) -> Sequence[Mapping[str, Any]] | None:
        return [w for w in self._workloads if (w["kind"], w["metadata"]["name"]) != exclude]

    def get(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        return None

    def cached(self, namespace: str, kind: str, name: str) -> Mapping[str, Any] | None:
        return None


def body_of(case: Case) -> bytes:
    return json.dumps(case.review).encode()


def context_of(case: Case) -> Context:
    return Context(lookup=StoredWorkloads(case.siblings)) if case.siblings else Context()


def handler(case: Case) -> Callable[[], bytes]:
    body, context = body_of(case), context_of(case)

    def handle() -> bytes:
        return encode(review(body, JSON, context).body)

    return handle


def cold_handler(case: Case) -> Callable[[], bytes]:
    """The handler for the first pod of its job: no topology stamp read before, no lists made
    (a large job's peers ConfigMap, the framework's own lists), no patch kept."""
    handle = handler(case)
    caches: list[object] = [topology._read_stamp, peers.peer_files]
    caches += [f.lists for f in FRAMEWORKS.values() if f.lists is not None]

    def first() -> bytes:
        pod_patches.forget()
        for cache in caches:
            getattr(cache, "cache_clear", lambda: None)()
        return handle()

    return first


def stdlib_floor(case: Case) -> Callable[[], bytes]:
    body = body_of(case)

    def floor() -> bytes:
        return json.dumps(json.loads(body), separators=(",", ":")).encode()

    return floor


def orjson_floor(case: Case) -> Callable[[], bytes] | None:
    try:
        import orjson
    except ImportError:
        return None
    body = body_of(case)

    def floor() -> bytes:
        return orjson.dumps(orjson.loads(body))

    return floor


def loops_for(function: Callable[[], object]) -> int:
    """How many calls make one timed block of about BLOCK_SECONDS."""
    loops = 1
    while True:
        started = time.thread_time()
        for _ in range(loops):
            function()
        if time.thread_time() - started >= BLOCK_SECONDS / 4:
            return max(1, int(loops * BLOCK_SECONDS / (time.thread_time() - started)))
        loops *= 4


def fastest(
    functions: Sequence[Callable[[], object]],
    rounds: int,
    settings: Sequence[Callable[[bool], None] | None] = (),
) -> list[float]:
    """Seconds per call of each function: the fastest of `rounds` alternating timed blocks.

    `settings[i]`, when given, is called with True before each block of function i and with
    False after it, to put the process in the state that function is measured in.
    """
    setters = list(settings) + [None] * (len(functions) - len(settings))
    loops = []
    for function, setter in zip(functions, setters, strict=True):
        if setter is not None:
            setter(True)
        loops.append(loops_for(function))
        if setter is not None:
            setter(False)
    best = [float("inf")] * len(functions)
    gc.collect()
    for _ in range(rounds):
        for position, (function, count) in enumerate(zip(functions, loops, strict=True)):
            setter = setters[position]
            if setter is not None:
                setter(True)
            started = time.thread_time()
            for _ in range(count):
                function()
            best[position] = min(best[position], (time.thread_time() - started) / count)
            if setter is not None:
                setter(False)
    return best


@dataclass(frozen=True)
class HandlerCost:
    case: str
    body_bytes: int
    patch_bytes: int
    handler_us: float
    cold_us: float  # the first pod of its job, before its topology stamp was read
    floor_us: float
    orjson_floor_us: float | None

    @property
    def ratio(self) -> float:
        return self.handler_us / self.floor_us

    @property
    def orjson_ratio(self) -> float | None:
        return None if self.orjson_floor_us is None else self.handler_us / self.orjson_floor_us


def answer(case: Case, *, lookup: bool = True) -> Answer:
    """The handler's answer; without the lookup, as `trainhook serve --no-lookup` gives it."""
    return review(body_of(case), JSON, context_of(case) if lookup else Context())


def _response(result: Answer) -> Mapping[str, Any]:
    response: Mapping[str, Any] = result.body.get("response") or {}  # type: ignore[assignment]
    return response


def patch_of(result: Answer) -> list[dict[str, Any]]:
    response: Mapping[str, Any] = _response(result)
    if "patch" not in response:
        return []
    operations: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return operations


def check_mutates(case: Case) -> Answer:
    """The handler's answer, after checking it allows the object with a patch that applies."""
    result = answer(case)
    response: Mapping[str, Any] = _response(result)
    if result.status != 200 or response.get("allowed") is not True or "patch" not in response:
        raise SystemExit(f"bench: {case.name}: expected a mutation, got {result.body}")
    apply(case.object, patch_of(result))
    return result


def handler_costs(cases: Sequence[Case], rounds: int) -> list[HandlerCost]:
    costs = []
    for case in cases:
        result = check_mutates(case)
        floors = [stdlib_floor(case)]
        fast = orjson_floor(case)
        if fast is not None:
            floors.append(fast)
        times = fastest([handler(case), cold_handler(case), *floors], rounds)
        costs.append(
            HandlerCost(
                case=case.name,
                body_bytes=len(body_of(case)),
                patch_bytes=result.record.patch_bytes,
                handler_us=times[0] * 1e6,
                cold_us=times[1] * 1e6,
                floor_us=times[2] * 1e6,
                orjson_floor_us=times[3] * 1e6 if fast is not None else None,
            )
        )
    return costs


@dataclass(frozen=True)
class Growth:
    workers: int
    pods: int  # every pod of the job: 1 chief, 4 ps and the workers
    body_bytes: int
    pod_us: float
    cold_pod_us: float
    statefulset_us: float
    tf_config_bytes: int  # in the env, or in a file when it moved there
    env_bytes: int  # names and values of the training container's literal env
    patch_bytes: int
    files: tuple[str, ...]  # variables moved to files under /etc/trainhook
    file_bytes: int  # what the job's peers ConfigMap carries for those files
    refused: str  # the refusal message, when the pod is refused


def growth(sizes: Sequence[int], rounds: int) -> list[Growth]:
    """A TF worker pod and the worker StatefulSet's CREATE for jobs of each size."""
    rows = []
    for workers in sizes:
        pod, statefulset = tensorflow_worker_pod(workers), tensorflow_statefulset(workers)
        check_mutates(statefulset)
        result = answer(pod)
        response: Mapping[str, Any] = _response(result)
        refused = "" if response.get("allowed") else str(response["status"]["message"])
        tf_config_bytes = env_bytes = file_bytes = 0
        files: tuple[str, ...] = ()
        if not refused:
            mutated = apply(pod.object, patch_of(result))
            env = training_env(mutated)
            env_bytes = sum(len(name) + len(value) for name, value in env.items())
            files = tuple(name[: -len("_FILE")] for name in env if name.endswith("_FILE"))
            peers = mutate_pod(pod.object, pod.object["metadata"]["namespace"]).peers
            in_files = {name: peers.data[name] for name in files} if peers else {}
            file_bytes = sum(len(value) for value in in_files.values())
            tf_config_bytes = len(env.get("TF_CONFIG") or in_files.get("TF_CONFIG", ""))
        pod_seconds, cold_seconds, statefulset_seconds = fastest(
            [handler(pod), cold_handler(pod), handler(statefulset)], rounds
        )
        rows.append(
            Growth(
                workers=workers,
                pods=workers + 5,
                body_bytes=len(body_of(pod)),
                pod_us=pod_seconds * 1e6,
                cold_pod_us=cold_seconds * 1e6,
                statefulset_us=statefulset_seconds * 1e6,
                tf_config_bytes=tf_config_bytes,
                env_bytes=env_bytes,
                patch_bytes=result.record.patch_bytes,
                files=files,
                file_bytes=file_bytes,
                refused=refused,
            )
        )
    return rows


def training_env(pod: Mapping[str, Any]) -> dict[str, str]:
    container = pod["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container.get("env") or [] if "value" in item}
