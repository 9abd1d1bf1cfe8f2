"""The Argo CD health check reports a training job's phase, run by Lua 5.1 the way Argo CD runs it.

Argo CD runs a custom health check in gopher-lua (Lua 5.1) with the live object as the global
`obj`, only the base, table, package and a reduced os library opened (no string library), and
takes the table the chunk returns as the health status. `argocd_health` reproduces that with
lupa's Lua 5.1. The finished objects are made by the sweeper's own decision, applied as the merge
patch the sweeper sends.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import pytest
import yaml
from lupa import lua51  # type: ignore[import-untyped]

from tests.chart.rendering import REPO
from tests.support.stored import indexed_job, pod, stamped, statefulset
from tests.sweeper.helpers import decision, of_type
from webhook.core import contract
from webhook.core.job.progress import summary_text
from webhook.core.job.workload import job_of
from webhook.sweeper.actions import Patch

ARGOCD = REPO / "examples" / "argocd"
SCRIPT = (ARGOCD / "trainhook-health.lua").read_text()
STATUSES = ("Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown")

# What Argo CD opens for a custom check (util/lua: package, base, table and a safe os), and no
# string methods on strings.
_RUNNER = """
function(source, obj)
  local env = {}
  for _, name in ipairs({"assert", "error", "getmetatable", "ipairs", "next", "pairs", "pcall",
      "print", "rawequal", "rawget", "rawset", "select", "setmetatable", "tonumber", "tostring",
      "type", "unpack", "xpcall", "_VERSION", "require", "module"}) do
    env[name] = _G[name]
  end
  env.table = table
  env.package = package
  env.os = {time = os.time, date = os.date, clock = os.clock}
  env._G = env
  env.obj = obj
  local chunk = assert(loadstring(source, "health.lua"))
  setfenv(chunk, env)
  local strings = getmetatable("")
  local methods = strings.__index
  strings.__index = nil
  local ok, result = pcall(chunk)
  strings.__index = methods
  if not ok then error(result, 0) end
  return result
end
"""


@cache
def _lua() -> tuple[Any, Any]:
    runtime = lua51.LuaRuntime(unpack_returned_tuples=False)
    assert runtime.eval("_VERSION") == "Lua 5.1"
    return runtime, runtime.eval(_RUNNER)


def argocd_health(obj: Mapping[str, Any], script: str = SCRIPT) -> dict[str, str]:
    """The health Argo CD shows for `obj` with `script` as its custom health check."""
    runtime, run = _lua()
    returned = run(script, runtime.table_from(obj, recursive=True))
    health = dict(returned.items())
    assert set(health) <= {"status", "message"}
    assert health["status"] in STATUSES
    return {"status": health["status"], "message": health.get("message") or ""}


def merged(target: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """A JSON merge patch (RFC 7386) applied to a copy of `target`."""
    result = copy.deepcopy(target)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def live(obj: dict[str, Any], **status: Any) -> dict[str, Any]:
    """`obj` as the API server and its controller show it: defaulted, observed, with a status."""
    result = copy.deepcopy(obj)
    result["metadata"]["generation"] = 1
    if result["kind"] == "StatefulSet":
        result["spec"].setdefault(
            "updateStrategy", {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}}
        )
        replicas = result["spec"]["replicas"]
        result["status"] = {
            "observedGeneration": 1,
            "replicas": replicas,
            "readyReplicas": replicas,
            "currentReplicas": replicas,
            "updatedReplicas": replicas,
            "currentRevision": "rev-1",
            "updateRevision": "rev-1",
            **status,
        }
    else:
        result["status"] = {**result.get("status", {}), **status}
    return result


def finished_by_the_sweeper(
    workloads: Sequence[dict[str, Any]], pods: Sequence[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The workloads after the sweeper's patches for a job that has just finished."""
    job = job_of(workloads[0])
    assert job is not None
    patches = {p.name: p.patch for p in of_type(decision(job, workloads, pods).actions, Patch)}
    assert set(patches) == {w["metadata"]["name"] for w in workloads}
    return [merged(w, patches[w["metadata"]["name"]]) for w in workloads]


def pytorch_job(annotations: dict[str, str] | None = None) -> list[dict[str, Any]]:
    master = statefulset("pt-master", role="master", job="pt", annotations=annotations)
    workers = statefulset("pt-worker", role="worker", job="pt", replicas=2, annotations=annotations)
    return stamped(master, workers)


def test_the_configmap_installs_the_script_for_statefulsets_and_jobs() -> None:
    configmap = yaml.safe_load((ARGOCD / "argocd-cm-health.yaml").read_text())
    assert configmap["data"] == {
        "resource.customizations.health.apps_StatefulSet": SCRIPT,
        "resource.customizations.health.batch_Job": SCRIPT,
    }


def test_a_running_statefulset_job_is_progressing_with_its_ready_pods() -> None:
    master, workers = pytorch_job()
    assert argocd_health(live(workers, readyReplicas=1)) == {
        "status": "Progressing",
        "message": "training job pt running: 1 of 2 pods ready",
    }
    # Every pod ready is still a job that trains, not a finished one.
    assert argocd_health(live(master)) == {
        "status": "Progressing",
        "message": "training job pt running: 1 of 1 pods ready",
    }


def test_a_job_that_reports_progress_says_how_far_it_is_while_it_runs() -> None:
    summary = {
        "progress": 45,
        "step": 450,
        "totalSteps": 1000,
        "etaSeconds": 795,
        "checkpoint": {"step": 400},
    }
    _, workers = pytorch_job({contract.PROGRESS_TEXT: summary_text(summary)})
    assert argocd_health(live(workers, readyReplicas=2)) == {
        "status": "Progressing",
        "message": "training job pt running: 2 of 2 pods ready; 45%, step 450/1000, 13m left, "
        "checkpoint at step 400",
    }
    [job] = stamped(
        indexed_job("mpi-run", completions=2, annotations={contract.PROGRESS_TEXT: "step 10"})
    )
    assert argocd_health(live(job, active=2))["message"] == (
        "training job mpi-run running: 2 active, 0 of 2 succeeded; step 10"
    )


def test_a_succeeded_statefulset_job_is_healthy_on_every_workload() -> None:
    master, workers = pytorch_job()
    pods = [pod(master, 0, exit_code=0), pod(workers, 0), pod(workers, 1)]
    for finished in finished_by_the_sweeper([master, workers], pods):
        assert finished["spec"]["replicas"] == 0
        assert argocd_health(live(finished)) == {
            "status": "Healthy",
            "message": "training job pt succeeded (Completed) at 2025-01-01T01:00:00Z",
        }


def test_a_failed_statefulset_job_is_degraded_where_the_built_in_check_says_healthy() -> None:
    master, workers = pytorch_job({contract.BACKOFF_LIMIT: "0"})
    pods = [pod(master, 0), pod(workers, 0, restarts=1, last_exit_code=2), pod(workers, 1)]
    finished = live(finished_by_the_sweeper([master, workers], pods)[1])
    assert finished["metadata"]["annotations"][contract.PHASE] == "Failed"
    assert argocd_health(finished) == {
        "status": "Degraded",
        "message": "training job pt failed (BackoffLimitExceeded) at 2025-01-01T01:00:00Z",
    }
    # Without the label, the same StatefulSet scaled to 0 is what Argo CD calls Healthy.
    del finished["metadata"]["labels"][contract.FRAMEWORK]
    assert argocd_health(finished)["status"] == "Healthy"


def test_an_indexed_job_reports_running_succeeded_and_failed() -> None:
    job = stamped(indexed_job("mpi-run", completions=2))[0]
    assert argocd_health(live(job)) == {
        "status": "Progressing",
        "message": "training job mpi-run running: 2 active, 0 of 2 succeeded",
    }
    pods = [pod(job, 0, phase="Succeeded", exit_code=0), pod(job, 1, phase="Succeeded")]
    (succeeded,) = finished_by_the_sweeper([job], pods)
    assert argocd_health(live(succeeded))["status"] == "Healthy"
    failed_status = {
        "startTime": "2025-01-01T00:00:05Z",
        "failed": 3,
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "BackoffLimitExceeded",
                "message": "Job has reached the specified backoff limit",
            }
        ],
    }
    failing = stamped(indexed_job("mpi-run", completions=2, status=failed_status))[0]
    # Before the sweeper has recorded it, the Job's own Failed condition already says so.
    assert argocd_health(live(failing)) == {
        "status": "Degraded",
        "message": "training job mpi-run failed: Job has reached the specified backoff limit",
    }
    (recorded,) = finished_by_the_sweeper([failing], [])
    assert argocd_health(live(recorded)) == {
        "status": "Degraded",
        "message": "training job mpi-run failed (JobFailed) at 2025-01-01T01:00:00Z",
    }


def test_a_statefulset_job_scaled_to_zero_before_it_finished_is_suspended() -> None:
    master, _ = pytorch_job()
    master["spec"]["replicas"] = 0
    assert argocd_health(live(master)) == {
        "status": "Suspended",
        "message": "training job pt scaled to 0",
    }


def test_a_suspended_indexed_job_that_never_started_is_suspended() -> None:
    job = stamped(indexed_job("queued", completions=2, suspend=True, status={}))[0]
    assert argocd_health(live(job)) == {
        "status": "Suspended",
        "message": "training job queued suspended",
    }


def test_a_phase_the_sweeper_never_writes_leaves_the_job_progressing() -> None:
    (master, _) = pytorch_job()
    master["metadata"]["annotations"][contract.PHASE] = "Pending"
    assert argocd_health(live(master))["status"] == "Progressing"


def unlabelled_statefulset(**status: Any) -> dict[str, Any]:
    obj = live(statefulset("db", replicas=3), **status)
    del obj["metadata"]["labels"][contract.FRAMEWORK]
    return obj


@pytest.mark.parametrize(
    ("change", "status", "expected"),
    [
        (
            {},
            {"observedGeneration": 0},
            ("Progressing", "Waiting for statefulset spec update to be observed..."),
        ),
        ({}, {"readyReplicas": 1}, ("Progressing", "Waiting for 2 pods to be ready...")),
        (
            {"updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}},
            {"updatedReplicas": 1},
            (
                "Progressing",
                "Waiting for partitioned roll out to finish: 1 out of 2 new pods have been "
                "updated...",
            ),
        ),
        (
            {},
            {},
            ("Healthy", "partitioned roll out complete: 3 new pods have been updated..."),
        ),
        (
            {"updateStrategy": {"type": "OnDelete"}},
            {"updatedReplicas": 1},
            ("Healthy", "statefulset has 3 ready pods (1 updated)"),
        ),
        (
            {"updateStrategy": {"type": "RollingUpdate"}},
            {"updateRevision": "rev-2", "updatedReplicas": 1},
            (
                "Progressing",
                "waiting for statefulset rolling update to complete 1 pods at revision rev-2...",
            ),
        ),
        (
            {"updateStrategy": {"type": "RollingUpdate"}},
            {},
            ("Healthy", "statefulset rolling update complete 3 pods at revision rev-1..."),
        ),
    ],
)
def test_an_unlabelled_statefulset_keeps_argo_cds_built_in_health(
    change: dict[str, Any], status: dict[str, Any], expected: tuple[str, str]
) -> None:
    obj = unlabelled_statefulset(**status)
    obj["spec"].update(change)
    assert argocd_health(obj) == {"status": expected[0], "message": expected[1]}


def plain_job(*conditions: dict[str, str]) -> dict[str, Any]:
    obj = live(indexed_job("batch", completions=1), conditions=list(conditions))
    del obj["metadata"]["labels"][contract.FRAMEWORK]
    return obj


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ((), ("Progressing", "")),
        (({"type": "Complete", "status": "True", "message": "done"},), ("Healthy", "done")),
        (
            ({"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"},),
            ("Degraded", "BackoffLimitExceeded"),
        ),
        (
            ({"type": "Suspended", "status": "True", "message": "Job suspended"},),
            ("Suspended", "Job suspended"),
        ),
        (
            ({"type": "Suspended", "status": "False", "message": "Job resumed"},),
            ("Healthy", "Job resumed"),
        ),
    ],
)
def test_an_unlabelled_job_keeps_argo_cds_built_in_health(
    conditions: tuple[dict[str, str], ...], expected: tuple[str, str]
) -> None:
    assert argocd_health(plain_job(*conditions)) == {"status": expected[0], "message": expected[1]}


def test_the_script_runs_without_the_string_library_as_argo_cd_runs_it() -> None:
    # The harness is faithful: a check calling a string method fails here as in Argo CD.
    calling = 'return {status = "Healthy", message = ("x"):upper()}'
    with pytest.raises(Exception, match="attempt to index"):
        argocd_health(unlabelled_statefulset(), calling)
    with pytest.raises(Exception, match="string"):
        argocd_health(unlabelled_statefulset(), 'return {status = string.upper("x")}')
