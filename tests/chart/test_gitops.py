"""The Argo CD examples agree with the chart, the jobs and docs/gitops.md."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jq
import jsonschema
import pytest
import yaml

from tests.chart.rendering import CHART, NEWEST_KUBERNETES, REPO, render, validate_strictly
from webhook.core import contract
from webhook.core.render import render as render_pods

ARGOCD = REPO / "examples" / "argocd"
DOC = (REPO / "docs" / "gitops.md").read_text()


def application(name: str) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load((ARGOCD / name).read_text())
    assert (document["apiVersion"], document["kind"]) == ("argoproj.io/v1alpha1", "Application")
    return document


def wave(app: dict[str, Any]) -> int:
    return int(app["metadata"].get("annotations", {}).get("argocd.argoproj.io/sync-wave", "0"))


def matches(expression: str, obj: dict[str, Any]) -> list[list[Any]]:
    """The paths Argo CD's ignoreDifferences would ignore in `obj` for a jqPathExpression."""
    found: list[list[Any]] = jq.compile(f"[path({expression})]").input_value(obj).first()
    return found


TRAINHOOK = application("trainhook.yaml")
JOBS = application("training-jobs.yaml")
ROOT = application("root.yaml")


def chart_as_argo_renders_it() -> Any:
    helm = TRAINHOOK["spec"]["source"].get("helm", {})
    return render(
        helm.get("valuesObject"),
        release=helm.get("releaseName", TRAINHOOK["metadata"]["name"]),
        namespace=TRAINHOOK["spec"]["destination"]["namespace"],
    )


def job_documents() -> list[dict[str, Any]]:
    path = REPO / JOBS["spec"]["source"]["path"]
    return [d for f in sorted(path.glob("*.yaml")) for d in yaml.safe_load_all(f.read_text()) if d]


def test_the_parent_application_syncs_the_chart_before_the_jobs() -> None:
    assert (REPO / ROOT["spec"]["source"]["path"]) == ARGOCD
    assert ROOT["spec"]["source"]["directory"]["include"] == "{trainhook.yaml,training-jobs.yaml}"
    assert wave(TRAINHOOK) < wave(JOBS)


def test_the_chart_application_installs_this_chart_with_values_the_schema_accepts() -> None:
    source = TRAINHOOK["spec"]["source"]
    assert REPO / source["path"] == CHART
    schema = json.loads((CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    values = {**defaults, **source["helm"]["valuesObject"]}
    for key, override in source["helm"]["valuesObject"].items():
        values[key] = {**defaults[key], **override} if isinstance(override, dict) else override
    assert list(jsonschema.Draft7Validator(schema).iter_errors(values)) == []
    assert values["certificates"]["mode"] == "self"


def test_the_ca_bundle_exception_names_the_rendered_configuration_and_its_ca_bundle_field() -> None:
    configuration = chart_as_argo_renders_it().one("MutatingWebhookConfiguration")
    (ignored,) = TRAINHOOK["spec"]["ignoreDifferences"]
    assert (ignored["group"], ignored["kind"]) == (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    )
    assert ignored["name"] == configuration["metadata"]["name"]
    (expression,) = ignored["jqPathExpressions"]
    live = json.loads(json.dumps(configuration))
    live["webhooks"][0]["clientConfig"]["caBundle"] = "TElWRQ=="  # what the webhook writes
    assert matches(expression, live) == [["webhooks", 0, "clientConfig", "caBundle"]]
    # Before the webhook wrote it, the same single field, and nothing else, is ignored.
    assert matches(expression, configuration) == [["webhooks", 0, "clientConfig", "caBundle"]]
    assert "RespectIgnoreDifferences=true" in TRAINHOOK["spec"]["syncPolicy"]["syncOptions"]


def test_finished_statefulsets_keep_zero_replicas_and_running_ones_still_scale_from_git() -> None:
    (ignored, _) = JOBS["spec"]["ignoreDifferences"]
    assert (ignored["group"], ignored["kind"]) == ("apps", "StatefulSet")
    (expression,) = ignored["jqPathExpressions"]
    assert f'.metadata.annotations["{contract.PHASE}"]' in expression
    (statefulset,) = [d for d in job_documents() if d["kind"] == "StatefulSet"]
    assert matches(expression, statefulset) == []
    finished = json.loads(json.dumps(statefulset))
    finished["metadata"]["annotations"] = {contract.PHASE: "Succeeded"}
    finished["spec"]["replicas"] = 0
    assert matches(expression, finished) == [["spec", "replicas"]]
    suspended = json.loads(json.dumps(statefulset))
    suspended["metadata"]["annotations"] = {contract.SUSPENDED_REPLICAS: "3"}
    suspended["spec"]["replicas"] = 0
    assert matches(expression, suspended) == [["spec", "replicas"]]
    assert "RespectIgnoreDifferences=true" in JOBS["spec"]["syncPolicy"]["syncOptions"]


def test_finished_indexed_jobs_stay_suspended_and_running_ones_follow_git() -> None:
    (_, ignored) = JOBS["spec"]["ignoreDifferences"]
    assert (ignored["group"], ignored["kind"]) == ("batch", "Job")
    (expression,) = ignored["jqPathExpressions"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "ernie", "annotations": {}},
        "spec": {"suspend": False, "completionMode": "Indexed", "completions": 2},
    }
    assert matches(expression, job) == []
    finished = json.loads(json.dumps(job))
    finished["metadata"]["annotations"] = {contract.PHASE: "Failed"}
    finished["spec"]["suspend"] = True
    assert matches(expression, finished) == [["spec", "suspend"]]
    suspended = json.loads(json.dumps(job))
    suspended["metadata"]["annotations"] = {contract.SUSPENDED_REPLICAS: "2"}
    suspended["spec"]["suspend"] = True
    assert matches(expression, suspended) == [["spec", "suspend"]]


def test_the_jobs_application_diffs_server_side_including_the_webhook() -> None:
    options = JOBS["metadata"]["annotations"]["argocd.argoproj.io/compare-options"].split(",")
    assert options == ["ServerSideDiff=true", "IncludeMutationWebhook=true"]
    # What makes that safe: the webhook declares it has no side effects.
    assert chart_as_argo_renders_it().webhook_hook()["sideEffects"] == "None"


def test_the_job_folder_holds_valid_labelled_jobs_that_render_into_pods() -> None:
    documents = job_documents()
    assert documents
    for document in documents:
        validate_strictly(document, NEWEST_KUBERNETES)
        assert contract.FRAMEWORK in document["metadata"]["labels"]
        assert contract.FRAMEWORK in document["spec"]["template"]["metadata"]["labels"]
    pods = render_pods(documents)
    assert [(pod.role, pod.rank) for pod in pods] == [("worker", 0), ("worker", 1)]
    assert pods[0].env["MASTER_ADDR"] == "gitops-ddp-0.gitops-ddp.default.svc"


def yaml_blocks(markdown: str) -> list[str]:
    return re.findall(r"```yaml\n(.*?)```", markdown, flags=re.S)


def test_every_yaml_snippet_in_the_gitops_guide_parses() -> None:
    blocks = yaml_blocks(DOC)
    assert len(blocks) == 5
    for block in blocks:
        assert isinstance(yaml.safe_load(block), dict)


@pytest.mark.parametrize(
    "expression",
    [
        TRAINHOOK["spec"]["ignoreDifferences"][0]["jqPathExpressions"][0],
        JOBS["spec"]["ignoreDifferences"][0]["jqPathExpressions"][0],
        JOBS["spec"]["ignoreDifferences"][1]["jqPathExpressions"][0],
        JOBS["metadata"]["annotations"]["argocd.argoproj.io/compare-options"],
    ],
)
def test_the_guide_shows_the_same_settings_as_the_examples(expression: str) -> None:
    assert expression in DOC


def test_the_guide_lists_every_file_of_the_examples_folder() -> None:
    files = sorted(
        str(p.relative_to(ARGOCD)) for p in ARGOCD.rglob("*") if p.suffix in (".yaml", ".lua")
    )
    assert files == [
        "argocd-cm-health.yaml",
        "jobs/pytorch-ddp.yaml",
        "root.yaml",
        "trainhook-health.lua",
        "trainhook.yaml",
        "training-jobs.yaml",
    ]
    for name in files:
        assert f"`{name}`" in DOC, name
    assert all(Path(ARGOCD / name).exists() for name in files)
