"""The thin executor: applies decided actions idempotently, one API call each."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from webhook.core import contract
from webhook.core.shape.peers import content_digest
from webhook.kube.client import ApiError, Kube
from webhook.kube.resources import COMPONENT, EVENTS, MANAGED_BY, MANAGER, Resource
from webhook.sweeper.actions import Action, Create, CreateSshSecret, Delete, Emit, Patch
from webhook.sweeper.emits import REMEMBERED, EmitBudget
from webhook.sweeper.job.state import JobKey, format_time
from webhook.sweeper.sshkeys import new_key_pair, secret_body
from webhook.sweeper.writes import WriteBudget

log = logging.getLogger("trainhook.sweeper")

EVENT_MESSAGE_LIMIT = 1024
RETRY_TAKEN = timedelta(minutes=1)


class StaleState(Exception):
    """An object changed since the state the actions were decided on; decide again."""


class NotLeading(Exception):
    """This sweeper lost its lease; another one acts now."""


class WritesDeferred(Exception):
    """The job spent its write budget: the writes left wait for a reconcile `after` seconds on."""

    def __init__(self, deferred: int, after: float) -> None:
        super().__init__(f"{deferred} writes deferred for {after:.1f}s")
        self.deferred = deferred
        self.after = after


Written = Callable[[Resource, str, str, "dict[str, Any] | None"], None]


def _ignore(resource: Resource, namespace: str, name: str, obj: dict[str, Any] | None) -> None:
    pass


class Executor:
    """`written(resource, namespace, name, object or None when gone)` hears of every write, so
    the caches can hold what was written before its watch event arrives."""

    def __init__(
        self,
        kube: Kube,
        *,
        identity: str,
        clock: Callable[[], datetime],
        may_act: Callable[[], bool] = lambda: True,
        written: Written = _ignore,
        writes: WriteBudget | None = None,
    ) -> None:
        self.kube = kube
        self.identity = identity
        self.clock = clock
        self.may_act = may_act
        self.written = written
        self.emits = EmitBudget()
        self.writes = writes or WriteBudget()
        # Names found taken by an object the sweeper does not see, and when.
        self.taken: dict[tuple[str, str, str], datetime] = {}
        # Within one decision: (plural, namespace, name, version decided on) -> version now.
        self._advanced: dict[tuple[str, str, str, str], str] = {}

    def apply(self, actions: Sequence[Action], job: JobKey | None = None, pods: int = 0) -> None:
        """Apply in order. Creating the job's Service, PodGroup or Secret and recording an Event
        depend on nothing else, so one of them failing stops none of the others; a patch or a
        delete that fails stops the patches and deletes after it (they may depend on it). The
        first failure is raised once everything that could be done is done.

        The writes of `job` (a job of `pods` pods) are paid from its write budget: once it is
        spent, that write and every write after it wait (WritesDeferred), its Events still go."""
        failed: ApiError | None = None
        ordered_failed = False
        deferred = 0
        self._advanced.clear()
        for action in actions:
            if not self.may_act():
                raise NotLeading()
            independent = isinstance(action, (Create, CreateSshSecret, Emit))
            if ordered_failed and not independent:
                continue
            if (
                not isinstance(action, Emit)
                and job is not None
                and (deferred or not self.writes.take(job, pods, self.clock()))
            ):
                deferred += 1
                continue
            try:
                done = self._apply(action)
            except ApiError as error:
                log.warning("%s failed: %s", action.describe(), error)
                failed = failed or error
                ordered_failed = ordered_failed or not independent
                continue
            log.info("%s%s", action.describe(), "" if done else " (already done)")
        if failed is not None:
            raise failed
        if deferred and job is not None:
            self._deferred(job, deferred, pods)

    def _deferred(self, job: JobKey, deferred: int, pods: int) -> None:
        after = self.writes.wait(job, self.clock())
        if self.writes.first_deferral(job):
            log.warning(
                "job %s/%s spent its write budget (%d at once, then %d a minute): %d writes "
                "deferred, the rest follow as the budget allows",
                *job,
                self.writes.capacity(pods),
                self.writes.per_minute,
                deferred,
            )
        raise WritesDeferred(deferred, after)

    def _apply(self, action: Action) -> bool:
        if isinstance(action, Create):
            return self._create_once(action)
        if isinstance(action, CreateSshSecret):
            keys = new_key_pair(f"trainhook@{action.namespace}/{action.name}")
            body = secret_body(
                namespace=action.namespace,
                name=action.name,
                labels=action.labels,
                owners=action.owners,
                config=action.ssh_config,
                keys=keys,
            )
            digest = content_digest(body["data"])
            for target in action.record_on:
                record = {"metadata": {"annotations": {contract.SSH_KEYS_DIGEST: digest}}}
                version = target.resource_version
                self._patch(Patch(target.resource, action.namespace, target.name, record, version))
            return self._create(action.resource, action.namespace, body)
        if isinstance(action, Patch):
            return self._patch(action)
        if isinstance(action, Delete):
            return self._delete(action)
        return self._emit(action)

    def _create_once(self, action: Create) -> bool:
        """Create; when the name is taken by an object the sweeper does not see (none of its
        own: its watch would show it), say so once and try again only after a while, so an
        object someone planted under the name costs no request per reconcile."""
        key = (action.resource.plural, action.namespace, str(action.body["metadata"]["name"]))
        now = self.clock()
        taken_at = self.taken.get(key)
        if taken_at is not None and now - taken_at < RETRY_TAKEN:
            return False
        self.taken.pop(key, None)
        try:
            created = self.kube.create(action.resource, action.namespace, action.body)
        except ApiError as error:
            if error.status != 409 or action.on_conflict is None:
                return self._failed_create(action.resource, error)
            self.taken[key] = now
            if len(self.taken) > REMEMBERED:
                self.taken.pop(next(iter(self.taken)))
            self._emit(action.on_conflict)
            return False
        self.written(action.resource, action.namespace, key[2], created)
        return True

    def _failed_create(self, resource: Resource, error: ApiError) -> bool:
        if error.status == 409:
            return False
        if error.status == 404 and resource.group:
            log.warning("%s are not served by this cluster; skipped", resource.plural)
            return False
        raise error

    def _create(self, resource: Resource, namespace: str, body: Mapping[str, Any]) -> bool:
        try:
            created = self.kube.create(resource, namespace, body)
        except ApiError as error:
            return self._failed_create(resource, error)
        self.written(resource, namespace, body["metadata"]["name"], created)
        return True

    def _patch(self, action: Patch) -> bool:
        patch = copy.deepcopy(dict(action.patch))
        key = (action.resource.plural, action.namespace, action.name, action.resource_version)
        # An object this decision already patched: its patches after that apply to the version
        # the first one made (which only added what the decision wanted).
        version = self._advanced.get(key, action.resource_version)
        if version:
            patch.setdefault("metadata", {})["resourceVersion"] = version
        try:
            patched = self.kube.patch(action.resource, action.namespace, action.name, patch)
        except ApiError as error:
            if error.status == 404:
                return False
            if error.status == 409:
                raise StaleState(f"{action.describe()}: {error.message}") from None
            raise
        new_version = (patched.get("metadata") or {}).get("resourceVersion")
        if action.resource_version and new_version:
            self._advanced[key] = new_version
        self.written(action.resource, action.namespace, action.name, patched)
        return True

    def _delete(self, action: Delete) -> bool:
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "propagationPolicy": "Background",
        }
        if action.uid:
            body["preconditions"] = {"uid": action.uid}
        try:
            answer = self.kube.delete(action.resource, action.namespace, action.name, body)
        except ApiError as error:
            if error.status == 404:
                self.written(action.resource, action.namespace, action.name, None)
                return False
            if error.status == 409:
                raise StaleState(f"{action.describe()}: {error.message}") from None
            raise
        lingers = answer.get("kind") == action.resource.kind and bool(
            (answer.get("metadata") or {}).get("deletionTimestamp")
        )
        self.written(action.resource, action.namespace, action.name, answer if lingers else None)
        return True

    def _emit(self, action: Emit) -> bool:
        clock = self.clock()
        if self.emits.recorded(action.namespace, action.name, clock):
            return False
        if not self.emits.allows((action.namespace, action.job), clock):
            log.info(
                "%s: job %s recorded enough Events for now; later", action.describe(), action.job
            )
            return False
        now = format_time(clock)
        involved = action.involved
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": action.name,
                "namespace": action.namespace,
                "labels": {MANAGED_BY: MANAGER},
            },
            "involvedObject": {
                "apiVersion": involved.api_version,
                "kind": involved.kind,
                "name": involved.name,
                "namespace": action.namespace,
                "uid": involved.uid,
            },
            "type": action.type,
            "reason": action.reason,
            "message": action.message[:EVENT_MESSAGE_LIMIT],
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.identity,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        created = self._create(EVENTS, action.namespace, body)
        self.emits.remember(action.namespace, action.name, clock)
        return created
