"""`make demo`: every example through the real admission path, on this machine.

1. `trainhook certs generate` makes a development CA and serving certificate in certs/.
2. `trainhook serve` runs under gunicorn on 127.0.0.1 with TLS, reading sibling workloads from
   a Kubernetes API emulator (the one the tests use) through its watch-backed cache.
3. Each example is applied the way the API server admits it: its workloads are sent as
   AdmissionReviews over TLS verified against the CA, patched and stored one after the other;
   StatefulSets are admitted once more as the sweeper's topology pass updates them; then the
   pods their controllers would create are sent, and the returned patches applied.
4. The pods of every job are shown, and checked against `trainhook render`, the offline path.
5. One job's life is played through a real `trainhook sweep` process against the emulator,
   `trainhook status` showing it at each step: its pods run, a rank fails, the sweeper restarts
   the whole job, and it succeeds (scripts/demo_sweeper.py says how).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.demo_sweeper import play_a_job  # noqa: E402
from tests.support.emulator import emulator, kubeconfig  # noqa: E402
from tests.support.reviews import (  # noqa: E402
    EmulatedApi,
    admit_job,
    encoded,
    example_documents,
    patched,
)
from tests.support.serving import serving  # noqa: E402
from webhook.core import contract  # noqa: E402
from webhook.core.frameworks import FRAMEWORKS  # noqa: E402
from webhook.core.job.settings import read_settings  # noqa: E402
from webhook.core.objects import annotations_of  # noqa: E402
from webhook.core.render import (  # noqa: E402
    DEFAULT_NAMESPACE,
    RenderedPod,
    render,
    table,
    training_env,
)

CERTS = ROOT / "certs"
SERVICE, NAMESPACE = "trainhook", "trainhook-system"


def main() -> int:
    generate = ["certs", "generate", f"--out={CERTS}", f"--service={SERVICE}"]
    subprocess.run(
        [sys.executable, "-m", "webhook.cli", *generate, f"--namespace={NAMESPACE}"],
        check=True,
        capture_output=True,
    )
    print(f"certificates: {CERTS.relative_to(ROOT)}/ca.crt signs tls.crt for {SERVICE}.{NAMESPACE}")
    with tempfile.TemporaryDirectory(prefix="trainhook-demo-") as scratch, emulator() as api:
        # The emulated cluster serves Kubernetes' own PodGroup (1.37's beta), as a cluster must
        # for the example that gangs its pods with it (examples/jax-kubernetes-gang.yaml).
        api.serve("scheduling.k8s.io/v1beta1/podgroups", "PodGroup")
        api.emulator.keep_requests = False  # kmock's log for its DSL, unused here
        config = kubeconfig(Path(scratch) / "kubeconfig", api.url)
        log = Path(scratch) / "serve.log"
        try:
            with serving(CERTS, log, "--lookup", env={"KUBECONFIG": str(config)}) as webhook:
                print(
                    f"trainhook serve: https://127.0.0.1:{webhook.port}/mutate (gunicorn, TLS), "
                    f"sibling lookup from the API emulator at {api.url}\n"
                )
                connection = webhook.connect()

                def send(document: dict[str, Any]) -> dict[str, Any]:
                    status, answer, _ = webhook.post(encoded(document), connection=connection)
                    if status != 200:
                        raise SystemExit(f"the webhook answered {status}: {answer}")
                    return answer

                mismatches = _show_examples(send, EmulatedApi(api))
                connection.close()
                if mismatches:
                    print(
                        f"differs from `trainhook render`: {', '.join(mismatches)}",
                        file=sys.stderr,
                    )
                    return 1
                print(
                    "Every pod is identical to what `trainhook render examples/` makes offline.\n"
                )
                play_a_job(api, webhook, config, Path(scratch))
                admissions = _admissions(webhook.get("/metrics")[1])
        except (OSError, RuntimeError, SystemExit) as error:
            print(f"demo failed: {error}\nserver log:\n{log.read_text()}", file=sys.stderr)
            return 1
    print(f"{admissions}; the server has stopped.")
    return 0


def _show_examples(send: Callable[[dict[str, Any]], dict[str, Any]], api: EmulatedApi) -> list[str]:
    mismatches = []
    for name, documents in example_documents():
        admitted = admit_job(documents, send, api)
        pods: list[RenderedPod] = []
        for created, answer in admitted.pods:
            if not answer["response"]["allowed"]:
                raise SystemExit(f"{name}: {answer['response']['status']['message']}")
            pods.append(_rendered(patched(created, answer), answer["response"].get("warnings", [])))
        print(f"examples/{name}: {len(admitted.workloads)} workload(s), {len(pods)} pod(s)")
        print(table(pods) + "\n")
        for pod in pods:
            for warning in pod.warnings:
                print(f"  warning: {pod.name}: {warning}")
        served = {pod.name: pod.pod for pod in pods}
        if served != {rendered.name: rendered.pod for rendered in render(documents)}:
            mismatches.append(name)
    return mismatches


def _rendered(pod: dict[str, Any], warnings: list[str]) -> RenderedPod:
    labels = pod["metadata"]["labels"]
    framework = FRAMEWORKS[labels[contract.FRAMEWORK]]
    return RenderedPod(
        pod=pod,
        framework=framework,
        namespace=pod["metadata"].get("namespace") or DEFAULT_NAMESPACE,
        job=labels[contract.JOB],
        role=labels[contract.ROLE],
        index=int(labels[contract.ROLE_INDEX]),
        rank=int(labels[contract.RANK]),
        env=training_env(pod),
        warnings=warnings,
        settings=read_settings(annotations_of(pod), framework),
    )


def _admissions(metrics: str) -> str:
    counts: dict[str, float] = {}
    for result, value in re.findall(
        r'^trainhook_admissions_total\{[^}]*result="(\w+)"\} (\S+)$', metrics, re.MULTILINE
    ):
        counts[result] = counts.get(result, 0) + float(value)
    total = int(sum(counts.values()))
    parts = ", ".join(f"{int(n)} {result}" for result, n in sorted(counts.items()))
    return f"{total} admissions over TLS ({parts})"


if __name__ == "__main__":
    sys.exit(main())
