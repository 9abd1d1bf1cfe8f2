"""Check the whole admission route the way a user's training pod takes it, and name the hop
that fails.

1. this pod -> API server: read the MutatingWebhookConfiguration $WEBHOOK_CONFIG (its caBundle
   must be set);
2. API server -> webhook Service -> webhook: create a labelled PyTorch Pod (worker 1 of 2) in
   $TEST_NAMESPACE with a server-side dry run (dryRun=All: admission runs, nothing is stored);
3. the Pod the API server returns must carry its rank, world size and peers.

When the API server cannot reach the webhook, the check calls the webhook itself from this pod
(trusting only the caBundle) to tell a control plane that cannot reach pod IPs from a webhook
that is down. Retries for up to $WAIT_SECONDS (default 60) while the CA bundle, the webhook or
the route are not there yet. Runs in the cluster (`helm test`) or from a workstation with a
kubeconfig.
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

JOB = "trainhook-check"
EXPECTED = {"TRAINHOOK_RANK": "1", "TRAINHOOK_WORLD_SIZE": "2", "TRAINHOOK_ROLE": "worker"}
HOSTS = "TRAINHOOK_WORKER_HOSTS"
UNREACHABLE = (
    "connection refused",
    "no route to host",
    "i/o timeout",
    "context deadline exceeded",
    "no endpoints available",
    "connection reset",
    "network is unreachable",
    "EOF",
)


class NotYet(Exception):
    """A failure that may clear by itself (pods starting, a bundle being injected): retried."""


class Failed(Exception):
    """A failure that waiting does not fix."""


class Rejected(Exception):
    """The API server refused the dry-run create; the message is the API server's."""


def load_kubernetes_config() -> None:
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        config.load_incluster_config()
    else:
        config.load_kube_config()


def labelled_pod(namespace: str) -> dict[str, Any]:
    """Worker 1 of a two-worker PyTorch job, as a bare Pod carrying its own topology."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{JOB}-",
            "namespace": namespace,
            "labels": {
                "trainhook.io/framework": "pytorch",
                "trainhook.io/job": JOB,
                "trainhook.io/role": "worker",
                "trainhook.io/index": "1",
            },
            "annotations": {"trainhook.io/topology": '{"worker":2}'},
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "pytorch", "image": "registry.k8s.io/pause:3.10"}],
        },
    }


def endpoint(hook: Any) -> str:
    client_config = hook.client_config
    if client_config.url:
        return str(client_config.url)
    service = client_config.service
    host = f"{service.name}.{service.namespace}.svc"
    return f"https://{host}:{service.port or 443}{service.path or ''}"


def read_configuration(name: str) -> tuple[Any, str]:
    """Hop 1: the configuration and its caBundle (PEM)."""
    try:
        configuration = client.AdmissionregistrationV1Api().read_mutating_webhook_configuration(
            name
        )
    except client.ApiException as error:
        if error.status == 404:
            raise NotYet(f"this pod -> API server: MutatingWebhookConfiguration {name} does not "
                         "exist yet") from error  # fmt: skip
        raise Failed(f"this pod -> API server: cannot read MutatingWebhookConfiguration {name}: "
                     f"HTTP {error.status} {error.reason}") from error  # fmt: skip
    except OSError as error:
        raise NotYet(f"this pod -> API server: unreachable: {error}") from error
    if not configuration.webhooks:
        raise Failed(f"MutatingWebhookConfiguration {name} has no webhooks")
    hook = configuration.webhooks[0]
    bundle = hook.client_config.ca_bundle
    if not bundle:
        raise NotYet(f"MutatingWebhookConfiguration {name} has no caBundle yet")
    return hook, base64.b64decode(bundle).decode()


def api_message(error: client.ApiException) -> str:
    try:
        return str(json.loads(error.body).get("message") or error.reason)
    except (TypeError, ValueError, AttributeError):
        return str(error.body or error.reason)


def create_dry_run(namespace: str) -> dict[str, Any]:
    """Hop 2: the labelled Pod through the API server, which calls the webhook."""
    api = client.CoreV1Api()
    try:
        created = api.create_namespaced_pod(namespace, labelled_pod(namespace), dry_run="All")
    except client.ApiException as error:
        message = api_message(error)
        if error.status == 403 and "failed calling webhook" not in message:
            raise Failed(f"this pod -> API server: may not create Pods in {namespace}: "
                         f"{message}") from error  # fmt: skip
        if error.status == 404:
            raise Failed(f"this pod -> API server: namespace {namespace} does not exist: set "
                         "helmTest.namespace to a namespace the webhook serves") from error  # fmt: skip
        raise Rejected(message) from error
    except OSError as error:
        raise NotYet(f"this pod -> API server: unreachable: {error}") from error
    result: dict[str, Any] = client.ApiClient().sanitize_for_serialization(created)
    return result


def call_webhook_directly(hook: Any, bundle: str, namespace: str) -> str:
    """This pod -> webhook, as the API server would call it: '' when it answers, else why."""
    url = endpoint(hook)
    timeout = hook.timeout_seconds or 10
    uid = str(uuid.uuid4())
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": namespace,
            "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:trainhook:check"},
            "object": labelled_pod(namespace),
            "oldObject": None,
            "dryRun": True,
        },
    }
    request = urllib.request.Request(
        f"{url}?timeout={timeout}s",
        data=json.dumps(review).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
        method="POST",
    )
    try:
        context = ssl.create_default_context(cadata=bundle)
        with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
            answer = json.load(response).get("response") or {}
    except urllib.error.HTTPError as error:
        return f"it answered HTTP {error.code}"
    except (urllib.error.URLError, OSError, ssl.SSLError, ValueError) as error:
        return f"{url}: {getattr(error, 'reason', error)}"
    if answer.get("uid") != uid:
        return f"{url} answered something other than a review of uid {uid}"
    return ""


def diagnose(message: str, hook: Any, bundle: str, namespace: str) -> Exception:
    """Which hop a refusal of the API server points at."""
    if "denied the request" in message:
        return Failed(f"webhook: it refused the labelled test Pod: {message}")
    if "failed calling webhook" not in message:
        return Failed(f"API server: refused the labelled test Pod: {message}")
    if "x509" in message or "certificate" in message:
        return NotYet(
            "API server -> webhook: TLS failed, the caBundle does not verify the certificate the "
            f"webhook serves (a renewal or injection in progress, or a wrong bundle): {message}"
        )
    if any(marker in message for marker in UNREACHABLE):
        direct = call_webhook_directly(hook, bundle, namespace)
        if not direct:
            return Failed(
                "API server -> webhook Service: the API server cannot reach the webhook, but "
                f"this pod can ({endpoint(hook)} answered): the control plane cannot reach pod "
                "IPs on this cluster; install with webhook.hostNetwork.enabled=true, or open "
                f"the webhook's port to the control plane. The API server said: {message}"
            )
        return NotYet(
            "webhook: neither the API server nor this pod reaches it (are webhook pods "
            f"ready? kubectl get pods -l app.kubernetes.io/component=webhook): {direct}. "
            f"The API server said: {message}"
        )
    return NotYet(f"API server -> webhook: the call failed: {message}")


def check_pod(pod: dict[str, Any], namespace: str) -> str:
    """Hop 3: what the webhook wrote on the Pod."""
    container = pod["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in container.get("env") or []}
    if not any(name.startswith("TRAINHOOK_") for name in env):
        raise Failed(
            "API server -> webhook: the API server did not send the labelled test Pod to the "
            f"webhook (it came back without env): namespace {namespace} is left out by the "
            "configuration's namespaceSelector, objectSelector or matchConditions; set "
            "helmTest.namespace to a namespace the webhook serves"
        )
    wrong = {k: env.get(k) for k, v in EXPECTED.items() if env.get(k) != v}
    peers = (env.get(HOSTS) or "").split(",")
    if wrong or len(peers) != 2 or not all(peers):
        raise Failed(
            f"webhook: the test Pod came back with {wrong or {}} and {HOSTS}={env.get(HOSTS)!r}; "
            f"expected {EXPECTED} and two peers"
        )
    return (
        f"labelled Pod created through the API server in {namespace} (dry run): "
        f"rank {env['TRAINHOOK_RANK']} of world size {env['TRAINHOOK_WORLD_SIZE']}, "
        f"peers {','.join(peers)}"
    )


def check_once(name: str, namespace: str) -> str:
    hook, bundle = read_configuration(name)
    try:
        pod = create_dry_run(namespace)
    except Rejected as rejected:
        raise diagnose(str(rejected), hook, bundle, namespace) from rejected
    return check_pod(pod, namespace)


def main() -> int:
    name = os.environ["WEBHOOK_CONFIG"]
    namespace = os.environ.get("TEST_NAMESPACE") or "default"
    deadline = time.monotonic() + float(os.environ.get("WAIT_SECONDS", "60"))
    load_kubernetes_config()
    while True:
        try:
            print(check_once(name, namespace))
            return 0
        except Failed as reason:
            print(f"FAILED: {reason}", file=sys.stderr)
            return 1
        except NotYet as reason:
            if time.monotonic() >= deadline:
                print(f"FAILED: {reason}", file=sys.stderr)
                return 1
            print(f"waiting: {reason}", file=sys.stderr)
            time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
