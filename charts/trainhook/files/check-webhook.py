"""Call the Trainhook webhook the way the API server does, and check that it answers.

Reads the MutatingWebhookConfiguration named by $WEBHOOK_CONFIG, trusts only its caBundle, POSTs
an admission.k8s.io/v1 AdmissionReview (a dry-run CREATE of an unlabelled Pod in $NAMESPACE) to
the service or URL it names, and expects an allowed answer carrying the request's uid. Retries
for up to $WAIT_SECONDS (default 60) while the CA bundle or the server is not there yet.
Runs in the cluster (`helm test`) or from a workstation with a kubeconfig.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

from kubernetes import client, config


class NotYet(Exception):
    """A condition that may clear by itself: retried until the deadline."""


def load_kubernetes_config() -> None:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()


def endpoint(hook: Any) -> str:
    client_config = hook.client_config
    if client_config.url:
        return str(client_config.url)
    service = client_config.service
    host = f"{service.name}.{service.namespace}.svc"
    return f"https://{host}:{service.port or 443}{service.path or ''}"


def admission_review(uid: str, namespace: str) -> dict[str, Any]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "trainhook-check", "namespace": namespace},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}]},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "name": "trainhook-check",
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:trainhook:check"},
            "object": pod,
            "oldObject": None,
            "dryRun": True,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def check_once(name: str, namespace: str) -> str:
    configuration = client.AdmissionregistrationV1Api().read_mutating_webhook_configuration(name)
    if not configuration.webhooks:
        raise SystemExit(f"MutatingWebhookConfiguration {name} has no webhooks")
    hook = configuration.webhooks[0]
    bundle = hook.client_config.ca_bundle
    if not bundle:
        raise NotYet(f"MutatingWebhookConfiguration {name} has no caBundle yet")
    context = ssl.create_default_context(cadata=base64.b64decode(bundle).decode())
    url = endpoint(hook)
    timeout = hook.timeout_seconds or 10
    uid = str(uuid.uuid4())
    request = urllib.request.Request(
        f"{url}?timeout={timeout}s",
        data=json.dumps(admission_review(uid, namespace)).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    started = time.monotonic()
    try:
        with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
            body = json.load(response)
    except urllib.error.HTTPError as error:
        raise SystemExit(
            f"webhook {url} answered HTTP {error.code}: {error.read()[:200]!r}"
        ) from error
    except (urllib.error.URLError, OSError) as error:
        raise NotYet(f"webhook {url} unreachable: {getattr(error, 'reason', error)}") from error
    elapsed_ms = (time.monotonic() - started) * 1000
    answer = body.get("response") or {}
    if body.get("kind") != "AdmissionReview" or answer.get("uid") != uid:
        raise SystemExit(f"webhook {url} answered something other than a review of uid {uid}")
    if answer.get("allowed") is not True:
        reason = (answer.get("status") or {}).get("message", "no message")
        raise SystemExit(f"webhook {url} refused an unlabelled pod: {reason}")
    return f"webhook {url} answered in {elapsed_ms:.0f} ms: allowed, uid {uid}"


def main() -> int:
    name = os.environ["WEBHOOK_CONFIG"]
    namespace = os.environ.get("NAMESPACE", "default")
    deadline = time.monotonic() + float(os.environ.get("WAIT_SECONDS", "60"))
    load_kubernetes_config()
    while True:
        try:
            print(check_once(name, namespace))
            return 0
        except NotYet as reason:
            if time.monotonic() >= deadline:
                print(f"FAILED: {reason}", file=sys.stderr)
                return 1
            print(f"waiting: {reason}", file=sys.stderr)
            time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
