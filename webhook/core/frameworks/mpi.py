"""MPI (Open MPI, Intel MPI, MPICH; Horovod on top): a launcher reaching workers over ssh."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.frameworks.base import Framework, Placement, Success
from webhook.core.objects import annotations_of
from webhook.core.shape.pods import add_volume, equipped, mount
from webhook.core.shape.topology import Topology

HOSTFILE_VOLUME = "mpi-hostfile"
HOSTFILE = "hostfile"  # the file name, and its key in a large job's peers ConfigMap
HYDRA_HOSTFILE = "hostfile.hydra"  # a large job's hostfile for Intel MPI and MPICH (Hydra)
DISCOVER_HOSTS = "discover_hosts.sh"  # the file name, and its key in the peers ConfigMap
SSH_VOLUME = "mpi-ssh"
SSH_PORT = 22
ROOT_READS = 0o600  # the keys of a root container: its own, as ssh and sshd demand
GROUP_READS = 0o440  # a non-root user's keys: root's files, readable by its fsGroup alone
HYDRA = ("Intel", "MPICH")  # implementations whose mpiexec is Hydra, reading `host:N`
DEFAULT_CLUSTER_DOMAIN = "cluster.local"

# Horovod elastic's --host-discovery-script: one `host:slots` line per worker, read from the
# hostfile beside it whichever MPI's format it is in.
DISCOVER_HOSTS_SCRIPT = (
    "#!/bin/sh\n"
    "# The job's workers, one host:slots line each, for horovodrun --host-discovery-script\n"
    f"exec sed -e 's/ slots=/:/' {contract.MPI_HOSTFILE_PATH}\n"
)


def slots(placement: Placement) -> int:
    """Processes per worker: the workers' own nproc, which the launcher learns from the stamp."""
    return placement.nproc_of("worker")


def hostfile(topology: Topology, implementation: str = "OpenMPI") -> str:
    """One line per worker in the format of `implementation`: Open MPI's `host slots=N`,
    Hydra's `host:N` (Intel MPI, MPICH), as mpi-operator writes them."""
    per_worker = topology.role("worker").nproc if topology.has("worker") else 1
    line = "{}:{}\n" if implementation in HYDRA else "{} slots={}\n"
    return "".join(line.format(host, per_worker) for host in topology.hosts("worker"))


@lru_cache(maxsize=8)
def lists(topology: Topology, port: int | None) -> dict[str, str]:
    return {
        HOSTFILE: hostfile(topology, "OpenMPI"),
        HYDRA_HOSTFILE: hostfile(topology, "MPICH"),
        DISCOVER_HOSTS: DISCOVER_HOSTS_SCRIPT,
    }


SSH_ARGS = "-o ConnectionAttempts=10"  # workers' sshd may start after the launcher


def env(placement: Placement) -> dict[str, str]:
    path = contract.MPI_HOSTFILE_PATH
    per_worker = str(slots(placement))
    result = {"K_MPI_JOB_ROLE": placement.role}
    if placement.mpi_implementation == "Intel":
        result |= {
            "I_MPI_HYDRA_HOST_FILE": path,
            "I_MPI_HYDRA_BOOTSTRAP_EXEC_EXTRA_ARGS": SSH_ARGS,
            "I_MPI_PERHOST": per_worker,
        }
    elif placement.mpi_implementation == "MPICH":
        # Hydra takes the slots from the hostfile's `host:N`; it has no variable for them. MPICH
        # reads HYDRA_LAUNCHER_EXTRA_ARGS; mpi-operator writes HYDRA_LAUNCH_EXTRA_ARGS, which
        # MPICH 4 ignores, kept for scripts that pass it on.
        result |= {
            "HYDRA_HOST_FILE": path,
            "HYDRA_LAUNCHER_EXTRA_ARGS": SSH_ARGS,
            "HYDRA_LAUNCH_EXTRA_ARGS": SSH_ARGS,
        }
    else:
        result |= {
            # Open MPI 4 (ORTE)
            "OMPI_MCA_orte_default_hostfile": path,
            "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
            "OMPI_MCA_plm_rsh_args": SSH_ARGS,
            "OMPI_MCA_orte_set_default_slots": per_worker,
            # Open MPI 5 (PRRTE) reads none of the ORTE names: without these, a plain mpirun
            # runs every rank on the launcher.
            "PRTE_MCA_prte_default_hostfile": path,
            "PRTE_MCA_prte_keep_fqdn_hostnames": "true",
            "PRTE_MCA_plm_ssh_args": SSH_ARGS,
            "PRTE_MCA_prte_set_default_slots": per_worker,
        }
    if placement.role == "launcher" and placement.gpus == 0:
        # A launcher without GPUs sees none, even where the runtime would expose every GPU of
        # the node to a container that requests none (as mpi-operator does).
        result |= {"NVIDIA_VISIBLE_DEVICES": "", "NVIDIA_DRIVER_CAPABILITIES": ""}
    return result


def pod_extras(draft: Draft, pod: Mapping[str, Any], placement: Placement) -> None:
    """Every pod mounts the job's ssh keys where its user finds them; the launcher also gets the
    hostfile and the host discovery script."""
    main = [c for c in equipped(pod, placement.training) if c[0] == "containers"]
    mount_ssh_keys(draft, pod, placement)
    if placement.mpi_implementation in HYDRA:
        _search_job_service(draft, pod, placement)
    if placement.role != "launcher":
        return
    if placement.peers:
        key = HYDRA_HOSTFILE if placement.mpi_implementation in HYDRA else HOSTFILE
        items = [
            {"key": key, "path": HOSTFILE},
            {"key": DISCOVER_HOSTS, "path": DISCOVER_HOSTS, "mode": 0o555},
        ]
        add_volume(
            draft,
            {"name": HOSTFILE_VOLUME, "configMap": {"name": placement.peers, "items": items}},
        )
    else:
        wanted = {
            contract.HOSTFILE: hostfile(placement.topology, placement.mpi_implementation),
            contract.DISCOVER_HOSTS: DISCOVER_HOSTS_SCRIPT,
        }
        annotations = annotations_of(pod)
        if any(annotations.get(key) != value for key, value in wanted.items()):
            draft.dict_at("metadata", "annotations").update(wanted)
        add_volume(
            draft,
            {
                "name": HOSTFILE_VOLUME,
                "downwardAPI": {
                    "items": [
                        _annotation_item(HOSTFILE, contract.HOSTFILE),
                        _annotation_item(DISCOVER_HOSTS, contract.DISCOVER_HOSTS, 0o555),
                    ]
                },
            },
        )
    directory = contract.MPI_HOSTFILE_PATH.rpartition("/")[0]
    for field, position, container in main:
        mount(draft, field, position, container, HOSTFILE_VOLUME, directory)


def mount_ssh_keys(draft: Draft, pod: Mapping[str, Any], placement: Placement) -> None:
    """The job's SSH Secret `<job>-ssh` in the training container, where its user finds it
    (every pod of an MPI job, and of any job with trainhook.io/ssh-keys)."""
    path, mode = _ssh_mount(draft, pod, placement)
    add_volume(
        draft,
        {
            "name": SSH_VOLUME,
            "secret": {"secretName": f"{placement.topology.job}-ssh", "defaultMode": mode},
        },
    )
    for field, position, container in equipped(pod, placement.training):
        if field == "containers":
            mount(draft, field, position, container, SSH_VOLUME, path)


def _annotation_item(path: str, key: str, mode: int | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {
        "path": path,
        "fieldRef": {"fieldPath": f"metadata.annotations['{key}']"},
    }
    if mode is not None:
        item["mode"] = mode
    return item


def check_ssh_user(
    pod: Mapping[str, Any], ssh_auth_mount_path: str | None, training: int | None
) -> None:
    """Refuse a pod (or pod template) whose training container (`training`, the one that mounts
    the keys) runs as a non-root user who could not read the job's keys: without
    trainhook.io/ssh-auth-mount-path they would be root's at /root/.ssh; with it but neither
    runAsUser nor fsGroup, no group could be given them that the user alone has."""
    pod_context = (pod.get("spec") or {}).get("securityContext") or {}
    non_root = _non_root(pod, training)
    if non_root is None:
        return
    container, user = non_root
    if ssh_auth_mount_path is None:
        raise Refused(
            f"{contract.SSH_AUTH_MOUNT_PATH}: not set, but container {container.get('name')} "
            f"runs as {user.shown()}, who cannot read the job's SSH keys at "
            f"{contract.MPI_SSH_PATH}: set it to that user's ~/.ssh, e.g. /home/mpiuser/.ssh"
        )
    if pod_context.get("fsGroup") is None and user.uid is None:
        raise InvalidSetting(
            contract.SSH_AUTH_MOUNT_PATH,
            ssh_auth_mount_path,
            f"container {container.get('name')} runs as a non-root user of its image that "
            "Trainhook cannot see: set securityContext.runAsUser (or the pod's fsGroup), so "
            "that the keys are readable by that user alone",
        )


def _non_root(
    pod: Mapping[str, Any], training: int | None
) -> tuple[Mapping[str, Any], _User] | None:
    """The training container, with its user, when that user is not root; sidecars mount no
    keys, so whoever they run as does not matter (and a pod of thousands costs no more)."""
    if training is None:
        return None
    spec = pod.get("spec") or {}
    container = (spec.get("containers") or [])[training]
    user = _effective(container, spec.get("securityContext") or {})
    return (container, user) if user.runs_as_non_root else None


def _ssh_mount(draft: Draft, pod: Mapping[str, Any], placement: Placement) -> tuple[str, int]:
    """Where the keys go and their mode. Root reads its own 0600 keys at /root/.ssh. A non-root
    user reads them at trainhook.io/ssh-auth-mount-path (its ~/.ssh), root's files with mode
    0440 and the pod's fsGroup as their group: ssh accepts a key that root owns, sshd's
    StrictModes a file no one else may write, and no other user of the node reads them."""
    path = placement.ssh_auth_mount_path
    check_ssh_user(pod, path, placement.training)
    non_root = _non_root(pod, placement.training)
    if path is None:
        return contract.MPI_SSH_PATH, ROOT_READS
    if non_root is None:
        return path, ROOT_READS
    pod_context = (pod.get("spec") or {}).get("securityContext") or {}
    if pod_context.get("fsGroup") is None:
        user = non_root[1]
        # The kubelet gives the Secret's files this group; only OnRootMismatch, so that no
        # other volume of the pod is walked again at every start.
        context = draft.dict_at("spec", "securityContext")
        context["fsGroup"] = user.gid if user.gid is not None else user.uid
        context.setdefault("fsGroupChangePolicy", "OnRootMismatch")
    return path, GROUP_READS


class _User:
    def __init__(self, uid: object, gid: object, non_root: object) -> None:
        self.uid = uid if isinstance(uid, int) and not isinstance(uid, bool) else None
        self.gid = gid if isinstance(gid, int) and not isinstance(gid, bool) else None
        self.non_root_flag = non_root is True

    @property
    def runs_as_non_root(self) -> bool:
        return self.uid != 0 and (self.uid is not None or self.non_root_flag)

    def shown(self) -> str:
        if self.uid is not None:
            return f"user {self.uid} (securityContext.runAsUser)"
        return "a non-root user (securityContext.runAsNonRoot)"


def _effective(container: Mapping[str, Any], pod_context: Mapping[str, Any]) -> _User:
    """The container's user as the kubelet runs it: its own securityContext over the pod's."""
    own = container.get("securityContext") or {}

    def get(key: str) -> object:
        return own[key] if own.get(key) is not None else pod_context.get(key)

    return _User(get("runAsUser"), get("runAsGroup"), get("runAsNonRoot"))


def _search_job_service(draft: Draft, pod: Mapping[str, Any], placement: Placement) -> None:
    """Hydra's proxies call the launcher back by its short hostname: every pod searches the
    job's Service domain (as mpi-operator adds for Intel MPI and MPICH)."""
    topology = placement.topology
    service = topology.role(placement.role).service
    domain = topology.cluster_domain or DEFAULT_CLUSTER_DOMAIN
    search = f"{service}.{topology.namespace}.svc.{domain}"
    searches = ((pod.get("spec") or {}).get("dnsConfig") or {}).get("searches") or []
    if search not in searches:
        draft.list_at("spec", "dnsConfig", "searches").append(search)


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
    check_template=check_ssh_user,
    lists=lists,
    key_vars=("K_MPI_JOB_ROLE",),
    single=("launcher",),
    # The launcher's hostfile lists the workers; workers only wait for a launcher's ssh.
    needs={"launcher": ("worker",), "worker": ("launcher",)},
)
