# ruff: noqa: F811  (the fixtures of test_progress are imported by name)
"""Slow clients cannot hurt the sweeper through its progress endpoint: connections and their
threads are bounded, headers and bodies have deadlines and sizes, and honest reports go through
while hundreds of clients dribble."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.emulator import EmulatorThread
from tests.sweeper.test_progress import (  # noqa: F401  (fixtures)
    REPORT,
    SERVER_NAME,
    Clock,
    certs,
    clock,
    make_job,
    post,
    token_for,
)
from webhook.core.job.progress import status_path
from webhook.kube.client import Kube
from webhook.sweeper.serving.progress import Limits, ProgressDesk
from webhook.sweeper.serving.progress_server import serve

CONNECTIONS = 32


@pytest.fixture
def served(kube: Kube, clock: Clock, certs: Path) -> Iterator[tuple[str, Any]]:
    limits = Limits(connections=CONNECTIONS, header_seconds=1.5, body_seconds=1.5)
    desk = ProgressDesk(kube, limits, clock=clock)
    server, stop = serve(desk, "127.0.0.1:0", str(certs / "tls.crt"), str(certs / "tls.key"))
    try:
        yield f"https://{SERVER_NAME}:{server.server_address[1]}", server
    finally:
        stop.set()
        server.shutdown()
        server.server_close()


def tls(port: int, certs: Path) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    return context.wrap_socket(raw, server_hostname=SERVER_NAME)


def slow_clients(port: int, certs: Path) -> list[socket.socket]:
    """200 clients that never finish their headers (half never even shake hands), and 16
    that send their headers and then a trickle of their body."""
    held: list[socket.socket] = []
    for n in range(200):
        try:
            if n % 2:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=5))
                continue
            client = tls(port, certs)
            client.sendall(f"POST {status_path('ml', 'victim')} HTTP/1.1\r\nHost: x\r\n".encode())
            held.append(client)
        except OSError:
            pass  # dropped for a newer one while it shook hands
    for _ in range(16):
        try:
            client = tls(port, certs)
            client.sendall(
                f"POST {status_path('ml', 'victim')} HTTP/1.1\r\nHost: x\r\n"
                'Authorization: Bearer junk\r\nContent-Length: 1000\r\n\r\n{"trai'.encode()
            )
            held.append(client)
        except OSError:
            pass
    return held


def test_honest_reports_go_through_while_hundreds_of_clients_dribble_and_threads_stay_bounded(
    emulator: EmulatorThread, served: tuple[str, Any], certs: Path
) -> None:
    base, server = served
    port = server.server_address[1]
    token = token_for(emulator, "bert", make_job(emulator, "bert"))
    before = threading.active_count()

    held = slow_clients(port, certs)
    try:
        most = threading.active_count()
        answers = [post(base, certs, "bert", token, json.dumps(REPORT).encode())[0]]
        for _ in range(4):
            answers.append(post(base, certs, "bert", token, b"{}")[0])
        most = max(most, threading.active_count())
    finally:
        for client in held:
            with contextlib.suppress(OSError):
                client.close()

    assert answers == [200] * 5
    assert most <= before + CONNECTIONS + 2
    assert len(server.connections) <= CONNECTIONS


def test_a_client_that_never_finishes_its_headers_is_cut_off_at_the_deadline(
    served: tuple[str, Any], certs: Path
) -> None:
    _, server = served
    client = tls(server.server_address[1], certs)
    client.sendall(b"POST /apis HTTP/1.1\r\n")
    started = time.monotonic()
    client.settimeout(10)
    try:
        for _ in range(20):  # a byte every 0.2 s: each read on time, the whole too slow
            client.sendall(b"X")
            time.sleep(0.2)
        closed = client.recv(100) == b""
    except OSError:
        closed = True
    finally:
        client.close()
    assert closed and time.monotonic() - started < 5.0


def test_headers_over_16_kib_are_refused_with_one_line(
    served: tuple[str, Any], certs: Path
) -> None:
    _, server = served
    client = tls(server.server_address[1], certs)
    client.sendall(b"POST /apis HTTP/1.1\r\nX-Junk: " + b"a" * 20_000 + b"\r\n\r\n")
    answer = b""
    with contextlib.suppress(OSError):
        while chunk := client.recv(65536):
            answer += chunk
    client.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431")
    assert json.loads(body)["message"] == "the request line and headers are over 16384 bytes"
