"""The kubelet's side of starting a container: its environment, command and volume contents.

Follows the kubelet's own rules (pkg/kubelet/kubelet_pods.go makeEnvironmentVariables,
pkg/kubelet/envvars, third_party/forked/golang/expansion): Service-link variables for every
Service with a cluster IP that exists in the pod's namespace when the container starts (unless
`enableServiceLinks` is false), then `env` in order, each literal value expanded against the
variables defined before it and the Service links, `valueFrom.fieldRef` read from the pod; the
command and args are expanded against the result.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

OPERATOR = "$"
FIELD_IN_BRACKETS = re.compile(r"^(metadata\.(?:labels|annotations))\['([^']*)'\]$")


@dataclass(frozen=True)
class ServicePort:
    port: int
    name: str = ""
    protocol: str = "TCP"


@dataclass(frozen=True)
class Service:
    """The parts of a Service the kubelet's Service links read."""

    name: str
    cluster_ip: str  # "None" for a headless Service, which gets no links
    ports: tuple[ServicePort, ...]
    selector: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PodStatus:
    """What the kubelet knows of a running pod beyond its manifest."""

    pod_ip: str
    host_ip: str = "127.0.0.1"
    node_name: str = "node-0"
    uid: str = "00000000-0000-0000-0000-000000000000"


def expand(value: str, mapping: Callable[[str], str]) -> str:
    """`$(NAME)` replaced by mapping(NAME), `$$` by `$`; anything else kept as written."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(value):
        if value[cursor] == OPERATOR and cursor + 1 < len(value):
            out.append(value[checkpoint:cursor])
            read, is_var, advance = _variable_name(value[cursor + 1 :])
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + value[checkpoint:]


def _variable_name(rest: str) -> tuple[str, bool, int]:
    if rest[0] == OPERATOR:
        return OPERATOR, False, 1
    if rest[0] == "(":
        closer = rest.find(")", 1)
        if closer != -1:
            return rest[1:closer], True, closer + 1
        return "$(", False, 1
    return OPERATOR + rest[0], False, 1


def mapping_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """The first context defining a name gives its value; an undefined name stays `$(NAME)`."""

    def lookup(name: str) -> str:
        for context in contexts:
            if name in context:
                return context[name]
        return f"$({name})"

    return lookup


def env_name(name: str) -> str:
    return name.upper().replace("-", "_")


def service_links(services: Sequence[Service]) -> dict[str, str]:
    """The Docker-link style variables a container gets for each Service with a cluster IP."""
    env: dict[str, str] = {}
    for service in services:
        if service.cluster_ip in ("", "None"):
            continue
        prefix = env_name(service.name)
        env[f"{prefix}_SERVICE_HOST"] = service.cluster_ip
        env[f"{prefix}_SERVICE_PORT"] = str(service.ports[0].port)
        for port in service.ports:
            if port.name:
                env[f"{prefix}_SERVICE_PORT_{env_name(port.name)}"] = str(port.port)
        for position, port in enumerate(service.ports):
            protocol = port.protocol.lower()
            address = f"{protocol}://{service.cluster_ip}:{port.port}"
            if position == 0:
                env[f"{prefix}_PORT"] = address
            port_prefix = f"{prefix}_PORT_{port.port}_{port.protocol.upper()}"
            env[port_prefix] = address
            env[f"{port_prefix}_PROTO"] = protocol
            env[f"{port_prefix}_PORT"] = str(port.port)
            env[f"{port_prefix}_ADDR"] = service.cluster_ip
    return env


def field_value(pod: Mapping[str, Any], status: PodStatus, path: str) -> str:
    """A `fieldRef.fieldPath` as the kubelet resolves it for an env variable or a volume."""
    metadata = pod["metadata"]
    spec = pod["spec"]
    simple = {
        "metadata.name": lambda: metadata["name"],
        "metadata.namespace": lambda: metadata["namespace"],
        "metadata.uid": lambda: status.uid,
        "spec.nodeName": lambda: status.node_name,
        "spec.serviceAccountName": lambda: spec.get("serviceAccountName", "default"),
        "status.hostIP": lambda: status.host_ip,
        "status.hostIPs": lambda: status.host_ip,
        "status.podIP": lambda: status.pod_ip,
        "status.podIPs": lambda: status.pod_ip,
    }
    if path in simple:
        return str(simple[path]())
    match = FIELD_IN_BRACKETS.match(path)
    if match:
        where = "labels" if match.group(1).endswith("labels") else "annotations"
        return str((metadata.get(where) or {}).get(match.group(2), ""))
    raise AssertionError(f"fieldRef {path!r} is not one the kubelet supports in env")


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    status: PodStatus,
    services: Sequence[Service] = (),
) -> dict[str, str]:
    """The environment the kubelet gives `container` of `pod` (before the image's own)."""
    links_on = pod["spec"].get("enableServiceLinks", True) is not False
    links = service_links(services) if links_on else {}
    env: dict[str, str] = {}
    lookup = mapping_for(env, links)
    if container.get("envFrom"):
        raise AssertionError("envFrom needs ConfigMaps or Secrets the harness does not model")
    for item in container.get("env") or []:
        value = item.get("value", "")
        if value:
            value = expand(value, lookup)
        elif "valueFrom" in item:
            source = item["valueFrom"]
            if "fieldRef" not in source:
                raise AssertionError(f"env {item['name']}: only fieldRef sources are modelled")
            value = field_value(pod, status, source["fieldRef"]["fieldPath"])
        env[item["name"]] = value
    for name, value in links.items():
        env.setdefault(name, value)
    return env


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """The container's command and args with `$(VAR)` expanded against its environment."""
    lookup = mapping_for(env)
    return [
        expand(word, lookup) for word in [*container.get("command", []), *container.get("args", [])]
    ]
