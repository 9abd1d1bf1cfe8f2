"""The nodes a job's restarts exclude, as the webhook writes them on each pod it admits: a
required node affinity keeping the pod off them, merged into the user's own, written once."""

from __future__ import annotations

import json
from typing import Any

import jsonpatch
import kubernetes_validate

from tests.core.test_pod_mutation import admit_pod, raw_pod
from tests.support.builders import statefulset
from webhook.core import contract
from webhook.core.job.node_exclusion import excluded_by
from webhook.core.mutation.admit import owner_to_resolve

RULES = "node-condition=GpuHealthy:False -> restart-job exclude-node"


def excluding(*nodes: str, policy: str = RULES, **spec: Any) -> dict[str, Any]:
    sts = statefulset("ddp", "pytorch", replicas=2, annotations={contract.FAILURE_POLICY: policy})
    sts["spec"]["template"]["spec"].update(spec)
    status = {"state": "Restarting", "restarts": 1, "excludedNodes": list(nodes)}
    sts["metadata"]["annotations"][contract.STATUS] = json.dumps(status)
    return sts


def required(pod: dict[str, Any]) -> Any:
    affinity = pod["spec"]["affinity"]["nodeAffinity"]
    return affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]


def test_a_pod_of_a_job_that_excludes_nodes_is_kept_off_them_by_a_required_affinity() -> None:
    sts = excluding("gpu-7", "gpu-3")
    pod = raw_pod(sts, 1)
    assert owner_to_resolve(pod) == ("StatefulSet", "ddp")  # read for its exclusions
    patched = jsonpatch.apply_patch(pod, admit_pod(pod, owner=sts).patch)
    assert required(patched) == [
        {
            "matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-3", "gpu-7"]}
            ]
        }
    ]
    kubernetes_validate.validate(patched, "1.32", strict=True)
    assert admit_pod(patched, owner=sts).patch == []  # admitted again: nothing more


def test_the_exclusion_joins_every_term_of_the_users_own_node_affinity() -> None:
    own = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["a100"]}]}
    other = {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["h100"]}]}
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [own, other]}
        }
    }
    sts = excluding("gpu-3", affinity=affinity)
    pod = raw_pod(sts, 0)
    patched = jsonpatch.apply_patch(pod, admit_pod(pod, owner=sts).patch)
    keep_off = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-3"]}
    assert required(patched) == [
        {"matchExpressions": [*own["matchExpressions"], keep_off]},
        {"matchExpressions": [*other["matchExpressions"], keep_off]},
    ]


def test_nothing_is_excluded_once_the_job_has_finished_or_without_the_modifier() -> None:
    sts = excluding("gpu-3")
    sts["metadata"]["annotations"][contract.PHASE] = "Succeeded"
    assert excluded_by(sts) == ()
    pod = raw_pod(sts, 0)
    patched = jsonpatch.apply_patch(pod, admit_pod(pod, owner=sts).patch)
    assert "affinity" not in patched["spec"]
    plain = excluding("gpu-3", policy="node-condition=GpuHealthy:False -> restart-job")
    assert owner_to_resolve(raw_pod(plain, 0)) is None  # stamped, nothing to read
