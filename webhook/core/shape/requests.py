"""What a job's pods ask the scheduler for: Kubernetes quantities added up the way it does.

A gang scheduler admits a job only when all of it fits, so its PodGroup states the job's total
requests. A pod's requests are computed as the kube-scheduler does: each container's requests
(a limit stands in for a missing request), the regular containers and sidecars added up, an init
container counting when it alone asks for more; pod-level `resources` win where they are set.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

QUANTITY = re.compile(r"^([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))(.*)$")
SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}
BINARY = ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki")

Requests = dict[str, Fraction]


def parse_quantity(value: object) -> Fraction:
    """A Kubernetes quantity ("500m", "16Gi", "1e3", 2) as an exact number."""
    if isinstance(value, bool):
        raise ValueError(f"not a quantity: {value!r}")
    if isinstance(value, int | float):
        return Fraction(value)
    match = QUANTITY.match(str(value).strip())
    if match is None:
        raise ValueError(f"not a quantity: {value!r}")
    number, suffix = match.groups()
    if suffix[:1] in ("e", "E") and suffix[1:].lstrip("+-").isdigit():
        return Fraction(number) * Fraction(10) ** int(suffix[1:])
    if suffix not in SUFFIXES:
        raise ValueError(f"not a quantity: {value!r}")
    return Fraction(number) * SUFFIXES[suffix]


def format_quantity(amount: Fraction, suffixes: tuple[str, ...] = ()) -> str:
    """An exact spelling: "4", "128Gi", "1500m", with the largest of `suffixes` that divides
    the amount; fractions of a milli round up."""
    if amount.denominator == 1:
        whole = amount.numerator
        for suffix in suffixes:
            size = SUFFIXES[suffix].numerator
            if whole and whole % size == 0:
                return f"{whole // size}{suffix}"
        return str(whole)
    millis = -(-amount.numerator * 1000 // amount.denominator)
    return f"{millis}m"


def is_bytes(resource: str) -> bool:
    """Resources counted in bytes, written with binary suffixes (Gi) as Kubernetes does."""
    return resource in ("memory", "ephemeral-storage") or resource.startswith("hugepages-")


def container_requests(container: Mapping[str, Any]) -> Requests:
    """A container's requests; a resource with only a limit is requested at its limit."""
    resources = container.get("resources") or {}
    limits = resources.get("limits") or {}
    requests = resources.get("requests") or {}
    merged = {**limits, **requests}
    return {name: parse_quantity(value) for name, value in merged.items()}


def _add(total: Requests, more: Mapping[str, Fraction]) -> None:
    for name, amount in more.items():
        total[name] = total.get(name, Fraction(0)) + amount


def pod_requests(spec: Mapping[str, Any]) -> Requests:
    """What the scheduler reserves for one pod of this spec (overhead included)."""
    pod_level = spec.get("resources") or {}
    total: Requests = {}
    for container in spec.get("containers") or []:
        _add(total, container_requests(container))
    sidecars: Requests = {}
    peak: Requests = {}
    for init in spec.get("initContainers") or []:
        own = container_requests(init)
        if init.get("restartPolicy") == "Always":
            _add(sidecars, own)
            continue
        running = dict(sidecars)
        _add(running, own)
        for name, amount in running.items():
            peak[name] = max(peak.get(name, Fraction(0)), amount)
    _add(total, sidecars)
    for name, amount in peak.items():
        total[name] = max(total.get(name, Fraction(0)), amount)
    if pod_level:
        total.update(container_requests({"resources": pod_level}))
    _add(total, {k: parse_quantity(v) for k, v in (spec.get("overhead") or {}).items()})
    return total


def sum_requests(parts: Iterable[tuple[Mapping[str, Fraction], int]]) -> dict[str, str]:
    """(requests of one pod, number of such pods) added up, as quantities in name order."""
    total: Requests = {}
    for requests, count in parts:
        _add(total, {name: amount * count for name, amount in requests.items()})
    return {
        name: format_quantity(total[name], BINARY if is_bytes(name) else ())
        for name in sorted(total)
        if total[name] > 0
    }
