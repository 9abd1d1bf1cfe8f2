"""Whether a job has all its roles: a pod of a job that lacks one would run with a partial world.

A job lacks a role the `trainhook.io/roles` annotation names, or one that a role it has cannot
run without (an MPI launcher without workers, a MindSpore worker without its scheduler). Where
each role can run alone (a PyTorch master, a PyTorch worker), only the annotation can say that
the job is waiting for another.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core import contract
from webhook.core.frameworks.base import Framework


def missing_roles(
    framework: Framework, present: Iterable[str], declared: tuple[str, ...] | None
) -> tuple[str, ...]:
    """What the job still lacks, in the framework's role order: a role name, or `a or b` where
    any one of several roles would do."""
    have = set(present)
    missing = [role for role in declared or () if role not in have]
    for role in framework.order(have):
        needed = framework.needs.get(role, ())
        if needed and not have.intersection(needed) and not set(missing).intersection(needed):
            missing.append(_either(needed))
    singles = [m for m in missing if " or " not in m]
    return (*framework.order(singles), *(m for m in missing if " or " in m))


def _either(roles: tuple[str, ...]) -> str:
    return roles[0] if len(roles) == 1 else f"{', '.join(roles[:-1])} or {roles[-1]}"


def waiting_message(job: str, missing: tuple[str, ...], declared: bool) -> str:
    """One line: what the job waits for, and how to end the wait."""
    named = ", ".join(missing)
    why = f"as {contract.ROLES} says" if declared else "which the roles it has cannot run without"
    return (
        f"job {job} waits for its role(s) {named} ({why}): its pods start once a workload of "
        "each is created"
    )
