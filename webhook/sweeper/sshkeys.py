"""The MPI SSH Secret: a fresh key pair per job and an ssh config that trusts the job's hosts.

The Secret is mounted as a whole at the ~/.ssh of the pods' user (/root/.ssh, or
trainhook.io/ssh-auth-mount-path), so its keys are the file names ssh looks for.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from webhook.certs.ssh import KeyPair as KeyPair
from webhook.certs.ssh import new_key_pair as new_key_pair

PRIVATE_KEY = "id_ed25519"
PUBLIC_KEY = "id_ed25519.pub"
# The same key pair under the names mpi-operator mounts its keys by: the images built on its base
# images read ~/.ssh/id_rsa as their sshd's HostKey, and their scripts may name it. (mpi-operator's
# own id_rsa is an ECDSA key: sshd and ssh go by a key file's content, not its name.)
MPI_OPERATOR_PRIVATE_KEY = "id_rsa"
MPI_OPERATOR_PUBLIC_KEY = "id_rsa.pub"
AUTHORIZED_KEYS = "authorized_keys"
CONFIG = "config"


def host_patterns(namespace: str, services: Iterable[str]) -> list[str]:
    """Every name a pod of the job is reached by: `<pod>.<service>.<namespace>.svc[.<domain>]`."""
    patterns: list[str] = []
    for service in dict.fromkeys(services):
        patterns += [f"*.{service}.{namespace}.svc", f"*.{service}.{namespace}.svc.*"]
    return patterns


def ssh_config(patterns: Sequence[str], port: int) -> str:
    """Pods are created and replaced with new host keys all the time; trust the job's own hosts
    (and only those) without a known_hosts file, which could not be written on a Secret mount."""
    return (
        f"Host {' '.join(patterns)}\n"
        f"    Port {port}\n"
        # `~` is the home of the user ssh runs as: root's, or a non-root image user's.
        f"    IdentityFile ~/.ssh/{PRIVATE_KEY}\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        "    LogLevel ERROR\n"
    )


def secret_body(
    *,
    namespace: str,
    name: str,
    labels: Mapping[str, str],
    owners: Sequence[Mapping[str, Any]],
    config: str,
    keys: KeyPair,
) -> dict[str, Any]:
    files = {
        PRIVATE_KEY: keys.private,
        PUBLIC_KEY: keys.public,
        MPI_OPERATOR_PRIVATE_KEY: keys.private,
        MPI_OPERATOR_PUBLIC_KEY: keys.public,
        AUTHORIZED_KEYS: keys.public,
        CONFIG: config,
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels)}
    if owners:
        metadata["ownerReferences"] = [dict(owner) for owner in owners]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": metadata,
        "type": "Opaque",
        "data": {key: base64.b64encode(value.encode()).decode() for key, value in files.items()},
    }
