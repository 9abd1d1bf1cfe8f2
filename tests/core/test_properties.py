"""Properties of admission over generated workloads and pods, checked as the API server would.

Every patch is applied with jsonpatch to the object exactly as received and the result is
validated against the official schema of Kubernetes 1.29 and of the newest version
kubernetes-validate ships; a second pass over the patched object must change nothing.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import jsonpatch
import kubernetes_validate
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from kubernetes_validate import utils as validate_utils

from tests.core.strategies import (
    BarePodJob,
    Obj,
    PodRealism,
    TrainingJob,
    Update,
    bare_pod_jobs,
    controller_pods,
    statefulset_updates,
    training_jobs,
    updated,
)
from tests.support.builders import statefulset
from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.mutation.admit import Found, Outcome, Policy, Request, admit

OLDEST = "1.29"
NEWEST = kubernetes_validate.latest_version()
VERSIONS = (OLDEST, NEWEST)

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CHEAP_PROPERTY = settings(PROPERTY, max_examples=100)

LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
# The grammar of apimachinery's resource.ParseQuantity.
QUANTITY = re.compile(
    r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$"
)
NATIVE_RESOURCES = ("cpu", "memory", "ephemeral-storage", "storage")


@pytest.fixture(scope="module", autouse=True)
def schemas_read_once() -> Iterator[None]:
    """kubernetes-validate re-reads a 1.8 MB schema file on every call; within this module each
    file is read once. Only the files are kept: every object is still validated afresh."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(
            validate_utils, "schema_contents", functools.cache(validate_utils.schema_contents)
        )
        yield


# --- admitting objects as the API server does -------------------------------------------------


@dataclass
class Admission:
    """One admission request: the object as received, a copy taken before, and the outcome."""

    obj: Obj
    before: Obj
    kind: str
    operation: str
    namespace: str
    siblings: list[Obj]
    siblings_before: list[Obj]
    cluster_domain: str
    outcome: Outcome
    patched: Obj

    def describe(self) -> str:
        metadata = self.obj.get("metadata") or {}
        name = metadata.get("name") or metadata.get("generateName")
        return f"{self.operation} {self.kind} {name}"

    def again(self) -> Outcome | None:
        """The webhook called again on its own output (reinvocationPolicy: IfNeeded)."""
        return call_admit(
            self.patched,
            self.kind,
            self.operation,
            self.namespace,
            self.siblings,
            self.cluster_domain,
        )


def deep_copy(obj: Any) -> Any:
    """A copy of a JSON document; several times faster than copy.deepcopy."""
    return json.loads(json.dumps(obj))


def call_admit(
    obj: Obj, kind: str, operation: str, namespace: str, siblings: list[Obj], cluster_domain: str
) -> Outcome | None:
    return admit(Request(kind, operation, obj, namespace), Found(siblings), Policy(cluster_domain))


def admitted(
    obj: Obj,
    kind: str,
    operation: str,
    namespace: str,
    cluster_domain: str,
    siblings: list[Obj] | None = None,
) -> Admission:
    """Admit `obj` and apply the patch to a copy of it exactly as received."""
    siblings = siblings or []
    before, siblings_before = deep_copy(obj), deep_copy(siblings)
    outcome = call_admit(obj, kind, operation, namespace, siblings, cluster_domain)
    assert outcome is not None, f"{operation} {kind} was not handled: {obj}"
    try:
        patched = jsonpatch.apply_patch(deep_copy(obj), outcome.patch, in_place=True)
    except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as error:
        raise AssertionError(
            f"patch does not apply to {operation} {kind}: {error}\n"
            f"object: {before}\npatch: {outcome.patch}"
        ) from None
    return Admission(
        obj,
        before,
        kind,
        operation,
        namespace,
        siblings,
        siblings_before,
        cluster_domain,
        outcome,
        patched,
    )


def workload_admissions(job: TrainingJob) -> list[Admission]:
    return [
        admitted(
            workload, workload["kind"], "CREATE", job.namespace, job.cluster_domain, job.workloads
        )
        for workload in job.workloads
    ]


def update_admission(job: TrainingJob, update: Update) -> Admission:
    """The StatefulSet as stored after its CREATE, changed by the user, admitted on UPDATE."""
    stored = [each.patched for each in workload_admissions(job)]
    obj = updated(stored[update.position], update)
    return admitted(obj, "StatefulSet", "UPDATE", job.namespace, job.cluster_domain, stored)


def pod_admissions(case: TrainingJob | BarePodJob) -> list[Admission]:
    if isinstance(case, BarePodJob):
        return [
            admitted(pod, "Pod", "CREATE", case.namespace, case.cluster_domain) for pod in case.pods
        ]
    return [
        admitted(pod, "Pod", "CREATE", case.namespace, case.cluster_domain)
        for workload in workload_admissions(case)
        for pod in controller_pods(workload.patched, case.namespace, case.realism)
    ]


def every_workload_admission(case: tuple[TrainingJob, Update]) -> list[Admission]:
    job, update = case
    return [*workload_admissions(job), update_admission(job, update)]


jobs_and_updates = statefulset_updates

# A parameter-server job whose workers are scaled to zero: its ps pods are still created.
PADDLE_PS_WITHOUT_WORKERS = TrainingJob(
    framework="paddle",
    job="ctr",
    namespace="default",
    workloads=[
        statefulset("ctr-ps", "paddle", role="ps", job="ctr", replicas=1),
        statefulset("ctr-worker", "paddle", role="worker", job="ctr", replicas=0),
    ],
    realism=PodRealism(owner_reference=True, generate_name=False, defaults=True),
    cluster_domain="",
)
pod_cases = st.one_of(training_jobs, bare_pod_jobs)


# --- 1: the patch applies and the result is a valid object -----------------------------------


def assert_validates(admission: Admission) -> None:
    for version in VERSIONS:
        try:
            kubernetes_validate.validate(admission.patched, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            where = "/".join(map(str, error.absolute_path))
            raise AssertionError(
                f"{admission.describe()} patched fails Kubernetes {version} at {where}: "
                f"{error.message}\noriginal valid for {version}: "
                f"{_is_valid(admission.before, version)}\npatch: {admission.outcome.patch}"
            ) from None


def assert_names_unique_and_mounts_resolve(admission: Admission) -> None:
    """What the API server validates beyond the schema, for what the webhook adds."""
    where = admission.describe()
    spec = _pod_spec(admission.patched)
    volumes = [volume["name"] for volume in spec.get("volumes") or []]
    assert len(volumes) == len(set(volumes)), f"{where}: duplicate volumes {volumes}"
    containers = [each["name"] for _, _, each in _containers(admission.patched)]
    assert len(containers) == len(set(containers)), f"{where}: duplicate containers"
    for _, _, each in _containers(admission.patched):
        mounts = each.get("volumeMounts") or []
        paths = [mount["mountPath"] for mount in mounts]
        assert len(paths) == len(set(paths)), f"{where} {each['name']}: mount paths {paths}"
        missing = [mount["name"] for mount in mounts if mount["name"] not in volumes]
        assert not missing, f"{where} {each['name']}: mounts of missing volumes {missing}"


def _is_valid(obj: Obj, version: str) -> bool:
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError:
        return False
    return True


@PROPERTY
@given(jobs_and_updates)
def test_every_workload_patch_applies_as_received_and_validates_for_1_29_and_the_newest(
    case: tuple[TrainingJob, Update],
) -> None:
    for admission in every_workload_admission(case):
        assert_validates(admission)
        assert_names_unique_and_mounts_resolve(admission)


@PROPERTY
@given(pod_cases)
@example(PADDLE_PS_WITHOUT_WORKERS)
def test_every_pod_patch_applies_as_received_and_validates_for_1_29_and_the_newest(
    case: TrainingJob | BarePodJob,
) -> None:
    for admission in pod_admissions(case):
        assert_validates(admission)
        assert_names_unique_and_mounts_resolve(admission)


# --- 2: a second pass changes nothing ----------------------------------------------------------


@CHEAP_PROPERTY
@given(jobs_and_updates)
def test_admitting_a_patched_workload_again_on_create_or_update_yields_an_empty_patch(
    case: tuple[TrainingJob, Update],
) -> None:
    for admission in every_workload_admission(case):
        second = admission.again()
        assert second is not None
        assert second.patch == [], f"{admission.describe()}: first patch {admission.outcome.patch}"


@CHEAP_PROPERTY
@given(pod_cases)
def test_admitting_a_patched_pod_again_yields_an_empty_patch(
    case: TrainingJob | BarePodJob,
) -> None:
    for admission in pod_admissions(case):
        second = admission.again()
        assert second is not None
        assert second.patch == [], f"{admission.describe()}: first patch {admission.outcome.patch}"


# --- 3: the object given to admit stays as it was ----------------------------------------------


@CHEAP_PROPERTY
@given(jobs_and_updates, pod_cases)
def test_admit_leaves_the_object_and_its_siblings_exactly_as_received(
    workloads: tuple[TrainingJob, Update], pods: TrainingJob | BarePodJob
) -> None:
    for admission in every_workload_admission(workloads) + pod_admissions(pods):
        assert admission.obj == admission.before, admission.describe()
        assert admission.siblings == admission.siblings_before, admission.describe()


# --- 4: only what the contract names is touched ------------------------------------------------

ANY_TAIL = "**"
POD_ANNOTATIONS = (
    contract.VOLCANO_GROUP_NAME,
    contract.VOLCANO_TASK_SPEC,
    contract.KUEUE_POD_GROUP_TOTAL_COUNT,
)
POD_LABELS = (
    contract.COSCHEDULING_POD_GROUP,
    contract.KUEUE_QUEUE_NAME,
    contract.KUEUE_POD_GROUP_NAME,
    contract.KUEUE_MANAGED,
)


def _ours(key: str) -> bool:
    return key.startswith(contract.PREFIX)


def _pod_annotation(key: str) -> bool:
    return _ours(key) or key in POD_ANNOTATIONS


def _pod_label(key: str) -> bool:
    return _ours(key) or key in POD_LABELS


def _container_field(key: str) -> bool:
    return key in ("env", "volumeMounts", "resources", "terminationMessagePolicy")


def _index(key: str) -> bool:
    return key.isdigit()


Segment = str | Callable[[str], bool]
CONTRACT_PATHS: tuple[tuple[Segment, ...], ...] = (
    ("metadata", "labels", _pod_label),
    ("metadata", "finalizers", ANY_TAIL),  # Kueue's, when Kueue's webhook has not added it
    ("spec", "schedulingGates", ANY_TAIL),  # Kueue's admission gate, likewise; ours
    ("spec", "suspend"),  # a Job created before a role its job needs, held until it comes
    ("metadata", "annotations", _pod_annotation),
    ("spec", "template", "metadata", "labels", _ours),
    ("spec", "template", "metadata", "annotations", _ours),
    ("spec", "serviceName"),
    ("spec", "podManagementPolicy"),
    ("spec", "template", "spec", "subdomain"),
    ("spec", "hostname"),
    ("spec", "subdomain"),
    ("spec", "schedulerName"),
    ("spec", "volumes", ANY_TAIL),
    ("spec", "containers", _index, _container_field, ANY_TAIL),
    ("spec", "initContainers", _index, _container_field, ANY_TAIL),
)


def _segment_matches(pattern: Segment, segment: str) -> bool:
    return pattern(segment) if callable(pattern) else pattern == segment


def _matches(path: list[str], pattern: tuple[Segment, ...]) -> bool:
    if pattern[-1] == ANY_TAIL:
        head = pattern[:-1]
        return len(path) >= len(head) and all(map(_segment_matches, head, path))
    return len(path) == len(pattern) and all(map(_segment_matches, pattern, path))


def _leads_to_contract_path(path: list[str]) -> bool:
    return any(
        len(path) < len(pattern) and all(map(_segment_matches, pattern, path))
        for pattern in CONTRACT_PATHS
    )


def split_pointer(pointer: str) -> list[str]:
    return [s.replace("~1", "/").replace("~0", "~") for s in pointer.split("/")[1:]]


def touched_paths(op: dict[str, Any]) -> Iterator[list[str]]:
    """The paths an op writes; a parent added whole counts as each of its keys."""
    path = split_pointer(op["path"])
    value = op.get("value")
    if op["op"] == "add" and isinstance(value, dict) and _leads_to_contract_path(path):
        for key, child in value.items():
            yield from touched_paths(
                {"op": "add", "path": f"{op['path']}/{_escape(key)}", "value": child}
            )
    else:
        yield path


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _containers(obj: Obj) -> Iterator[tuple[str, int, Obj]]:
    spec = obj.get("spec") or {}
    if obj["kind"] != "Pod":
        spec = ((spec.get("template") or {}).get("spec")) or {}
    for field in ("initContainers", "containers"):
        for position, each in enumerate(spec.get(field) or []):
            yield field, position, each


def _pod_spec(obj: Obj) -> Obj:
    spec = obj.get("spec") or {}
    return spec if obj["kind"] == "Pod" else (spec.get("template") or {}).get("spec") or {}


def assert_user_entries_kept(admission: Admission) -> None:
    before, after = admission.before, admission.patched
    kept_containers = list(_containers(after))
    assert [(f, p, c["name"]) for f, p, c in _containers(before)] == [
        (f, p, c["name"]) for f, p, c in kept_containers
    ]
    for (field, position, original), (_, _, result) in zip(
        _containers(before), kept_containers, strict=True
    ):
        where = f"{admission.describe()} {field}[{position}]"
        result_env = list(result.get("env") or [])
        for item in original.get("env") or []:
            assert item in result_env, f"{where}: user env {item} changed or removed"
            result_env.remove(item)
        for mount in original.get("volumeMounts") or []:
            assert mount in (result.get("volumeMounts") or []), f"{where}: mount {mount}"
        for kind, values in (original.get("resources") or {}).items():
            kept = (result.get("resources") or {}).get(kind) or {}
            for name, quantity in values.items():
                assert kept.get(name) == quantity, f"{where}: {kind}[{name}] was {quantity}"
    volumes = _pod_spec(after).get("volumes") or []
    for volume in _pod_spec(before).get("volumes") or []:
        assert volume in volumes, f"{admission.describe()}: user volume {volume} changed"


def assert_contract_paths_only(admission: Admission) -> None:
    for op in admission.outcome.patch:
        assert op["op"] in ("add", "replace"), f"{admission.describe()}: {op}"
        for path in touched_paths(dict(op)):
            assert any(_matches(path, pattern) for pattern in CONTRACT_PATHS), (
                f"{admission.describe()}: {op['op']} /{'/'.join(path)} is outside the contract"
            )


@CHEAP_PROPERTY
@given(jobs_and_updates, pod_cases)
def test_patches_touch_only_what_the_contract_names_and_keep_every_user_entry(
    workloads: tuple[TrainingJob, Update], pods: TrainingJob | BarePodJob
) -> None:
    for admission in every_workload_admission(workloads) + pod_admissions(pods):
        assert_contract_paths_only(admission)
        assert_user_entries_kept(admission)


# --- 5: ranks and world size ------------------------------------------------------------------


def _equipped(pod: Obj) -> set[tuple[str, int]]:
    """Where the webhook puts the job's env: every init container and the training container
    (named by trainhook.io/container, else the framework's own container name, else the first)."""
    spec = _pod_spec(pod)
    names = [each.get("name") for each in spec.get("containers") or []]
    wanted = (pod["metadata"].get("annotations") or {}).get(contract.CONTAINER)
    default = FRAMEWORKS[pod["metadata"]["labels"][contract.FRAMEWORK]].container
    training = names.index(wanted or default) if (wanted or default) in names else 0
    found = {("initContainers", i) for i in range(len(spec.get("initContainers") or []))}
    return found | ({("containers", training)} if names else set())


def _env_values(admission: Admission, name: str) -> Iterator[str]:
    """The variable's value in every equipped container where the user did not set it; the
    other containers get none."""
    equipped = _equipped(admission.before)
    for (field, position, original), (_, _, result) in zip(
        _containers(admission.before), _containers(admission.patched), strict=True
    ):
        if (field, position) not in equipped:
            assert result.get("env") == original.get("env"), f"{admission.describe()}: sidecar"
            continue
        if any(item["name"] == name for item in original.get("env") or []):
            continue
        values = [item.get("value") for item in result.get("env") or [] if item["name"] == name]
        assert len(values) == 1, f"{admission.describe()} {original['name']}: {name} {values}"
        yield values[0]


@CHEAP_PROPERTY
@given(pod_cases)
def test_every_pod_of_a_job_gets_a_distinct_rank_from_0_and_the_same_world_size(
    case: TrainingJob | BarePodJob,
) -> None:
    admissions = pod_admissions(case)
    total = len(admissions)
    ranks = []
    for admission in admissions:
        rank = admission.patched["metadata"]["labels"][contract.RANK]
        ranks.append(int(rank))
        assert set(_env_values(admission, "TRAINHOOK_RANK")) <= {rank}, admission.describe()
        world_sizes = set(_env_values(admission, "TRAINHOOK_WORLD_SIZE"))
        assert world_sizes <= {str(total)}, admission.describe()
    assert sorted(ranks) == list(range(total))


# What every pod of a job must see alike: where its peers are, on which ports, and how many.
PEER_VIEW = (
    "MASTER_ADDR",
    "MASTER_PORT",
    "PET_RDZV_ENDPOINT",
    "NNODES",
    "WORLD_SIZE",
    "WORKER_PORT",
    "WORKER_ADDRS",
    "COORDINATOR_ADDRESS",
    "COORDINATOR_PORT",
    "NUM_PROCESSES",
    "JAX_COORDINATOR_ADDRESS",
    "JAX_NUM_PROCESSES",
    "MS_SCHED_PORT",
    "MS_WORKER_NUM",
    "PADDLE_NNODES",
    "PADDLE_TRAINER_ENDPOINTS",
    "PADDLE_PSERVERS_IP_PORT_LIST",
    "PADDLE_HETER_ENDPOINTS",
)


@CHEAP_PROPERTY
@given(pod_cases)
def test_every_pod_of_a_job_sees_the_same_peers_on_the_same_ports(
    case: TrainingJob | BarePodJob,
) -> None:
    seen: dict[str, set[str]] = {}
    admissions = pod_admissions(case)
    roles = {a.patched["metadata"]["labels"][contract.ROLE] for a in admissions}
    for admission in admissions:
        for name in PEER_VIEW:
            for value in _env_values_if_set(admission, name):
                seen.setdefault(name, set()).add(value)
        for value in _env_values_if_set(admission, "TF_CONFIG"):
            cluster = json.dumps(json.loads(value)["cluster"])
            seen.setdefault("TF_CONFIG cluster", set()).add(cluster)
    if "scheduler" not in roles:
        seen.pop("MS_SCHED_PORT", None)  # no scheduler (scaled to 0) to agree on yet
    if isinstance(case, BarePodJob):
        # Bare pods without a hosts annotation know only their own processes per pod.
        for name in ("WORLD_SIZE", "MS_WORKER_NUM"):
            seen.pop(name, None)
    assert {name: values for name, values in seen.items() if len(values) > 1} == {}


def _env_values_if_set(admission: Admission, name: str) -> Iterator[str]:
    """The variable's value in every container where the webhook set it (the user did not)."""
    for (_, _, original), (_, _, result) in zip(
        _containers(admission.before), _containers(admission.patched), strict=True
    ):
        if any(item["name"] == name for item in original.get("env") or []):
            continue
        yield from (
            item["value"]
            for item in result.get("env") or []
            if item["name"] == name and "value" in item
        )


# --- 6: label and quantity syntax ------------------------------------------------------------


def is_label_value(value: object) -> bool:
    return isinstance(value, str) and len(value) <= 63 and bool(LABEL_VALUE.match(value))


def is_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS_SUBDOMAIN.match(prefix)):
        return False
    return len(name) <= 63 and bool(LABEL_NAME.match(name))


def is_quantity(value: object) -> bool:
    return isinstance(value, str) and bool(QUANTITY.match(value))


def assert_syntax(admission: Admission) -> None:
    where = admission.describe()
    labels = admission.patched["metadata"].get("labels") or {}
    original_keys = (admission.before["metadata"].get("labels") or {}).keys()
    for key, value in labels.items():
        assert is_label_value(value), f"{where}: label {key}={value!r}"
        assert key in original_keys or is_label_key(key), f"{where}: label key {key!r}"
    for _, _, each in _containers(admission.patched):
        resources = each.get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        for kind, values in (("limits", limits), ("requests", requests)):
            for name, quantity in values.items():
                assert is_quantity(quantity), f"{where} {each['name']}: {kind}[{name}]={quantity!r}"
                if name not in NATIVE_RESOURCES:
                    assert str(quantity).isdigit(), f"{where}: extended {name}={quantity!r}"
        for name in limits.keys() & requests.keys():
            if name not in NATIVE_RESOURCES:
                assert limits[name] == requests[name], f"{where}: {name} request != limit"
    for volume in _pod_spec(admission.patched).get("volumes") or []:
        size = (volume.get("emptyDir") or {}).get("sizeLimit")
        assert size is None or is_quantity(size), f"{where}: volume {volume}"


@CHEAP_PROPERTY
@given(pod_cases)
def test_pod_labels_and_the_quantities_written_satisfy_kubernetes_syntax(
    case: TrainingJob | BarePodJob,
) -> None:
    for admission in pod_admissions(case):
        assert_syntax(admission)
