"""What a pod template needs to restart in place: the attempt files, a barrier, a restarter.

The sweeper restarts a job in place by writing the next attempt number on every pod
(`trainhook.io/attempt`). A downward API volume shows it to the pod as a file, updated live:

* the restarter, a native sidecar, exits with RESTART_EXIT_CODE when the attempt changes; its
  `restartPolicyRules` make the kubelet restart every container of the pod (RestartAllContainers,
  Kubernetes 1.35+, KEP-5532), init containers included, on the same node with the same IP;
* the barrier, the last init container, then waits until the sweeper has released that attempt
  (`trainhook.io/released-attempt`), which it does once every rank waits at its barrier: no rank
  starts training before all are on the same attempt;
* the training container reads the attempt from TRAINHOOK_ATTEMPT (empty before the first
  restart) or the file, to resume from its checkpoint.

Both helpers run `sh` from the training container's image, so they need no image of their own.
On a cluster without RestartAllContainers the restarter's exit restarts only itself; the sweeper
sees that the ranks do not reach their barriers and recreates the pods instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.job.failure_rules import RESTART_IN_PLACE, Rule
from webhook.core.shape.pods import add_volume, mount

RESTARTER: Final = "trainhook-restarter"
BARRIER: Final = "trainhook-barrier"
VOLUME: Final = "trainhook-attempt"
MOUNT_PATH: Final = "/etc/trainhook-attempt"
ATTEMPT_FILE: Final = f"{MOUNT_PATH}/attempt"
RELEASED_FILE: Final = f"{MOUNT_PATH}/released"
ATTEMPT_ENV: Final = "TRAINHOOK_ATTEMPT"
RESTART_EXIT_CODE: Final = 88
POLL_SECONDS: Final = 1
HELPER_RESOURCES: Final = {
    "requests": {"cpu": "10m", "memory": "16Mi"},
    "limits": {"memory": "32Mi"},
}

# The attempt as a number: an empty file (no restart yet) is attempt 0.
_READ = "a=$(cat {file} 2>/dev/null); a=${{a:-0}}"
RESTARTER_SCRIPT: Final = (
    f"{_READ.format(file=ATTEMPT_FILE)}; start=$a; "
    f"while sleep {POLL_SECONDS}; do {_READ.format(file=ATTEMPT_FILE)}; "
    f'[ "$a" = "$start" ] || exit {RESTART_EXIT_CODE}; done'
)
BARRIER_SCRIPT: Final = (
    f"while :; do {_READ.format(file=ATTEMPT_FILE)}; "
    f"r=$(cat {RELEASED_FILE} 2>/dev/null); r=${{r:-0}}; "
    f'[ "$r" -ge "$a" ] && exit 0; sleep {POLL_SECONDS}; done'
)


def wants_in_place(restart_policy: str | None, rules: tuple[Rule, ...] | None) -> bool:
    return restart_policy == "RestartJobInPlace" or any(
        rule.action == RESTART_IN_PLACE for rule in rules or ()
    )


def add_restart_plumbing(draft: Draft, template: Mapping[str, Any], training: int | None) -> None:
    """Add the attempt volume, the restarter and the barrier to a pod template (once)."""
    spec = template.get("spec") or {}
    containers = spec.get("containers") or []
    if not containers or any(
        c.get("name") in (RESTARTER, BARRIER) for c in spec.get("initContainers") or []
    ):
        return
    position = training if training is not None else 0
    trainer = containers[position]
    # The helpers run like the training container: its image, pull policy and security context
    # (a namespace that enforces the restricted Pod Security Standard admits them as it does it).
    same = {
        key: trainer[key]
        for key in ("image", "imagePullPolicy", "securityContext")
        if trainer.get(key) is not None
    }
    base = ("spec", "template", "spec")
    draft.list_at(*base, "volumes").append(
        {
            "name": VOLUME,
            "downwardAPI": {
                "items": [
                    _annotation_file("attempt", contract.ATTEMPT),
                    _annotation_file("released", contract.RELEASED_ATTEMPT),
                ]
            },
        }
    )
    restarter = {
        "name": RESTARTER,
        **same,
        "volumeMounts": [_mount()],
        "command": ["sh", "-c", RESTARTER_SCRIPT],
        "restartPolicy": "Always",
        "restartPolicyRules": [
            {
                "action": "RestartAllContainers",
                "exitCodes": {"operator": "In", "values": [RESTART_EXIT_CODE]},
            }
        ],
        "resources": _resources(),
    }
    barrier = {
        "name": BARRIER,
        **same,
        "volumeMounts": [_mount()],
        "command": ["sh", "-c", BARRIER_SCRIPT],
        "resources": _resources(),
    }
    # The restarter first, so it watches while the user's init containers run again; the
    # barrier last, so training starts as soon as it is released.
    init = draft.list_at(*base, "initContainers")
    init.insert(0, restarter)
    init.append(barrier)
    draft.list_at(*base, "containers", position, "volumeMounts").append(_mount())
    draft.list_at(*base, "containers", position, "env").append(
        {
            "name": ATTEMPT_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{contract.ATTEMPT}']"}},
        }
    )


def _mount() -> dict[str, Any]:
    return {"name": VOLUME, "mountPath": MOUNT_PATH, "readOnly": True}


def _resources() -> dict[str, Any]:
    """What each helper asks for: a shell that reads a file every second."""
    return {"requests": {"cpu": "10m", "memory": "16Mi"}, "limits": {"memory": "32Mi"}}


def _annotation_file(path: str, key: str) -> dict[str, Any]:
    return {"path": path, "fieldRef": {"fieldPath": f"metadata.annotations['{key}']"}}


# trainhook.io/checkpoint-on-stop: the same mechanism shows a pod the sweeper's request to save a
# checkpoint before a planned stop; the file holds the request's time, empty while none is open.
CHECKPOINT_VOLUME: Final = "trainhook-checkpoint"
CHECKPOINT_MOUNT_PATH: Final = "/etc/trainhook-checkpoint"
CHECKPOINT_FILE: Final = f"{CHECKPOINT_MOUNT_PATH}/requested"


def add_checkpoint_file(draft: Draft, pod: Mapping[str, Any], training: int | None) -> None:
    """Give a pod of a job with checkpoint-on-stop the request file, in its training container
    (once)."""
    if training is None:
        return
    add_volume(
        draft,
        {
            "name": CHECKPOINT_VOLUME,
            "downwardAPI": {
                "items": [_annotation_file("requested", contract.CHECKPOINT_REQUESTED)]
            },
        },
    )
    container = ((pod.get("spec") or {}).get("containers") or [])[training]
    mount(draft, "containers", training, container, CHECKPOINT_VOLUME, CHECKPOINT_MOUNT_PATH)


def remove_restart_plumbing(draft: Draft, template: dict[str, Any]) -> None:
    """Take the plumbing off a template whose job no longer restarts in place."""
    spec: dict[str, Any] = template.get("spec") or {}
    if not any(c.get("name") in (RESTARTER, BARRIER) for c in spec.get("initContainers") or []):
        return
    base = ("spec", "template", "spec")
    helpers = (RESTARTER, BARRIER)
    init = [c for c in spec.get("initContainers") or [] if c.get("name") not in helpers]
    draft.dict_at(*base)["initContainers"] = init
    if not init:
        del draft.dict_at(*base)["initContainers"]
    volumes = [v for v in spec.get("volumes") or [] if v.get("name") != VOLUME]
    draft.dict_at(*base)["volumes"] = volumes
    for position, container in enumerate(spec.get("containers") or []):
        mounts = container.get("volumeMounts") or []
        env = container.get("env") or []
        if any(m.get("name") == VOLUME for m in mounts):
            trainer = draft.dict_at(*base, "containers", position)
            trainer["volumeMounts"] = [m for m in mounts if m.get("name") != VOLUME]
            trainer["env"] = [e for e in env if e.get("name") != ATTEMPT_ENV]
