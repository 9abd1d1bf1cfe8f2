"""The "restricted" Pod Security Standard (Kubernetes docs, latest version), as a checker.

`restricted_violations(pod_spec)` lists every rule a pod spec breaks, in the words of the
standard, so a failing test says which field of which container is wrong. The chart's own rule
(a read-only root filesystem) is checked by `read_only_root_violations`.
"""

from __future__ import annotations

from typing import Any

ALLOWED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}
ALLOWED_ADDED_CAPABILITIES = {"NET_BIND_SERVICE"}
SAFE_SYSCTLS = {
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
}
ALLOWED_SELINUX_TYPES = {
    None,
    "",
    "container_t",
    "container_init_t",
    "container_kvm_t",
    "container_engine_t",
}


def _containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for container in spec.get(field) or []:
            found.append((f"{field}[{container['name']}]", container))
    return found


def _effective(pod: dict[str, Any], container: dict[str, Any], key: str) -> Any:
    own = (container.get("securityContext") or {}).get(key)
    return own if own is not None else pod.get(key)


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    pod = spec.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field):
            problems.append(f"{field} must be unset or false")
    for sysctl in pod.get("sysctls") or []:
        if sysctl["name"] not in SAFE_SYSCTLS:
            problems.append(f"sysctl {sysctl['name']} is not in the safe set")
    for volume in spec.get("volumes") or []:
        types = set(volume) - {"name"}
        if not types <= ALLOWED_VOLUME_TYPES:
            problems.append(f"volume {volume['name']} has type {sorted(types)}, not an allowed one")
    if (pod.get("windowsOptions") or {}).get("hostProcess"):
        problems.append("windowsOptions.hostProcess must not be true")
    if pod.get("runAsUser") == 0:
        problems.append("pod runAsUser must not be 0")
    if (pod.get("seLinuxOptions") or {}).get("type") not in ALLOWED_SELINUX_TYPES:
        problems.append("pod seLinuxOptions.type is not allowed")

    for where, container in _containers(spec):
        context = container.get("securityContext") or {}
        if context.get("privileged"):
            problems.append(f"{where}: privileged must be unset or false")
        if context.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{where}: allowPrivilegeEscalation must be false")
        if _effective(pod, container, "runAsNonRoot") is not True:
            problems.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if context.get("runAsUser") == 0:
            problems.append(f"{where}: runAsUser must not be 0")
        seccomp = _effective(pod, container, "seccompProfile") or {}
        if seccomp.get("type") not in ("RuntimeDefault", "Localhost"):
            problems.append(f"{where}: seccompProfile.type must be RuntimeDefault or Localhost")
        capabilities = context.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            problems.append(f"{where}: capabilities must drop ALL")
        added = set(capabilities.get("add") or []) - ALLOWED_ADDED_CAPABILITIES
        if added:
            problems.append(
                f"{where}: capabilities may add only NET_BIND_SERVICE, not {sorted(added)}"
            )
        if context.get("procMount") not in (None, "Default"):
            problems.append(f"{where}: procMount must be Default")
        for port in container.get("ports") or []:
            if port.get("hostPort"):
                problems.append(f"{where}: hostPort {port['hostPort']} is not allowed")
        if (context.get("seLinuxOptions") or {}).get("type") not in ALLOWED_SELINUX_TYPES:
            problems.append(f"{where}: seLinuxOptions.type is not allowed")
        if (context.get("windowsOptions") or {}).get("hostProcess"):
            problems.append(f"{where}: windowsOptions.hostProcess must not be true")
    return problems


def read_only_root_violations(spec: dict[str, Any]) -> list[str]:
    return [
        f"{where}: readOnlyRootFilesystem must be true"
        for where, container in _containers(spec)
        if (container.get("securityContext") or {}).get("readOnlyRootFilesystem") is not True
    ]
