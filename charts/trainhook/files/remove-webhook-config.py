"""Remove Trainhook's MutatingWebhookConfiguration before the rest of the release is deleted.

Deleting it first means no window in which the API server still sends labelled objects to a
webhook that is going away (with failurePolicy Fail they would be rejected). In self mode it
also deletes the Secret the webhook created for its certificate ($CERT_SECRET in $NAMESPACE),
which the release does not own. Objects already gone are fine: running it twice is harmless.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from kubernetes import client, config


def load_kubernetes_config() -> None:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()


def delete(what: str, call: Callable[[], Any]) -> None:
    try:
        call()
    except client.ApiException as error:
        if error.status != 404:
            raise SystemExit(
                f"could not delete {what}: HTTP {error.status} {error.reason}"
            ) from error
        print(f"{what} was already gone")
        return
    print(f"deleted {what}")


def main() -> int:
    name = os.environ["WEBHOOK_CONFIG"]
    secret = os.environ.get("CERT_SECRET", "")
    namespace = os.environ.get("NAMESPACE", "")
    load_kubernetes_config()
    admission = client.AdmissionregistrationV1Api()
    delete(
        f"MutatingWebhookConfiguration {name}",
        lambda: admission.delete_mutating_webhook_configuration(name),
    )
    if secret:
        core = client.CoreV1Api()
        delete(
            f"Secret {namespace}/{secret}",
            lambda: core.delete_namespaced_secret(secret, namespace),
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
