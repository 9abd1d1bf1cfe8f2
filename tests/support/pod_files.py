"""The files a rendered pod's training container sees, by path: what a script that `cat`s them
reads. Annotations projected by the downward API and the job's peers ConfigMap give their
content; a Secret the sweeper creates (the job's SSH keys) gives `<Secret NAME: KEY>`, its keys
as the sweeper writes them."""

from __future__ import annotations

import re

from webhook.certs.ssh import KeyPair
from webhook.core.render import RenderedPod
from webhook.sweeper import sshkeys

SSH_KEYS = tuple(
    sshkeys.secret_body(
        namespace="", name="", labels={}, owners=(), config="", keys=KeyPair("", "")
    )["data"]
)
FIELD = re.compile(r"metadata\.annotations\['(.+)'\]")


def pod_files(pod: RenderedPod, container: int = 0) -> dict[str, str]:
    spec = pod.pod["spec"]
    volumes = {volume["name"]: volume for volume in spec.get("volumes") or []}
    annotations = pod.pod["metadata"].get("annotations") or {}
    found: dict[str, str] = {}
    for mount in spec["containers"][container].get("volumeMounts") or []:
        volume = volumes[mount["name"]]
        base = mount["mountPath"].rstrip("/")
        if "downwardAPI" in volume:
            for item in volume["downwardAPI"]["items"]:
                match = FIELD.fullmatch(item.get("fieldRef", {}).get("fieldPath", ""))
                if match is not None:
                    found[f"{base}/{item['path']}"] = annotations[match.group(1)]
        elif "configMap" in volume and pod.peers is not None:
            if volume["configMap"]["name"] == pod.peers.name:
                items = volume["configMap"].get("items") or [
                    {"key": key, "path": key} for key in pod.peers.data
                ]
                for item in items:
                    found[f"{base}/{item['path']}"] = pod.peers.data[item["key"]]
        elif "secret" in volume and volume["secret"]["secretName"] == f"{pod.job}-ssh":
            for key in SSH_KEYS:
                found[f"{base}/{key}"] = f"<Secret {pod.job}-ssh: {key}>"
    return found
