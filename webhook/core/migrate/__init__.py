"""`trainhook migrate`: an operator's job in, the labelled workloads that do the same out.

Pure: manifests as plain data in, workloads and one-line notes out. One module per source
family; `SOURCES` says which reads what, so a new kind is one row there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from webhook.core.migrate.base import Fields, Job, Migration, MigrationError, Notes, workloads
from webhook.core.migrate.jobset import migrate_jobset
from webhook.core.migrate.kubeflow import KINDS, migrate_replica_job
from webhook.core.migrate.paddle_operator import migrate_paddle_operator
from webhook.core.migrate.trainer import RuntimeKey, Runtimes, migrate_trainjob, runtime_key
from webhook.core.migrate.volcano import migrate_volcano
from webhook.core.render import RenderError, render_all

__all__ = [
    "SOURCES",
    "Migration",
    "MigrationError",
    "is_source",
    "migrate",
    "migrate_one",
    "runtime_key",
    "runtimes_of",
]


@dataclass(frozen=True)
class Given:
    """What a source is read with besides itself: the framework of a Volcano Job that names
    none, and the Trainer runtimes of the input, which TrainJobs name."""

    framework: str | None = None
    runtimes: Runtimes = field(default_factory=dict)


Reader = Callable[[Mapping[str, Any], tuple[str, str], Notes, Given], Job]


def _replica_job(source: Mapping[str, Any], key: tuple[str, str], notes: Notes, _: Given) -> Job:
    return migrate_replica_job(source, key, notes)


def _paddle_operator(
    source: Mapping[str, Any], key: tuple[str, str], notes: Notes, _: Given
) -> Job:
    return migrate_paddle_operator(source, key, notes)


def _volcano(source: Mapping[str, Any], key: tuple[str, str], notes: Notes, given: Given) -> Job:
    return migrate_volcano(source, key, notes, given.framework)


def _jobset(source: Mapping[str, Any], key: tuple[str, str], notes: Notes, _: Given) -> Job:
    return migrate_jobset(source, key, notes)


def _trainjob(source: Mapping[str, Any], key: tuple[str, str], notes: Notes, given: Given) -> Job:
    return migrate_trainjob(source, key, notes, given.runtimes)


# (apiVersion, kind) -> the function that reads it
SOURCES: dict[tuple[str, str], Reader] = {
    **{key: _replica_job for key in KINDS},
    ("batch.paddlepaddle.org/v1", "PaddleJob"): _paddle_operator,
    ("batch.volcano.sh/v1alpha1", "Job"): _volcano,
    ("trainer.kubeflow.org/v1alpha1", "TrainJob"): _trainjob,
    ("jobset.x-k8s.io/v1alpha2", "JobSet"): _jobset,
}
# Jobs of the operators' API groups in versions trainhook migrate does not read (older ones, as
# MPIJob v1alpha2 or TFJob v1beta2), and the training kinds it has no reader for: refused in one
# line, never passed through as if they were not jobs. (group, kind) -> what to do instead.
UNREAD: dict[tuple[str, str], str] = {
    **{
        (api.split("/")[0], kind): "an API version it does not read; rewrite the job as "
        + " or ".join(sorted(a for a, k in SOURCES if k == kind and a.split("/")[0] == group))
        + " (the fields that moved are in its operator's upgrade notes)"
        for api, kind in SOURCES
        for group in [api.split("/")[0]]
    },
    ("leaderworkerset.x-k8s.io", "LeaderWorkerSet"): "a LeaderWorkerSet serves (a group of pods "
    "per replica, restarted as one), it is no training job that ends; label its pods' "
    "StatefulSets yourself if they train",
}


def is_source(document: Any) -> bool:
    """Whether `document` is an operator's job: one trainhook migrate reads or refuses."""
    if not isinstance(document, Mapping) or runtime_key(document) is not None:
        return False
    api, kind = str(document.get("apiVersion")), str(document.get("kind"))
    return (api, kind) in SOURCES or (api.split("/")[0], kind) in UNREAD


# Top-level fields every object has; status is what the operator wrote, never carried over.
TOP_LEVEL = ("apiVersion", "kind", "metadata", "spec", "status")


def runtimes_of(documents: Sequence[Any]) -> dict[RuntimeKey, Mapping[str, Any]]:
    """The Trainer runtimes among `documents`, which TrainJobs name; they are read, not
    written."""
    found: dict[RuntimeKey, Mapping[str, Any]] = {}
    for document in documents:
        key = runtime_key(document) if isinstance(document, Mapping) else None
        if key is not None:
            found[key] = document
    return found


def migrate_one(
    source: Mapping[str, Any], framework: str | None = None, runtimes: Runtimes | None = None
) -> Migration:
    """The workloads of one operator object, and a note for every field without an exact
    equivalent. Raises MigrationError for what cannot work, including workloads the webhook
    would refuse."""
    key = (str(source.get("apiVersion")), str(source.get("kind")))
    reader = SOURCES.get(key)
    instead = UNREAD.get((key[0].split("/")[0], key[1]))
    if reader is None and instead is not None:
        raise MigrationError(f"{key[1]} ({key[0]}): not read by trainhook migrate: {instead}")
    if reader is None:
        known = ", ".join(f"{kind} ({api})" for api, kind in SOURCES)
        raise MigrationError(f"{key[1]} ({key[0]}): not a kind trainhook migrate reads ({known})")
    notes = Notes()
    job = reader(source, key, notes, Given(framework, runtimes or {}))
    top = notes.track(Fields(source, ""))
    for name in TOP_LEVEL:
        top.get(name)
    notes.report_unread()
    objects = workloads(job, notes)
    try:
        render_all(objects)
    except RenderError as error:
        raise MigrationError(f"the workloads it becomes would be refused: {error}") from None
    return Migration(objects, notes.lines, job.others)


def migrate(documents: Sequence[Any], framework: str | None = None) -> list[Migration]:
    """Every operator object in `documents`, in order; other documents are refused."""
    runtimes = runtimes_of(documents)
    return [
        migrate_one(doc, framework, runtimes)
        for doc in documents
        if doc is not None and runtime_key(doc) is None
    ]
