"""Job-wide settings the roles of a running job disagree on."""

from __future__ import annotations

from collections.abc import Iterable

from webhook.core import contract
from webhook.core.job.workload import Member, disagreement
from webhook.sweeper.actions import Action
from webhook.sweeper.decide.events import event_on
from webhook.sweeper.job.state import JobState


def agreement_warnings(state: JobState) -> Iterable[Action]:
    """A job-wide setting its roles disagree on (admitted while its siblings could not be read,
    or changed since): one Warning on the first workload, for as long as it lasts."""
    members = [
        Member(w.role, f"{w.kind} {w.name}", w.settings, w.priority_class) for w in state.workloads
    ]
    problem = disagreement(state.job, state.framework, members)
    if problem is None:
        problem = _bare_pod_ports(state)
    if problem is not None:
        yield event_on(state, state.workloads[0], "Warning", "SettingsDisagree", problem)


def _bare_pod_ports(state: JobState) -> str | None:
    """Bare pods whose hosts annotation records no ports reach every peer on their own port:
    those of one job must listen on one."""
    bare = [
        w
        for w in state.workloads
        if w.kind == "Pod" and '"port":' not in w.stamp.get(contract.HOSTS, "")
    ]
    ports = [(w, w.settings.port or w.framework.port) for w in bare]
    if len({port for _, port in ports}) < 2:
        return None
    listed = ", ".join(f"{w.role} (Pod {w.name}) {port}" for w, port in ports[:6])
    more = f" and {len(ports) - 6} more" if len(ports) > 6 else ""
    return (
        f"{contract.PORT} differs between the bare pods of job {state.job}: {listed}{more}; "
        f"set one, or record each role's port in {contract.HOSTS}"
    )
