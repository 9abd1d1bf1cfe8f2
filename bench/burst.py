"""A burst of one job's pods, as the StatefulSet controller sends them: every pod of a PyTorch job
of N pods (1 master, N-1 workers) created at once, 16 admissions in flight, each on a kept-alive
TLS connection, through ours and through the do-nothing app. Each pod is what the API server
sends (its own name, index labels and token volume name), so nothing is answered twice alike.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from bench.reviews import NAMESPACE, admitted, as_served, container, review, statefulset
from bench.served import Server
from webhook.core import contract, jsoncodec
from webhook.core.render import expand

IN_FLIGHT = 16
SIZES = (1_000, 8_192)


@dataclass(frozen=True)
class Burst:
    server: str
    pods: int
    seconds: float  # from the first request sent to the last answer read
    cpu_us_per_pod: float  # the server's own CPU time (master and workers)


def job_bodies(pods: int) -> list[bytes]:
    """Every pod's AdmissionReview of a PyTorch job of `pods` pods, in creation order."""
    containers = [container("pytorch", "registry.example.com/ml/trainer:2.4", 20, "8", "32Gi")]
    settings = {contract.GPUS: "8", contract.SHM_SIZE: "16Gi"}
    job = f"burst{pods}"
    master = statefulset("pytorch", job, "master", 1, copy.deepcopy(containers), settings)
    worker = statefulset("pytorch", job, "worker", pods - 1, copy.deepcopy(containers), settings)
    bodies = []
    for workload in (admitted(master, [master, worker]), admitted(worker, [master, worker])):
        for ordinal, made in enumerate(expand(workload, NAMESPACE)):
            pod = as_served(workload, made)
            token = f"kube-api-access-{ordinal:05x}"
            for volume in pod["spec"]["volumes"]:
                if volume["name"].startswith("kube-api-access-"):
                    volume["name"] = token
            for item in pod["spec"]["containers"]:
                for mount in item["volumeMounts"]:
                    if mount["name"].startswith("kube-api-access-"):
                        mount["name"] = token
            bodies.append(jsoncodec.dumps(review(pod)))
    return bodies


def send(server: Server, bodies: Sequence[bytes]) -> Burst:
    """All bodies through `server`, IN_FLIGHT at a time; each must be answered 200 and allowed."""
    connections = [server.webhook.connect(timeout=30) for _ in range(IN_FLIGHT)]
    for connection in connections:  # TLS handshakes before the clock starts, as kept-alive
        server.webhook.get("/readyz", connection=connection)
    following = iter(range(len(bodies)))
    lock = threading.Lock()
    failures: list[str] = []

    def client(index: int) -> None:
        connection = connections[index]
        while True:
            with lock:
                position = next(following, None)
            if position is None:
                return
            status, answer, _ = server.webhook.post(bodies[position], connection=connection)
            if status != 200 or answer["response"]["allowed"] is not True:
                failures.append(f"{status} {answer}")
                return

    threads = [threading.Thread(target=client, args=(i,)) for i in range(IN_FLIGHT)]
    cpu = server.cpu_seconds()
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.monotonic() - began
    cpu = server.cpu_seconds() - cpu
    for connection in connections:
        connection.close()
    if failures:
        raise SystemExit(f"bench: burst through {server.name}: {failures[0]}")
    return Burst(server.name, len(bodies), seconds, cpu / len(bodies) * 1e6)


def bursts(ours: Server, null: Server, sizes: Sequence[int] = SIZES) -> list[tuple[Burst, Burst]]:
    """(ours, do-nothing) per size; the order alternates so neither always goes first."""
    pairs = []
    for turn, pods in enumerate(sizes):
        bodies = job_bodies(pods)
        if turn % 2:
            null_run, ours_run = send(null, bodies), send(ours, bodies)
        else:
            ours_run, null_run = send(ours, bodies), send(null, bodies)
        pairs.append((ours_run, null_run))
    return pairs
