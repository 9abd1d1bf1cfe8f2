"""The chart lints, and all it renders is valid Kubernetes for 1.29 and the newest release."""

from __future__ import annotations

import subprocess
import sys

import kubernetes_validate
import pytest
from yamllint import linter
from yamllint.config import YamlLintConfig

from tests.chart.rendering import (
    CHART,
    COMBINATIONS,
    NEWEST_KUBERNETES,
    OLDEST_KUBERNETES,
    REPO,
    helm,
    render,
    render_text,
    run_helm,
    validate_strictly,
)

# Kinds from CRDs that kubernetes-validate has no schema for; tests/chart checks their fields.
CRD_KINDS = {
    "cert-manager.io/v1": {"Certificate", "Issuer"},
    "monitoring.coreos.com/v1": {"ServiceMonitor", "PodMonitor", "PrometheusRule"},
}


@pytest.mark.parametrize("major", ["3", "4"])
def test_chart_passes_helm_lint_strict_under_helm_3_and_4(major: str) -> None:
    result = subprocess.run(
        [helm(major), "lint", "--strict", str(CHART)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout


def test_helm_lint_strict_fails_on_values_the_schema_refuses() -> None:
    result = run_helm(["lint", "--strict", str(CHART)], {"webhook": {"replicas": "two"}})
    assert result.returncode != 0
    assert (
        "webhook.replicas: Invalid type. Expected: integer, given: string"
        in result.stdout + result.stderr
    )


@pytest.mark.parametrize("kube_version", [OLDEST_KUBERNETES, NEWEST_KUBERNETES])
@pytest.mark.parametrize("combination", sorted(COMBINATIONS))
def test_every_rendered_manifest_passes_strict_kubernetes_validation(
    combination: str, kube_version: str
) -> None:
    rendered = render(COMBINATIONS[combination], kube_version=kube_version)
    checked = 0
    for document in rendered.documents:
        if document["kind"] in CRD_KINDS.get(document["apiVersion"], set()):
            continue
        try:
            validate_strictly(document, kube_version)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(f"{document['kind']}/{document['metadata']['name']}: {error.message}")
        checked += 1
    assert checked >= 8


def test_strict_validation_catches_a_field_kubernetes_does_not_have() -> None:
    service = render().named("Service", "trainhook-webhook")
    broken = {**service, "spec": {**service["spec"], "publishNotReady": True}}
    with pytest.raises(kubernetes_validate.ValidationError, match="publishNotReady"):
        validate_strictly(broken, NEWEST_KUBERNETES)


def test_the_validate_command_accepts_the_default_rendering(tmp_path) -> None:
    manifests = tmp_path / "trainhook.yaml"
    manifests.write_text(render_text())
    for kube_version in (OLDEST_KUBERNETES, NEWEST_KUBERNETES):
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "kubernetes_validate",
                "--strict",
                "--quiet",
                "-k",
                kube_version,
                str(manifests),
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("combination", sorted(COMBINATIONS))
def test_rendered_manifests_pass_yamllint(combination: str) -> None:
    config = YamlLintConfig(file=str(REPO / "charts" / "yamllint.yaml"))
    problems = list(linter.run(render_text(COMBINATIONS[combination]), config))
    assert [f"{p.line}:{p.column} {p.message} ({p.rule})" for p in problems] == []


def test_chart_sources_pass_yamllint() -> None:
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "yamllint",
            "--strict",
            "-c",
            str(REPO / "charts" / "yamllint.yaml"),
            str(CHART / "values.yaml"),
            str(CHART / "Chart.yaml"),
            str(REPO / "examples" / "argocd"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout
