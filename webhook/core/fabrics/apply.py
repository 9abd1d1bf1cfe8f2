"""A fabric profile written on a pod: the same on every pod of the job, and nothing twice.

The profile's env reaches the pod with the job's own (`fabric_env`, through the env the webhook
writes on the training and init containers); `apply_fabric` writes the rest: device resources
and DRA claims, capabilities, pod annotations, host mounts and sidecars. What the pod already
holds and the profile sets otherwise is refused in one line, never overwritten; what it holds
alike is left as it is, so the webhook's own output passes through unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.errors import InvalidSetting, Refused
from webhook.core.fabrics.registry import profile_for
from webhook.core.fabrics.schema import Profile
from webhook.core.fabrics.users import pod_refusal
from webhook.core.limits import shown
from webhook.core.objects import annotations_of
from webhook.core.shape.pods import MAX_INIT_CONTAINERS, add_volume, env_by_name, equipped, mount


def fabric_env(env: dict[str, str], name: str) -> dict[str, str]:
    """The job's env with the profile's added; refuses a variable both set differently."""
    profile = profile_for(name)
    for key, value in profile.env.items():
        if env.get(key, value) != value:
            raise InvalidSetting(
                contract.FABRIC,
                name,
                f"it sets {key}={shown(value)}, which Trainhook sets to {shown(env[key])} for "
                "this job: define a profile without it",
            )
    return env | profile.env


def apply_fabric(
    draft: Draft,
    pod: Mapping[str, Any],
    name: str,
    framework: str,
    training: int | None,
    gpus: int,
    warnings: list[str],
) -> None:
    """Write profile `name` on the pod; raises InvalidSetting or Refused for what conflicts."""
    profile = profile_for(name)
    if training is None:
        return
    container = pod["spec"]["containers"][training]
    why = pod_refusal(name, framework, gpus, str(container.get("name")))
    if why is not None:
        raise InvalidSetting(contract.FABRIC, name, why)
    _check_env(pod, training, profile)
    _set_resources(draft, container, training, profile)
    _set_claims(draft, pod, container, training, profile)
    _set_capabilities(draft, container, training, profile)
    _set_annotations(draft, pod, profile)
    for host in profile.host_paths:
        _add_volume(draft, pod, profile, {"name": host.name, "hostPath": {"path": host.path}})
        if host.mount_path is not None:
            mount(
                draft, "containers", training, container, host.name, host.mount_path, host.read_only
            )
    for sidecar in profile.sidecars:
        _add_sidecar(draft, pod, profile, sidecar, warnings)


def _check_env(pod: Mapping[str, Any], training: int, profile: Profile) -> None:
    for _, _, container in equipped(pod, training):
        found = env_by_name(container.get("env") or [], set(profile.env))
        for key, item in found.items():
            wanted = profile.env[key]
            if item.get("value") != wanted or "valueFrom" in item:
                have = shown(item.get("value")) if "valueFrom" not in item else "a valueFrom"
                raise InvalidSetting(
                    contract.FABRIC,
                    profile.name,
                    f"it sets {key}={shown(wanted)}, container {container.get('name')} sets "
                    f"{have}: remove it, or use a profile with the value you need",
                )


def _set_resources(
    draft: Draft, container: Mapping[str, Any], training: int, profile: Profile
) -> None:
    """Each device as the training container's limit and request, unless it asks for some of
    that device itself (an instance's count of them, say)."""
    resources = container.get("resources") or {}
    limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
    base = ("spec", "containers", training, "resources")
    for resource, count in profile.resources:
        if resource in limits or resource in requests:
            continue
        draft.dict_at(*base, "limits")[resource] = count
        draft.dict_at(*base, "requests")[resource] = count


def _set_claims(
    draft: Draft, pod: Mapping[str, Any], container: Mapping[str, Any], training: int,
    profile: Profile,
) -> None:  # fmt: skip
    for claim, template in profile.claims:
        have = add_claim(draft, pod, container, training, claim, template)
        if have is not None:
            raise InvalidSetting(
                contract.FABRIC,
                profile.name,
                f"it claims {claim} from ResourceClaimTemplate {template}, the pod's claim "
                f"{claim} is {shown(dict(have))}: rename the pod's claim",
            )


def add_claim(
    draft: Draft, pod: Mapping[str, Any], container: Mapping[str, Any], training: int,
    claim: str, template: str,
) -> Mapping[str, Any] | None:  # fmt: skip
    """A DRA claim `claim` from ResourceClaimTemplate `template` in the pod and the training
    container's `resources.claims`, each unless already there; the pod's own claim of that name
    when it is another (nothing is written then)."""
    spec = pod.get("spec") or {}
    claims: dict[Any, Mapping[str, Any]] = {
        c.get("name"): c for c in spec.get("resourceClaims") or []
    }
    wanted = {"name": claim, "resourceClaimTemplateName": template}
    have = claims.get(claim)
    if have is None:
        draft.list_at("spec", "resourceClaims").append(wanted)
    elif have != wanted:
        return have
    used = {c.get("name") for c in (container.get("resources") or {}).get("claims") or []}
    if claim not in used:
        draft.list_at("spec", "containers", training, "resources", "claims").append({"name": claim})
    return None


def _set_capabilities(
    draft: Draft, container: Mapping[str, Any], training: int, profile: Profile
) -> None:
    capabilities = (container.get("securityContext") or {}).get("capabilities") or {}
    present = set(capabilities.get("add") or [])
    missing = [c for c in profile.capabilities if c not in present]
    if missing:
        path = ("spec", "containers", training, "securityContext", "capabilities", "add")
        draft.list_at(*path).extend(missing)


def _set_annotations(draft: Draft, pod: Mapping[str, Any], profile: Profile) -> None:
    annotations = annotations_of(pod)
    for key, value in profile.annotations:
        have = annotations.get(key)
        if have is None:
            draft.dict_at("metadata", "annotations")[key] = value
        elif have != value:
            raise InvalidSetting(
                contract.FABRIC,
                profile.name,
                f"it sets annotation {key}={shown(value)}, the pod has {shown(have)}: remove "
                "it, or use a profile with the value you need",
            )


def _add_volume(
    draft: Draft, pod: Mapping[str, Any], profile: Profile, volume: dict[str, Any]
) -> None:
    for have in (pod.get("spec") or {}).get("volumes") or []:
        if have.get("name") == volume["name"] and have != volume:
            raise InvalidSetting(
                contract.FABRIC,
                profile.name,
                f"it adds volume {volume['name']} (hostPath {volume['hostPath']['path']}), the "
                "pod has another volume of that name: rename the pod's",
            )
    add_volume(draft, volume)


def sidecar_of(profile: Profile, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A profile's sidecar as the pod gets it: a native sidecar (an init container that keeps
    running beside training, stopped once training ends), marked as the profile's so the job's
    own env stays out of it."""
    container = copy.deepcopy(dict(spec))
    marker = {"name": contract.FABRIC_SIDECAR_ENV, "value": profile.name}
    container["env"] = [marker, *(container.get("env") or [])]
    container["restartPolicy"] = "Always"
    return container


def _add_sidecar(
    draft: Draft,
    pod: Mapping[str, Any],
    profile: Profile,
    spec: Mapping[str, Any],
    warnings: list[str],
) -> None:
    wanted = sidecar_of(profile, spec)
    pod_spec = pod.get("spec") or {}
    for field in ("initContainers", "containers"):
        for have in pod_spec.get(field) or []:
            if have.get("name") != wanted["name"]:
                continue
            if have != wanted:
                warnings.append(
                    f"{contract.FABRIC}: the pod's own container {wanted['name']} is kept in "
                    f"place of profile {profile.name}'s"
                )
            return
    if len(draft.root.get("spec", {}).get("initContainers") or []) >= MAX_INIT_CONTAINERS:
        raise Refused(
            f"spec.initContainers: profile {profile.name} adds sidecar {wanted['name']}, and a "
            f"training pod has at most {MAX_INIT_CONTAINERS} init containers"
        )
    draft.list_at("spec", "initContainers").append(wanted)
