"""trainhook.io/preflight: a gang-wide all-reduce before the job's first step.

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
exits with the same code and `trainhook-preflight: error: node NODE rank R: WHAT`. The failure
rules' `preflight=slow|error|any` term matches those (`preflight_verdict`).

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
KINDS: Final = ("nccl",)  # what trainhook.io/preflight may say
FRAMEWORKS: Final = ("pytorch",)  # whose images the program runs in (torch.distributed)
EXIT_CODE: Final = 97
PREFLIGHT_PORT_OFFSET: Final = 1
TIMEOUT_SECONDS: Final = 600  # for the whole gang to reach the rendezvous, and per collective
MAX_BUSBW: Final = 100_000.0  # GB/s: far above any fabric
VERDICT: Final = "trainhook-preflight: "
VERDICTS: Final = ("slow", "error")  # what a failed preflight says it found
# The env the program reads beside the framework's (NODE_RANK, NNODES, MASTER_ADDR).
PORT_ENV: Final = "TRAINHOOK_PREFLIGHT_PORT"
MIN_BUSBW_ENV: Final = "TRAINHOOK_PREFLIGHT_MIN_BUSBW"
EVERY_ATTEMPT_ENV: Final = "TRAINHOOK_PREFLIGHT_EVERY_ATTEMPT"
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


def read_preflight(value: str | None, framework: str, elastic: bool) -> str | None:
    """trainhook.io/preflight: None, or the kind; raises InvalidSetting in one line."""
    if value is None:
        return None
    if value not in KINDS:
        later = " (dcgm diagnostics are not available yet)" if value == "dcgm" else ""
        raise InvalidSetting(contract.PREFLIGHT, value, "one of " + ", ".join(KINDS) + later)
    if framework not in FRAMEWORKS:
        raise InvalidSetting(
            contract.PREFLIGHT,
            value,
            f"the preflight runs torch.distributed, for {', '.join(FRAMEWORKS)} jobs; "
            f"not yet for {framework} jobs",
        )
    if elastic:
        raise InvalidSetting(
            contract.PREFLIGHT,
            value,
            f"an elastic job ({contract.ELASTIC}) has no world size before its rendezvous, "
            "which the preflight needs",
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
    return number


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
    """Append the preflight init container to the pod on `draft`, once, like its training
    container as Trainhook has written it (its env included): call it last."""
    spec = draft.root.get("spec") or {}
    init = spec.get("initContainers") or []
    if training is None or any(c.get("name") == CONTAINER for c in init):
        return
    trainer = spec["containers"][training]
    env = copy.deepcopy(list(trainer.get("env") or []))
    by_name = env_by_name(env, {"MASTER_PORT", "NODE_RANK", "NNODES", ATTEMPT_ENV, NODE_ENV})
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
    if every_attempt:
        ours.append({"name": EVERY_ATTEMPT_ENV, "value": "true"})
    if NODE_ENV not in by_name:
        ours.append({"name": NODE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}})
    if ATTEMPT_ENV not in by_name:
        path = f"metadata.annotations['{contract.ATTEMPT}']"
        ours.append({"name": ATTEMPT_ENV, "valueFrom": {"fieldRef": {"fieldPath": path}}})
    container: dict[str, Any] = {"name": CONTAINER}
    for key in ("image", "imagePullPolicy", "securityContext", "resources", "envFrom"):
        if trainer.get(key) is not None:
            container[key] = copy.deepcopy(trainer[key])
    container["command"] = ["python", "-c", PROGRAM]
    container["env"] = [*env, *ours]
    if trainer.get("volumeMounts"):
        container["volumeMounts"] = copy.deepcopy(trainer["volumeMounts"])
    container["terminationMessagePolicy"] = "FallbackToLogsOnError"
    draft.list_at("spec", "initContainers").append(container)


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
    """What a failed run of the preflight found, `slow` or `error`; "" for any other run."""
    if exit_code != EXIT_CODE:
        return ""
    at = message.rfind(VERDICT)
    if at < 0:
        return ""
    kind = message[at + len(VERDICT) :].partition(":")[0]
    return kind if kind in VERDICTS else ""
