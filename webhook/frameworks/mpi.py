"""MPI (Open MPI, Intel MPI, MPICH; Horovod on top): a launcher reaching workers over ssh."""

from webhook import contract
from webhook.frameworks.base import Framework, Placement


def slots(placement: Placement) -> int:
    """Processes per worker: the workers' own nproc, which the launcher learns from the stamp."""
    topology = placement.topology
    return topology.role("worker").nproc if topology.has("worker") else placement.nproc


def hostfile(placement: Placement) -> str:
    """One line per worker, as mpirun reads it."""
    per_worker = slots(placement)
    return "".join(f"{host} slots={per_worker}\n" for host in placement.topology.hosts("worker"))


def env(placement: Placement) -> dict[str, str]:
    path = contract.MPI_HOSTFILE_PATH
    return {
        "K_MPI_JOB_ROLE": placement.role,
        "OMPI_MCA_orte_default_hostfile": path,
        "I_MPI_HYDRA_HOST_FILE": path,
        "HYDRA_HOST_FILE": path,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
        "OMPI_MCA_orte_set_default_slots": str(slots(placement)),
        "I_MPI_PERHOST": str(slots(placement)),
    }


FRAMEWORK = Framework(
    name="mpi",
    roles=("launcher", "worker"),
    default_role="worker",
    port=22,
    container="mpi",
    env=env,
    key_vars=("K_MPI_JOB_ROLE", "OMPI_MCA_orte_set_default_slots"),
)
