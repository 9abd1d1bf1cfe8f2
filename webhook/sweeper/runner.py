"""The sweeper process: caches fed by watches, a work queue of jobs, each job acted on by the
replica holding its shard's lease."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from webhook.core import contract
from webhook.core.frameworks import FRAMEWORKS
from webhook.core.objects import annotations_of, labels_of, metadata_of
from webhook.kube.client import ApiError, Kube
from webhook.kube.discovery import NOT_SERVED, compute_domains_served, served_podgroup_api
from webhook.kube.informer import Informer, backoff
from webhook.kube.resources import (
    COMPUTE_DOMAINS,
    CONFIGMAPS,
    COSCHEDULING_PODGROUPS,
    JOBS,
    KAI_PODGROUPS,
    KUBERNETES_PODGROUPS,
    PODGROUPS,
    PODS,
    SECRETS,
    SERVICES,
    STATEFULSETS,
    Resource,
)
from webhook.sweeper.actions import Emit, annotations_written
from webhook.sweeper.decide import decide
from webhook.sweeper.executor import Executor, NotLeading, StaleState, WritesDeferred
from webhook.sweeper.heap import Heap
from webhook.sweeper.informers import (
    OPTIONAL,
    OWNED_SELECTOR,
    PodTables,
    selectors,
    watches,
)
from webhook.sweeper.job.pods import pod_peers
from webhook.sweeper.job.state import JobKey, JobState, WorkloadViews, job_key, read_job_state
from webhook.sweeper.lease import ShardElector, shard_of
from webhook.sweeper.node_watch import NodeWatch, names_nodes
from webhook.sweeper.queue import WorkQueue
from webhook.sweeper.serving.goodput import recorded_ledger, statuses_written
from webhook.sweeper.serving.health import SweeperHealth
from webhook.sweeper.writes import BURST, PER_MINUTE, WriteBudget

log = logging.getLogger("trainhook.sweeper")

CONFLICT_RETRIES = 3
# A change to a job is looked at after its batch period (SweeperConfig.batch_seconds), or after
# 10 times its last reconcile took when that is longer (at most 2 s): the pod events of a job
# arriving meanwhile share one reconcile, so a job's Ready churn costs at most one look a period,
# and the sweeper spends at most a tenth of its time on any one busy job.
COALESCE_FACTOR = 10.0
COALESCE_MAX = 2.0
BATCH_SECONDS = 1.0
# A pod watch that trickles is read at most every half batch period (at most this often): an
# event waits no more than that to join its job's look, and the events of that time cost one
# wake-up of the watching thread, not one each (WatchStream).
TRICKLE_PAUSE_MAX = 0.5


def trickle_pause(batch_seconds: float) -> float:
    """How long the pods' watches wait between reads of a trickle, for a batch period."""
    return min(TRICKLE_PAUSE_MAX, batch_seconds / 2)


# On shutdown, how long the threads get to end once the leases are given up (they are daemon
# threads: whatever still waits on the API server ends with the process).
JOIN_SECONDS = 1.0


@dataclass(frozen=True)
class SweeperConfig:
    identity: str
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    resync_seconds: float = 60.0
    lease_name: str = "trainhook-sweeper"
    lease_namespace: str = "default"
    lease_duration_seconds: int = 15
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    backoff_base: float = 1.0  # first delay after an API error; doubles up to a minute
    cluster_domain: str = ""  # the webhook's --cluster-domain, for large jobs' peer lists
    shards: int = 1  # jobs are split into this many shards, each with its own Lease
    replicas: int = 1  # replicas expected to share them: each takes shards / replicas at first
    writes_per_minute: int = PER_MINUTE  # each job's write budget (writes.py)
    write_burst: int = BURST  # plus one per pod of the job
    # A job's watch events within this window share one look at it (as the Job controller's
    # one-second batch period for pod events): its first event is acted on this much later.
    batch_seconds: float = BATCH_SECONDS
    # A full pass of the cyclic garbage collector at an idle moment at most this often, what
    # survives it frozen (heap.py); 0: the interpreter's own passes only.
    heap_seconds: float = 0.0


def fetch_state(
    kube: Kube,
    key: JobKey,
    cluster_domain: str = "",
    kubernetes_podgroup_api: str | None = None,
    compute_domains: bool = False,
) -> JobState:
    """A job's state read straight from the API, for deciding again after a conflict."""
    namespace, job = key
    found: dict[Resource, list[dict[str, Any]]] = {}
    for resource, selector in selectors(kubernetes_podgroup_api, compute_domains).items():
        if resource == PODS:
            selector = f"{contract.JOB}={job}"
        elif selector == OWNED_SELECTOR:
            selector = f"{OWNED_SELECTOR},{contract.JOB}={job}"
        try:
            items, _ = kube.list(resource, namespace, selector)
        except ApiError as error:
            if resource in OPTIONAL and error.status == 404:
                items = []
            else:
                raise
        found[resource] = [obj for obj in items if job_key(resource, obj) == key]
    workloads = found[STATEFULSETS] + found[JOBS]
    return read_job_state(
        namespace,
        job,
        workloads=workloads,
        pods=found[PODS],
        services=found[SERVICES],
        podgroups=found[PODGROUPS],
        coscheduling_podgroups=found[COSCHEDULING_PODGROUPS],
        kai_podgroups=found[KAI_PODGROUPS],
        kubernetes_podgroups=_kubernetes_podgroups(found, kubernetes_podgroup_api),
        kubernetes_podgroup_api=kubernetes_podgroup_api,
        secrets=ssh_secret(kube, key, workloads + found[PODS]),
        configmaps=found[CONFIGMAPS]
        + unlabelled_peers(kube, key, mounting(found[PODS]), found[CONFIGMAPS]),
        compute_domains=found.get(COMPUTE_DOMAINS, []),
        compute_domains_served=compute_domains,
        cluster_domain=cluster_domain,
    )


def _kubernetes_podgroups(
    found: Mapping[Resource, list[dict[str, Any]]], api: str | None
) -> list[dict[str, Any]]:
    return found[KUBERNETES_PODGROUPS[api]] if api is not None else []


def discover_podgroup_api(kube: Kube) -> str | None:
    """The Kubernetes PodGroup version the cluster serves, said once at start-up."""
    try:
        api = served_podgroup_api(kube)
    except ApiError as error:
        log.warning(
            "cannot ask which scheduling.k8s.io PodGroup the cluster serves (%s): jobs with "
            "trainhook.io/scheduler: kubernetes get no PodGroup until the sweeper restarts",
            error.message,
        )
        return None
    if api is None:
        log.info("%s; jobs with trainhook.io/scheduler: kubernetes get no PodGroup", NOT_SERVED)
    else:
        log.info("Kubernetes' own gang scheduling: PodGroups of %s", api)
    return api


def discover_compute_domains(kube: Kube) -> bool:
    """Whether the cluster serves ComputeDomains, said once at start-up."""
    try:
        served = compute_domains_served(kube)
    except ApiError as error:
        log.warning(
            "cannot ask whether the cluster serves ComputeDomains (%s): jobs with "
            "trainhook.io/nvlink-domain get none until the sweeper restarts",
            error.message,
        )
        return False
    if served:
        log.info("NVLink domains: ComputeDomains of %s", COMPUTE_DOMAINS.api_version)
    else:
        log.info(
            "this cluster serves no ComputeDomain of %s; jobs with trainhook.io/nvlink-domain "
            "are said to wait for it",
            COMPUTE_DOMAINS.api_version,
        )
    return served


def ssh_secret(
    kube: Kube, key: JobKey, members: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """The job's `<job>-ssh` Secret, read by name, when its framework uses one (or the job has no
    workloads left, so that one the sweeper made is cleaned up); else nothing is read."""
    frameworks = {labels_of(obj).get(contract.FRAMEWORK) for obj in members} - {None}
    if (
        frameworks
        and not any(
            (framework := FRAMEWORKS.get(name or "")) is not None and framework.ssh_keys
            for name in frameworks
        )
        and not any(_asks_for_ssh_keys(obj) for obj in members)
    ):
        return []
    namespace, job = key
    try:
        return [kube.get(SECRETS, namespace, f"{job}-ssh")]
    except ApiError as error:
        if error.status == 404:
            return []
        raise


def _asks_for_ssh_keys(obj: Mapping[str, Any]) -> bool:
    """A workload (or its pod template) or pod with trainhook.io/ssh-keys: "true"."""
    template = (obj.get("spec") or {}).get("template") or {}
    on_template = (template.get("metadata") or {}).get("annotations") or {}
    found = (annotations_of(obj).get(contract.SSH_KEYS), on_template.get(contract.SSH_KEYS))
    return "true" in found


# At most this many peers ConfigMaps are read by name for a job on one reconcile: a job's pods
# mount one (two while it changes its topology), whatever pods carrying its label claim.
PEERS_READ = 2


def mounting(pods: Iterable[Mapping[str, Any]]) -> Counter[str]:
    """How many of the job's pods mount each of its peers ConfigMaps."""
    return Counter(name for pod in pods if (name := pod_peers(pod)) is not None)


def unlabelled_peers(
    kube: Kube, key: JobKey, mounting: Mapping[str, int], labelled: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The peers ConfigMaps that the job's pods mount (`mounting`: by how many pods) and that
    the watch of labelled ones does not hold, read by name: one made by someone else under the
    job's name is then seen, judged by its content, and never created over again."""
    namespace, _ = key
    held = {metadata_of(obj).get("name") for obj in labelled}
    mounted = Counter({name: count for name, count in mounting.items() if name not in held})
    found = []
    for name, _ in mounted.most_common(PEERS_READ):
        try:
            found.append(kube.get(CONFIGMAPS, namespace, name))
        except ApiError as error:
            if error.status != 404:
                raise
    return found


class Sweeper:
    def __init__(
        self,
        kube: Kube,
        config: SweeperConfig,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.kube = kube
        self.config = config
        self.clock = clock
        self.queue = WorkQueue()
        self.kubernetes_podgroup_api = discover_podgroup_api(kube)
        self.compute_domains = discover_compute_domains(kube)
        self.selectors = selectors(self.kubernetes_podgroup_api, self.compute_domains)
        self.pod_tables = PodTables()
        self.workload_views = WorkloadViews()
        self.watches = watches(
            kube,
            namespaces=config.namespaces,
            on_change=self._changed,
            resync_seconds=config.resync_seconds,
            backoff_base=config.backoff_base,
            watched=self.selectors,
            pod_tables=self.pod_tables,
            pods_trickle_pause=trickle_pause(config.batch_seconds),
        )
        self.nodes = NodeWatch(
            kube,
            on_change=self._changed,
            resync_seconds=config.resync_seconds,
            backoff_base=config.backoff_base,
        )
        self.elector = ShardElector(
            kube,
            namespace=config.lease_namespace,
            name=config.lease_name,
            identity=config.identity,
            shards=config.shards,
            replicas=config.replicas,
            duration_seconds=config.lease_duration_seconds,
            renew_deadline=config.renew_deadline,
            retry_period=config.retry_period,
        )
        self.executor = Executor(
            kube,
            identity=config.identity,
            clock=clock,
            may_act=self._may_act,
            written=self._written,
            writes=WriteBudget(config.writes_per_minute, config.write_burst),
        )
        self._acting_on: JobKey | None = None
        self._stopping = threading.Event()
        self._failures: dict[JobKey, int] = {}
        self._costs: dict[JobKey, float] = {}  # seconds the job's last reconcile took
        self.health = SweeperHealth(queue_depth=lambda: len(self.queue))
        self.heap = Heap(config.heap_seconds)
        # Told of each job gone (the progress endpoint forgets what it kept of its ranks).
        self.on_gone: list[Callable[[JobKey], None]] = []

    def run(self, stop: threading.Event) -> None:
        """Sweep until `stop` is set; then give the leases up at once and return within a few
        seconds, whether the API server answers or not."""
        threads = [
            threading.Thread(
                target=informer.run,
                name=f"watch-{resource.plural}" + (f"-{namespace}" if namespace else ""),
                daemon=True,
            )
            for (resource, namespace), informer in self.watches.items()
        ]
        elector = threading.Thread(target=self.elector.run, name="lease", daemon=True)
        worker = threading.Thread(target=self._work, name="reconcile", daemon=True)
        for thread in [*threads, elector, worker]:
            thread.start()
        log.info(
            "sweeper %s started, watching %s%s",
            self.config.identity,
            (
                f"namespace{'s' if len(self.config.namespaces) > 1 else ''} "
                + ", ".join(self.config.namespaces)
                if self.config.namespaces
                else "every namespace"
            ),
            f", {self.config.shards} shards" if self.config.shards > 1 else "",
        )
        try:
            while not stop.wait(0.5) and worker.is_alive():
                pass
        finally:
            # A reconcile waiting on the API server is not waited for: it writes nothing more
            # (may_act), and a write already sent carries its preconditions.
            self._stopping.set()
            self.elector.stop()
            for informer in self.watches.values():
                informer.stop()
            self.nodes.stop()
            self.elector.release()
            deadline = time.monotonic() + JOIN_SECONDS
            for thread in [worker, elector, *threads]:
                thread.join(max(0.0, deadline - time.monotonic()))
            log.info("sweeper %s stopped", self.config.identity)

    def _work(self) -> None:
        """Reconcile the jobs of the shards this replica holds, as they come due."""
        held: frozenset[int] = frozenset()
        while not self._stopping.is_set():
            self.health.turned()
            self.health.set_ready(self.synced())
            now_held = self.elector.held() if self.synced() else frozenset()
            if now_held - held:
                for key in self.known_jobs():
                    if self.shard(key) in now_held - held:
                        self.queue.add(key)
            if held - now_held:
                for key in list(self.health.phases):  # the new holder counts them
                    if self.shard(key) in held - now_held:
                        self.health.job_phase(key, None)
            held = now_held
            if not held:
                self._stopping.wait(min(0.2, self.config.retry_period))
                if self.synced():
                    self.heap.tidy()
                continue
            due = self.queue.pop(timeout=min(0.5, self.config.retry_period))
            if due is None and self.synced():
                self.heap.tidy()
            elif due is not None and self.shard(due) in held:
                self.reconcile(due)

    def shard(self, key: JobKey) -> int:
        return shard_of(key, self.config.shards)

    def _may_act(self) -> bool:
        key = self._acting_on
        return not self._stopping.is_set() and key is not None and self.elector.owns(key)

    def synced(self) -> bool:
        return all(informer.synced.is_set() for informer in self.watches.values())

    def known_jobs(self) -> set[JobKey]:
        keys: set[JobKey] = set()
        for informer in self.watches.values():
            keys |= informer.keys()
        return keys

    def informer(self, resource: Resource, namespace: str) -> Informer[JobKey] | None:
        """The watch that sees `resource` in `namespace`, if any does."""
        return self.watches.get((resource, namespace)) or self.watches.get((resource, None))

    def cached_state(self, key: JobKey) -> JobState:
        """The job's state from the caches: its pods from the job's PodTable, which reads only
        the pods that changed since the job was last looked at."""
        objects: dict[Resource, list[dict[str, Any]]] = {}
        for resource in self.selectors:
            informer = self.informer(resource, key[0])
            if resource != PODS:
                objects[resource] = list(informer.objects_of(key)) if informer else []
        workloads = objects[STATEFULSETS] + objects[JOBS]
        pods = self.pod_tables.of(key)
        members: Sequence[Mapping[str, Any]] = workloads
        if not workloads:  # the framework of a job of bare pods, or of none left, is its pods'
            members = [pod for c in pods.controllers() for pod in pods.objects_of(c)]
        state = read_job_state(
            key[0],
            key[1],
            workloads=workloads,
            pod_table=pods,
            workload_views=self.workload_views,
            services=objects[SERVICES],
            podgroups=objects[PODGROUPS],
            coscheduling_podgroups=objects[COSCHEDULING_PODGROUPS],
            kai_podgroups=objects[KAI_PODGROUPS],
            kubernetes_podgroups=_kubernetes_podgroups(objects, self.kubernetes_podgroup_api),
            kubernetes_podgroup_api=self.kubernetes_podgroup_api,
            secrets=ssh_secret(self.kube, key, members),
            configmaps=objects[CONFIGMAPS]
            + unlabelled_peers(self.kube, key, pods.mounting(), objects[CONFIGMAPS]),
            compute_domains=objects.get(COMPUTE_DOMAINS, []),
            compute_domains_served=self.compute_domains,
            cluster_domain=self.config.cluster_domain,
        )
        return self._with_nodes(key, state)

    def _with_nodes(self, key: JobKey, state: JobState) -> JobState:
        """The state with the nodes its pods run on, for the rules that name them."""
        nodes = self.nodes.views(key, (pod.node for pod in state.pods), names_nodes(state))
        return replace(state, nodes=nodes) if nodes else state

    def reconcile(self, key: JobKey) -> None:
        """Decide on the cached state and act; on a conflict decide again on fresh state."""
        now = self.clock()
        began = time.monotonic()
        self._acting_on = key
        try:
            state = self.cached_state(key)
            for _ in range(CONFLICT_RETRIES):
                decision = decide(state, now)
                self._goodput(key, state, decision.actions)
                pods = sum(workload.replicas for workload in state.workloads)
                try:
                    self.executor.apply(decision.actions, key, pods)
                except WritesDeferred as deferred:
                    self.health.writes_deferred.inc(deferred.deferred)
                    self._failures.pop(key, None)
                    self._decided(key, decision.phase, decision.actions)
                    self.queue.add(key, deferred.after)
                    return
                except StaleState as stale:
                    log.info("job %s/%s: %s; deciding again on fresh state", *key, stale)
                    state = self._with_nodes(
                        key,
                        fetch_state(
                            self.kube,
                            key,
                            self.config.cluster_domain,
                            self.kubernetes_podgroup_api,
                            self.compute_domains,
                        ),
                    )
                    continue
                self._failures.pop(key, None)
                self._decided(key, decision.phase, decision.actions)
                if decision.recheck_at is not None:
                    self.queue.add(key, (decision.recheck_at - now).total_seconds())
                if any(contract.FAILED_RUNS in a for a in annotations_written(decision.actions)):
                    # The job's pod table retires the pods a ledger counts when a look reads
                    # it: a look right after this write, not whichever pod event comes next
                    # (after a blip, thousands of pods at once).
                    self.queue.add(key, self.config.batch_seconds)
                return
            self.health.errors.labels("conflict").inc()
            self._retry_later(key, f"conflicts {CONFLICT_RETRIES} times in a row")
        except NotLeading:
            self.queue.add(key)
        except ApiError as error:
            self.health.errors.labels("api").inc()
            self._retry_later(key, str(error))
        except Exception:
            log.exception("job %s/%s: unexpected error", *key)
            self.health.errors.labels("unexpected").inc()
            self._retry_later(key, "unexpected error")
        finally:
            self._acting_on = None
            took = time.monotonic() - began
            self.health.reconciles.observe(took)
            if key in self.health.phases:  # a job that is gone is forgotten
                self._costs[key] = took
            else:
                self._costs.pop(key, None)
                self.pod_tables.forget_if_empty(key)

    def _goodput(self, key: JobKey, state: JobState, actions: tuple[Any, ...]) -> None:
        """The job's goodput ledger as this decision records it, for /metrics."""
        ledger, step = recorded_ledger(
            statuses_written(actions)
            or [w.annotations.get(contract.STATUS) for w in state.workloads],
            [w.annotations for w in state.workloads],
        )
        self.health.goodput.seen(key, ledger, step)
        self.health.pod_info.seen(key, state.pods)

    def _decided(self, key: JobKey, phase: str | None, actions: tuple[Any, ...]) -> None:
        self.health.job_phase(key, phase)
        if phase is None:
            self.health.goodput.seen(key, None, None)
            self.health.pod_info.seen(key, None)
            for gone in self.on_gone:
                gone(key)
        restarts = sum(1 for a in actions if isinstance(a, Emit) and a.reason == "Restarting")
        if restarts:
            self.health.restarts.inc(restarts)

    def _written(
        self, resource: Resource, namespace: str, name: str, obj: dict[str, Any] | None
    ) -> None:
        informer = self.informer(resource, namespace)
        if informer is None:
            return
        if obj is None:
            informer.forget(namespace, name)
        else:
            informer.remember(obj)

    def _changed(self, key: JobKey) -> None:
        # A change is news even for a job backing off after an error: decide on it soon; the
        # events of a job within its batch period, and those of a busy large job, share one
        # look (COALESCE_FACTOR). A job of a shard held elsewhere is dropped when it comes due,
        # and queued again if its shard is taken over.
        busy = min(COALESCE_MAX, COALESCE_FACTOR * self._costs.get(key, 0.0))
        self.queue.add(key, max(self.config.batch_seconds, busy))

    def _retry_later(self, key: JobKey, why: str) -> None:
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = backoff(failures, self.config.backoff_base)
        log.warning("job %s/%s: %s; retrying in %.1fs", key[0], key[1], why, delay)
        self.queue.add(key, delay)
