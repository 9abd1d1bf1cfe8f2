"""The API server's side of a dry-run Pod create, for the helm test: it reads its
MutatingWebhookConfiguration, calls the webhook over TLS trusting only the caBundle (as
kube-apiserver does: AdmissionReview v1, `?timeout=`), applies the JSONPatch and answers with
the mutated Pod, or fails with the message kube-apiserver gives for each kind of failure.

Only what `helm test` calls is served: GET of one MutatingWebhookConfiguration and POST of a Pod
with `dryRun=All`. The namespaceSelector is matched on `kubernetes.io/metadata.name` and the
objectSelector on label existence, which is all the chart renders by default.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jsonpatch

CONFIGS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/"


class AdmittingApiServer:
    def __init__(self) -> None:
        self.configurations: dict[str, dict[str, Any]] = {}
        self.namespaces = {"default", "ml", "trainhook"}
        # A control plane that cannot reach the webhook's pods (GKE private clusters...).
        self.webhook_unreachable = False
        self.requests: list[str] = []

    def add_configuration(self, configuration: dict[str, Any]) -> None:
        self.configurations[configuration["metadata"]["name"]] = configuration

    # --- admission -----------------------------------------------------------------------

    def create_pod(self, namespace: str, pod: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if namespace not in self.namespaces:
            return 404, status(404, "NotFound", f'namespaces "{namespace}" not found')
        pod = json.loads(json.dumps(pod))
        pod["metadata"]["name"] = pod["metadata"].pop("generateName", "pod-") + "x7k2q"
        for configuration in self.configurations.values():
            for hook in configuration.get("webhooks") or []:
                if not selected(hook, namespace, pod):
                    continue
                failure = self.call(hook, namespace, pod)
                if isinstance(failure, tuple):
                    return failure
                pod = failure
        return 201, pod

    def call(
        self, hook: dict[str, Any], namespace: str, pod: dict[str, Any]
    ) -> dict[str, Any] | tuple[int, dict[str, Any]]:
        name = hook["name"]
        url = hook["clientConfig"]["url"]
        timeout = hook.get("timeoutSeconds", 10)
        target = f"{url}?timeout={timeout}s"

        def failed(reason: str) -> tuple[int, dict[str, Any]]:
            message = (
                f'Internal error occurred: failed calling webhook "{name}": failed to call '
                f'webhook: Post "{target}": {reason}'
            )
            return 500, status(500, "InternalError", message)

        if self.webhook_unreachable:
            return failed("context deadline exceeded")
        uid = str(uuid.uuid4())
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": uid,
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
                "requestResource": {"group": "", "version": "v1", "resource": "pods"},
                "namespace": namespace,
                "operation": "CREATE",
                "userInfo": {"username": "system:serviceaccount:trainhook:trainhook-test"},
                "object": pod,
                "oldObject": None,
                "dryRun": True,
                "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
            },
        }
        bundle = base64.b64decode(hook["clientConfig"].get("caBundle") or "").decode()
        context = ssl.create_default_context(cadata=bundle or None)
        request = urllib.request.Request(
            target,
            data=json.dumps(review).encode(),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
                answer = json.load(response)["response"]
        except urllib.error.URLError as error:
            reason = error.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                return failed(
                    "tls: failed to verify certificate: x509: certificate signed by unknown "
                    "authority"
                )
            if isinstance(reason, ConnectionRefusedError):
                host = urllib.parse.urlsplit(url).netloc
                return failed(f"dial tcp {host}: connect: connection refused")
            return failed(str(reason))
        assert answer["uid"] == uid
        if not answer["allowed"]:
            message = (answer.get("status") or {}).get("message", "")
            return 400, status(
                400, "BadRequest", f'admission webhook "{name}" denied the request: {message}'
            )
        if answer.get("patch"):
            patch = json.loads(base64.b64decode(answer["patch"]))
            pod = jsonpatch.apply_patch(pod, patch)
        return pod


def selected(hook: dict[str, Any], namespace: str, pod: dict[str, Any]) -> bool:
    for expression in (hook.get("namespaceSelector") or {}).get("matchExpressions") or []:
        assert expression["key"] == "kubernetes.io/metadata.name"
        inside = namespace in expression["values"]
        if inside != (expression["operator"] == "In"):
            return False
    labels = pod["metadata"].get("labels") or {}
    for expression in (hook.get("objectSelector") or {}).get("matchExpressions") or []:
        assert expression["operator"] == "Exists"
        if expression["key"] not in labels:
            return False
    return True


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        api = self.server.api
        api.requests.append(f"GET {self.path}")
        path = urllib.parse.urlsplit(self.path).path
        name = path.removeprefix(CONFIGS)
        if path.startswith(CONFIGS) and name in api.configurations:
            self._answer(200, api.configurations[name])
        else:
            self._answer(404, status(404, "NotFound", f"{path} not found"))

    def do_POST(self) -> None:
        api = self.server.api
        api.requests.append(f"POST {self.path}")
        parts = urllib.parse.urlsplit(self.path)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        segments = parts.path.strip("/").split("/")
        if segments[:3] != ["api", "v1", "namespaces"] or segments[4:] != ["pods"]:
            self._answer(404, status(404, "NotFound", f"{parts.path} not found"))
            return
        if urllib.parse.parse_qs(parts.query).get("dryRun") != ["All"]:
            self._answer(400, status(400, "BadRequest", "only dry runs are served here"))
            return
        self._answer(*api.create_pod(segments[3], body))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: AdmittingApiServer) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api


@contextmanager
def admitting_api_server() -> Iterator[tuple[AdmittingApiServer, str]]:
    """The emulated API server and its http://127.0.0.1:PORT address; stopped on exit."""
    api = AdmittingApiServer()
    server = _Server(api)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
