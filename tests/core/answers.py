"""The webhook's answers for every example's workloads and pods, as AdmissionReview bodies.

`python -m tests.core.answers` records them into `example_answers.json`, which
`test_answers_unchanged.py` compares every later answer with, byte for byte. Each pod is admitted
as the API server sends it (field defaults, the service-account token volume with its random
name, owner references, the controller's labels), and a job's pods in order, so later pods of a
job find whatever the first one left cached.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from bench import reviews as bench_reviews
from webhook.core import jsoncodec
from webhook.core.job.workload import job_of
from webhook.core.mutation.workload_mutation import mutate_workload
from webhook.core.objects import labels_of
from webhook.core.render import expand
from webhook.server.admission import Context, review

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
RECORDED = Path(__file__).resolve().parent / "example_answers.json"


def example_documents() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    for path in sorted([*EXAMPLES.glob("*.yaml"), *EXAMPLES.glob("*/*.yaml")]):
        with open(path) as manifest:
            documents = [doc for doc in yaml.safe_load_all(manifest) if isinstance(doc, dict)]
        yield str(path.relative_to(EXAMPLES)), documents


def _as_served(pod: dict[str, Any], workload: dict[str, Any], ordinal: int) -> dict[str, Any]:
    """A controller's pod with what the API server adds before mutating webhooks see it; the
    token volume's name differs per pod, as the API server makes it."""
    pod = copy.deepcopy(pod)
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": workload["apiVersion"],
            "kind": workload["kind"],
            "name": workload["metadata"]["name"],
            "uid": f"0000-{workload['metadata']['name']}",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    token = f"kube-api-access-{ordinal:05d}"
    spec = pod["spec"]
    spec["volumes"] = [
        *spec.get("volumes", []),
        {"name": token, "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}},
    ]
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or []:
            container["volumeMounts"] = [
                *container.get("volumeMounts", []),
                {"name": token, "readOnly": True, "mountPath": "/var/run/secrets/sa"},
            ]
    spec.setdefault("enableServiceLinks", True)
    return pod


def _answer(obj: dict[str, Any], siblings: list[dict[str, Any]] | None = None) -> str:
    body = bench_reviews.review(obj)
    body["request"]["uid"] = "recorded"
    body["request"]["namespace"] = obj["metadata"].get("namespace") or "default"
    context = Context(lookup=_Fixed(siblings) if siblings is not None else None)
    answer = review(jsoncodec.dumps(body), "application/json", context)
    return jsoncodec.dumps(answer.body).decode()


class _Fixed:
    """A lookup that knows one job's workloads."""

    def __init__(self, workloads: list[dict[str, Any]]) -> None:
        self.workloads = workloads

    def siblings(
        self, namespace: str, job: str, *, exclude: tuple[str, str] | None = None
    ) -> list[dict[str, Any]]:
        return [
            w
            for w in self.workloads
            if job_of(w) == job and (w["kind"], w["metadata"]["name"]) != exclude
        ]

    def get(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        found = [w for w in self.workloads if (w["kind"], w["metadata"]["name"]) == (kind, name)]
        return found[0] if found else None

    def cached(self, namespace: str, kind: str, name: str) -> dict[str, Any] | None:
        return self.get(namespace, kind, name)


def example_answers() -> dict[str, str]:
    """Every example's answers, keyed by file, kind and name."""
    answers: dict[str, str] = {}
    for file, documents in example_documents():
        labelled = [d for d in documents if "trainhook.io/framework" in labels_of(d)]
        workloads = [d for d in labelled if d.get("kind") in ("StatefulSet", "Job")]
        for doc in labelled:
            name = doc["metadata"].get("name") or doc["metadata"].get("generateName")
            namespace = doc["metadata"].get("namespace") or "default"
            if doc["kind"] == "Pod":
                answers[f"{file} Pod {name}"] = _answer(doc)
                continue
            job = [w for w in workloads if job_of(w) == job_of(doc)]
            others = [w for w in job if w is not doc]
            answers[f"{file} {doc['kind']} {name}"] = _answer(doc, others)
            stored = copy.deepcopy(mutate_workload(doc, "CREATE", namespace, job).workload)
            for ordinal, pod in enumerate(expand(stored, namespace)):
                pod = _as_served(pod, stored, ordinal)
                answers[f"{file} Pod {pod['metadata']['name']}"] = _answer(pod)
    for case in bench_reviews.headline_cases():
        answers[f"bench {case.name}"] = _answer(case.object, case.siblings)
    return answers


if __name__ == "__main__":
    recorded = example_answers()
    RECORDED.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
    print(f"{len(recorded)} answers recorded into {RECORDED}", file=sys.stderr)
