"""A bounded search for the costliest reviews a tenant can send: bodies near the API server's
3 MiB limit, grown along every dimension the webhook reads.

Each *family* grows one part of an admitted example's object (its pod, or its workload's pod
template): containers, env entries, envFrom, volumes, mounts, ports, annotations and labels (the
webhook's own prefix included, whose unknown keys it names), long values of every key it parses,
affinity terms, tolerations, spread constraints, resources, owner references, host aliases. Each
is grown until the review is as large as the API server lets through, and measured there (and
at a sixteenth of it) as a CREATE and there as an UPDATE (whose old object takes half the body);
a review over budget is measured again as `cost_past_decoding` says. Then random
mixes of two or three families share a body. What is measured is what the handler costs past
decoding the body (`cost_past_decoding`, the budget tests/server/test_bounded_reviews.py holds
every review to): decoding is bounded by the body itself.

    .venv/bin/python -m tests.support.costly [--mixes N] [--seed S] [--top K]

prints one line per review over budget, then the count, the largest CPU and memory seen and the
costliest families. Bounded: the families times examples times two operations, plus `--mixes`.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from tests.support.reviews import (
    StoredWorkloads,
    admit_job,
    cost_past_decoding,
    encoded,
    example_documents,
    review,
)
from webhook.core import contract
from webhook.server.admission import Context
from webhook.server.admission import review as answer_to

LIMIT = 3 * 2**20 - 4096  # the API server's largest body, less room for the review's own fields
MILLISECONDS = 10.0
MEBIBYTES = 5.0
EXAMPLES = ("pytorch.yaml", "mpi-horovod.yaml")
LONG = "x" * 60

Grow = Callable[[dict[str, Any], int], None]  # grows a pod spec's owner (pod or template) by n


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = (
        obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
    )
    return spec


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    """The metadata the webhook reads its settings from: the pod's, or the workload's."""
    metadata: dict[str, Any] = obj["metadata"]
    metadata.setdefault("annotations", {})
    metadata.setdefault("labels", {})
    return metadata


def _training(obj: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = _spec(obj)["containers"][0]
    return container


def containers(obj: dict[str, Any], n: int) -> None:
    _spec(obj)["containers"] += [{"name": f"c{i}", "image": "r/" + LONG} for i in range(n)]


def containers_with_env(obj: dict[str, Any], n: int) -> None:
    env = [{"name": f"E{i}", "value": LONG} for i in range(20)]
    _spec(obj)["containers"] += [
        {"name": f"c{i}", "image": "r/i", "env": copy.deepcopy(env)} for i in range(n)
    ]


def env(obj: dict[str, Any], n: int) -> None:
    _training(obj).setdefault("env", []).extend(
        {"name": f"USER_{i}", "value": LONG} for i in range(n)
    )


def env_shadowing(obj: dict[str, Any], n: int) -> None:
    """Env whose names are the framework's own, repeated: every one is a user override."""
    names = ["MASTER_ADDR", "WORLD_SIZE", "RANK", "TF_CONFIG", "PADDLE_TRAINER_ENDPOINTS"]
    _training(obj).setdefault("env", []).extend(
        {"name": names[i % len(names)], "value": LONG} for i in range(n)
    )


def env_from(obj: dict[str, Any], n: int) -> None:
    _training(obj).setdefault("envFrom", []).extend(
        {"prefix": f"P{i}_", "configMapRef": {"name": f"cm-{i}"}} for i in range(n)
    )


def volumes(obj: dict[str, Any], n: int) -> None:
    _spec(obj).setdefault("volumes", []).extend({"name": f"v{i}", "emptyDir": {}} for i in range(n))


def mounts(obj: dict[str, Any], n: int) -> None:
    _training(obj).setdefault("volumeMounts", []).extend(
        {"name": f"v{i}", "mountPath": f"/m/{i}"} for i in range(n)
    )


def ports(obj: dict[str, Any], n: int) -> None:
    _training(obj).setdefault("ports", []).extend(
        {"name": f"p{i}", "containerPort": 1 + i % 65535} for i in range(n)
    )


def many_annotations(obj: dict[str, Any], n: int) -> None:
    _meta(obj)["annotations"].update({f"a{i}.example.com/k": LONG for i in range(n)})


def trainhook_annotations(obj: dict[str, Any], n: int) -> None:
    """Unknown keys under the webhook's own prefix, which it names (and may suggest for)."""
    _meta(obj)["annotations"].update({f"{contract.PREFIX}sheduler-{i}": "x" for i in range(n)})


def env_annotations(obj: dict[str, Any], n: int) -> None:
    _meta(obj)["annotations"].update({f"{contract.PREFIX}env.E{i}": LONG for i in range(n)})


def many_labels(obj: dict[str, Any], n: int) -> None:
    _meta(obj)["labels"].update({f"l{i}.example.com/k": "v" * 60 for i in range(n)})


def trainhook_labels(obj: dict[str, Any], n: int) -> None:
    _meta(obj)["labels"].update({f"{contract.PREFIX}rol-{i}": "x" for i in range(n)})


def node_affinity(obj: dict[str, Any], n: int) -> None:
    terms = [
        {"matchExpressions": [{"key": f"k{i}", "operator": "In", "values": [LONG]}]}
        for i in range(n)
    ]
    _spec(obj)["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
        }
    }


def pod_affinity(obj: dict[str, Any], n: int) -> None:
    terms = [
        {
            "labelSelector": {"matchLabels": {f"k{i}": "v"}},
            "topologyKey": f"topology.example.com/{LONG}",
        }
        for i in range(n)
    ]
    _spec(obj)["affinity"] = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": terms},
    }


def deep_selector(obj: dict[str, Any], n: int) -> None:
    """One affinity term whose expression lists many values."""
    values = [f"{LONG}{i}" for i in range(n)]
    _spec(obj)["affinity"] = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "k", "operator": "In", "values": values}]}
                ]
            }
        }
    }


def tolerations(obj: dict[str, Any], n: int) -> None:
    _spec(obj)["tolerations"] = [
        {"key": f"k{i}", "operator": "Exists", "effect": "NoSchedule"} for i in range(n)
    ]


def spread(obj: dict[str, Any], n: int) -> None:
    _spec(obj)["topologySpreadConstraints"] = [
        {
            "maxSkew": 1,
            "topologyKey": f"t{i}",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"a": "b"}},
        }
        for i in range(n)
    ]


def node_selector(obj: dict[str, Any], n: int) -> None:
    _spec(obj)["nodeSelector"] = {f"n{i}.example.com/k": LONG for i in range(n)}


def resources(obj: dict[str, Any], n: int) -> None:
    names = {f"vendor{i}.example.com/gpu": "1" for i in range(n)}
    _training(obj)["resources"] = {"limits": dict(names), "requests": dict(names)}


def owner_references(obj: dict[str, Any], n: int) -> None:
    _meta(obj).setdefault("ownerReferences", []).extend(
        {"apiVersion": "v1", "kind": "Thing", "name": f"o{i}", "uid": f"u{i}"} for i in range(n)
    )


def host_aliases(obj: dict[str, Any], n: int) -> None:
    _spec(obj)["hostAliases"] = [{"ip": "10.0.0.1", "hostnames": [f"h{i}"]} for i in range(n)]


def init_containers(obj: dict[str, Any], n: int) -> None:
    """As many init containers as allowed, each with n env entries."""
    _spec(obj)["initContainers"] = [
        {
            "name": f"i{j}",
            "image": "r/i",
            "env": [{"name": f"E{i}", "value": LONG} for i in range(n)],
        }
        for j in range(16)
    ]


def long_value(key: str) -> Grow:
    def grow(obj: dict[str, Any], n: int) -> None:
        _meta(obj)["annotations"][key] = "a" * n

    grow.__name__ = f"long {key}"
    return grow


def many_rules(obj: dict[str, Any], n: int) -> None:
    rule = 'message~"' + "|".join(f"x{i}*y" for i in range(16)) + '" -> fail\n'
    _meta(obj)["annotations"][contract.FAILURE_POLICY] = rule * n


PARSED_KEYS = (
    contract.FAILURE_POLICY,
    contract.SUCCESS_POLICY,
    contract.COMPAT,
    contract.ELASTIC,
    contract.ROLES,
    contract.TOPOLOGY,
    contract.HOSTS,
    contract.SHM_SIZE,
    contract.GPU_RESOURCE,
    contract.CONTAINER,
    contract.PLACEMENT_TOPOLOGY,
    contract.QUEUE,
    contract.SCHEDULER,
    contract.STATUS,
    contract.PROGRESS,
    contract.FAILED_RUNS,
    contract.HOSTFILE,
    contract.KUEUE_REQUIRED_TOPOLOGY,
    contract.VOLCANO_TASK_SPEC,
)

FAMILIES: tuple[Grow, ...] = (
    containers,
    containers_with_env,
    env,
    env_shadowing,
    env_from,
    volumes,
    mounts,
    ports,
    many_annotations,
    trainhook_annotations,
    env_annotations,
    many_labels,
    trainhook_labels,
    node_affinity,
    pod_affinity,
    deep_selector,
    tolerations,
    spread,
    node_selector,
    resources,
    owner_references,
    host_aliases,
    init_containers,
    many_rules,
    *(long_value(key) for key in PARSED_KEYS),
)


@dataclass(frozen=True)
class Measured:
    what: str
    size: int  # the review's bytes
    milliseconds: float
    mebibytes: float
    answer: str  # allowed, or the status code and the first words of the refusal

    @property
    def over(self) -> bool:
        return self.milliseconds > MILLISECONDS or self.mebibytes > MEBIBYTES


def seeds() -> list[tuple[str, dict[str, Any]]]:
    """Objects as they reach admission: each example's workloads, and a pod of each, admitted."""
    found: list[tuple[str, dict[str, Any]]] = []
    for name, documents in example_documents():
        if name not in EXAMPLES:
            continue
        admitted = admit_job(documents, _send, StoredWorkloads())
        first = admitted.workloads[0]
        found.append((f"{name} {first['kind']}", first))
        found.append((f"{name} pod", admitted.pods[0][0]))
    return found


def _send(document: dict[str, Any]) -> dict[str, Any]:
    body = answer_to(encoded(document), "application/json", Context()).body
    return dict(body)


def _document(obj: dict[str, Any], update: bool) -> dict[str, Any]:
    namespace = obj["metadata"].get("namespace") or "default"
    if update:
        return review(obj, operation="UPDATE", namespace=namespace, old=obj)
    return review(obj, namespace=namespace)


def grown(seed: dict[str, Any], grows: list[Grow], n: int) -> dict[str, Any]:
    obj = copy.deepcopy(seed)
    for grow in grows:
        grow(obj, n)
    return obj


def largest(seed: dict[str, Any], grows: list[Grow], update: bool) -> int:
    """The largest n whose review fits the API server's body limit (0: none does)."""
    sizes: dict[int, int] = {}

    def fits(n: int) -> bool:
        if n not in sizes:
            sizes[n] = len(encoded(_document(grown(seed, grows, n), update)))
        return sizes[n] <= LIMIT

    if not fits(0):
        return 0
    low, high = 0, 1
    while fits(high):
        low, high = high, high * 2
        if high > 10_000_000:
            return low
    # The size grows about linearly with n, so the limit is crossed close to where the line
    # through low and high crosses it: try there and its neighbour, halving where that misses.
    while high - low > 1:
        slope = (sizes[high] - sizes[low]) / (high - low)
        guess = low + int((LIMIT - sizes[low]) / slope) if slope > 0 else (low + high) // 2
        for middle in (guess, guess + 1, (low + high) // 2):
            if low < middle < high:
                if fits(middle):
                    low = middle
                else:
                    high = middle
    return low


def measure(what: str, document: dict[str, Any]) -> Measured:
    body = encoded(document)
    answer: dict[str, Any] = dict(answer_to(body, "application/json", Context()).body)
    response = answer.get("response") or {}
    if response.get("allowed"):
        said = "allowed"
    else:
        status = response.get("status") or answer
        said = f"{status.get('code')} {str(status.get('message', ''))[:70]}"
    milliseconds, mebibytes = cost_past_decoding(body, within=MILLISECONDS)
    return Measured(what, len(body), milliseconds, mebibytes, said)


def cases(mixes: int, rng: random.Random) -> Iterator[tuple[str, dict[str, Any]]]:
    found = seeds()
    for seed_name, seed in found:
        for grow in FAMILIES:
            for update in (False, True):
                n = largest(seed, [grow], update)
                for share in (n, n // 16) if not update else (n,):
                    if share:
                        operation = "UPDATE" if update else "CREATE"
                        what = f"{seed_name} {operation} {grow.__name__} x{share}"
                        yield what, _document(grown(seed, [grow], share), update)
    for _ in range(mixes):
        seed_name, seed = rng.choice(found)
        grows = rng.sample(FAMILIES, rng.choice((2, 3)))
        update = rng.random() < 0.3
        n = largest(seed, grows, update)
        if n:
            names = "+".join(g.__name__ for g in grows)
            what = f"{seed_name} {'UPDATE' if update else 'CREATE'} {names} x{n}"
            yield what, _document(grown(seed, grows, n), update)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.support.costly")
    parser.add_argument("--mixes", type=int, default=100, help="random mixes (default: 100)")
    parser.add_argument("--seed", type=int, default=27)
    parser.add_argument("--top", type=int, default=10, help="costliest reviews shown")
    args = parser.parse_args(argv)
    measured: list[Measured] = []
    for what, document in cases(args.mixes, random.Random(args.seed)):
        result = measure(what, document)
        measured.append(result)
        if result.over:
            print(
                f"OVER {result.milliseconds:7.2f} ms {result.mebibytes:6.2f} MiB "
                f"{result.size:>8} B  {what}: {result.answer}",
                flush=True,
            )
    over = [m for m in measured if m.over]
    print(
        f"{len(measured)} reviews, {len(over)} over {MILLISECONDS:g} ms or {MEBIBYTES:g} MiB; "
        f"largest body {max(m.size for m in measured)} B; "
        f"max CPU {max(m.milliseconds for m in measured):.2f} ms, "
        f"max memory {max(m.mebibytes for m in measured):.2f} MiB (past decoding)"
    )
    print("costliest by CPU:")
    for m in sorted(measured, key=lambda m: -m.milliseconds)[: args.top]:
        print(
            f"  {m.milliseconds:7.2f} ms {m.mebibytes:6.2f} MiB {m.size:>8} B  {m.what}: {m.answer}"
        )
    print("costliest by memory:")
    for m in sorted(measured, key=lambda m: -m.mebibytes)[: args.top]:
        print(
            f"  {m.milliseconds:7.2f} ms {m.mebibytes:6.2f} MiB {m.size:>8} B  {m.what}: {m.answer}"
        )
    print(json.dumps({"reviews": len(measured), "over": len(over)}))
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
