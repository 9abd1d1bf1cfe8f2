"""trainhook.io/failure-policy: ordered one-line rules `MATCH -> ACTION [max=N]`, first match wins.

A rule matches what a pod and its training container report when a run fails or the pod is
stopped from outside; the restart policy's preset follows the user's rules, so a policy lists only
its exceptions. Pure: parsing, the presets, and matching one failure against the rules.

Termination messages come from the tenant's own program, so they are matched with a pattern
(text, `*` for any run of characters, `|` between alternatives) searched in linear time, never a
backtracking regular expression.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from webhook.core import contract
from webhook.core.errors import InvalidSetting
from webhook.core.fabrics.preflight import VERDICTS as PREFLIGHT_VERDICTS
from webhook.core.limits import whole_number

# Actions.
FAIL: Final = "fail"
RESTART_JOB: Final = "restart-job"
RESTART_JOB_FREE: Final = "restart-job-free"  # a whole-job restart not counted against a budget
RESTART_IN_PLACE: Final = "restart-in-place"  # a whole-job restart that keeps the pods
RESTART_ROLE: Final = "restart-role"  # the failed pod's role only (elastic or parameter servers)
RESTART_POD: Final = "restart-pod"  # the failed pod only, recreated (elastic or parameter servers)
RETRY: Final = "retry"  # Kubernetes restarts the container; counted against the backoff limit
IGNORE: Final = "ignore"  # nothing is done and nothing counted
ACTIONS: Final = (
    FAIL,
    RESTART_JOB,
    RESTART_JOB_FREE,
    RESTART_IN_PLACE,
    RESTART_ROLE,
    RESTART_POD,
    RETRY,
    IGNORE,
)
PARTIAL: Final = (RESTART_ROLE, RESTART_POD)  # for jobs that take restarted pods back
WHOLE_JOB: Final = (RESTART_JOB, RESTART_JOB_FREE, RESTART_IN_PLACE)
BUDGETED: Final = (RESTART_JOB, RESTART_JOB_FREE, RESTART_IN_PLACE, *PARTIAL)
COUNTED: Final = (RESTART_JOB, RESTART_IN_PLACE, *PARTIAL)  # against the backoff limit

# Why a pod was stopped from outside: the DisruptionTarget condition's reason (Kubernetes), the
# TerminationTarget condition (Kueue), or the pod's status.reason (the kubelet).
DISRUPTIONS: Final = {
    "preemption": (("DisruptionTarget", "PreemptionByScheduler"), ("TerminationTarget", "*")),
    "drain": (("DisruptionTarget", "EvictionByEvictionAPI"),),
    "node-loss": (
        ("DisruptionTarget", "DeletionByTaintManager"),
        ("DisruptionTarget", "DeletionByPodGC"),
        ("reason", "NodeLost"),
        ("reason", "DeletionByTaintManager"),
    ),
    "kubelet": (
        ("DisruptionTarget", "TerminationByKubelet"),
        ("reason", "Evicted"),
        ("reason", "Terminated"),
        ("reason", "Preempting"),
    ),
}
DISRUPTED_ANY: Final = "any"
# What a failed run of the job's preflight found (webhook.core.fabrics.preflight): `any` is all.
PREFLIGHT_ANY: Final = "any"

MAX_POLICY_CHARS: Final = 4096
MAX_RULES: Final = 32
MAX_PATTERN_CHARS: Final = 256
MAX_ALTERNATIVES: Final = 16
MAX_EXIT_CODE: Final = 255
EXCLUDE_NODE: Final = "exclude-node"  # a restart's modifier: keep the recreated pods off the node
NODE_STATUSES: Final = ("True", "False", "Unknown")
GRAMMAR: Final = (
    "one rule a line, MATCH -> ACTION [max=N] [exclude-node]; MATCH is `*` or terms joined by "
    "spaces: exit=1-127,137 reason=OOMKilled pod-reason=UnexpectedAdmissionError "
    "condition=DisruptionTarget[:Reason] disrupted=preemption|drain|node-loss|kubelet|any "
    'message~"NCCL*timeout|Watchdog" role=worker node-condition=GpuHealthy:False '
    "node-taint=nvidia.com/gpu-unhealthy stalled straggler preflight=slow|error|gpu|any; "
    "ACTION one of " + ", ".join(ACTIONS)
)


@dataclass(frozen=True)
class Failure:
    """What one failed run (or one pod stopped from outside) reports."""

    role: str | None = None
    exit_code: int | None = None  # None: no container run ended (e.g. the pod was never started)
    reason: str = ""  # the container's: OOMKilled, Error, ...
    message: str = ""  # its termination message
    pod_reason: str = ""  # the pod's status.reason: UnexpectedAdmissionError, Evicted, ...
    conditions: tuple[tuple[str, str], ...] = ()  # (type, reason) of True pod conditions
    # The node the pod runs on: (type, status) of its conditions, and the keys of its taints.
    node_conditions: tuple[tuple[str, str], ...] = ()
    node_taints: frozenset[str] = frozenset()
    # The job reported no new step for trainhook.io/stall-timeout while every pod ran.
    stalled: bool = False
    preflight: str = ""  # what the run of trainhook.io/preflight found: slow, error or gpu

    def disruption(self) -> str | None:
        """preemption, drain, node-loss or kubelet when the pod was stopped from outside."""
        for kind, signs in DISRUPTIONS.items():
            if any(_shows(self, sign) for sign in signs):
                return kind
        if any(kind in ("DisruptionTarget", "TerminationTarget") for kind, _ in self.conditions):
            return "kubelet"
        return None


def _shows(failure: Failure, sign: tuple[str, str]) -> bool:
    kind, reason = sign
    if kind == "reason":
        return failure.pod_reason == reason
    return any(t == kind and reason in ("*", r) for t, r in failure.conditions)


@dataclass(frozen=True)
class Match:
    exit_codes: tuple[tuple[int, int], ...] = ()
    reasons: frozenset[str] = frozenset()
    pod_reasons: frozenset[str] = frozenset()
    conditions: tuple[tuple[str, str], ...] = ()  # (type, reason or "*")
    disrupted: frozenset[str] = frozenset()
    message: tuple[tuple[str, ...], ...] = ()  # alternatives, each its literal pieces
    roles: frozenset[str] = frozenset()
    node_conditions: tuple[tuple[str, str], ...] = ()  # (type, status)
    node_taints: frozenset[str] = frozenset()
    stalled: bool = False
    preflight: frozenset[str] = frozenset()  # slow, error, gpu
    # The nodes of the ranks flagged as stragglers: no failure, so the rule never fires; each
    # whole-job restart another rule fires excludes them too.
    straggler: bool = False

    @property
    def on_node(self) -> bool:
        """Whether the rule names a fact of the pod's node: it then fires on a running pod too."""
        return bool(self.node_conditions or self.node_taints)

    def matches(self, failure: Failure) -> bool:
        if self.straggler:
            return False  # a straggler is no failure: it never restarts the job by itself
        if self.stalled and not failure.stalled:
            return False
        if self.preflight and failure.preflight not in self.preflight:
            return False
        if self.exit_codes and not (
            failure.exit_code is not None
            and any(low <= failure.exit_code <= high for low, high in self.exit_codes)
        ):
            return False
        if self.reasons and failure.reason not in self.reasons:
            return False
        if self.pod_reasons and failure.pod_reason not in self.pod_reasons:
            return False
        if self.conditions and not any(_shows(failure, c) for c in self.conditions):
            return False
        if self.disrupted:
            kind = failure.disruption()
            if kind is None or not (DISRUPTED_ANY in self.disrupted or kind in self.disrupted):
                return False
        if self.message and not any(_found(p, failure.message) for p in self.message):
            return False
        if self.node_conditions and not any(
            c in failure.node_conditions for c in self.node_conditions
        ):
            return False
        if self.node_taints and not self.node_taints & failure.node_taints:
            return False
        return not self.roles or failure.role in self.roles


def _found(pieces: tuple[str, ...], text: str) -> bool:
    """Whether the pieces occur in `text` in order (`*` between them): a leftmost search for each
    piece after the previous one is exact for such patterns, and linear."""
    at = 0
    for piece in pieces:
        found = text.find(piece, at)
        if found < 0:
            return False
        at = found + len(piece)
    return True


@dataclass(frozen=True)
class Rule:
    number: int  # 1-based, in the order written
    text: str  # as written, spaces normalised
    match: Match
    action: str
    budget: int | None = None  # max=N: how often this rule may act before the job fails
    preset: str = ""  # the restart policy it comes from; "" for the user's own rules
    verdict_reason: str = "FailurePolicy"  # the job's reason when a `fail` rule fires
    exclude_node: bool = False  # the pods its restart recreates keep off the pod's node

    @property
    def key(self) -> str:
        """Short and stable: how the sweeper records the times a rule acted."""
        return f"{self.preset or 'policy'}/{self.number}"

    @property
    def name(self) -> str:
        where = f"{contract.RESTART_POLICY} {self.preset}" if self.preset else "failure-policy"
        return f"{where} rule {self.number} ({self.text})"


@dataclass(frozen=True)
class FailurePolicy:
    rules: tuple[Rule, ...] = field(default_factory=tuple)

    def first(self, failure: Failure) -> Rule | None:
        return next((rule for rule in self.rules if rule.match.matches(failure)), None)

    def lines(self) -> list[str]:
        """The rules as render and describe print them."""
        return [
            f"{i}. {rule.text}"
            + (f"   [{contract.RESTART_POLICY} {rule.preset}]" if rule.preset else "")
            for i, rule in enumerate(self.rules, 1)
        ]


def parse_rules(text: str) -> tuple[Rule, ...]:
    """The user's rules; InvalidSetting naming the rule and what is allowed when one is wrong."""
    if len(text) > MAX_POLICY_CHARS:
        raise InvalidSetting(
            contract.FAILURE_POLICY, text, f"at most {MAX_POLICY_CHARS} characters"
        )
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise InvalidSetting(contract.FAILURE_POLICY, text, GRAMMAR)
    if len(lines) > MAX_RULES:
        raise InvalidSetting(contract.FAILURE_POLICY, text, f"at most {MAX_RULES} rules")
    return tuple(_rule(number, line) for number, line in enumerate(lines, 1))


def _refuse(number: int, line: str, problem: str) -> InvalidSetting:
    return InvalidSetting(contract.FAILURE_POLICY, line, f"rule {number}: {problem}")


def _rule(number: int, line: str, preset: str = "", verdict_reason: str = "FailurePolicy") -> Rule:
    match_text, arrow, action_text = line.partition("->")
    if not arrow or "->" in action_text:
        raise _refuse(number, line, "one `->` between what it matches and its action; " + GRAMMAR)
    action_words = action_text.split()
    if not action_words or action_words[0] not in ACTIONS:
        found = action_words[0] if action_words else "nothing"
        raise _refuse(number, line, f"action {found!r}: one of {', '.join(ACTIONS)}")
    action = action_words[0]
    budget: int | None = None
    exclude_node = False
    for word in action_words[1:]:
        if word == EXCLUDE_NODE:
            if action not in BUDGETED or exclude_node:
                raise _refuse(
                    number,
                    line,
                    f"{EXCLUDE_NODE} is given once, after one of {', '.join(BUDGETED)} "
                    "(the restart that recreates the pods elsewhere)",
                )
            exclude_node = True
            continue
        key, eq, value = word.partition("=")
        number_value = whole_number(value, 1_000_000) if eq else None
        if key != "max" or number_value is None:
            raise _refuse(
                number,
                line,
                f"after the action only max=N (a whole number) and {EXCLUDE_NODE}, not {word!r}",
            )
        if action not in BUDGETED:
            raise _refuse(
                number,
                line,
                f"max= is for {', '.join(BUDGETED)}; {RETRY} counts against "
                f"{contract.BACKOFF_LIMIT}, {FAIL} and {IGNORE} need none",
            )
        budget = number_value
    terms = _terms(number, line, match_text.strip())
    match = _match(number, line, terms)
    if match.stalled and (action in PARTIAL or len(terms) > 1):
        raise _refuse(
            number,
            line,
            f"{STALLED} is the whole job's, a term alone: its action one of "
            f"{', '.join(a for a in ACTIONS if a not in PARTIAL)}",
        )
    if match.straggler and (
        len(terms) > 1 or action not in WHOLE_JOB or not exclude_node or budget is not None
    ):
        raise _refuse(
            number,
            line,
            f"{STRAGGLER} is a term alone and never fires by itself: write it with "
            f"{EXCLUDE_NODE} on one of {', '.join(WHOLE_JOB)}, without max=; the whole-job "
            "restarts other rules fire then keep the pods off the stragglers' nodes",
        )
    text = f"{match_text.strip()} -> {' '.join(action_words)}"
    return Rule(number, text, match, action, budget, preset, verdict_reason, exclude_node)


def _terms(number: int, line: str, text: str) -> list[tuple[str, str, str]]:
    """(key, operator, value) of each term; a message pattern may be quoted to hold spaces."""
    if text == "*":
        return []
    if not text:
        raise _refuse(number, line, "nothing to match before `->` (write `*` to match any failure)")
    terms: list[tuple[str, str, str]] = []
    at = 0
    while at < len(text):
        if text[at].isspace():
            at += 1
            continue
        start = at
        while at < len(text) and not text[at].isspace() and text[at] not in "=~":
            at += 1
        key = text[start:at]
        if key in (STALLED, STRAGGLER) and (at >= len(text) or text[at].isspace()):
            terms.append((key, "", ""))
            continue
        if at >= len(text) or text[at] not in "=~":
            raise _refuse(number, line, f"term {key!r} has no value: KEY=VALUE, or message~PATTERN")
        operator = text[at]
        at += 1
        if at < len(text) and text[at] == '"':
            end = text.find('"', at + 1)
            if end < 0:
                raise _refuse(number, line, "a quoted pattern has no closing quote")
            value, at = text[at + 1 : end], end + 1
        else:
            start = at
            while at < len(text) and not text[at].isspace():
                at += 1
            value = text[start:at]
        if not value:
            raise _refuse(number, line, f"term {key}{operator} has an empty value")
        terms.append((key, operator, value))
    return terms


KEYS: Final = (
    "exit",
    "reason",
    "pod-reason",
    "condition",
    "disrupted",
    "message",
    "role",
    "node-condition",
    "node-taint",
    "stalled",
    "straggler",
    "preflight",
)
STALLED: Final = "stalled"  # a term of its own, without a value
STRAGGLER: Final = "straggler"  # likewise


def _match(number: int, line: str, terms: Iterable[tuple[str, str, str]]) -> Match:
    found: dict[str, object] = {}
    for key, operator, value in terms:
        if key not in KEYS:
            raise _refuse(number, line, f"unknown term {key!r}: one of {', '.join(KEYS)}")
        if key in found:
            raise _refuse(number, line, f"{key} given twice (list values with commas)")
        if key in (STALLED, STRAGGLER):
            if operator:
                raise _refuse(number, line, f"write {key} alone, without a value")
            found[key] = True
            continue
        if (key == "message") != (operator == "~"):
            wanted = "message~PATTERN" if key == "message" else f"{key}=VALUE"
            raise _refuse(number, line, f"write {wanted}")
        found[key] = _value(number, line, key, value)
    return Match(**{_FIELDS[key]: value for key, value in found.items()})  # type: ignore[arg-type]


_FIELDS: Final = {
    "exit": "exit_codes",
    "reason": "reasons",
    "pod-reason": "pod_reasons",
    "condition": "conditions",
    "disrupted": "disrupted",
    "message": "message",
    "role": "roles",
    "node-condition": "node_conditions",
    "node-taint": "node_taints",
    "stalled": "stalled",
    "straggler": "straggler",
    "preflight": "preflight",
}


def _value(number: int, line: str, key: str, value: str) -> object:
    if key == "exit":
        return _exit_codes(number, line, value)
    if key == "message":
        return _pattern(number, line, value)
    items = value.split(",")
    if key == "node-taint":
        return _taint_keys(number, line, items)
    if any(not item or not _word(item, key in ("condition", "node-condition")) for item in items):
        raise _refuse(number, line, f"{key}={value}: comma-separated names (letters, digits, -)")
    if key == "disrupted":
        allowed = (*DISRUPTIONS, DISRUPTED_ANY)
        unknown = [item for item in items if item not in allowed]
        if unknown:
            raise _refuse(number, line, f"disrupted={unknown[0]}: one of {', '.join(allowed)}")
    if key == "node-condition":
        return _node_conditions(number, line, items)
    if key == "preflight":
        allowed = (*PREFLIGHT_VERDICTS, PREFLIGHT_ANY)
        unknown = [item for item in items if item not in allowed]
        if unknown:
            raise _refuse(number, line, f"preflight={unknown[0]}: one of {', '.join(allowed)}")
        return frozenset(PREFLIGHT_VERDICTS if PREFLIGHT_ANY in items else items)
    if key == "condition":
        return tuple(
            (kind, reason or "*") for kind, _, reason in (item.partition(":") for item in items)
        )
    return frozenset(items)


def _node_conditions(number: int, line: str, items: list[str]) -> tuple[tuple[str, str], ...]:
    found = []
    for item in items:
        kind, _, status = item.partition(":")
        if not kind or (status and status not in NODE_STATUSES):
            raise _refuse(
                number,
                line,
                f"node-condition={item}: a node condition's type, then :True (the default), "
                ":False or :Unknown",
            )
        found.append((kind, status or "True"))
    return tuple(found)


def _taint_keys(number: int, line: str, items: list[str]) -> frozenset[str]:
    """Taint keys: a qualified name, with an optional DNS prefix and a slash."""
    for item in items:
        prefix, slash, name = item.rpartition("/")
        good = (
            0 < len(name) <= 63
            and all(c.isalnum() or c in "-_." for c in name)
            and name[0].isalnum()
            and name[-1].isalnum()
            and (not slash or (0 < len(prefix) <= 253 and _dns(prefix)))
        )
        if not good:
            raise _refuse(
                number,
                line,
                f"node-taint={item}: taint keys (like nvidia.com/gpu-unhealthy), "
                "separated by commas",
            )
    return frozenset(items)


def _dns(text: str) -> bool:
    return all(
        part
        and part[0].isalnum()
        and part[-1].isalnum()
        and all(c.isalnum() or c == "-" for c in part)
        for part in text.split(".")
    )


def _word(text: str, colon: bool) -> bool:
    extra = "-_.:" if colon else "-_."
    return len(text) <= 128 and all(c.isalnum() or c in extra for c in text)


def _exit_codes(number: int, line: str, value: str) -> tuple[tuple[int, int], ...]:
    ranges: list[tuple[int, int]] = []
    for item in value.split(","):
        low_text, dash, high_text = item.partition("-")
        low = whole_number(low_text, MAX_EXIT_CODE)
        high = whole_number(high_text, MAX_EXIT_CODE) if dash else low
        if low is None or high is None or low > high:
            raise _refuse(
                number,
                line,
                f"exit={value}: exit codes 0-{MAX_EXIT_CODE} or ranges like 1-127, "
                "separated by commas",
            )
        ranges.append((low, high))
    return tuple(ranges)


def _pattern(number: int, line: str, value: str) -> tuple[tuple[str, ...], ...]:
    if len(value) > MAX_PATTERN_CHARS:
        raise _refuse(number, line, f"a message pattern has at most {MAX_PATTERN_CHARS} characters")
    alternatives = value.split("|")
    if len(alternatives) > MAX_ALTERNATIVES:
        raise _refuse(
            number, line, f"a message pattern has at most {MAX_ALTERNATIVES} alternatives"
        )
    found = []
    for alternative in alternatives:
        pieces = tuple(piece for piece in alternative.split("*") if piece)
        if not pieces:
            raise _refuse(
                number, line, "every alternative of a message pattern needs some text besides *"
            )
        found.append(pieces)
    return tuple(found)


# --- the restart policies as presets ---------------------------------------------------------

RESTART_POLICIES: Final = ("OnFailure", "ExitCode", "Never", "RestartJob", "RestartJobInPlace")
# Stopped from outside (preemption, drain, node loss, the kubelet): never counted. A job restarted
# as a whole restarts free; otherwise the pod's controller recreates it.
_PRESETS: Final = {
    "OnFailure": ((f"disrupted=any -> {IGNORE}", ""), (f"* -> {RETRY}", "")),
    "ExitCode": (
        (f"disrupted=any -> {IGNORE}", ""),
        (f"exit=1-127 -> {FAIL}", "ExitCode"),
        (f"* -> {RETRY}", ""),
    ),
    "Never": ((f"disrupted=any -> {IGNORE}", ""), (f"* -> {FAIL}", "PodFailed")),
    "RestartJob": ((f"disrupted=any -> {RESTART_JOB_FREE}", ""), (f"* -> {RESTART_JOB}", "")),
    "RestartJobInPlace": (
        (f"disrupted=any -> {RESTART_JOB_FREE}", ""),
        (f"* -> {RESTART_IN_PLACE}", ""),
    ),
}


@functools.cache
def preset(restart_policy: str) -> tuple[Rule, ...]:
    return tuple(
        _rule(number, text, restart_policy, reason or "FailurePolicy")
        for number, (text, reason) in enumerate(_PRESETS[restart_policy], 1)
    )


@functools.lru_cache(maxsize=256)
def failure_policy(rules: tuple[Rule, ...] | None, restart_policy: str | None) -> FailurePolicy:
    """The user's rules, then the restart policy's (OnFailure when unset)."""
    return FailurePolicy((*(rules or ()), *preset(restart_policy or "OnFailure")))


def straggler_rule(policy: FailurePolicy) -> Rule | None:
    """The rule that has whole-job restarts exclude the stragglers' nodes, if the job has one."""
    return next((rule for rule in policy.rules if rule.match.straggler), None)


def partial_restart_allowed(framework: str, elastic: bool) -> bool:
    """Whether restarting one role or one pod alone can work: torchrun's elastic rendezvous
    takes pods back, and parameter-server jobs (TensorFlow, Paddle) take workers and servers
    back."""
    return elastic or framework in ("tensorflow", "paddle")
