"""MindSpore: the MS_* variables of its dynamic networking (scheduler, servers, workers).

MindSpore parses MS_SCHED_HOST with inet_pton only, so it must be an IP literal when the
process starts. The scheduler reads its own pod IP (a fieldRef); every other pod reads the
cluster IP of a Service the sweeper creates for scheduler 0, through the Service-link variable
the kubelet expands in `$(...)` at every container start (so a pod started before the Service
existed gets it on its next restart).
"""

import hashlib
from collections.abc import Iterable

from webhook.core import contract
from webhook.core.errors import Refused
from webhook.core.frameworks.base import ClusterService, Framework, Placement, Success

MS_ROLES = {"scheduler": "MS_SCHED", "ps": "MS_PSERVER", "worker": "MS_WORKER"}
SCHEDULER = "scheduler"
SERVICE_SUFFIX = "-ms-scheduler"
MAX_NAME = 63  # a Service name is a DNS-1035 label


def scheduler_service(job: str) -> str:
    """The ClusterIP Service of scheduler 0: `<job>-ms-scheduler`, or for a job name too long
    for that, its start and a hash of the whole, so the name stays a DNS-1035 label."""
    name = job + SERVICE_SUFFIX
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(job.encode()).hexdigest()[:8]
    keep = MAX_NAME - len(SERVICE_SUFFIX) - len(digest) - 1
    return f"{job[:keep]}-{digest}{SERVICE_SUFFIX}"


def link_variable(service: str) -> str:
    """The variable the kubelet sets to a Service's cluster IP."""
    return service.upper().replace("-", "_") + "_SERVICE_HOST"


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    result = {"MS_ROLE": MS_ROLES[placement.role]}
    if topology.has(SCHEDULER) and (placement.role, placement.index) != (SCHEDULER, 0):
        link = f"$({link_variable(scheduler_service(topology.job))})"
        if not placement.service_links:
            raise Refused(
                f"spec.enableServiceLinks: false: pods of MindSpore job {topology.job} read "
                f"scheduler 0's IP from the Service link {link}; leave enableServiceLinks unset"
            )
        result["MS_SCHED_HOST"] = link
    worker = topology.role("worker") if topology.has("worker") else None
    workers = worker.replicas * placement.nproc_of("worker") if worker is not None else 0
    result |= {
        "MS_SCHED_PORT": str(placement.port_of("scheduler")),
        "MS_WORKER_NUM": str(workers),
        "MS_SERVER_NUM": str(topology.replicas("ps")),
    }
    if placement.role != "worker":
        result["MS_NODE_ID"] = placement.hostname
    elif placement.nproc == 1:
        # A whole number: MindSpore then makes it the rank (other ids are ranked by IP).
        result["MS_NODE_ID"] = str(placement.index)
    # Several processes per pod: msrun --node_rank=$(TRAINHOOK_ROLE_INDEX) gives each its id.
    return result


def field_env(placement: Placement) -> dict[str, str]:
    if (placement.role, placement.index) == (SCHEDULER, 0):
        return {"MS_SCHED_HOST": "status.podIP"}  # it listens there
    return {}


def services(job: str, roles: Iterable[str], port: int | None) -> tuple[ClusterService, ...]:
    if SCHEDULER not in roles or port is None:
        return ()
    selector = {contract.JOB: job, contract.ROLE: SCHEDULER, contract.ROLE_INDEX: "0"}
    return (ClusterService(scheduler_service(job), selector, port),)


FRAMEWORK = Framework(
    name="mindspore",
    roles=(SCHEDULER, "ps", "worker"),
    default_role="worker",
    port=2222,
    container="mindspore",
    env=env,
    field_env=field_env,
    services=services,
    success=Success(first_of=("worker",)),
    key_vars=("MS_ROLE", "MS_SCHED_HOST", "MS_WORKER_NUM", "MS_NODE_ID"),
    single=("scheduler",),
    # Every process registers with the scheduler, which waits for MS_WORKER_NUM workers.
    needs={"scheduler": ("worker",), "ps": ("scheduler",), "worker": ("scheduler",)},
)
