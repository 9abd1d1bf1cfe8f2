"""A fabric profile as data: the schema platform teams write, and its one-line refusals.

A profile file maps each profile's name to its fields (YAML or JSON, read by the server or
`trainhook render`); `parse_profiles` turns that mapping into `Profile`s or refuses it with one
line naming the profile, the field and what is allowed. Every field but `ncclNet` is optional:

    ncclNet: "AWS Libfabric"          # NCCL_NET: the network NCCL must use, or stop
    env: {FI_PROVIDER: efa}           # set on the training (and init) containers
    resources: {vpc.amazonaws.com/efa: 1}          # limit and request on the training container
    resourceClaims:                                 # DRA: a claim of every pod, in the container
      - {name: efa, resourceClaimTemplateName: efa-all}
    capabilities: [IPC_LOCK]          # securityContext.capabilities.add of the training container
    annotations: {networking.gke.io/default-interface: eth0}   # on the pod
    hostPaths:                        # a hostPath volume, mounted in the training container
      - {name: fabric-libs, path: /opt/fabric/lib, mountPath: /opt/fabric/lib, readOnly: true}
    sidecars:                         # containers run beside training (native sidecars)
      - {name: fabric-daemon, image: registry.example.com/daemon:1.0}
    preflightMinBusBW: 40             # GB/s: the preflight's threshold for the profile's jobs
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict

from webhook.core.contract import FABRIC_SIDECAR_ENV
from webhook.core.errors import TrainhookError
from webhook.core.limits import MAX_LABEL, shown

NCCL_NET = "NCCL_NET"
DNS_1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
QUALIFIED_NAME = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CAPABILITY = re.compile(r"^(CAP_)?[A-Z][A-Z0-9_]*$")
WHOLE = re.compile(r"^[1-9][0-9]{0,8}$")
MAX_ITEMS = 64  # entries of any one field: far more than a fabric needs
MAX_TEXT = 16 * 1024  # characters of any one value
# What a sidecar may say of itself: the fields of a Kubernetes container.
CONTAINER_FIELDS = frozenset(
    {
        "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
        "resizePolicy", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe",
        "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy",
        "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty",
    }
)  # fmt: skip


class HostPathData(TypedDict):
    name: str
    path: str
    mountPath: NotRequired[str]
    readOnly: NotRequired[bool]


class ClaimData(TypedDict):
    name: str
    resourceClaimTemplateName: str


class ProfileData(TypedDict):
    """One profile as written in a profiles file (and as the reference ones are written)."""

    ncclNet: str
    env: NotRequired[dict[str, str]]
    resources: NotRequired[dict[str, str | int]]
    resourceClaims: NotRequired[list[ClaimData]]
    capabilities: NotRequired[list[str]]
    annotations: NotRequired[dict[str, str]]
    hostPaths: NotRequired[list[HostPathData]]
    sidecars: NotRequired[list[dict[str, Any]]]
    preflightMinBusBW: NotRequired[int | float]


FIELDS = (
    "ncclNet",
    "env",
    "resources",
    "resourceClaims",
    "capabilities",
    "annotations",
    "hostPaths",
    "sidecars",
    "preflightMinBusBW",
)  # those of ProfileData, in its order


class ProfileError(TrainhookError):
    """A profiles file Trainhook cannot use: the message is one line naming where and why."""


@dataclass(frozen=True)
class HostPath:
    name: str  # the pod's volume
    path: str  # on the node
    mount_path: str | None  # in the training container; None: only sidecars mount it
    read_only: bool


@dataclass(frozen=True)
class Profile:
    """A fabric's pod shape, checked: what `apply_fabric` writes on every pod of a job."""

    name: str
    env: dict[str, str]  # NCCL_NET first; never written to
    resources: tuple[tuple[str, str], ...]
    claims: tuple[tuple[str, str], ...]  # (claim name, ResourceClaimTemplate name)
    capabilities: tuple[str, ...]
    annotations: tuple[tuple[str, str], ...]
    host_paths: tuple[HostPath, ...]
    sidecars: tuple[Mapping[str, Any], ...]  # container specs; copied before each use
    # GB/s: the trainhook.io/preflight threshold of its jobs that set none of their own.
    preflight_min_busbw: float | None = None

    @property
    def nccl_net(self) -> str:
        return self.env[NCCL_NET]


def parse_profiles(data: object, source: str) -> dict[str, Profile]:
    """Every profile of a profiles file's content (name -> fields); raises ProfileError."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        raise ProfileError(f"{source}: a mapping of profile names to profiles, not {_kind(data)}")
    if len(data) > MAX_ITEMS:
        raise ProfileError(f"{source}: at most {MAX_ITEMS} profiles, not {len(data)}")
    profiles = {}
    for name, fields in data.items():
        if not isinstance(name, str) or not _label(name):
            raise ProfileError(
                f"{source}: profile name {shown(name)}: a DNS label (lower-case letters, digits "
                "and '-', at most 63 characters)"
            )
        profiles[name] = parse_profile(name, fields, f"{source}: profile {name}")
    return profiles


def parse_profile(name: str, fields: object, where: str) -> Profile:
    if not isinstance(fields, Mapping):
        raise ProfileError(
            f"{where}: a mapping of fields ({', '.join(FIELDS)}), not {_kind(fields)}"
        )
    for key in fields:
        if key not in FIELDS:
            raise ProfileError(
                f"{where}: unknown field {shown(key)}; the fields are {', '.join(FIELDS)}"
            )
    net = fields.get("ncclNet")
    if not isinstance(net, str) or not net.strip() or not _one_line(net):
        raise ProfileError(
            f"{where}: ncclNet: required: the name of the NCCL network the job must use "
            "(NCCL_NET, e.g. IB or AWS Libfabric), which makes NCCL stop rather than fall back "
            "to TCP"
        )
    env = {NCCL_NET: net}
    for key, value in _pairs(fields, "env", where):
        if not ENV_NAME.match(key):
            raise ProfileError(f"{where}: env: {shown(key)} is not a variable name")
        if key == NCCL_NET:
            raise ProfileError(f"{where}: env: NCCL_NET is the profile's ncclNet; set it there")
        env[key] = _text(value, f"{where}: env: {key}")
    host_paths = _host_paths(fields, where)
    return Profile(
        name=name,
        env=env,
        resources=tuple(_resource(k, v, where) for k, v in _pairs(fields, "resources", where)),
        claims=_claims(fields, where),
        capabilities=_capabilities(fields, where),
        annotations=tuple(
            (_annotation_key(k, where), _text(v, f"{where}: annotations: {k}"))
            for k, v in _pairs(fields, "annotations", where)
        ),
        host_paths=host_paths,
        sidecars=_sidecars(fields, where, {h.name for h in host_paths}),
        preflight_min_busbw=_busbw(fields.get("preflightMinBusBW"), where),
    )


MAX_BUSBW = 100_000  # GB/s: far above any fabric


def _busbw(value: object, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= MAX_BUSBW:
        raise ProfileError(
            f"{where}: preflightMinBusBW: {shown(value)} is not a bus bandwidth in GB/s above 0 "
            f"and at most {MAX_BUSBW}, such as 40 or 12.5"
        )
    return float(value)


def _pairs(fields: Mapping[str, Any], key: str, where: str) -> list[tuple[str, Any]]:
    value = fields.get(key)
    if value is None:
        return []
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ProfileError(f"{where}: {key}: a mapping of names to values, not {_kind(value)}")
    if len(value) > MAX_ITEMS:
        raise ProfileError(f"{where}: {key}: at most {MAX_ITEMS} entries")
    return list(value.items())


def _items(fields: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = fields.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise ProfileError(f"{where}: {key}: a list, not {_kind(value)}")
    if len(value) > MAX_ITEMS:
        raise ProfileError(f"{where}: {key}: at most {MAX_ITEMS} entries")
    return value


def _resource(name: str, value: object, where: str) -> tuple[str, str]:
    prefix, slash, short = name.partition("/")
    if (
        not slash
        or len(name) > 253
        or not DNS_1123_SUBDOMAIN.match(prefix)
        or not QUALIFIED_NAME.match(short)
        or prefix == "kubernetes.io"
        or prefix.endswith(".kubernetes.io")
    ):
        raise ProfileError(
            f"{where}: resources: {shown(name)} is not an extended resource name such as "
            "vpc.amazonaws.com/efa"
        )
    count = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(count, str) or not WHOLE.match(count):
        raise ProfileError(
            f"{where}: resources: {name}: {shown(value)} is not a whole number of devices >= 1"
        )
    return name, count


def _claims(fields: Mapping[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    claims: dict[str, str] = {}
    for item in _items(fields, "resourceClaims", where):
        name = item.get("name") if isinstance(item, Mapping) else None
        template = item.get("resourceClaimTemplateName") if isinstance(item, Mapping) else None
        if (
            not isinstance(item, Mapping)
            or set(item) != {"name", "resourceClaimTemplateName"}
            or not _label(name)
            or not _subdomain(template)
            or name in claims
        ):
            raise ProfileError(
                f"{where}: resourceClaims: {shown(item)}: each a distinct claim name (a DNS "
                "label) and the resourceClaimTemplateName it is made from"
            )
        claims[str(name)] = str(template)
    return tuple(claims.items())


def _capabilities(fields: Mapping[str, Any], where: str) -> tuple[str, ...]:
    found = _items(fields, "capabilities", where)
    for item in found:
        if not isinstance(item, str) or not CAPABILITY.match(item):
            raise ProfileError(
                f"{where}: capabilities: {shown(item)} is not a Linux capability such as IPC_LOCK"
            )
    return tuple(dict.fromkeys(found))


def _annotation_key(key: str, where: str) -> str:
    prefix = key.rpartition("/")[0]
    if len(key) > 317 or not QUALIFIED_NAME.match(key) or len(key.rpartition("/")[2]) > MAX_LABEL:
        raise ProfileError(f"{where}: annotations: {shown(key)} is not an annotation key")
    if prefix == "trainhook.io" or prefix.endswith(".trainhook.io"):
        raise ProfileError(f"{where}: annotations: {key}: trainhook.io/ keys are Trainhook's own")
    return key


def _host_paths(fields: Mapping[str, Any], where: str) -> tuple[HostPath, ...]:
    found: list[HostPath] = []
    for item in _items(fields, "hostPaths", where):
        if (
            not isinstance(item, Mapping)
            or not {"name", "path"} <= set(item) <= {"name", "path", "mountPath", "readOnly"}
            or not _label(item["name"])
            or not _absolute(item["path"])
            or not _absolute(item.get("mountPath", "/"))
            or not isinstance(item.get("readOnly", False), bool)
            or any(h.name == item["name"] for h in found)
        ):
            raise ProfileError(
                f"{where}: hostPaths: {shown(item)}: each a distinct name (a DNS label), the "
                "absolute path on the node, and optionally the absolute mountPath in the "
                "training container and readOnly (true or false)"
            )
        found.append(
            HostPath(item["name"], item["path"], item.get("mountPath"), item.get("readOnly", False))
        )
    return tuple(found)


def _sidecars(
    fields: Mapping[str, Any], where: str, volumes: set[str]
) -> tuple[Mapping[str, Any], ...]:
    found: list[Mapping[str, Any]] = []
    for item in _items(fields, "sidecars", where):
        if not isinstance(item, Mapping) or not _label(item.get("name")):
            raise ProfileError(
                f"{where}: sidecars: {shown(item)}: each a container with a name (a DNS label)"
            )
        name = item["name"]
        here = f"{where}: sidecars: {name}"
        if any(s["name"] == name for s in found):
            raise ProfileError(f"{here}: named twice")
        if not isinstance(item.get("image"), str) or not item["image"]:
            raise ProfileError(f"{here}: image: required, the container's image")
        for key in item:
            if key not in CONTAINER_FIELDS:
                raise ProfileError(
                    f"{here}: {shown(key)} is not a container field this sidecar may set"
                    + (" (Trainhook runs it as a sidecar)" if key == "restartPolicy" else "")
                )
        mounts = item.get("volumeMounts") or []
        if not isinstance(mounts, list):
            raise ProfileError(f"{here}: volumeMounts: a list, not {_kind(mounts)}")
        for mount in mounts:
            volume = mount.get("name") if isinstance(mount, Mapping) else None
            if volume not in volumes:
                raise ProfileError(
                    f"{here}: volumeMounts: {shown(volume)}: a sidecar mounts only the "
                    f"profile's hostPaths ({', '.join(sorted(volumes)) or 'none'})"
                )
        env = item.get("env") or []
        names = [e.get("name") if isinstance(e, Mapping) else None for e in _listed(env)]
        if not isinstance(env, list) or not all(isinstance(n, str) and n for n in names):
            raise ProfileError(f"{here}: env: a list of variables, each with a name")
        if FABRIC_SIDECAR_ENV in names:
            raise ProfileError(f"{here}: env: {FABRIC_SIDECAR_ENV} is Trainhook's mark")
        found.append(item)
    return tuple(found)


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _text(value: object, where: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise ProfileError(f"{where}: {shown(value)}: a string (quote numbers and booleans)")
    return value


def _label(value: object) -> bool:
    return isinstance(value, str) and len(value) <= MAX_LABEL and bool(DNS_1123_LABEL.match(value))


def _subdomain(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 253 and bool(DNS_1123_SUBDOMAIN.match(value))


def _absolute(value: object) -> bool:
    return (
        isinstance(value, str)
        and value.startswith("/")
        and len(value) <= 4096
        and ".." not in value.split("/")
        and ":" not in value
    )


def _one_line(text: str) -> bool:
    return "\n" not in text and "\r" not in text and len(text) <= MAX_LABEL


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return shown(value)
