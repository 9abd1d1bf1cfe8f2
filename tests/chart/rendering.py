"""Render the chart with a real helm binary and look things up in what it renders."""

from __future__ import annotations

import base64
import datetime
import functools
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate
import kubernetes_validate.utils
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "trainhook"
RELEASE = "trainhook"
NAMESPACE = "trainhook"

# The oldest Kubernetes the rendered manifests are validated for, and the newest schema there is.
OLDEST_KUBERNETES = "1.29.0"
NEWEST_KUBERNETES = "1.37.0"

POD_OWNERS = ("Deployment", "Job", "Pod")

Document = dict[str, Any]


@functools.cache
def helm(major: str = "3") -> str:
    """The path of a cached helm binary of that major version (downloaded on first use)."""
    fetched = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "fetch-helm"), major],
        capture_output=True,
        text=True,
        check=False,
    )
    if fetched.returncode != 0:
        raise RuntimeError(f"scripts/fetch-helm {major} failed:\n{fetched.stderr}")
    return fetched.stdout.strip()


def run_helm(
    args: list[str], values: Mapping[str, Any] | None, major: str = "3"
) -> subprocess.CompletedProcess[str]:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values_file:
        json.dump(dict(values or {}), values_file)
        values_file.flush()
        return subprocess.run(
            [helm(major), *args, "--values", values_file.name],
            capture_output=True,
            text=True,
            check=False,
        )


# kubernetes-validate re-reads its JSON schema files on every call; they never change, so read
# each once. Validation itself is the library's own (Draft 2020-12, strict schemas).
kubernetes_validate.utils.schema_contents = functools.cache(
    kubernetes_validate.utils.schema_contents
)


def validate_strictly(document: Document, kube_version: str) -> None:
    """kubernetes-validate --strict for one object; raises kubernetes_validate.ValidationError."""
    kubernetes_validate.validate(document, kube_version, strict=True)


@dataclass(frozen=True)
class Rendered:
    documents: tuple[Document, ...]

    def of_kind(self, kind: str) -> list[Document]:
        return [d for d in self.documents if d["kind"] == kind]

    def named(self, kind: str, name: str) -> Document:
        found = [d for d in self.of_kind(kind) if d["metadata"]["name"] == name]
        assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
        return found[0]

    def one(self, kind: str) -> Document:
        found = self.of_kind(kind)
        assert len(found) == 1, (
            f"expected one {kind}, found {[d['metadata']['name'] for d in found]}"
        )
        return found[0]

    def names(self, kind: str) -> set[str]:
        return {d["metadata"]["name"] for d in self.of_kind(kind)}

    def pod_specs(self) -> Iterator[tuple[str, Document]]:
        """("Kind/name", pod spec) of every pod the chart runs, hooks and tests included."""
        for document in self.documents:
            kind = document["kind"]
            if kind == "Pod":
                yield f"Pod/{document['metadata']['name']}", document["spec"]
            elif kind in POD_OWNERS:
                yield f"{kind}/{document['metadata']['name']}", document["spec"]["template"]["spec"]

    def webhook_hook(self) -> Document:
        hooks: list[Document] = self.one("MutatingWebhookConfiguration")["webhooks"]
        assert len(hooks) == 1
        return hooks[0]

    def container(self, kind: str, name: str) -> Document:
        containers: list[Document] = self.named(kind, name)["spec"]["template"]["spec"][
            "containers"
        ]
        assert len(containers) == 1
        return containers[0]


def template_args(kube_version: str, release: str, namespace: str) -> list[str]:
    return [
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--kube-version",
        kube_version,
    ]


@functools.lru_cache(maxsize=64)
def _render(values_json: str, kube_version: str, release: str, namespace: str) -> Rendered:
    result = run_helm(template_args(kube_version, release, namespace), json.loads(values_json))
    if result.returncode != 0:
        raise AssertionError(f"helm template failed:\n{result.stderr}")
    documents = tuple(d for d in yaml.safe_load_all(result.stdout) if d)
    return Rendered(documents)


def render(
    values: Mapping[str, Any] | None = None,
    *,
    kube_version: str = OLDEST_KUBERNETES,
    release: str = RELEASE,
    namespace: str = NAMESPACE,
) -> Rendered:
    """The chart rendered by `helm template` with these values (cached per arguments)."""
    return _render(json.dumps(values or {}, sort_keys=True), kube_version, release, namespace)


def render_text(
    values: Mapping[str, Any] | None = None, *, kube_version: str = OLDEST_KUBERNETES
) -> str:
    result = run_helm(template_args(kube_version, RELEASE, NAMESPACE), values)
    assert result.returncode == 0, result.stderr
    return result.stdout


def render_error(values: Mapping[str, Any], major: str = "3") -> str:
    """helm's error output for values the chart must refuse."""
    result = run_helm(template_args(OLDEST_KUBERNETES, RELEASE, NAMESPACE), values, major)
    assert result.returncode != 0, f"helm accepted {values}"
    return result.stderr


def _ca_bundle() -> str:
    """base64 of a real self-signed CA certificate (PEM), as certificates.secret.caBundle wants."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trainhook test CA")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return base64.b64encode(certificate.public_bytes(serialization.Encoding.PEM)).decode()


CA_BUNDLE = _ca_bundle()

# Value combinations every rendered manifest is validated for: each certificate mode, and
# settings that switch parts of the chart on, off or to another shape.
COMBINATIONS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "cert-manager": {
        "certificates": {"mode": "certManager"},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}},
        "clusterDomain": "cluster.local",
        "webhookConfiguration": {
            "matchConditions": [
                {
                    "name": "not-node",
                    "expression": "!request.userInfo.username.startsWith('system:node:')",
                }
            ]
        },
    },
    "cert-manager-cluster-issuer": {
        "certificates": {
            "mode": "certManager",
            "certManager": {"issuerRef": {"name": "corp-ca", "kind": "ClusterIssuer"}},
        },
        "priorityClassName": "system-cluster-critical",
        "imagePullSecrets": [{"name": "regcred"}],
        "image": {"digest": "sha256:" + "ab" * 32},
    },
    "existing-secret": {
        "certificates": {
            "mode": "secret",
            "secret": {"name": "trainhook-tls", "caBundle": CA_BUNDLE},
        },
        "namespaces": ["ml"],
        "webhook": {"lookup": False},
    },
    "single-replica": {
        "webhook": {
            "replicas": 1,
            "podDisruptionBudget": {"enabled": False},
            "topologySpread": {"enabled": False},
        },
        "sweeper": {"enabled": False},
        "helmTest": {"enabled": False},
        "uninstallHook": {"enabled": False},
        "webhookConfiguration": {"failurePolicy": "Ignore"},
    },
    "scoped-and-observed": {
        "namespaces": ["ml", "vision"],
        "networkPolicy": {
            "enabled": True,
            "apiServer": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
            "extraIngress": [
                {
                    "namespaceSelector": {
                        "matchLabels": {"kubernetes.io/metadata.name": "monitoring"}
                    }
                }
            ],
        },
        "metrics": {
            "serviceMonitor": {"enabled": True},
            "prometheusRule": {"enabled": True, "labels": {"release": "prometheus"}},
            "grafanaDashboards": {"enabled": True, "labels": {"release": "prometheus"}},
        },
        "image": {"registry": "registry.example.com:5000", "repository": "ml/trainhook"},
        "webhook": {
            "serviceAccount": {
                "annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/trainhook"}
            },
            "extraArgs": ["--log-level=debug"],
            "extraEnv": [{"name": "HTTPS_PROXY", "value": "http://proxy.example.com:3128"}],
            "extraVolumes": [{"name": "corp-ca", "configMap": {"name": "corp-ca"}}],
            "extraVolumeMounts": [{"name": "corp-ca", "mountPath": "/etc/corp-ca"}],
            "readinessProbe": {"periodSeconds": 2, "failureThreshold": 3},
            "livenessProbe": {"initialDelaySeconds": 30},
        },
        "sweeper": {
            "serviceAccount": {"create": False, "name": "platform-sweeper"},
            "extraEnv": [{"name": "TZ", "value": "UTC"}],
            "extraVolumes": [{"name": "scratch", "emptyDir": {}}],
            "extraVolumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
            "podDisruptionBudget": {"maxUnavailable": "50%"},
        },
    },
    "no-rbac": {
        "rbac": {"create": False},
        "webhook": {"serviceAccount": {"create": False, "name": "platform-webhook"}},
    },
    "platform-assigned-ids": {
        "fullnameOverride": "ml-hook",
        "commonLabels": {"team": "ml-platform"},
        "securityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
        "webhook": {
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "infra", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {"key": "node-role", "operator": "In", "values": ["infra"]}
                                ]
                            }
                        ]
                    }
                }
            },
            "podLabels": {"team": "ml-platform"},
            "podAnnotations": {"example.com/scrape": "true"},
            "topologySpread": {"whenUnsatisfiable": "DoNotSchedule"},
        },
        "webhookConfiguration": {
            "namespaceSelector": {
                "excludeNamespaces": ["kube-system", "monitoring"],
                "matchLabels": {"trainhook.io/enabled": "true"},
                "matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["system"]}],
            },
            "objectSelector": {
                "matchLabels": {"team": "ml"},
                "matchExpressions": [{"key": "trainhook.io/skip", "operator": "DoesNotExist"}],
            },
            "labels": {"team": "ml-platform"},
            "annotations": {"example.com/owner": "ml-platform"},
        },
    },
}
