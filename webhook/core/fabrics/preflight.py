"""trainhook.io/preflight: a gang-wide all-reduce (`nccl`), the image's DCGM diagnostic on the
pod's GPUs (`dcgm`), or both (`nccl,dcgm`), before the job's first step.

With `trainhook.io/preflight: nccl` every pod of the job gets one more init container,
`trainhook-preflight`, the last before its training container starts. It runs in the training
container's image, with its resources, volume mounts, security context and env (so the same
devices, fabric env and rank, world size and master address), the small Python program below
(`python -c`), delivered in the pod spec itself: nothing is written at admission.

The program joins a rendezvous of its own, one process per pod (rank NODE_RANK of NNODES), on
the master's address at the training port + 1 (PREFLIGHT_PORT_OFFSET; the port below it when
the training port is 65535), and all-reduces a buffer over NCCL on the pod's first GPU, or over
gloo on CPUs when the pod has no GPU. It measures, as nccl-tests report it, the bus bandwidth
(algorithm bandwidth times 2(n-1)/n) of the whole job and of each link of the ring of ranks
(rank r with rank r+1, and the last with the first), one link at a time per rank. A rank's own
figure is the best of its links: a slow pod slows both links it has, its neighbours each keep
one fast link, so the slow pod alone is below the threshold (a job of two pods has one link,
which both share).

With a threshold (`trainhook.io/preflight-min-busbw` in GB/s, or the fabric profile's
`preflightMinBusBW`), a rank whose figure is below it exits with EXIT_CODE and a last line,
which the kubelet keeps as its termination message (FallbackToLogsOnError),

    trainhook-preflight: slow: node NODE rank R: bus bandwidth B GB/s, below T GB/s (job J GB/s)

and a rank that cannot take part (no rendezvous within the timeout, a collective that fails)
exits with the same code and `trainhook-preflight: error: node NODE rank R: WHAT`.

With `dcgm` every pod gets the init container `trainhook-preflight-dcgm` too, before
`trainhook-preflight`, a copy of the training container in the same way (its GPUs above all),
running the shell script DCGM_SCRIPT: `dcgmi diag -r LEVEL` (trainhook.io/preflight-dcgm-level,
1 by default). dcgmi, given no --host, connects to a host engine on localhost:5555 and, finding
none (none listens in the pod's own network namespace), starts one embedded in its own process,
which sees the GPUs the container sees. dcgmi exits with DCGM's status as a byte: 226
(DCGM_ST_NVVS_ERROR, -30) or 205 (DCGM_ST_NVVS_ISOLATE_ERROR, -51) when the diagnostic ran and
found a fault, any other non-zero status when it could not run. The script exits with EXIT_CODE
and the last line

    trainhook-preflight: gpu: node NODE: dcgmi diag -r L exited 226: FAILING TESTS

where FAILING TESTS are dcgmi's lines that say Fail or Error (else its last lines), and with
`trainhook-preflight: error: node NODE: ...` when the image has no dcgmi or the diagnostic could
not run. The failure rules' `preflight=slow|error|gpu|any` term matches those
(`preflight_verdict`).

Only the job's first attempt runs it, unless `trainhook.io/preflight-every-attempt: "true"`:
a pod admitted for a job whose trainhook.io/status records a restart gets no preflight (the
webhook reads the pod's StatefulSet or Job), and a pod restarted in place (its init containers
run again) skips it when its trainhook.io/attempt is past 0.

Pure: the settings, the container, and reading a verdict back.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any, Final

from webhook.core import contract
from webhook.core.draft import Draft
from webhook.core.errors import InvalidSetting
from webhook.core.objects import annotations_of
from webhook.core.shape.pods import env_by_name

CONTAINER: Final = "trainhook-preflight"
DCGM_CONTAINER: Final = "trainhook-preflight-dcgm"
NCCL: Final = "nccl"
DCGM: Final = "dcgm"
KINDS: Final = (NCCL, DCGM)  # what trainhook.io/preflight may list, comma-separated
FRAMEWORKS: Final = ("pytorch",)  # whose images the nccl program runs in (torch.distributed)
DCGM_LEVELS: Final = ("1", "2", "3", "4")  # dcgmi diag -r: seconds, ~2 min, ~15 min, longer
DEFAULT_DCGM_LEVEL: Final = 1
# dcgmi's exit status when the diagnostic ran and found a fault: DCGM_ST_NVVS_ERROR (-30) and
# DCGM_ST_NVVS_ISOLATE_ERROR (-51) as a byte.
DCGM_FOUND_FAULT: Final = (226, 205)
EXIT_CODE: Final = 97
PREFLIGHT_PORT_OFFSET: Final = 1
TIMEOUT_SECONDS: Final = 600  # for the whole gang to reach the rendezvous, and per collective
MAX_BUSBW: Final = 100_000.0  # GB/s: far above any fabric
VERDICT: Final = "trainhook-preflight: "
VERDICTS: Final = ("slow", "error", "gpu")  # what a failed preflight says it found
# The env the program reads beside the framework's (NODE_RANK, NNODES, MASTER_ADDR).
PORT_ENV: Final = "TRAINHOOK_PREFLIGHT_PORT"
MIN_BUSBW_ENV: Final = "TRAINHOOK_PREFLIGHT_MIN_BUSBW"
EVERY_ATTEMPT_ENV: Final = "TRAINHOOK_PREFLIGHT_EVERY_ATTEMPT"
DCGM_LEVEL_ENV: Final = "TRAINHOOK_PREFLIGHT_DCGM_LEVEL"
TIMEOUT_ENV: Final = "TRAINHOOK_PREFLIGHT_TIMEOUT_SECONDS"
NODE_ENV: Final = "TRAINHOOK_NODE_NAME"
ATTEMPT_ENV: Final = "TRAINHOOK_ATTEMPT"  # as restart_in_place gives the training container
# Megabytes all-reduced: enough to reach a GPU fabric's bandwidth, and a CPU link's.
GPU_MIB: Final = 256
CPU_MIB: Final = 4
ITERATIONS: Final = 5  # timed, after one untimed to set up the connections

# The program. No `$(` in it: the kubelet would expand it in args.
PROGRAM: Final = f"""
import datetime, os, socket, sys, time
get = os.environ.get
def say(line):
    print({VERDICT!r} + line, file=sys.stderr, flush=True)
attempt = get({ATTEMPT_ENV!r}) or "0"
if attempt != "0" and get({EVERY_ATTEMPT_ENV!r}) != "true":
    say("skipped: attempt " + attempt + " of the job; only its first runs the preflight")
    sys.exit(0)
node = (get({NODE_ENV!r}) or socket.gethostname())[:100]
rank, world = int(get("NODE_RANK")), int(get("NNODES"))
floor = float(get({MIN_BUSBW_ENV!r}) or 0)
where = "node " + node + " rank " + str(rank)
def fail(kind, text):
    say(kind + ": " + where + ": " + text)
    os._exit({EXIT_CODE})
if world < 2:
    say("passed: " + where + ": a job of one pod has no link to measure")
    sys.exit(0)
try:
    import torch
    import torch.distributed as dist
    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(0)
    limit = datetime.timedelta(seconds=int(get({TIMEOUT_ENV!r}) or {TIMEOUT_SECONDS}))
    store = dist.TCPStore(get("MASTER_ADDR"), int(get({PORT_ENV!r})), world, rank == 0,
                          timeout=limit)
    dist.init_process_group("nccl" if gpu else "gloo", store=store, rank=rank,
                            world_size=world, timeout=limit)
    size = ({GPU_MIB} if gpu else {CPU_MIB}) << 20
    data = torch.ones(size // 4, device="cuda" if gpu else "cpu")
    def busbw(group, n):
        dist.all_reduce(data, group=group)
        if gpu:
            torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range({ITERATIONS}):
            dist.all_reduce(data, group=group)
        if gpu:
            torch.cuda.synchronize()
        seconds = (time.perf_counter() - start) / {ITERATIONS}
        return size / seconds / 1e9 * 2 * (n - 1) / n
    job = busbw(None, world) if world > 1 else 0.0
    links = [(r, (r + 1) % world) for r in range(world if world > 2 else world - 1)]
    groups = [dist.new_group(list(link)) for link in links]
    own = []
    for phase in (0, 1, 2):
        for (a, b), group in zip(links, groups):
            if rank in (a, b) and phase == (2 if b < a else a % 2):
                own.append(busbw(group, 2))
        dist.barrier()
    dist.destroy_process_group()
except Exception as error:
    fail("error", " ".join((type(error).__name__ + ": " + str(error)).split())[:80])
best = max(own, default=job)
figures = "bus bandwidth %.3g GB/s" % best
if floor and best < floor:
    fail("slow", figures + ", below %g GB/s (job %.3g GB/s)" % (floor, job))
say("passed: " + where + ": " + figures + " (job %.3g GB/s)" % job)
""".lstrip()

# The DCGM diagnostic, for any POSIX shell. No `$(` nor `$$` in it: the kubelet would expand them
# in a command. The summary names each test dcgmi's table says Fail for, with its Error and
# Warning rows (wrapped rows joined), else ends with dcgmi's last lines.
DCGM_SCRIPT: Final = rf"""
say() {{ echo {VERDICT!r}"$1" >&2; }}
attempt="${{{ATTEMPT_ENV}:-0}}"
if [ "$attempt" != 0 ] && [ "${{{EVERY_ATTEMPT_ENV}:-}}" != true ]; then
  say "skipped: attempt $attempt of the job; only its first runs the preflight"
  exit 0
fi
node="${{{NODE_ENV}:-${{HOSTNAME:-}}}}"
level="${{{DCGM_LEVEL_ENV}:-{DEFAULT_DCGM_LEVEL}}}"
if ! command -v dcgmi >/dev/null 2>&1; then
  say "error: node $node: the image has no dcgmi on its PATH to run the DCGM diagnostic"
  exit {EXIT_CODE}
fi
out=`dcgmi diag -r "$level" 2>&1`
code=$?
printf '%s\n' "$out" >&2
if [ "$code" = 0 ]; then
  say "passed: node $node: dcgmi diag -r $level"
  exit 0
fi
set -f
found= test= detail=
while IFS='|' read -r _ name result _; do
  set -- $name; name="$*"; set -- $result; result="$*"
  case "$name" in
    Error|Warning) found="$found; $result"; detail=1; continue ;;
    -*) detail=; continue ;;
    ?*) detail=; test="$name" ;;
  esac
  case "$result" in
    Fail*) found="$found; $test: $result"; detail= ;;
    Pass*|Skip*|Warn*|'') detail= ;;
    *) [ -n "$detail" ] && found="$found $result" ;;
  esac
done <<END
$out
END
found="${{found#; }}"
if [ -z "$found" ]; then
  found=`printf '%s\n' "$out" | grep -v '^[-+=| ]*$' | tail -n 3 | tr -s ' \t\n' '   '`
  found="${{found% }}"
fi
found=`printf '%s\n' "$found" | cut -c1-400`
case "$code" in
  {"|".join(str(code) for code in DCGM_FOUND_FAULT)}) kind=gpu ;;
  *) kind=error ;;
esac
say "$kind: node $node: dcgmi diag -r $level exited $code: $found"
exit {EXIT_CODE}
""".lstrip()


def preflight_kinds(value: str | None) -> tuple[str, ...]:
    """The kinds a valid trainhook.io/preflight lists: (), ("nccl",), ("dcgm",) or both."""
    return tuple(value.split(",")) if value else ()


def read_preflight(value: str | None, framework: str, elastic: bool) -> str | None:
    """trainhook.io/preflight: None, or the kind; raises InvalidSetting in one line."""
    if value is None:
        return None
    kinds = value.split(",")
    if any(kind not in KINDS for kind in kinds) or len(set(kinds)) != len(kinds):
        raise InvalidSetting(
            contract.PREFLIGHT, value, f"{NCCL}, {DCGM}, or both comma-separated ({NCCL},{DCGM})"
        )
    if NCCL in kinds and framework not in FRAMEWORKS:
        raise InvalidSetting(
            contract.PREFLIGHT,
            value,
            f"the nccl preflight runs torch.distributed, for {', '.join(FRAMEWORKS)} jobs; "
            f"not yet for {framework} jobs (dcgm runs for any)",
        )
    if NCCL in kinds and elastic:
        raise InvalidSetting(
            contract.PREFLIGHT,
            value,
            f"an elastic job ({contract.ELASTIC}) has no world size before its rendezvous, "
            "which the nccl preflight needs",
        )
    return value


def read_min_busbw(value: str | None, preflight: str | None) -> float | None:
    """trainhook.io/preflight-min-busbw: GB/s, a number above 0; read with a preflight only."""
    if value is None:
        return None
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    text = value.strip()
    if not (0 < number <= MAX_BUSBW) or text != value or not text.replace(".", "", 1).isdigit():
        raise InvalidSetting(
            contract.PREFLIGHT_MIN_BUSBW,
            value,
            f"a bus bandwidth in GB/s above 0 and at most {MAX_BUSBW:g}, such as 40 or 12.5",
        )
    if preflight is None:
        raise InvalidSetting(
            contract.PREFLIGHT_MIN_BUSBW,
            value,
            f"read only with {contract.PREFLIGHT} set: set it too, or remove the threshold",
        )
    if NCCL not in preflight_kinds(preflight):
        raise InvalidSetting(
            contract.PREFLIGHT_MIN_BUSBW,
            value,
            f"the threshold of the nccl preflight, which {contract.PREFLIGHT} does not list: "
            "add nccl, or remove the threshold",
        )
    return number


def read_dcgm_level(value: str | None, preflight: str | None) -> int | None:
    """trainhook.io/preflight-dcgm-level: dcgmi diag's run level; read with a dcgm preflight."""
    if value is None:
        return None
    if value not in DCGM_LEVELS:
        raise InvalidSetting(
            contract.PREFLIGHT_DCGM_LEVEL,
            value,
            "a DCGM diagnostic run level: 1 (seconds), 2 (about 2 minutes), 3 (about 15 "
            "minutes) or 4 (longer)",
        )
    if DCGM not in preflight_kinds(preflight):
        raise InvalidSetting(
            contract.PREFLIGHT_DCGM_LEVEL,
            value,
            f"read only with dcgm in {contract.PREFLIGHT}: add it, or remove the level",
        )
    return int(value)


def read_every_attempt(value: str | None, preflight: str | None) -> bool | None:
    """trainhook.io/preflight-every-attempt: "true" or "false"; read with a preflight only."""
    if value is None:
        return None
    if value not in ("true", "false"):
        raise InvalidSetting(contract.PREFLIGHT_EVERY_ATTEMPT, value, "one of true, false")
    if preflight is None:
        raise InvalidSetting(
            contract.PREFLIGHT_EVERY_ATTEMPT,
            value,
            f"read only with {contract.PREFLIGHT} set: set it too, or remove this",
        )
    return value == "true"


def preflight_port(master_port: int) -> int:
    """The preflight's rendezvous port: the training port + 1, or the one below it at the top."""
    above = master_port + PREFLIGHT_PORT_OFFSET
    return above if above <= 65535 else master_port - PREFLIGHT_PORT_OFFSET


def wants_attempts(annotations: Mapping[str, str]) -> bool:
    """Whether admitting a pod reads its StatefulSet or Job for the job's restarts: its job
    runs the preflight on the first attempt only."""
    return contract.PREFLIGHT in annotations and (
        annotations.get(contract.PREFLIGHT_EVERY_ATTEMPT) != "true"
    )


def later_attempt(owner: Mapping[str, Any] | None) -> bool:
    """Whether the job of `owner` (a StatefulSet or Job) records a restart in its status."""
    if owner is None:
        return False
    try:
        status = json.loads(annotations_of(owner).get(contract.STATUS) or "{}")
    except ValueError:
        return False
    if not isinstance(status, dict):
        return False
    restarts = status.get("restarts")
    counted = isinstance(restarts, int) and not isinstance(restarts, bool) and restarts > 0
    return counted or status.get("restartedAt") is not None


def add_preflight(
    draft: Draft,
    training: int | None,
    min_busbw: float | None,
    every_attempt: bool,
) -> None:
    """Append the nccl preflight's init container to the pod on `draft`, once, like its training
    container as Trainhook has written it (its env included): call it last."""
    spec = draft.root.get("spec") or {}
    init = spec.get("initContainers") or []
    if training is None or any(c.get("name") == CONTAINER for c in init):
        return
    trainer = spec["containers"][training]
    env = copy.deepcopy(list(trainer.get("env") or []))
    by_name = env_by_name(env, {"MASTER_PORT"})
    master_port = by_name.get("MASTER_PORT", {}).get("value")
    if not (isinstance(master_port, str) and master_port.isdigit()):
        raise InvalidSetting(
            contract.PREFLIGHT,
            "nccl",
            "the training container's MASTER_PORT is the user's own, not a number Trainhook "
            "set: remove it so the preflight finds its port",
        )
    port = preflight_port(int(master_port))
    _check_port(spec, port)
    ours: list[dict[str, Any]] = [
        {"name": PORT_ENV, "value": str(port)},
        {"name": TIMEOUT_ENV, "value": str(TIMEOUT_SECONDS)},
    ]
    if min_busbw is not None:
        ours.append({"name": MIN_BUSBW_ENV, "value": f"{min_busbw:g}"})
    container = _like(trainer, CONTAINER, ["python", "-c", PROGRAM], env, ours, every_attempt)
    draft.list_at("spec", "initContainers").append(container)


def check_dcgm(
    spec: Mapping[str, Any], training: int | None, gpus: int, value: str, resource: str
) -> None:
    """Refuse, in one line, a dcgm preflight on a pod it cannot run on: no GPU in its training
    container, or on the node's network, where dcgmi would reach the node's own host engine
    and test every GPU of the node."""
    if training is None:
        return
    name = spec["containers"][training].get("name")
    if not gpus:
        raise InvalidSetting(
            contract.PREFLIGHT,
            value,
            f"the DCGM diagnostic runs on the pod's GPUs, and container {name} has none: set "
            f"{contract.GPUS} or a {resource} limit, or remove dcgm",
        )
    if spec.get("hostNetwork"):
        raise InvalidSetting(
            contract.PREFLIGHT,
            value,
            "a pod on the node's network (hostNetwork) would reach the node's DCGM host engine, "
            "which tests every GPU of the node: remove hostNetwork, or remove dcgm",
        )


def add_dcgm_preflight(draft: Draft, training: int | None, level: int, every_attempt: bool) -> None:
    """Append the DCGM diagnostic's init container to the pod on `draft`, once, like its training
    container as Trainhook has written it: call it last, before add_preflight."""
    spec = draft.root.get("spec") or {}
    init = spec.get("initContainers") or []
    if training is None or any(c.get("name") == DCGM_CONTAINER for c in init):
        return
    trainer = spec["containers"][training]
    env = copy.deepcopy(list(trainer.get("env") or []))
    ours: list[dict[str, Any]] = [{"name": DCGM_LEVEL_ENV, "value": str(level)}]
    container = _like(trainer, DCGM_CONTAINER, ["sh", "-c", DCGM_SCRIPT], env, ours, every_attempt)
    draft.list_at("spec", "initContainers").append(container)


def _like(
    trainer: Mapping[str, Any],
    name: str,
    command: list[str],
    env: list[dict[str, Any]],
    ours: list[dict[str, Any]],
    every_attempt: bool,
) -> dict[str, Any]:
    """An init container `name` running `command` in the training container's image, resources,
    security context, mounts and env (`env`), with `ours` and the node and attempt after it."""
    by_name = env_by_name(env, {NODE_ENV, ATTEMPT_ENV})
    if every_attempt:
        ours.append({"name": EVERY_ATTEMPT_ENV, "value": "true"})
    if NODE_ENV not in by_name:
        ours.append({"name": NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    if ATTEMPT_ENV not in by_name:
        path = f"metadata.annotations['{contract.ATTEMPT}']"
        ours.append({"name": ATTEMPT_ENV, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    container: dict[str, Any] = {"name": name}
    for key in ("image", "imagePullPolicy", "securityContext", "resources", "envFrom"):
        if trainer.get(key) is not None:
            container[key] = copy.deepcopy(trainer[key])
    container["command"] = command
    container["env"] = [*env, *ours]
    if trainer.get("volumeMounts"):
        container["volumeMounts"] = copy.deepcopy(trainer["volumeMounts"])
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    return container


def _check_port(spec: Mapping[str, Any], port: int) -> None:
    for kind in ("initContainers", "containers"):
        for container in spec.get(kind) or []:
            for declared in container.get("ports") or []:
                if declared.get("containerPort") == port:
                    raise InvalidSetting(
                        contract.PREFLIGHT,
                        "nccl",
                        f"its rendezvous takes port {port}, next to the training port, which "
                        f"container {container.get('name')} declares: set {contract.PORT} to a "
                        "port whose next one is free",
                    )


def preflight_verdict(exit_code: int | None, message: str) -> str:
    """What a failed run of a preflight container found, `slow`, `gpu` or `error`; "" for any
    other run."""
    if exit_code != EXIT_CODE:
        return ""
    at = message.rfind(VERDICT)
    if at < 0:
        return ""
    kind = message[at + len(VERDICT) :].partition(":")[0]
    return kind if kind in VERDICTS else ""
