"""The helm test and uninstall hook scripts, run as their pods run them, against a Kubernetes API
emulator (kmock) and, for the test, a real `trainhook serve` over TLS."""

from __future__ import annotations

import asyncio
import base64
import copy
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kmock
import pytest
import yaml
from kubernetes import client

from tests.chart.apiserver import AdmittingApiServer, admitting_api_server
from tests.chart.rendering import render
from tests.support.serving import serving
from webhook.certs.material import generate

NAMESPACE = "trainhook"


class ApiEmulator:
    """kmock's Kubernetes emulator on 127.0.0.1, served from a background thread."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.emulator = kmock.KubernetesEmulator()
        self.server = kmock.Server(self.emulator)

    def __enter__(self) -> ApiEmulator:
        self.thread.start()
        self._run(self.emulator.__aenter__())
        self._run(self.server.__aenter__())
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{self.server.port}"
        self.api = client.ApiClient(configuration)
        return self

    def __exit__(self, *exc: object) -> None:
        self._run(self.server.__aexit__(None, None, None))
        self._run(self.emulator.__aexit__(None, None, None))
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        self.loop.close()

    def _run(self, coroutine: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def kubeconfig(self, directory: Path) -> Path:
        path = directory / "kubeconfig"
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {"name": "emulator", "cluster": {"server": self.api.configuration.host}}
                    ],
                    "users": [{"name": "hook", "user": {"token": "not-checked"}}],
                    "contexts": [
                        {"name": "emulator", "context": {"cluster": "emulator", "user": "hook"}}
                    ],
                    "current-context": "emulator",
                }
            )
        )
        return path


@pytest.fixture
def api() -> Iterator[ApiEmulator]:
    with ApiEmulator() as emulator:
        yield emulator


def webhook_configuration(
    url: str, ca_bundle: bytes | None
) -> client.V1MutatingWebhookConfiguration:
    client_config: dict[str, Any] = {"url": url}
    if ca_bundle is not None:
        client_config["caBundle"] = base64.b64encode(ca_bundle).decode()
    return client.V1MutatingWebhookConfiguration.model_validate(
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "trainhook"},
            "webhooks": [
                {
                    "name": "mutate.trainhook.io",
                    "admissionReviewVersions": ["v1"],
                    "sideEffects": "None",
                    "timeoutSeconds": 5,
                    "clientConfig": client_config,
                }
            ],
        }
    )


def run_like_the_pod(
    pod_spec: dict[str, Any], kubeconfig: Path, **extra: str
) -> subprocess.CompletedProcess[str]:
    """The container's command with the chart's env (the downward API namespace filled in)."""
    container = pod_spec["containers"][0]
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    for variable in container["env"]:
        env[variable["name"]] = variable.get("value", NAMESPACE)
    env.update(KUBECONFIG=str(kubeconfig), **extra)
    program, *arguments = container["command"]
    assert program == "python"
    return subprocess.run(
        [sys.executable, *arguments],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def uninstall_pod() -> dict[str, Any]:
    spec: dict[str, Any] = render().named("Job", "trainhook-uninstall")["spec"]["template"]["spec"]
    return spec


def test_uninstall_hook_deletes_the_configuration_and_the_self_managed_secret_once(
    api: ApiEmulator, tmp_path: Path
) -> None:
    admission = client.AdmissionregistrationV1Api(api.api)
    core = client.CoreV1Api(api.api)
    admission.create_mutating_webhook_configuration(
        webhook_configuration("https://127.0.0.1:1/mutate", b"x")
    )
    core.create_namespaced_secret(
        NAMESPACE,
        client.V1Secret.model_validate(
            {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "trainhook-webhook-tls"}}
        ),
    )
    kubeconfig = api.kubeconfig(tmp_path)
    first = run_like_the_pod(uninstall_pod(), kubeconfig)
    assert first.returncode == 0, first.stderr
    assert first.stdout.splitlines() == [
        "deleted MutatingWebhookConfiguration trainhook",
        "deleted Secret trainhook/trainhook-webhook-tls",
    ]
    with pytest.raises(client.ApiException) as gone:
        admission.read_mutating_webhook_configuration("trainhook")
    assert gone.value.status == 404
    with pytest.raises(client.ApiException) as secret_gone:
        core.read_namespaced_secret("trainhook-webhook-tls", NAMESPACE)
    assert secret_gone.value.status == 404
    # Run again (a retried hook, or an uninstall after a manual cleanup): nothing left, no error.
    again = run_like_the_pod(uninstall_pod(), kubeconfig)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "MutatingWebhookConfiguration trainhook was already gone",
        "Secret trainhook/trainhook-webhook-tls was already gone",
    ]


@pytest.fixture(scope="module")
def running_webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, bytes]]:
    certs = tmp_path_factory.mktemp("hook-certs")
    generate(certs, "trainhook-webhook", NAMESPACE)
    with serving(
        certs, tmp_path_factory.mktemp("hook-serve") / "serve.log", "--workers=1"
    ) as webhook:
        yield webhook.port, (certs / "ca.crt").read_bytes()


def helm_test_pod(values: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = render(values).named("Pod", "trainhook-test")["spec"]
    return spec


def kubeconfig_for(server: str, directory: Path) -> Path:
    path = directory / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "cluster", "cluster": {"server": server}}],
                "users": [{"name": "test", "user": {"token": "not-checked"}}],
                "contexts": [
                    {"name": "cluster", "context": {"cluster": "cluster", "user": "test"}}
                ],
                "current-context": "cluster",
            }
        )
    )
    return path


def rendered_configuration(url: str, ca: bytes | None, values: dict[str, Any] | None = None):
    """The chart's MutatingWebhookConfiguration, its Service reference swapped for a URL."""
    configuration = copy.deepcopy(render(values).one("MutatingWebhookConfiguration"))
    client_config: dict[str, Any] = {"url": url}
    if ca is not None:
        client_config["caBundle"] = base64.b64encode(ca).decode()
    configuration["webhooks"][0]["clientConfig"] = client_config
    return configuration


@pytest.fixture
def apiserver() -> Iterator[tuple[AdmittingApiServer, str]]:
    with admitting_api_server() as served:
        yield served


def failure_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_helm_test_creates_a_labelled_pod_through_the_api_server_and_checks_rank_and_peers(
    apiserver: tuple[AdmittingApiServer, str],
    running_webhook: tuple[int, bytes],
    tmp_path: Path,
) -> None:
    api, address = apiserver
    port, ca = running_webhook
    api.add_configuration(rendered_configuration(f"https://127.0.0.1:{port}/mutate", ca))
    result = run_like_the_pod(helm_test_pod(), kubeconfig_for(address, tmp_path))
    assert result.returncode == 0, result.stderr
    peers = ",".join(f"trainhook-check-worker-{i}.trainhook-check.default.svc" for i in range(2))
    assert result.stdout.splitlines() == [
        "labelled Pod created through the API server in default (dry run): "
        f"rank 1 of world size 2, peers {peers}"
    ]
    assert api.requests == [
        "GET /apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/trainhook",
        "POST /api/v1/namespaces/default/pods?dryRun=All",
    ]


def test_helm_test_runs_in_the_first_served_namespace_when_a_namespace_list_is_set(
    apiserver: tuple[AdmittingApiServer, str],
    running_webhook: tuple[int, bytes],
    tmp_path: Path,
) -> None:
    api, address = apiserver
    port, ca = running_webhook
    values = {"namespaces": ["ml", "vision"]}
    api.add_configuration(rendered_configuration(f"https://127.0.0.1:{port}/mutate", ca, values))
    result = run_like_the_pod(helm_test_pod(values), kubeconfig_for(address, tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("labelled Pod created through the API server in ml ")


def test_helm_test_says_when_the_api_server_never_sends_the_pod_to_the_webhook(
    apiserver: tuple[AdmittingApiServer, str],
    running_webhook: tuple[int, bytes],
    tmp_path: Path,
) -> None:
    api, address = apiserver
    port, ca = running_webhook
    # The webhook serves only "ml"; the test was pointed at "default".
    api.add_configuration(
        rendered_configuration(f"https://127.0.0.1:{port}/mutate", ca, {"namespaces": ["ml"]})
    )
    pod = helm_test_pod({"helmTest": {"namespace": "default"}})
    result = run_like_the_pod(pod, kubeconfig_for(address, tmp_path), WAIT_SECONDS="0")
    assert failure_line(result) == (
        "FAILED: API server -> webhook: the API server did not send the labelled test Pod to "
        "the webhook (it came back without env): namespace default is left out by the "
        "configuration's namespaceSelector, objectSelector or matchConditions; set "
        "helmTest.namespace to a namespace the webhook serves"
    )


def test_helm_test_blames_the_control_plane_route_when_only_the_api_server_cannot_reach_it(
    apiserver: tuple[AdmittingApiServer, str],
    running_webhook: tuple[int, bytes],
    tmp_path: Path,
) -> None:
    api, address = apiserver
    port, ca = running_webhook
    api.add_configuration(rendered_configuration(f"https://127.0.0.1:{port}/mutate", ca))
    api.webhook_unreachable = True
    result = run_like_the_pod(helm_test_pod(), kubeconfig_for(address, tmp_path))
    line = failure_line(result)
    assert line.startswith(
        "FAILED: API server -> webhook Service: the API server cannot reach the webhook, but "
        f"this pod can (https://127.0.0.1:{port}/mutate answered): the control plane cannot "
        "reach pod IPs on this cluster; install with webhook.hostNetwork.enabled=true"
    )
    target = f"https://127.0.0.1:{port}/mutate?timeout=5s"
    assert line.endswith(f'failed to call webhook: Post "{target}": context deadline exceeded')


def test_helm_test_says_when_neither_the_api_server_nor_the_pod_reaches_the_webhook(
    apiserver: tuple[AdmittingApiServer, str], running_webhook: tuple[int, bytes], tmp_path: Path
) -> None:
    api, address = apiserver
    _, ca = running_webhook
    api.add_configuration(rendered_configuration("https://127.0.0.1:1/mutate", ca))
    result = run_like_the_pod(helm_test_pod(), kubeconfig_for(address, tmp_path), WAIT_SECONDS="0")
    line = failure_line(result)
    assert line.startswith(
        "FAILED: webhook: neither the API server nor this pod reaches it (are webhook pods "
        "ready? kubectl get pods -l app.kubernetes.io/component=webhook): "
        "https://127.0.0.1:1/mutate: [Errno 111] Connection refused."
    )
    assert line.endswith("dial tcp 127.0.0.1:1: connect: connection refused")


def test_helm_test_names_tls_when_the_ca_bundle_is_not_the_webhook_ca(
    apiserver: tuple[AdmittingApiServer, str], running_webhook: tuple[int, bytes], tmp_path: Path
) -> None:
    api, address = apiserver
    port, _ = running_webhook
    other = tmp_path / "other-ca"
    generate(other, "trainhook-webhook", NAMESPACE)
    api.add_configuration(
        rendered_configuration(f"https://127.0.0.1:{port}/mutate", (other / "ca.crt").read_bytes())
    )
    result = run_like_the_pod(helm_test_pod(), kubeconfig_for(address, tmp_path), WAIT_SECONDS="0")
    line = failure_line(result)
    assert line.startswith(
        "FAILED: API server -> webhook: TLS failed, the caBundle does not verify the "
        "certificate the webhook serves"
    )
    assert line.endswith("x509: certificate signed by unknown authority")


def test_helm_test_waits_for_the_ca_bundle_and_names_what_is_missing(
    apiserver: tuple[AdmittingApiServer, str], tmp_path: Path
) -> None:
    api, address = apiserver
    api.add_configuration(rendered_configuration("https://127.0.0.1:1/mutate", None))
    result = run_like_the_pod(helm_test_pod(), kubeconfig_for(address, tmp_path), WAIT_SECONDS="0")
    assert failure_line(result) == (
        "FAILED: MutatingWebhookConfiguration trainhook has no caBundle yet"
    )


def test_helm_test_says_which_namespace_is_missing(
    apiserver: tuple[AdmittingApiServer, str], running_webhook: tuple[int, bytes], tmp_path: Path
) -> None:
    api, address = apiserver
    port, ca = running_webhook
    api.add_configuration(rendered_configuration(f"https://127.0.0.1:{port}/mutate", ca))
    pod = helm_test_pod({"helmTest": {"namespace": "research"}})
    result = run_like_the_pod(pod, kubeconfig_for(address, tmp_path), WAIT_SECONDS="0")
    assert failure_line(result) == (
        "FAILED: this pod -> API server: namespace research does not exist: set "
        "helmTest.namespace to a namespace the webhook serves"
    )


def test_helm_test_may_create_pods_only_in_its_namespace_and_only_while_it_runs() -> None:
    rendered = render({"namespaces": ["ml", "vision"]})
    role = rendered.named("Role", "trainhook-test")
    assert role["metadata"]["namespace"] == "ml"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]}]
    binding = rendered.named("RoleBinding", "trainhook-test")
    assert binding["metadata"]["namespace"] == "ml"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "trainhook-test", "namespace": "trainhook"}
    ]
    for document in (role, binding):
        assert document["metadata"]["annotations"]["helm.sh/hook"] == "test"
        assert "hook-succeeded" in document["metadata"]["annotations"]["helm.sh/hook-delete-policy"]


def test_helm_test_pod_is_kept_for_its_logs_and_its_permissions_are_removed() -> None:
    rendered = render()
    annotations = rendered.named("Pod", "trainhook-test")["metadata"]["annotations"]
    assert annotations == {
        "helm.sh/hook": "test",
        "helm.sh/hook-delete-policy": "before-hook-creation",
    }
    for kind in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
        policy = rendered.named(kind, "trainhook-test")["metadata"]["annotations"]
        assert policy["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"


def test_uninstall_hook_runs_before_deletion_with_its_permissions_created_first() -> None:
    rendered = render()
    weights = {}
    for document in rendered.documents:
        annotations = document["metadata"].get("annotations", {})
        if annotations.get("helm.sh/hook") == "pre-delete":
            weights[f"{document['kind']}/{document['metadata']['name']}"] = int(
                annotations["helm.sh/hook-weight"]
            )
    job_weight = weights.pop("Job/trainhook-uninstall")
    assert sorted(weights) == [
        "ClusterRole/trainhook-uninstall",
        "ClusterRoleBinding/trainhook-uninstall",
        "Role/trainhook-uninstall",
        "RoleBinding/trainhook-uninstall",
        "ServiceAccount/trainhook-uninstall",
    ]
    assert max(weights.values()) < job_weight
