"""What the sweeper decides to do: plain values the executor applies, one API call each."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from webhook.kube.resources import SECRETS, Resource

if TYPE_CHECKING:
    from webhook.sweeper.job.state import JobState, WorkloadView


@dataclass(frozen=True)
class ObjectRef:
    api_version: str
    kind: str
    name: str
    uid: str


@dataclass(frozen=True)
class Create:
    """Create an object; one that already exists counts as done."""

    resource: Resource
    namespace: str
    body: Mapping[str, Any]
    # Recorded when the name is taken by an object the sweeper does not see as its own.
    on_conflict: Emit | None = None

    def describe(self) -> str:
        return f"create {self.resource.kind} {self.namespace}/{self.body['metadata']['name']}"


@dataclass(frozen=True)
class Recorded:
    """An object the digest of the SSH Secret's data is recorded on, as it was decided on."""

    resource: Resource
    name: str
    resource_version: str


@dataclass(frozen=True)
class CreateSshSecret:
    """Create the MPI SSH Secret; the executor makes the key pair, so decisions stay pure. It
    first records the digest of the Secret's data on `record_on` (the job's workloads): a Secret
    under the name with other data is not the one it made."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    owners: tuple[Mapping[str, Any], ...]
    ssh_config: str
    record_on: tuple[Recorded, ...] = ()
    resource: Resource = field(default=SECRETS, init=False)

    def describe(self) -> str:
        return f"create Secret {self.namespace}/{self.name} with a new SSH key pair"


@dataclass(frozen=True)
class Patch:
    """A JSON merge patch; with a resourceVersion it applies only to the state it was decided on."""

    resource: Resource
    namespace: str
    name: str
    patch: Mapping[str, Any]
    resource_version: str = ""

    def describe(self) -> str:
        return f"patch {self.resource.kind} {self.namespace}/{self.name}"


def workload_patch(state: JobState, workload: WorkloadView, patch: Mapping[str, Any]) -> Patch:
    """A patch of one of the job's workloads, applied only to the version of it decided on."""
    return Patch(
        workload.resource, state.namespace, workload.name, patch, workload.resource_version
    )


def annotations_written(actions: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    """The annotations each merge patch among `actions` writes."""
    for action in actions:
        patch = getattr(action, "patch", None)
        yield ((patch or {}).get("metadata") or {}).get("annotations") or {}


@dataclass(frozen=True)
class Delete:
    """Delete an object, only if it is still the one seen (same uid); a missing one is done."""

    resource: Resource
    namespace: str
    name: str
    uid: str = ""

    def describe(self) -> str:
        return f"delete {self.resource.kind} {self.namespace}/{self.name}"


@dataclass(frozen=True)
class Emit:
    """Record a Kubernetes Event; its name is derived from what it says, so it is recorded once."""

    namespace: str
    name: str
    involved: ObjectRef
    type: str  # Normal or Warning
    reason: str
    message: str
    job: str = ""  # the job it is about: Events are bounded per job

    def describe(self) -> str:
        return f"event {self.reason} on {self.involved.kind} {self.namespace}/{self.involved.name}"


Action = Create | CreateSshSecret | Patch | Delete | Emit


@dataclass(frozen=True)
class Decision:
    actions: tuple[Action, ...] = ()
    recheck_at: datetime | None = None  # look at the job again then, even if nothing changes
    phase: str | None = None  # the job's phase as decided (None: the job is gone), for metrics
