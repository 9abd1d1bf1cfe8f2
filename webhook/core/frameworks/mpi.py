"""MPI (Open MPI, Intel MPI, MPICH; Horovod on top): a launcher reaching workers over ssh."""

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.frameworks.base import Framework, Placement, Success
from webhook.core.objects import annotations_of
from webhook.core.pods import add_volume, containers, mount
from webhook.core.topology import Topology

HOSTFILE_VOLUME = "mpi-hostfile"
HOSTFILE = "hostfile"  # the file name, and its key in a large job's peers ConfigMap
SSH_VOLUME = "mpi-ssh"
SSH_PORT = 22


def slots(placement: Placement) -> int:
    """Processes per worker: the workers' own nproc, which the launcher learns from the stamp."""
    return placement.nproc_of("worker")


def hostfile(topology: Topology) -> str:
    """One line per worker, as mpirun reads it."""
    per_worker = topology.role("worker").nproc if topology.has("worker") else 1
    return "".join(f"{host} slots={per_worker}\n" for host in topology.hosts("worker"))


@lru_cache(maxsize=8)
def lists(topology: Topology, port: int | None) -> dict[str, str]:
    return {HOSTFILE: hostfile(topology)}


SSH_ARGS = "-o ConnectionAttempts=10"  # workers' sshd may start after the launcher


def env(placement: Placement) -> dict[str, str]:
    path = contract.MPI_HOSTFILE_PATH
    per_worker = str(slots(placement))
    result = {
        "K_MPI_JOB_ROLE": placement.role,
        # Open MPI 4 (ORTE)
        "OMPI_MCA_orte_default_hostfile": path,
        "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
        "OMPI_MCA_plm_rsh_args": SSH_ARGS,
        "OMPI_MCA_orte_set_default_slots": per_worker,
        # Open MPI 5 (PRRTE) reads none of the ORTE names: without these, a plain mpirun runs
        # every rank on the launcher.
        "PRTE_MCA_prte_default_hostfile": path,
        "PRTE_MCA_prte_keep_fqdn_hostnames": "true",
        "PRTE_MCA_plm_ssh_args": SSH_ARGS,
        "PRTE_MCA_prte_set_default_slots": per_worker,
        # Intel MPI and MPICH (Hydra)
        "I_MPI_HYDRA_HOST_FILE": path,
        "HYDRA_HOST_FILE": path,
        "I_MPI_PERHOST": per_worker,
    }
    if placement.role == "launcher" and placement.gpus == 0:
        # A launcher without GPUs sees none, even where the runtime would expose every GPU of
        # the node to a container that requests none (as mpi-operator does).
        result |= {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
    return result


def pod_extras(draft: Draft, pod: Mapping[str, Any], placement: Placement) -> None:
    """Every pod mounts the job's ssh keys; the launcher also gets the hostfile."""
    add_volume(
        draft,
        {
            "name": SSH_VOLUME,
            "secret": {"secretName": f"{placement.topology.job}-ssh", "defaultMode": 0o600},
        },
    )
    main = [c for c in containers(pod) if c[0] == "containers"]
    for field, position, container in main:
        mount(draft, field, position, container, SSH_VOLUME, contract.MPI_SSH_PATH)
    if placement.role != "launcher":
        return
    if placement.peers:
        items = [{"key": HOSTFILE, "path": HOSTFILE}]
        add_volume(
            draft,
            {"name": HOSTFILE_VOLUME, "configMap": {"name": placement.peers, "items": items}},
        )
    else:
        content = hostfile(placement.topology)
        if annotations_of(pod).get(contract.HOSTFILE) != content:
            draft.dict_at("metadata", "annotations")[contract.HOSTFILE] = content
        path = f"metadata.annotations['{contract.HOSTFILE}']"
        add_volume(
            draft,
            {
                "name": HOSTFILE_VOLUME,
                "downwardAPI": {"items": [{"path": HOSTFILE, "fieldRef": {"fieldPath": path}}]},
            },
        )
    directory = contract.MPI_HOSTFILE_PATH.rpartition("/")[0]
    for field, position, container in main:
        mount(draft, field, position, container, HOSTFILE_VOLUME, directory)


FRAMEWORK = Framework(
    name="mpi",
    roles=("launcher", "worker"),
    default_role="worker",
    port=SSH_PORT,
    container="mpi",
    env=env,
    success=Success(first_of=("launcher",)),
    pod_extras=pod_extras,
    ssh_keys=True,
    lists=lists,
    key_vars=("K_MPI_JOB_ROLE", "PRTE_MCA_prte_set_default_slots"),
    single=("launcher",),
    # The launcher's hostfile lists the workers; workers only wait for a launcher's ssh.
    needs={"launcher": ("worker",), "worker": ("launcher",)},
)
