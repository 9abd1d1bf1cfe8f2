"""Volcano's job plugins, as Volcano Job scripts read them (pkg/controllers/job/plugins):

* svc: `VC_<TASK>_HOSTS` (comma list) and `VC_<TASK>_NUM` of every task, and the files
  `/etc/volcano/<task>.host` (one host per line); the task name upper-cased with `-` as `_` in a
  variable, with `-` as `_` in a file name;
* env: `VK_TASK_INDEX` and `VC_TASK_INDEX`, the pod's index in its task;
* mpi: `MPI_HOST` on the launcher (Volcano's master task), the workers' hosts, comma-separated.

A task is a Trainhook role, named as Volcano names it: Volcano's pods of task T in job J are
`J-T-<i>`, so a role whose pods are named `J-T-<i>` (its StatefulSet or Job is `J-T`, as
`trainhook migrate` names them) is task T, whatever the framework calls the role; any other role
is the task of its own name. Its hosts are the pods' names under the job's headless Service, as
in every Trainhook list. Past the inline bound the comma lists become `<VAR>_FILE` (files of the
job's peers ConfigMap, as Trainhook's own lists) and the `.host` files come from it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from webhook.core import contract
from webhook.core.compat.base import Compat
from webhook.core.draft import Draft
from webhook.core.frameworks.base import Framework, Placement
from webhook.core.objects import annotations_of
from webhook.core.shape.peers import env_key, file_path, host_list
from webhook.core.shape.pods import add_volume, equipped, mount
from webhook.core.shape.topology import Topology

HOSTS_VOLUME = "volcano-hosts"


def host_file(task: str) -> str:
    """The file (and peers ConfigMap key) of a task's hosts, as Volcano names it."""
    return f"{task.replace('-', '_')}.host"


@lru_cache(maxsize=8)
def tasks(topology: Topology) -> dict[str, str]:
    """Each role's Volcano task: the name between `<job>-` and the index in its pods' names,
    else the role's own; every role by its own name when that would name two roles alike."""
    prefix = f"{topology.job}-"
    found = {
        role.name: role.pod[len(prefix) :]
        if role.pod.startswith(prefix) and len(role.pod) > len(prefix) and role.start == 0
        else role.name
        for role in topology.roles
    }
    if len(set(found.values())) != len(found):
        return {role.name: role.name for role in topology.roles}
    return found


def _lines(topology: Topology, role: str) -> str:
    return "\n".join(topology.hosts(role))  # no newline after the last, as Volcano writes it


@lru_cache(maxsize=8)
def lists(topology: Topology, port: int | None) -> dict[str, str]:
    named = tasks(topology)
    return {host_file(named[role.name]): _lines(topology, role.name) for role in topology.roles}


def env(framework: Framework, placement: Placement) -> dict[str, str]:
    topology = placement.topology
    named = tasks(topology)
    result: dict[str, str] = {}
    for role in topology.roles:
        key = env_key(named[role.name])
        if placement.peers:
            # The same comma list as Trainhook's own, stored once.
            result[f"VC_{key}_HOSTS_FILE"] = file_path(f"TRAINHOOK_{env_key(role.name)}_HOSTS")
        else:
            result[f"VC_{key}_HOSTS"] = host_list(topology, role.name)
        result[f"VC_{key}_NUM"] = str(role.replicas)
    index = str(placement.index)
    result |= {"VK_TASK_INDEX": index, "VC_TASK_INDEX": index}
    workers = framework.default_role
    # The pod the others are reached from over ssh (an MPI launcher) learns the workers' hosts.
    if framework.ssh_keys and placement.role in framework.single and topology.has(workers):
        if placement.peers:
            result["MPI_HOST_FILE"] = file_path(f"TRAINHOOK_{env_key(workers)}_HOSTS")
        else:
            result["MPI_HOST"] = host_list(topology, workers)
    return result


def pod_extras(draft: Draft, pod: Mapping[str, Any], placement: Placement) -> None:
    """/etc/volcano/<task>.host in every container: from the pod's annotations while the job
    is small, else from its peers ConfigMap."""
    topology = placement.topology
    named = tasks(topology)
    files = [host_file(named[role.name]) for role in topology.roles]
    if placement.peers:
        items = [{"key": file, "path": file} for file in files]
        volume: dict[str, Any] = {"configMap": {"name": placement.peers, "items": items}}
    else:
        wanted = {
            contract.VOLCANO_HOSTS_PREFIX + role.name: _lines(topology, role.name)
            for role in topology.roles
        }
        annotations = annotations_of(pod)
        if any(annotations.get(key) != value for key, value in wanted.items()):
            draft.dict_at("metadata", "annotations").update(wanted)
        volume = {
            "downwardAPI": {
                "items": [
                    {
                        "path": file,
                        "fieldRef": {
                            "fieldPath": "metadata.annotations"
                            f"['{contract.VOLCANO_HOSTS_PREFIX}{role.name}']"
                        },
                    }
                    for role, file in zip(topology.roles, files, strict=True)
                ]
            }
        }
    add_volume(draft, {"name": HOSTS_VOLUME, **volume})
    for field, position, container in equipped(pod, placement.training):
        mount(draft, field, position, container, HOSTS_VOLUME, contract.VOLCANO_HOSTS_DIR)


COMPAT = Compat(
    name="volcano",
    env=env,
    lists=lists,
    pod_extras=pod_extras,
    key_vars=("VK_TASK_INDEX",),
)
