"""Parse and validate the trainhook.io/ annotations into plain settings."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import Field, dataclass, field, fields
from typing import Any, Final

from webhook.core import contract
from webhook.core.compat import COMPATS
from webhook.core.errors import InvalidSetting
from webhook.core.fabrics import registry as fabrics
from webhook.core.fabrics.nvlink import read_nvlink_domain
from webhook.core.fabrics.preflight import (
    read_dcgm_level,
    read_every_attempt,
    read_min_busbw,
    read_preflight,
)
from webhook.core.fabrics.users import framework_refusal
from webhook.core.frameworks.base import Framework
from webhook.core.job.failure_rules import (
    PARTIAL,
    RESTART_POLICIES,
    Rule,
    parse_rules,
    partial_restart_allowed,
)
from webhook.core.job.progress import (
    checkpoint_on_stop,
    needs_reports,
    stall_timeout,
    straggler_threshold,
)
from webhook.core.values import (
    BOOLEANS,
    DNS_1123_LABEL,
    RESOURCE_NAME,
    allowed_list,
    boolean,
    choice,
    elastic_range,
    integer,
    label_key,
    object_name,
    placement_tier,
    quantity,
)

MAX_ROLES_CHARS = 1024  # a job's roles, listed: far more than any job has
SCHEDULERS = ("volcano", "coscheduling", "kueue", "kubernetes", "kai")
# Those whose PodGroup takes a minimum of pods (Kueue's pod group is admitted whole).
GANG_MINIMUM_SCHEDULERS = ("volcano", "coscheduling", "kubernetes", "kai")
PLACEMENTS = ("required", "preferred")
SUCCESS_POLICIES = ("all", "rank0", "any-worker")
CLEAN_POD_POLICIES = ("All", "Running", "None")
MPI_IMPLEMENTATIONS = ("OpenMPI", "Intel", "MPICH")  # as mpi-operator's mpiImplementation
DEFAULT_MPI_IMPLEMENTATION = "OpenMPI"
DEFAULT_GPU_RESOURCE = "nvidia.com/gpu"
DEFAULT_QUEUE = "default"
INT32_MAX = 2**31 - 1
NPROC_AUTO = "auto"  # one process per GPU of the training container, as when unset


# How the roles of one job agree on a job-wide setting (the `agree` of its field below).
EVERY_ROLE = "every role"  # one value on every workload; a role without it counts as unset
ROLES_THAT_SET_IT = "roles that set it"  # set on one role, or on several with one value
ANY_ROLE = "any role"  # set on any workload: the first in role order that sets it decides
SWEEPER_APPLIES = "the sweeper applies one to the whole job"


def _job_wide(key: str, agree: str, why: str = SWEEPER_APPLIES) -> Any:
    """A JobSettings field: None when unset, with the annotation it is read from."""
    return field(default=None, metadata={"key": key, "agree": agree, "why": why})


@dataclass(frozen=True)
class JobSettings:
    """The settings one job has a single value of, whichever of its workloads sets them.

    Each workload's `Settings` carries its own reading of them; `job_settings` merges those of
    a job's workloads into the job's. The disagreement check reads its fields' `key`, `agree`
    and `why`, so a new lifecycle annotation is one field here and its parsing in `_parse`.
    """

    elastic: tuple[int, int] | None = _job_wide(
        contract.ELASTIC, EVERY_ROLE, "every pod joins one rendezvous"
    )
    success_policy: str | None = _job_wide(contract.SUCCESS_POLICY, ROLES_THAT_SET_IT)
    clean_pod_policy: str | None = _job_wide(contract.CLEAN_POD_POLICY, ROLES_THAT_SET_IT)
    backoff_limit: int | None = _job_wide(contract.BACKOFF_LIMIT, ROLES_THAT_SET_IT)
    restart_policy: str | None = _job_wide(contract.RESTART_POLICY, ROLES_THAT_SET_IT)
    failure_rules: tuple[Rule, ...] | None = _job_wide(contract.FAILURE_POLICY, ROLES_THAT_SET_IT)
    ttl_seconds_after_finished: int | None = _job_wide(
        contract.TTL_SECONDS_AFTER_FINISHED, ROLES_THAT_SET_IT
    )
    # A deadline or a suspension is often added to one workload of a running job.
    active_deadline_seconds: int | None = _job_wide(contract.ACTIVE_DEADLINE_SECONDS, ANY_ROLE)
    suspend: bool | None = _job_wide(contract.SUSPEND, ANY_ROLE)
    stall_timeout: int | None = _job_wide(contract.STALL_TIMEOUT, ROLES_THAT_SET_IT)  # seconds
    checkpoint_on_stop: int | None = _job_wide(contract.CHECKPOINT_ON_STOP, ROLES_THAT_SET_IT)
    straggler_threshold: float | None = _job_wide(contract.STRAGGLER_THRESHOLD, ROLES_THAT_SET_IT)
    # A role without it runs Open MPI, as one that says so.
    mpi_implementation: str = field(
        default=DEFAULT_MPI_IMPLEMENTATION,
        metadata={
            "key": contract.MPI_IMPLEMENTATION,
            "agree": EVERY_ROLE,
            "why": "the launcher's hostfile is written for one MPI, which every pod runs",
        },
    )
    compat: str | None = _job_wide(
        contract.COMPAT, EVERY_ROLE, "every pod reads the same variables and files"
    )
    tpu_slices: int | None = _job_wide(
        contract.TPU_SLICES, EVERY_ROLE, "every worker counts its slice among the same slices"
    )
    ssh_keys: bool | None = _job_wide(
        contract.SSH_KEYS, EVERY_ROLE, "every pod reaches the others with the same keys"
    )
    # Every role of the job, in the framework's order: its pods wait until each has a workload.
    roles: tuple[str, ...] | None = _job_wide(
        contract.ROLES, EVERY_ROLE, "every pod waits for the same roles"
    )
    # The fabric profile every pod of the job is shaped for (webhook.core.fabrics).
    fabric: str | None = _job_wide(
        contract.FABRIC, EVERY_ROLE, "every pod reaches its peers over the same fabric"
    )
    # Checks before the first step (webhook.core.fabrics.preflight): every rank takes part in
    # the all-reduce, against one threshold (GB/s; the fabric profile's when unset), runs the
    # DCGM diagnostic at one level, on the same attempts.
    preflight: str | None = _job_wide(
        contract.PREFLIGHT, EVERY_ROLE, "every rank joins the same preflight"
    )
    preflight_min_busbw: float | None = _job_wide(
        contract.PREFLIGHT_MIN_BUSBW, EVERY_ROLE, "every rank is held to the same threshold"
    )
    preflight_dcgm_level: int | None = _job_wide(
        contract.PREFLIGHT_DCGM_LEVEL, EVERY_ROLE, "every pod's GPUs are held to the same tests"
    )
    preflight_every_attempt: bool | None = _job_wide(
        contract.PREFLIGHT_EVERY_ATTEMPT, EVERY_ROLE, "every rank runs it on the same attempts"
    )


JOB_SETTINGS: tuple[Field[Any], ...] = fields(JobSettings)


def job_settings(workloads: Iterable[JobSettings]) -> JobSettings:
    """A job's settings from its workloads' in role order: each the first that sets it."""
    merged: dict[str, Any] = {}
    for settings in workloads:
        for setting in JOB_SETTINGS:
            if merged.get(setting.name) is None:
                merged[setting.name] = getattr(settings, setting.name)
    return JobSettings(**merged)


@dataclass(frozen=True)
class Settings(JobSettings):
    """Every trainhook.io/ annotation of one workload, validated; None where the user set
    nothing. The job-wide ones are those of JobSettings."""

    port: int | None = None
    gpus: int | None = None
    gpu_resource: str = DEFAULT_GPU_RESOURCE
    shm_size: str | None = None
    scheduler: str | None = None
    container: str | None = None
    nproc_per_node: int | None = None  # None: unset or `auto`, one process per GPU
    max_restarts: int | None = None
    queue: str = DEFAULT_QUEUE
    schedule_timeout_seconds: int | None = None
    min_available: int | None = None  # the gang's minimum of pods; None: every pod, or elastic's
    ordered_start: bool = False
    placement_topology: str | None = None  # a node label key
    placement: str | None = None  # required or preferred; None: required when a key is set
    placement_tier: str | None = None  # Volcano's HyperNode tier: a number or a tier name
    kai_topology: str | None = None  # the KAI Topology object whose level is the label

    report_progress: bool = False  # Kubeflow Trainer v2's progress variables and token
    ssh_auth_mount_path: str | None = None  # MPI: the ~/.ssh of a non-root user
    nvlink_domain: bool = False  # its pods claim a channel of the job's ComputeDomain


# Every annotation `read_settings` reads: the job-wide ones come with their fields.
SETTING_KEYS = (
    contract.PORT,
    contract.GPUS,
    contract.GPU_RESOURCE,
    contract.SHM_SIZE,
    contract.SCHEDULER,
    contract.CONTAINER,
    contract.NPROC_PER_NODE,
    contract.MAX_RESTARTS,
    contract.QUEUE,
    contract.SCHEDULE_TIMEOUT_SECONDS,
    contract.MIN_AVAILABLE,
    contract.ORDERED_START,
    contract.PLACEMENT_TOPOLOGY,
    contract.PLACEMENT,
    contract.PLACEMENT_TIER,
    contract.KAI_TOPOLOGY,
    contract.REPORT_PROGRESS,
    contract.SSH_AUTH_MOUNT_PATH,
    contract.NVLINK_DOMAIN,
    *(setting.metadata["key"] for setting in JOB_SETTINGS),
)
_SETTING_KEYS: Final = frozenset(SETTING_KEYS)
_READ_AT_MOST = 256
# Every pod of a job carries the same settings: they are parsed once and found again by value,
# keyed by the settings an object carries (most carry none or a few of the many there are).
_read: dict[tuple[str, int, tuple[tuple[str, str], ...]], Settings] = {}


def read_settings(annotations: dict[str, str], framework: Framework) -> Settings:
    given = sorted((key, value) for key, value in annotations.items() if key in _SETTING_KEYS)
    key = (framework.name, fabrics.version(), tuple(given))
    settings = _read.get(key)
    if settings is None:
        settings = _parse(annotations, framework)
        if len(_read) >= _READ_AT_MOST:
            _read.clear()
        _read[key] = settings
    return settings


def _parse(annotations: Mapping[str, str], framework: Framework) -> Settings:
    get = annotations.get
    elastic = elastic_range(get(contract.ELASTIC))
    if elastic is not None and not framework.elastic:
        raise InvalidSetting(
            contract.ELASTIC,
            get(contract.ELASTIC),
            f"elastic training is not available for {framework.name} jobs",
        )
    preflight = read_preflight(get(contract.PREFLIGHT), framework.name, elastic is not None)
    ssh_keys = _ssh_keys(get(contract.SSH_KEYS), framework)
    settings = Settings(
        port=integer(contract.PORT, get(contract.PORT), 1, 65535, "an integer from 1 to 65535"),
        gpus=integer(contract.GPUS, get(contract.GPUS), 0, None, "a whole number, 0 or more"),
        gpu_resource=_resource_name(get(contract.GPU_RESOURCE)),
        shm_size=quantity(contract.SHM_SIZE, get(contract.SHM_SIZE)),
        scheduler=choice(contract.SCHEDULER, get(contract.SCHEDULER), SCHEDULERS),
        container=_container(get(contract.CONTAINER)),
        nproc_per_node=_nproc(get(contract.NPROC_PER_NODE)),
        elastic=elastic,
        max_restarts=_max_restarts(get(contract.MAX_RESTARTS), framework),
        queue=_queue(get(contract.QUEUE)),
        schedule_timeout_seconds=integer(
            contract.SCHEDULE_TIMEOUT_SECONDS,
            get(contract.SCHEDULE_TIMEOUT_SECONDS),
            1,
            INT32_MAX,
            f"a whole number of seconds from 1 to {INT32_MAX}",
        ),
        min_available=integer(
            contract.MIN_AVAILABLE,
            get(contract.MIN_AVAILABLE),
            1,
            INT32_MAX,
            f"a whole number of pods from 1 to {INT32_MAX}",
        ),
        ordered_start=choice(contract.ORDERED_START, get(contract.ORDERED_START), BOOLEANS)
        == "true",
        report_progress=choice(contract.REPORT_PROGRESS, get(contract.REPORT_PROGRESS), BOOLEANS)
        == "true",
        success_policy=_success_policy(get(contract.SUCCESS_POLICY)),
        clean_pod_policy=choice(
            contract.CLEAN_POD_POLICY, get(contract.CLEAN_POD_POLICY), CLEAN_POD_POLICIES
        ),
        backoff_limit=integer(
            contract.BACKOFF_LIMIT, get(contract.BACKOFF_LIMIT), 0, None, "a whole number >= 0"
        ),
        restart_policy=choice(
            contract.RESTART_POLICY, get(contract.RESTART_POLICY), RESTART_POLICIES
        ),
        failure_rules=_failure_rules(get(contract.FAILURE_POLICY), framework, elastic),
        ttl_seconds_after_finished=integer(
            contract.TTL_SECONDS_AFTER_FINISHED,
            get(contract.TTL_SECONDS_AFTER_FINISHED),
            0,
            None,
            "a whole number of seconds >= 0",
        ),
        active_deadline_seconds=integer(
            contract.ACTIVE_DEADLINE_SECONDS,
            get(contract.ACTIVE_DEADLINE_SECONDS),
            1,
            None,
            "a whole number of seconds >= 1",
        ),
        suspend=boolean(contract.SUSPEND, get(contract.SUSPEND)),
        stall_timeout=stall_timeout(get(contract.STALL_TIMEOUT)),
        checkpoint_on_stop=checkpoint_on_stop(get(contract.CHECKPOINT_ON_STOP)),
        straggler_threshold=straggler_threshold(get(contract.STRAGGLER_THRESHOLD)),
        placement_topology=label_key(contract.PLACEMENT_TOPOLOGY, get(contract.PLACEMENT_TOPOLOGY)),
        placement=choice(contract.PLACEMENT, get(contract.PLACEMENT), PLACEMENTS),
        placement_tier=placement_tier(get(contract.PLACEMENT_TIER)),
        kai_topology=object_name(contract.KAI_TOPOLOGY, get(contract.KAI_TOPOLOGY)),
        mpi_implementation=_mpi_implementation(get(contract.MPI_IMPLEMENTATION), framework),
        ssh_keys=ssh_keys,
        ssh_auth_mount_path=_ssh_auth_mount_path(
            get(contract.SSH_AUTH_MOUNT_PATH), framework, ssh_keys is True
        ),
        compat=_compat(get(contract.COMPAT), framework),
        tpu_slices=_tpu_slices(get(contract.TPU_SLICES), framework),
        roles=_roles(get(contract.ROLES), framework),
        fabric=_fabric(get(contract.FABRIC), framework, get(contract.GPU_RESOURCE)),
        nvlink_domain=read_nvlink_domain(get(contract.NVLINK_DOMAIN)),
        preflight=preflight,
        preflight_min_busbw=read_min_busbw(get(contract.PREFLIGHT_MIN_BUSBW), preflight),
        preflight_dcgm_level=read_dcgm_level(get(contract.PREFLIGHT_DCGM_LEVEL), preflight),
        preflight_every_attempt=read_every_attempt(
            get(contract.PREFLIGHT_EVERY_ATTEMPT), preflight
        ),
    )
    _check_placement(settings, get)
    _check_kai_topology(settings, get)
    _check_min_available(settings, get)
    if get(contract.QUEUE) is not None and settings.scheduler is None:
        raise InvalidSetting(
            contract.QUEUE,
            get(contract.QUEUE),
            f"a queue is read only with {contract.SCHEDULER} set "
            f"({allowed_list(SCHEDULERS)}): set the scheduler too, or remove the queue",
        )
    for key, what, remove in (
        (contract.STALL_TIMEOUT, "the step comes", "the timeout"),
        (contract.STRAGGLER_THRESHOLD, "the ranks' step times come", "the threshold"),
        (contract.CHECKPOINT_ON_STOP, "the saved checkpoint comes", "it"),
    ):
        needs_reports(key, get(key), settings.report_progress, what, remove)
    return settings


def _check_placement(settings: Settings, get: Any) -> None:
    """The placement keys that mean nothing without another: refused rather than ignored."""
    if settings.placement is not None and settings.placement_topology is None:
        raise InvalidSetting(
            contract.PLACEMENT,
            get(contract.PLACEMENT),
            f"read only with {contract.PLACEMENT_TOPOLOGY} set (the node label key of the "
            "domain the job is kept within): set it too, or remove the placement",
        )
    volcano = settings.scheduler == "volcano"
    if settings.placement_tier is not None and not (volcano and settings.placement_topology):
        raise InvalidSetting(
            contract.PLACEMENT_TIER,
            get(contract.PLACEMENT_TIER),
            f"read only with {contract.SCHEDULER}: volcano and {contract.PLACEMENT_TOPOLOGY} "
            "set: Volcano alone places by HyperNode tier",
        )
    if volcano and settings.placement_topology is not None and settings.placement_tier is None:
        raise InvalidSetting(
            contract.PLACEMENT_TOPOLOGY,
            get(contract.PLACEMENT_TOPOLOGY),
            "Volcano places a job by HyperNode tier, not by node label: add "
            f"{contract.PLACEMENT_TIER} with the tier (a number from 1, or the tier's name) "
            "whose HyperNodes group the nodes by this label",
        )


def _check_min_available(settings: Settings, get: Any) -> None:
    """A gang's minimum needs a gang that can start with fewer than all of its pods."""
    if settings.min_available is None:
        return
    if settings.scheduler is None:
        raise InvalidSetting(
            contract.MIN_AVAILABLE,
            get(contract.MIN_AVAILABLE),
            f"the gang's minimum is read only with {contract.SCHEDULER} set "
            f"({allowed_list(GANG_MINIMUM_SCHEDULERS)}): set the scheduler too, or remove it",
        )
    if settings.scheduler not in GANG_MINIMUM_SCHEDULERS:
        raise InvalidSetting(
            contract.MIN_AVAILABLE,
            get(contract.MIN_AVAILABLE),
            f"{contract.SCHEDULER} {settings.scheduler} admits a pod group whole, with no "
            f"minimum; a gang's minimum is read with {allowed_list(GANG_MINIMUM_SCHEDULERS)}",
        )


def _check_kai_topology(settings: Settings, get: Any) -> None:
    kai = settings.scheduler == "kai"
    if settings.kai_topology is not None and not (kai and settings.placement_topology):
        raise InvalidSetting(
            contract.KAI_TOPOLOGY,
            get(contract.KAI_TOPOLOGY),
            f"read only with {contract.SCHEDULER}: kai and {contract.PLACEMENT_TOPOLOGY} set",
        )
    if kai and settings.placement_topology is not None and settings.kai_topology is None:
        raise InvalidSetting(
            contract.PLACEMENT_TOPOLOGY,
            get(contract.PLACEMENT_TOPOLOGY),
            f"KAI places a job by the levels of a Topology object: add {contract.KAI_TOPOLOGY} "
            "with the name of the Topology that has this label as a level",
        )


def _failure_rules(
    value: str | None, framework: Framework, elastic: tuple[int, int] | None
) -> tuple[Rule, ...] | None:
    if value is None:
        return None
    rules = parse_rules(value)
    for rule in rules:
        strangers = sorted(role for role in rule.match.roles if not framework.allows(role))
        if strangers:
            raise InvalidSetting(
                contract.FAILURE_POLICY,
                rule.text,
                f"rule {rule.number}: role {strangers[0]}: {framework.name} roles are "
                + ", ".join(framework.roles),
            )
        if rule.action in PARTIAL and not partial_restart_allowed(
            framework.name, elastic is not None
        ):
            raise InvalidSetting(
                contract.FAILURE_POLICY,
                rule.text,
                f"rule {rule.number}: {rule.action} needs a job that takes restarted pods "
                f"back: elastic pytorch ({contract.ELASTIC}) or a tensorflow or paddle "
                f"parameter-server job, not a {framework.name} job"
                + (f" without {contract.ELASTIC}" if framework.elastic else ""),
            )
    return rules


def _mpi_implementation(value: str | None, framework: Framework) -> str:
    if value is None:
        return DEFAULT_MPI_IMPLEMENTATION
    if not framework.ssh_keys:
        raise InvalidSetting(
            contract.MPI_IMPLEMENTATION, value, f"read by mpi jobs only, not {framework.name}"
        )
    return choice(contract.MPI_IMPLEMENTATION, value, MPI_IMPLEMENTATIONS) or (
        DEFAULT_MPI_IMPLEMENTATION
    )


def wants_ssh_keys(framework: Framework, settings: JobSettings) -> bool:
    """Whether the job's pods get the job's SSH keys: an mpi job's always, any other's when
    trainhook.io/ssh-keys says so."""
    return framework.ssh_keys or settings.ssh_keys is True


def _ssh_keys(value: str | None, framework: Framework) -> bool | None:
    keys = boolean(contract.SSH_KEYS, value)
    if keys is False and framework.ssh_keys:
        raise InvalidSetting(
            contract.SSH_KEYS,
            value,
            f"an {framework.name} job's launcher reaches its workers over SSH, so it always "
            "gets the job's keys",
        )
    return keys


def _ssh_auth_mount_path(value: str | None, framework: Framework, keys: bool) -> str | None:
    if value is None:
        return None
    if not (framework.ssh_keys or keys):
        raise InvalidSetting(
            contract.SSH_AUTH_MOUNT_PATH,
            value,
            f'read by mpi jobs and jobs with {contract.SSH_KEYS}: "true" only, '
            f"not {framework.name}",
        )
    parts = value.split("/")
    if (
        not value.startswith("/")
        or value == "/"
        or len(value) > 4096
        or any(part in (".", "..") for part in parts)
        or ":" in value
    ):
        raise InvalidSetting(
            contract.SSH_AUTH_MOUNT_PATH,
            value,
            "an absolute directory path without '..' or ':', the ~/.ssh of the container's "
            "user, e.g. /home/mpiuser/.ssh",
        )
    return value.rstrip("/")


def _tpu_slices(value: str | None, framework: Framework) -> int | None:
    number = integer(contract.TPU_SLICES, value, 1, None, "a whole number of slices >= 1")
    if number is not None and not framework.tpu:
        raise InvalidSetting(
            contract.TPU_SLICES, value, f"read by jax jobs only, not {framework.name}"
        )
    return number


def _compat(value: str | None, framework: Framework) -> str | None:
    compat = choice(contract.COMPAT, value, tuple(COMPATS))
    if compat is not None and not COMPATS[compat].allows(framework):
        raise InvalidSetting(
            contract.COMPAT,
            value,
            f"{compat} is for {' and '.join(COMPATS[compat].frameworks)} jobs, "
            f"not {framework.name}",
        )
    return compat


def _fabric(value: str | None, framework: Framework, gpu_resource: str | None) -> str | None:
    if value is None:
        return None
    fabrics.profile_for(value)
    why = framework_refusal(value, framework.name, gpu_resource or DEFAULT_GPU_RESOURCE)
    if why is not None:
        raise InvalidSetting(contract.FABRIC, value, why)
    return value


def _nproc(value: str | None) -> int | None:
    if value == NPROC_AUTO:
        return None
    return integer(contract.NPROC_PER_NODE, value, 1, None, f"a whole number >= 1, or {NPROC_AUTO}")


def _roles(value: str | None, framework: Framework) -> tuple[str, ...] | None:
    if value is None:
        return None
    allowed = (
        f"a comma-separated list of the job's roles ({', '.join(framework.roles)})"
        if framework.roles
        else "a comma-separated list of the job's roles (DNS labels)"
    )
    if len(value) > MAX_ROLES_CHARS:  # not split: a value may be megabytes long
        raise InvalidSetting(contract.ROLES, value, allowed)
    names = [name.strip() for name in value.split(",")]
    if not all(names) or len(set(names)) != len(names):
        raise InvalidSetting(contract.ROLES, value, allowed + ", each once")
    for name in names:
        if not framework.allows(name) or not DNS_1123_LABEL.match(name):
            raise InvalidSetting(
                contract.ROLES, value, f"{name} is not a {framework.name} role: {allowed}"
            )
    return tuple(framework.order(names))


# `role=<role>`: the job succeeds once every pod of that role has (a Volcano task's completion).
SUCCESS_OF_A_ROLE = re.compile(r"role=([a-z0-9]([-a-z0-9]*[a-z0-9])?)")


def _success_policy(value: str | None) -> str | None:
    if value is not None and SUCCESS_OF_A_ROLE.fullmatch(value):
        return value
    return choice(contract.SUCCESS_POLICY, value, (*SUCCESS_POLICIES, "role=<role>"))


def _max_restarts(value: str | None, framework: Framework) -> int | None:
    number = integer(contract.MAX_RESTARTS, value, 0, None, "a whole number >= 0")
    if number is not None and not framework.elastic:
        raise InvalidSetting(
            contract.MAX_RESTARTS,
            value,
            f"torchrun restarts are not available for {framework.name} jobs",
        )
    return number


def _resource_name(value: str | None) -> str:
    if value is None:
        return DEFAULT_GPU_RESOURCE
    domain = value.partition("/")[0]
    if (
        len(value) > 253  # before the pattern, whose cost grows with the value
        or not RESOURCE_NAME.match(value)
        or domain.endswith("kubernetes.io")
        or domain == "kubernetes.io"
    ):
        raise InvalidSetting(
            contract.GPU_RESOURCE,
            value,
            "an extended resource name such as nvidia.com/gpu or huawei.com/Ascend910",
        )
    return value


def _container(value: str | None) -> str | None:
    if value is not None and not (len(value) <= 63 and DNS_1123_LABEL.match(value)):
        raise InvalidSetting(contract.CONTAINER, value, "a container name (a DNS-1123 label)")
    return value


def _queue(value: str | None) -> str:
    if value is None:
        return DEFAULT_QUEUE
    if not (len(value) <= 63 and DNS_1123_LABEL.match(value)):
        raise InvalidSetting(
            contract.QUEUE,
            value,
            "a Volcano or KAI queue, or Kueue LocalQueue, name (a DNS-1123 label)",
        )
    return value
