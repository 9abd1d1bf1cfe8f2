"""The user contract: every label and annotation key Trainhook reads or writes."""

from typing import Final

PREFIX: Final = "trainhook.io/"

# Labels the user sets.
FRAMEWORK: Final = "trainhook.io/framework"
JOB: Final = "trainhook.io/job"
ROLE: Final = "trainhook.io/role"
INDEX: Final = "trainhook.io/index"

# The first env item of a sidecar a fabric profile adds (its value: the profile): the job's own
# env stays out of that container.
FABRIC_SIDECAR_ENV: Final = "TRAINHOOK_FABRIC"

# Labels the webhook writes on pods.
RANK: Final = "trainhook.io/rank"
ROLE_INDEX: Final = "trainhook.io/role-index"

# Annotations the user sets.
PORT: Final = "trainhook.io/port"
GPUS: Final = "trainhook.io/gpus"
GPU_RESOURCE: Final = "trainhook.io/gpu-resource"
SHM_SIZE: Final = "trainhook.io/shm-size"
SCHEDULER: Final = "trainhook.io/scheduler"
CONTAINER: Final = "trainhook.io/container"
NPROC_PER_NODE: Final = "trainhook.io/nproc-per-node"
ELASTIC: Final = "trainhook.io/elastic"
MAX_RESTARTS: Final = "trainhook.io/max-restarts"  # torchrun's --max-restarts (PET_MAX_RESTARTS)
QUEUE: Final = "trainhook.io/queue"
SCHEDULE_TIMEOUT_SECONDS: Final = "trainhook.io/schedule-timeout-seconds"
# The gang's minimum of pods (a PodGroup's minMember), as Kubeflow's schedulingPolicy.minAvailable.
MIN_AVAILABLE: Final = "trainhook.io/min-available"
ORDERED_START: Final = "trainhook.io/ordered-start"
SUCCESS_POLICY: Final = "trainhook.io/success-policy"
CLEAN_POD_POLICY: Final = "trainhook.io/clean-pod-policy"
BACKOFF_LIMIT: Final = "trainhook.io/backoff-limit"
RESTART_POLICY: Final = "trainhook.io/restart-policy"
# Ordered rules `MATCH -> ACTION [max=N]` on what a failed pod reports (core/job/failure_rules.py).
FAILURE_POLICY: Final = "trainhook.io/failure-policy"
TTL_SECONDS_AFTER_FINISHED: Final = "trainhook.io/ttl-seconds-after-finished"
ACTIVE_DEADLINE_SECONDS: Final = "trainhook.io/active-deadline-seconds"
SUSPEND: Final = "trainhook.io/suspend"
# How long the job may go without reporting a new step while every pod runs before it is stalled
# (a failure `stalled`, routed by the failure rules).
STALL_TIMEOUT: Final = "trainhook.io/stall-timeout"
# How long a planned stop of the job (its suspend, a pod preempted or evicted, a node drained)
# waits for the job's pods to save a checkpoint once asked (a duration), job-wide.
CHECKPOINT_ON_STOP: Final = "trainhook.io/checkpoint-on-stop"
# A rank whose reported step time stays over this many times the median of the job's other ranks
# is a straggler (a number above 1, like 1.5): shown, and a `straggler` failure-rule term.
STRAGGLER_THRESHOLD: Final = "trainhook.io/straggler-threshold"
# Keep the job's pods within one domain of a node label (a rack, a block): job-wide.
PLACEMENT_TOPOLOGY: Final = "trainhook.io/placement-topology"  # the node label key
PLACEMENT: Final = "trainhook.io/placement"  # required (the default) or preferred
PLACEMENT_TIER: Final = "trainhook.io/placement-tier"  # Volcano: the HyperNode tier instead
KAI_TOPOLOGY: Final = "trainhook.io/kai-topology"  # KAI: its Topology object with that level
# The roles the job has ("launcher,worker"): its pods wait until every one has its workload.
ROLES: Final = "trainhook.io/roles"
# MPI: which MPI reads the launcher's hostfile (OpenMPI, Intel, MPICH), job-wide, and where the
# job's SSH keys are mounted for a training container that does not run as root.
MPI_IMPLEMENTATION: Final = "trainhook.io/mpi-implementation"
SSH_AUTH_MOUNT_PATH: Final = "trainhook.io/ssh-auth-mount-path"
# JAX on TPU: the job's workers are this many TPU slices of equal size, in index order; each pod
# gets the TPU_* variables of its slice and, with several slices, the MEGASCALE_* ones; job-wide.
TPU_SLICES: Final = "trainhook.io/tpu-slices"
# "true": the job's pods get the job's SSH keys whatever the framework (an mpi job always does):
# the sweeper makes the Secret <job>-ssh, the webhook mounts it; job-wide.
SSH_KEYS: Final = "trainhook.io/ssh-keys"
# The variables and files of the scheduler or operator a job comes from (volcano,
# paddle-operator), job-wide.
COMPAT: Final = "trainhook.io/compat"
# "true": the job's pods get Kubeflow Trainer v2's three KUBEFLOW_TRAINER_SERVER_* variables, a
# token whose audience names the job, and the CA of the sweeper's progress endpoint.
REPORT_PROGRESS: Final = "trainhook.io/report-progress"
# The fabric profile (aws-efa, infiniband, gke-tcpxo or the cluster's own) the job's pods get the
# devices, env, sidecars and host mounts of, job-wide (core/fabrics).
FABRIC: Final = "trainhook.io/fabric"
# Checks before the job's first step, job-wide: a gang-wide all-reduce (`nccl`), the image's DCGM
# diagnostic on the pod's GPUs (`dcgm`), or both (`nccl,dcgm`), each an init container in every
# pod (core/fabrics/preflight.py); the bus bandwidth in GB/s below which a rank fails the
# all-reduce; the DCGM diagnostic's run level (1-4); and "true" to run them on every attempt of
# the job, not only its first.
PREFLIGHT: Final = "trainhook.io/preflight"
PREFLIGHT_MIN_BUSBW: Final = "trainhook.io/preflight-min-busbw"
PREFLIGHT_DCGM_LEVEL: Final = "trainhook.io/preflight-dcgm-level"
PREFLIGHT_EVERY_ATTEMPT: Final = "trainhook.io/preflight-every-attempt"
# "true": the role's pods claim an IMEX channel of the job's NVLink domain, the ComputeDomain
# <job>-nvlink the sweeper makes (core/fabrics/nvlink.py); set per role.
NVLINK_DOMAIN: Final = "trainhook.io/nvlink-domain"

# Annotations the webhook writes.
# The scheduling gate of a pod whose job lacks roles, and the annotation on a Job the webhook
# created suspended for the same reason (its value names the missing roles); the sweeper lifts
# both once every role is there.
WAITING_FOR_ROLES: Final = "trainhook.io/waiting-for-roles"
# The scheduling gate of a pod that mounts an object the sweeper makes for its job (a large job's
# peers ConfigMap, the MPI SSH Secret): lifted once the sweeper has proven that object its own.
WAITING_FOR_OWNED_OBJECTS: Final = "trainhook.io/waiting-for-owned-objects"
# On the job's workloads, written by the sweeper alone before it creates the SSH Secret: the digest
# of the Secret's data, which proves the Secret under that name the one it made.
SSH_KEYS_DIGEST: Final = "trainhook.io/ssh-keys-digest"
# On the job's workloads, written by the sweeper alone: the objects it made for the job and has
# proven its own (`ConfigMap/<name>,Secret/<name>,ComputeDomain/<name>`). A pod that mounts or
# claims only those is admitted without the owned-objects gate.
PROVEN_OBJECTS: Final = "trainhook.io/proven-objects"
TOPOLOGY: Final = "trainhook.io/topology"  # {"role": replicas, ...} in role order
HOSTS: Final = "trainhook.io/hosts"  # {"role": {"pod": prefix, "start": n, "service": s}}
HOSTFILE: Final = "trainhook.io/hostfile"  # MPI hostfile, projected into the launcher
# Horovod elastic's host discovery script, projected into the launcher next to the hostfile.
DISCOVER_HOSTS: Final = "trainhook.io/discover-hosts"
# A Volcano-compatible job's pods: one annotation per role, `volcano.trainhook.io/<role>`, holding
# the role's hosts one per line, projected as /etc/volcano/<role>.host.
VOLCANO_HOSTS_PREFIX: Final = "volcano.trainhook.io/"
# On a StatefulSet or Job when it is created: the requester's userInfo.username. A job belongs to
# the creator of its first workload; nobody else writes or changes it.
CREATED_BY: Final = "trainhook.io/created-by"

# On a pod that reports progress: the progress endpoint's CA (PEM), projected as its ca.crt.
PROGRESS_CA: Final = "trainhook.io/progress-ca"

# Annotations the sweeper writes on workloads. The phase is a label too, for selectors
# (`kubectl get sts -l trainhook.io/phase=Failed`) and `kubectl wait`.
PHASE: Final = "trainhook.io/phase"
FINISHED_AT: Final = "trainhook.io/finished-at"
REASON: Final = "trainhook.io/reason"
# The job's current state, the same on every workload: compact JSON with state, reason, message,
# restarts and startTime (see docs/sweeper.md).
STATUS: Final = "trainhook.io/status"
# What the sweeper must not forget about the pods of one workload, even once they are replaced:
# the role indexes that have succeeded ("0,2-4") and the failed runs counted so far (JSON).
SUCCEEDED: Final = "trainhook.io/succeeded"
FAILED_RUNS: Final = "trainhook.io/failed-runs"
# On the pods of a job restarted in place: the attempt the sweeper asks every pod to restart for,
# and the attempt whose barrier it has released (every rank is back). The pod reads both through
# a downward API volume, which the kubelet keeps up to date.
ATTEMPT: Final = "trainhook.io/attempt"
RELEASED_ATTEMPT: Final = "trainhook.io/released-attempt"
# The job's last progress report, compact JSON (see docs/progress.md); on workloads and pods.
PROGRESS: Final = "trainhook.io/progress"
# The same in a few words ("45%, step 450/1000, 13m left"), for Argo CD's health message.
PROGRESS_TEXT: Final = "trainhook.io/progress-text"
# On a reporting job's pods: its last checkpoint, {"step": n, "time": RFC 3339}, for schedulers
# that prefer to preempt a pod which has just saved its work.
LAST_CHECKPOINT: Final = "trainhook.io/last-checkpoint"
# On a job's workloads: its ranks the sweeper flags as stragglers (rank, pod, node, ratio), JSON.
STRAGGLERS: Final = "trainhook.io/stragglers"
# On the pod templates of a job whose failure rules exclude nodes (`exclude-node`): its pods are
# admitted with the nodes the job's restarts exclude, read from their workload's status.
EXCLUDES_NODES: Final = "trainhook.io/excludes-nodes"
# On the running pods of a job with checkpoint-on-stop, before a planned stop: when the sweeper
# asked them to save a checkpoint (RFC 3339). A pod reads it as a file through a downward API
# volume, which the kubelet keeps up to date.
CHECKPOINT_REQUESTED: Final = "trainhook.io/checkpoint-requested"
# On a workload the sweeper suspended: its replicas before, restored when the job resumes.
SUSPENDED_REPLICAS: Final = "trainhook.io/suspended-replicas"

# Annotations that configure pods; the webhook copies them from a workload onto its template.
POD_SETTINGS: Final = (
    PORT,
    GPUS,
    GPU_RESOURCE,
    SHM_SIZE,
    SCHEDULER,
    CONTAINER,
    NPROC_PER_NODE,
    ELASTIC,
    MAX_RESTARTS,
    QUEUE,
    PLACEMENT_TOPOLOGY,
    PLACEMENT,
    PLACEMENT_TIER,
    KAI_TOPOLOGY,
    ROLES,
    MPI_IMPLEMENTATION,
    SSH_AUTH_MOUNT_PATH,
    TPU_SLICES,
    SSH_KEYS,
    COMPAT,
    REPORT_PROGRESS,
    FABRIC,
    PREFLIGHT,
    PREFLIGHT_MIN_BUSBW,
    PREFLIGHT_DCGM_LEVEL,
    PREFLIGHT_EVERY_ATTEMPT,
    NVLINK_DOMAIN,
    CHECKPOINT_ON_STOP,
)

# The labels among the keys above; every other key is an annotation, except these, both.
LABELS: Final = (FRAMEWORK, JOB, ROLE, INDEX, RANK, ROLE_INDEX, PHASE)
LABELS_AND_ANNOTATIONS: Final = (PHASE,)
# Labels of a workload that stay off its pod template (a change would roll its pods).
WORKLOAD_ONLY_LABELS: Final = (PHASE,)

# Controllers whose pods are interchangeable (no stable name or index): never a training job.
REPLICA_CONTROLLERS: Final = ("Deployment", "ReplicaSet", "ReplicationController", "DaemonSet")

# Labels Kubernetes controllers put on the pods they create.
STATEFULSET_POD_INDEX: Final = "apps.kubernetes.io/pod-index"
STATEFULSET_POD_NAME: Final = "statefulset.kubernetes.io/pod-name"
JOB_COMPLETION_INDEX: Final = "batch.kubernetes.io/job-completion-index"
JOB_NAME: Final = "batch.kubernetes.io/job-name"

# Volcano gang scheduling.
VOLCANO_GROUP_NAME: Final = "scheduling.k8s.io/group-name"
VOLCANO_TASK_SPEC: Final = "volcano.sh/task-spec"
VOLCANO_PODGROUP_API: Final = "scheduling.volcano.sh/v1beta1"

# scheduler-plugins coscheduling: the pod's PodGroup, and the name its scheduler usually runs as.
COSCHEDULING_POD_GROUP: Final = "scheduling.x-k8s.io/pod-group"
COSCHEDULING_PODGROUP_API: Final = "scheduling.x-k8s.io/v1alpha1"
DEFAULT_COSCHEDULING_SCHEDULER: Final = "scheduler-plugins-scheduler"

# Kueue plain-pod groups (Kueue v0.19, pkg/controller/jobs/pod/constants).
KUEUE_QUEUE_NAME: Final = "kueue.x-k8s.io/queue-name"  # label: the LocalQueue
KUEUE_POD_GROUP_NAME: Final = "kueue.x-k8s.io/pod-group-name"  # label: the group (Workload)
KUEUE_POD_GROUP_TOTAL_COUNT: Final = "kueue.x-k8s.io/pod-group-total-count"  # annotation
KUEUE_MANAGED: Final = "kueue.x-k8s.io/managed"  # label "true", and Kueue's finalizer's name
KUEUE_ADMISSION_GATE: Final = "kueue.x-k8s.io/admission"  # scheduling gate until admitted
# On one pod of a finished group: Kueue then marks the group's Workload Finished and frees its
# quota (pkg/controller/jobs/pod); Kueue refuses to remove it again.
KUEUE_RETRIABLE_IN_GROUP: Final = "kueue.x-k8s.io/retriable-in-group"
KUEUE_STOPPED: Final = "TerminationTarget"  # pod condition: Kueue stopped (preempted) the pod
DISRUPTION_TARGET: Final = "DisruptionTarget"  # pod condition: evicted or preempted
# Kueue Topology Aware Scheduling (v0.19, apis/kueue/v1beta2 constants): pod annotations.
KUEUE_REQUIRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED_TOPOLOGY: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_POD_INDEX_LABEL: Final = "kueue.x-k8s.io/pod-group-pod-index-label"  # names the index label

# Kubernetes' own gang (workload-aware scheduling, KEP-4671/5832): a pod names its PodGroup in
# the immutable `spec.schedulingGroup.podGroupName`. The versions that carry it, newest first:
# v1alpha2 (Kubernetes 1.36, its PodGroup's spec immutable), v1alpha3 and v1beta1 (1.37,
# `schedulingPolicy.gang.minCount` mutable).
KUBERNETES_SCHEDULING_GROUP: Final = "scheduling.k8s.io"
KUBERNETES_PODGROUP_APIS: Final = (
    "scheduling.k8s.io/v1beta1",
    "scheduling.k8s.io/v1alpha3",
    "scheduling.k8s.io/v1alpha2",
)
KUBERNETES_IMMUTABLE_PODGROUP_APIS: Final = ("scheduling.k8s.io/v1alpha2",)

# NVIDIA KAI scheduler (v0.17, pkg/common/constants): a PodGroup made outside its podgrouper,
# which pods join by annotation, with the podgrouper told to leave them alone (docs/batch).
KAI_PODGROUP_API: Final = "scheduling.run.ai/v2alpha2"
KAI_SCHEDULER_NAME: Final = "kai-scheduler"
KAI_POD_GROUP: Final = "pod-group-name"  # pod annotation: the PodGroup
KAI_SKIP_PODGROUPER: Final = "kai.scheduler/skip-podgrouper"  # pod annotation "true"
KAI_QUEUE: Final = "kai.scheduler/queue"  # pod label: the queue

# Kubernetes limits that the webhook must stay under.
ANNOTATIONS_TOTAL_LIMIT: Final = 256 * 1024
# A large job's peer lists are one ConfigMap, stored in etcd as one object of at most 1 MiB; its
# metadata (owner references to every workload of the job) gets what the data leaves.
CONFIGMAP_DATA_LIMIT: Final = 1024 * 1024 - 16 * 1024
# A large job's peer lists live in one ConfigMap (at most 1 MiB); past this many pods they cannot
# fit it anyway, so larger stamps are refused before any work is spent on them.
MAX_PODS_PER_JOB: Final = 10_000

WORKDIR_FILES: Final = "/etc/trainhook"
MPI_HOSTFILE_PATH: Final = "/etc/mpi/hostfile"
MPI_SSH_PATH: Final = "/root/.ssh"
MPI_DISCOVER_HOSTS_PATH: Final = "/etc/mpi/discover_hosts.sh"
VOLCANO_HOSTS_DIR: Final = "/etc/volcano"


def known_keys() -> frozenset[str]:
    """Every trainhook.io/ key of the contract: the keys defined in this module."""
    return frozenset(
        value
        for name, value in globals().items()
        if name.isupper()
        and isinstance(value, str)
        and value.startswith(PREFIX)
        and value != PREFIX
        and not value.endswith(".")
    )
