"""docs/gitops.md lists exactly the fields the webhook and the sweeper change on tracked objects.

The webhook's changes are what `trainhook render -o yaml` prints for the examples (and for a
workload that uses every setting) compared with the manifests as they are in Git; the sweeper's
are the patches of its own decisions for running, rescaled and finished jobs.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from tests.chart.rendering import REPO
from tests.support.stored import (
    indexed_job,
    owned,
    pod,
    stamped,
    statefulset,
    sweepers_ssh_secret,
)
from tests.sweeper.helpers import NOW, decision, of_type
from webhook.cli import main
from webhook.core import contract
from webhook.core.job import restart_in_place
from webhook.core.mutation.admit import Request, admit
from webhook.sweeper.actions import CreateSshSecret, Delete, Patch

DOC = (REPO / "docs" / "gitops.md").read_text()
WORKLOAD_KINDS = ("StatefulSet", "Job")

EVERY_SETTING = """
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: every-setting
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/port: "29500"
    trainhook.io/gpus: "2"
    trainhook.io/gpu-resource: nvidia.com/gpu
    trainhook.io/shm-size: 8Gi
    trainhook.io/scheduler: volcano
    trainhook.io/queue: research
    trainhook.io/container: trainer
    trainhook.io/nproc-per-node: "2"
    trainhook.io/elastic: "1:4"
    trainhook.io/max-restarts: "3"
    trainhook.io/placement-topology: cloud.example.com/rack
    trainhook.io/placement: preferred
    trainhook.io/placement-tier: "2"
    trainhook.io/report-progress: "true"
    trainhook.io/checkpoint-on-stop: 5m
    trainhook.io/fabric: aws-efa
spec:
  replicas: 2
  selector:
    matchLabels:
      app: every-setting
  template:
    metadata:
      labels:
        app: every-setting
    spec:
      containers:
        - name: trainer
          image: trainer:1
---
apiVersion: batch/v1
kind: Job
metadata:
  name: every-setting-job
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/port: "29500"
    trainhook.io/gpus: "2"
    trainhook.io/gpu-resource: nvidia.com/gpu
    trainhook.io/shm-size: 8Gi
    trainhook.io/scheduler: volcano
    trainhook.io/queue: research
    trainhook.io/container: trainer
    trainhook.io/nproc-per-node: "2"
    trainhook.io/elastic: "1:4"
    trainhook.io/max-restarts: "3"
    trainhook.io/placement-topology: cloud.example.com/rack
    trainhook.io/placement: preferred
    trainhook.io/placement-tier: "2"
    trainhook.io/report-progress: "true"
    trainhook.io/checkpoint-on-stop: 5m
    trainhook.io/fabric: aws-efa
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: trainer
          image: trainer:1
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: every-mpi-setting-worker
  labels:
    trainhook.io/framework: mpi
    trainhook.io/job: every-mpi-setting
    trainhook.io/role: worker
  annotations:
    trainhook.io/mpi-implementation: MPICH
    trainhook.io/ssh-auth-mount-path: /home/mpiuser/.ssh
    trainhook.io/compat: volcano
spec:
  replicas: 2
  selector:
    matchLabels:
      app: every-mpi-setting-worker
  template:
    metadata:
      labels:
        app: every-mpi-setting-worker
    spec:
      securityContext:
        runAsUser: 1000
      containers:
        - name: mpi
          image: trainer:1
---
apiVersion: batch/v1
kind: Job
metadata:
  name: every-mpi-setting-launcher
  labels:
    trainhook.io/framework: mpi
    trainhook.io/job: every-mpi-setting
    trainhook.io/role: launcher
  annotations:
    trainhook.io/mpi-implementation: MPICH
    trainhook.io/ssh-auth-mount-path: /home/mpiuser/.ssh
    trainhook.io/compat: volcano
spec:
  completionMode: Indexed
  completions: 1
  parallelism: 1
  template:
    spec:
      restartPolicy: OnFailure
      securityContext:
        runAsUser: 1000
      containers:
        - name: mpi
          image: trainer:1
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: every-kai-setting
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/scheduler: kai
    trainhook.io/placement-topology: cloud.example.com/rack
    trainhook.io/kai-topology: cluster-topology
    trainhook.io/gpus: "1"
    trainhook.io/preflight: nccl,dcgm
    trainhook.io/preflight-min-busbw: "40"
    trainhook.io/preflight-dcgm-level: "2"
    trainhook.io/preflight-every-attempt: "true"
    trainhook.io/nvlink-domain: "true"
spec:
  replicas: 1
  selector:
    matchLabels:
      app: every-kai-setting
  template:
    metadata:
      labels:
        app: every-kai-setting
    spec:
      containers:
        - name: trainer
          image: trainer:1
---
apiVersion: batch/v1
kind: Job
metadata:
  name: every-kai-setting-job
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/scheduler: kai
    trainhook.io/placement-topology: cloud.example.com/rack
    trainhook.io/kai-topology: cluster-topology
    trainhook.io/roles: worker
    trainhook.io/gpus: "1"
    trainhook.io/preflight: nccl,dcgm
    trainhook.io/preflight-min-busbw: "40"
    trainhook.io/preflight-dcgm-level: "2"
    trainhook.io/preflight-every-attempt: "true"
    trainhook.io/nvlink-domain: "true"
spec:
  completionMode: Indexed
  completions: 1
  parallelism: 1
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: trainer
          image: trainer:1
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: every-jax-setting
  labels:
    trainhook.io/framework: jax
  annotations:
    trainhook.io/tpu-slices: "2"
    trainhook.io/ssh-keys: "true"
spec:
  replicas: 4
  selector:
    matchLabels:
      app: every-jax-setting
  template:
    metadata:
      labels:
        app: every-jax-setting
    spec:
      containers:
        - name: trainer
          image: trainer:1
---
apiVersion: batch/v1
kind: Job
metadata:
  name: every-jax-setting-job
  labels:
    trainhook.io/framework: jax
  annotations:
    trainhook.io/tpu-slices: "2"
    trainhook.io/ssh-keys: "true"
spec:
  completionMode: Indexed
  completions: 4
  parallelism: 4
  template:
    spec:
      restartPolicy: OnFailure
      containers:
        - name: trainer
          image: trainer:1
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: every-in-place-setting
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/restart-policy: RestartJobInPlace
    trainhook.io/roles: worker
spec:
  replicas: 2
  selector:
    matchLabels:
      app: every-in-place-setting
  template:
    metadata:
      labels:
        app: every-in-place-setting
    spec:
      containers:
        - name: trainer
          image: trainer:1
          env:
            - name: EPOCHS
              value: "10"
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: every-in-place-rule
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/failure-policy: "exit=1-127 -> restart-in-place"
spec:
  replicas: 2
  selector:
    matchLabels:
      app: every-in-place-rule
  template:
    metadata:
      labels:
        app: every-in-place-rule
    spec:
      initContainers:
        - name: fetch-data
          image: trainer:1
      volumes:
        - name: data
          emptyDir: {}
      containers:
        - name: pytorch
          image: trainer:1
          volumeMounts:
            - name: data
              mountPath: /data
---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: every-node-rule
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/failure-policy: "node-taint=nvidia.com/gpu-unhealthy -> restart-job exclude-node"
spec:
  replicas: 2
  selector:
    matchLabels:
      app: every-node-rule
  template:
    metadata:
      labels:
        app: every-node-rule
    spec:
      containers:
        - name: pytorch
          image: trainer:1
---
apiVersion: batch/v1
kind: Job
metadata:
  name: every-node-rule-job
  labels:
    trainhook.io/framework: pytorch
  annotations:
    trainhook.io/failure-policy: "node-condition=GpuHealthy:False -> restart-job exclude-node"
spec:
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
        - name: pytorch
          image: trainer:1
"""


def documented(by: str) -> set[tuple[str, str]]:
    """(kind, field) for every field the table says `by` (webhook or sweeper) changes."""
    section = DOC.split("## What Trainhook changes on the objects in Git", 1)[1].split("\n## ")[0]
    found = set()
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 5 or by not in cells[2]:
            continue
        for kind in cells[0].split(", "):
            for field in re.findall(r"`((?:spec|metadata)\.[^`]+)`", cells[1]):
                found.add((kind, field))
    return found


EACH = "[]"  # a path token: every item of a list, as the guide writes `containers[].env`


def field_name(path: Iterable[str]) -> str:
    name = ""
    for token in path:
        if token == EACH:
            name += EACH
        else:
            name += f'["{token}"]' if "/" in token or "." in token else f".{token}"
    return name.lstrip(".")


def changed_fields(before: Any, after: Any, path: tuple[str, ...] = ()) -> set[str]:
    """Every leaf field that differs between two objects (added, removed or changed). A list
    that keeps its length is compared item by item (a container that gains an env entry is
    `containers[].env`); one that grows or shrinks changes as a whole."""
    if isinstance(before, Mapping) and isinstance(after, Mapping):
        return {
            field
            for key in {*before, *after}
            for field in changed_fields(before.get(key), after.get(key), (*path, key))
        }
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return {
            field
            for old, new in zip(before, after, strict=True)
            for field in changed_fields(old, new, (*path, EACH))
        }
    if isinstance(after, Mapping) and before is None:
        return changed_fields({}, after, path)
    if isinstance(before, Mapping) and after is None:
        return changed_fields(before, {}, path)
    return set() if before == after else {field_name(path)}


def rendered_yaml(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    assert main(["render", "-o", "yaml", str(path)]) == 0
    return [d for d in yaml.safe_load_all(capsys.readouterr().out) if d]


def webhook_changes(path: Path, capsys: pytest.CaptureFixture[str]) -> set[tuple[str, str]]:
    """(kind, field) for every field `trainhook render -o yaml` changes on the file's workloads."""
    given = {
        (d["kind"], d["metadata"]["name"]): d
        for d in yaml.safe_load_all(path.read_text())
        if d and d["kind"] in WORKLOAD_KINDS
    }
    rendered = [d for d in rendered_yaml(path, capsys) if d["kind"] in WORKLOAD_KINDS]
    assert len(rendered) == len(given)
    return {
        (obj["kind"], field)
        for obj in rendered
        for field in changed_fields(given[(obj["kind"], obj["metadata"]["name"])], obj)
    }


def examples(tmp_path: Path) -> list[Path]:
    every = tmp_path / "every-setting.yaml"
    every.write_text(EVERY_SETTING)
    files = sorted((REPO / "examples").glob("*.yaml"))
    return [*files, REPO / "examples" / "argocd" / "jobs" / "pytorch-ddp.yaml", every]


def admission_changes() -> set[tuple[str, str]]:
    """(kind, field) for every field the webhook's answer to a user's CREATE changes: render's,
    and what only a request says (who sent it); and for a StatefulSet, what its answer to an
    UPDATE that takes its settings off again changes (the copies and the in-place restart's
    plumbing go)."""
    found = set()
    for doc in yaml.safe_load_all(EVERY_SETTING):
        kind = doc["kind"]
        outcome = admit(Request(kind, "CREATE", doc, "ml", username="alice"))
        assert outcome is not None
        created = jsonpatch.apply_patch(doc, outcome.patch)
        found |= {(kind, f) for f in changed_fields(doc, created)}
        if kind != "StatefulSet":
            continue  # a Job's template cannot change once created
        bare = copy.deepcopy(created)
        kept = (contract.CREATED_BY, contract.SSH_AUTH_MOUNT_PATH)  # the MPI one runs as a user
        given = bare["metadata"]["annotations"]
        bare["metadata"]["annotations"] = {k: v for k, v in given.items() if k in kept}
        update = Request(kind, "UPDATE", bare, "ml", username="alice", old=created)
        outcome = admit(update)
        assert outcome is not None
        updated = jsonpatch.apply_patch(bare, outcome.patch)
        found |= {(kind, f) for f in changed_fields(bare, updated)}
    return found


def test_the_workloads_with_every_setting_use_every_setting_a_template_carries() -> None:
    """The list above cannot fall behind the code: every setting the webhook copies onto a pod
    template, and both ways of asking for the in-place restart that adds its plumbing."""
    docs = list(yaml.safe_load_all(EVERY_SETTING))
    used = {key for doc in docs for key in doc["metadata"].get("annotations", {})}
    missing = set(contract.POD_SETTINGS) - used
    assert not missing, f"give {missing} a value in EVERY_SETTING, and a row in docs/gitops.md"
    asked = {
        (doc["metadata"]["name"], key, value)
        for doc in docs
        for key, value in doc["metadata"].get("annotations", {}).items()
        if "RestartJobInPlace" in value or "restart-in-place" in value
    }
    assert asked == {
        ("every-in-place-setting", contract.RESTART_POLICY, "RestartJobInPlace"),
        ("every-in-place-rule", contract.FAILURE_POLICY, "exit=1-127 -> restart-in-place"),
    }
    for doc in docs:
        if doc["metadata"]["name"] in ("every-in-place-setting", "every-in-place-rule"):
            outcome = admit(Request(doc["kind"], "CREATE", doc, "ml", username="alice"))
            assert outcome is not None
            spec = jsonpatch.apply_patch(doc, outcome.patch)["spec"]["template"]["spec"]
            helpers = [c["name"] for c in spec["initContainers"] if "trainhook" in c["name"]]
            assert helpers == ["trainhook-restarter", "trainhook-barrier"]
            assert "trainhook-attempt" in [v["name"] for v in spec["volumes"]]


def test_the_in_place_restart_fields_of_the_guide_name_what_the_webhook_adds() -> None:
    row = next(line for line in DOC.splitlines() if "`spec.template.spec.initContainers`" in line)
    for name in (
        restart_in_place.RESTARTER,
        restart_in_place.BARRIER,
        restart_in_place.VOLUME,
        restart_in_place.MOUNT_PATH,
        restart_in_place.ATTEMPT_ENV,
    ):
        assert f"`{name}`" in row


def test_the_guide_lists_every_field_render_changes_on_workloads_and_no_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    changed = set().union(*(webhook_changes(path, capsys) for path in examples(tmp_path)))
    assert changed | admission_changes() == documented("webhook")
    # Only a request says who sent it; a Job admitted alone, before its job's other roles,
    # is created suspended (render sees the whole folder).
    assert admission_changes() - changed == {
        ("StatefulSet", 'metadata.annotations["trainhook.io/created-by"]'),
        ("Job", 'metadata.annotations["trainhook.io/created-by"]'),
        ("Job", 'metadata.annotations["trainhook.io/waiting-for-roles"]'),
        ("Job", "spec.suspend"),
    }


def sweeper_changes(
    workloads: list[dict[str, Any]], pods: list[dict[str, Any]], **owned: Any
) -> set[Any]:
    """(kind, field) for every field the sweeper's merge patches write on the job's objects."""
    job = workloads[0]["metadata"]["labels"].get(contract.JOB, workloads[0]["metadata"]["name"])
    return {
        (patch.resource.kind, whole_map(field))
        for patch in of_type(
            decision(job, workloads, pods, now=NOW, records=True, **owned).actions, Patch
        )
        for field in changed_fields({}, patch.patch)
    }


# PodGroup fields the guide names as a whole: minResources holds whatever resources the job asks
# for, the others are one placement or gang setting each.
WHOLE = (
    "spec.minResources",
    "spec.networkTopology",
    "spec.topologyConstraint",
    "spec.schedulingPolicy",
)


def whole_map(field: str) -> str:
    return next((whole for whole in WHOLE if field.startswith(f"{whole}.")), field)


def pytorch(replicas: int = 2, annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations)
    workers = statefulset(
        "pt-worker", role="worker", job="pt", replicas=replicas, annotations=annotations
    )
    return stamped(master, workers)


def test_the_guide_lists_every_field_the_sweeper_patches_on_workloads_and_no_other() -> None:
    master, workers = pytorch()
    finished = sweeper_changes([master, workers], [pod(master, 0, exit_code=0)])
    rescaled = pytorch()
    rescaled[1]["spec"]["replicas"] = 4  # `kubectl scale`, which the webhook never sees
    restamped = sweeper_changes(rescaled, [])
    cleaned = {contract.CLEAN_POD_POLICY: "All"}
    complete = {"conditions": [{"type": "Complete", "status": "True"}], "completedIndexes": "0"}
    launcher, workers = stamped(
        indexed_job("hvd-l", role="launcher", job="hvd", annotations=cleaned, status=complete),
        indexed_job("hvd-w", role="worker", job="hvd", completions=2, annotations=cleaned),
    )
    suspended = sweeper_changes([launcher, workers], [pod(workers, 0), pod(workers, 1)])
    waiting = stamped(indexed_job("queued", role="worker", completions=2, suspend=True, status={}))
    launcher = indexed_job("queued-launcher", role="launcher", job="queued", suspend=True)
    launcher["status"] = {}
    waiting[0]["metadata"]["labels"][contract.JOB] = "queued"
    never_started = sweeper_changes([launcher, *waiting], [])
    stamp_fields = {
        f'spec.template.metadata.annotations["{key}"]'
        for key in (contract.TOPOLOGY, contract.HOSTS)
    }
    status = f'metadata.annotations["{contract.STATUS}"]'
    assert {f for _, f in restamped} - {status} == stamp_fields
    assert {f for k, f in never_started if k == "Job"} - {status} == stamp_fields
    assert ("Job", "spec.suspend") in suspended
    assert ("StatefulSet", "spec.replicas") in finished
    gang = {contract.SCHEDULER: "volcano", contract.QUEUE: "research"}
    master = statefulset(
        "pt-master", role="master", job="pt", annotations=gang, priority_class="hi"
    )
    workers = statefulset("pt-worker", role="worker", job="pt", annotations=gang)
    workers["spec"]["template"]["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    # A Service and PodGroup the sweeper created, since changed by someone: it puts them back.
    kept = sweeper_changes(
        stamped(master, workers),
        [],
        services=[owned("Service", "pt", job="pt")],
        podgroups=[owned("PodGroup", "pt", job="pt")],
    )
    master, workers = pytorch()
    running = sweeper_changes(
        [master, workers],
        [
            pod(master, 0),
            pod(workers, 0, exit_code=0),
            pod(workers, 1, restarts=1, last_exit_code=1),
        ],
    )
    (retried,) = stamped(indexed_job("ij", role="worker", completions=1))
    running |= sweeper_changes([retried], [pod(retried, 0, restarts=1, last_exit_code=1)])
    pausing = {contract.SUSPEND: "true"}
    paused = sweeper_changes(pytorch(annotations=pausing), [])
    paused |= sweeper_changes(
        stamped(indexed_job("ij", role="worker", completions=1, annotations=pausing)), []
    )
    cosched = {contract.SCHEDULER: "coscheduling", contract.SCHEDULE_TIMEOUT_SECONDS: "60"}
    timed = sweeper_changes(
        pytorch(annotations=cosched),
        [],
        coscheduling_podgroups=[owned("PodGroup", "pt", job="pt")],
    )
    (held,) = stamped(
        indexed_job("hv-launcher", role="launcher", job="hv", suspend=True, status={})
    )
    held["metadata"]["annotations"][contract.WAITING_FOR_ROLES] = "worker"
    hv_workers = statefulset("hv-worker", framework="mpi", role="worker", job="hv")
    released = sweeper_changes([held, hv_workers], [])
    assert ("Job", "spec.suspend") in released  # resumed (and the annotation removed)
    # Written by the executor on the workloads each CreateSshSecret names, before the Secret.
    made = decision("hv", [held, hv_workers], [], now=NOW).actions
    recorded = {
        (target.resource.kind, f'metadata.annotations["{contract.SSH_KEYS_DIGEST}"]')
        for secret in of_type(made, CreateSshSecret)
        for target in secret.record_on
    }
    assert recorded == {
        ("Job", 'metadata.annotations["trainhook.io/ssh-keys-digest"]'),
        ("StatefulSet", 'metadata.annotations["trainhook.io/ssh-keys-digest"]'),
    }
    # Every PodGroup the sweeper keeps: Volcano's within a tier, KAI's within a Topology level,
    # Kubernetes' own (whose gang size is the one field it may patch).
    placed = {contract.PLACEMENT_TOPOLOGY: "cloud.example.com/rack", contract.PLACEMENT: "required"}
    volcano = {contract.SCHEDULER: "volcano", contract.PLACEMENT_TIER: "2", **placed}
    tiered = sweeper_changes(
        pytorch(annotations=volcano), [], podgroups=[owned("PodGroup", "pt", job="pt")]
    )
    kai = {contract.SCHEDULER: "kai", contract.KAI_TOPOLOGY: "cluster-topology", **placed}
    kai_roles = [
        statefulset("pt-master", role="master", job="pt", annotations=kai, priority_class="hi"),
        statefulset("pt-worker", role="worker", job="pt", annotations=kai, priority_class="hi"),
    ]
    kai_kept = sweeper_changes(
        stamped(*kai_roles), [], kai_podgroups=[owned("PodGroup", "pt", job="pt")]
    )
    gang_size: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 1}}}
    kubernetes_kept = sweeper_changes(
        pytorch(annotations={contract.SCHEDULER: "kubernetes"}),
        [],
        kubernetes_podgroups=[owned("PodGroup", "pt", job="pt", spec=gang_size)],
        kubernetes_podgroup_api=contract.KUBERNETES_PODGROUP_APIS[0],
    )
    podgroups = tiered | kai_kept | kubernetes_kept
    assert {
        ("PodGroup", "spec.networkTopology"),
        ("PodGroup", "spec.topologyConstraint"),
        ("PodGroup", "spec.schedulingPolicy"),
    } <= podgroups
    # Once the job's SSH Secret is seen to be the one it made: the record of what is proven.
    hv_proving = stamped(
        indexed_job("hv-launcher", role="launcher", job="hv"),
        statefulset("hv-worker", framework="mpi", role="worker", job="hv"),
    )
    keys = sweepers_ssh_secret("hv", *hv_proving, proven=False)
    proven = sweeper_changes(hv_proving, [], secrets=[keys])
    assert ("Job", f'metadata.annotations["{contract.PROVEN_OBJECTS}"]') in proven
    changes = finished | restamped | suspended | never_started | kept | timed | running | paused
    changes |= podgroups | proven
    assert changes | released | recorded == documented("sweeper")


def test_the_guide_says_a_ttl_deletes_the_workloads_that_argo_cd_then_recreates() -> None:
    master, workers = pytorch(annotations={contract.TTL_SECONDS_AFTER_FINISHED: "60"})
    for workload in (master, workers):
        workload["metadata"]["annotations"] |= {
            contract.PHASE: "Succeeded",
            contract.FINISHED_AT: "2025-01-01T00:00:00Z",
            contract.REASON: "Completed",
        }
        workload["spec"]["replicas"] = 0
    actions = decision("pt", [master, workers], now=NOW + timedelta(seconds=60)).actions
    deleted = {(a.resource.kind, a.name) for a in of_type(actions, Delete)}
    assert {("StatefulSet", "pt-master"), ("StatefulSet", "pt-worker")} <= deleted
    row = "| StatefulSet, Job | the whole object, deleted | sweeper |"
    assert row in DOC
    assert "## 6. `ttl-seconds-after-finished` with automated sync" in DOC


ORDERED = """
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: ordered
  labels:
    trainhook.io/framework: pytorch
  annotations: {annotations}
spec:
  replicas: 2
  podManagementPolicy: {policy}
  selector:
    matchLabels:
      app: ordered
  template:
    metadata:
      labels:
        app: ordered
    spec:
      containers:
        - name: pytorch
          image: trainer:1
"""


@pytest.mark.parametrize(
    ("policy", "annotations", "created_with"),
    [
        ("OrderedReady", "{}", "Parallel"),  # the trap: Git and the cluster disagree for good
        ("OrderedReady", '{"trainhook.io/ordered-start": "true"}', "OrderedReady"),
        ("Parallel", "{}", "Parallel"),
    ],
)
def test_an_explicit_pod_management_policy_is_created_as_the_guide_says(
    policy: str,
    annotations: str,
    created_with: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = tmp_path / "ordered.yaml"
    path.write_text(ORDERED.format(policy=policy, annotations=annotations))
    (workload,) = [d for d in rendered_yaml(path, capsys) if d["kind"] == "StatefulSet"]
    assert workload["spec"]["podManagementPolicy"] == created_with
    assert "## 5. `podManagementPolicy: OrderedReady` written in Git" in DOC
    assert f'`{contract.ORDERED_START}: "true"`' in DOC
