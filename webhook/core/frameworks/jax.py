"""JAX: what jax.distributed.initialize needs (coordinator, process count, process id).

JAX itself reads `JAX_COORDINATOR_ADDRESS` (`host:port`) when called without a coordinator; the
`JAX_` names are Kubeflow Trainer's, the unprefixed ones the training-operator's JAXJob's.

On TPU (trainhook.io/tpu-slices), each worker is one TPU host and the workers, in index order,
make that many slices of equal size. libtpu finds the other hosts of its slice in the variables
GKE's TPU webhook gives a multi-host slice: `TPU_WORKER_ID` (the host's index within its slice),
`TPU_WORKER_HOSTNAMES` (the slice's hosts in that order, comma-separated) and `TPU_NAME` (the
slice's name, `<job>-slice-<n>`). Several slices also get the three variables JobSet users set
by hand for multislice (kubernetes-sigs/jobset#787): `MEGASCALE_NUM_SLICES`,
`MEGASCALE_SLICE_ID` and `MEGASCALE_COORDINATOR_ADDRESS`, the first host of the first slice,
without a port as JobSet's coordinator annotation has none (libtpu's MEGASCALE_PORT applies).
"""

from webhook.core import contract
from webhook.core.errors import InvalidSetting
from webhook.core.frameworks.base import Framework, Placement, Success
from webhook.core.shape.topology import Topology

WORKER = "worker"


def env(placement: Placement) -> dict[str, str]:
    topology = placement.topology
    coordinator = topology.host(topology.roles[0].name, 0)
    port = str(placement.port_of(topology.roles[0].name))
    processes, process_id = str(topology.total), str(placement.rank)
    result = {
        "COORDINATOR_ADDRESS": coordinator,
        "COORDINATOR_PORT": port,
        "NUM_PROCESSES": processes,
        "PROCESS_ID": process_id,
        "JAX_COORDINATOR_ADDRESS": f"{coordinator}:{port}",
        "JAX_NUM_PROCESSES": processes,
        "JAX_PROCESS_ID": process_id,
    }
    if placement.tpu_slices is not None:
        result |= tpu_env(placement, placement.tpu_slices)
    return result


def check_slices(topology: Topology, slices: int) -> None:
    """Refuse a job whose workers the slices cannot share equally (at the workload's admission,
    and at each pod's)."""
    workers = topology.replicas(WORKER)
    if workers % slices:
        raise InvalidSetting(
            contract.TPU_SLICES,
            str(slices),
            f"job {topology.job} has {workers} workers, which {slices} slices cannot share "
            "equally: a slice is a whole number of TPU hosts, one worker each",
        )


def tpu_env(placement: Placement, slices: int) -> dict[str, str]:
    """The TPU_* variables of the pod's slice, and the MEGASCALE_* ones across slices."""
    topology = placement.topology
    check_slices(topology, slices)
    hosts = topology.hosts(WORKER)
    per_slice = len(hosts) // slices
    slice_id, worker_id = divmod(placement.index, per_slice)
    result = {
        "TPU_WORKER_ID": str(worker_id),
        "TPU_WORKER_HOSTNAMES": ",".join(hosts[slice_id * per_slice : (slice_id + 1) * per_slice]),
        "TPU_NAME": f"{topology.job}-slice-{slice_id}",
    }
    if slices > 1:
        result |= {
            "MEGASCALE_NUM_SLICES": str(slices),
            "MEGASCALE_SLICE_ID": str(slice_id),
            "MEGASCALE_COORDINATOR_ADDRESS": hosts[0],
        }
    return result


FRAMEWORK = Framework(
    name="jax",
    roles=(WORKER,),
    default_role=WORKER,
    port=6666,
    container="jax",
    env=env,
    success=Success(every=WORKER),
    key_vars=("COORDINATOR_ADDRESS", "NUM_PROCESSES", "PROCESS_ID"),
    tpu=True,
)
