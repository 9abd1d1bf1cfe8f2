"""`trainhook serve` run for real (gunicorn, TLS) on 127.0.0.1, and clients that verify its CA.

Used by the server tests and by `make demo`.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPResponse, HTTPSConnection
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STARTUP_SECONDS = 20


class Webhook:
    """A running server: where it listens, the CA it is trusted through, the name its
    certificate is checked against, and its log."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        port: int,
        ca_file: Path,
        log: Path,
        server_name: str = "127.0.0.1",
    ) -> None:
        self.process = process
        self.port = port
        self.ca_file = ca_file
        self.log = log
        self.server_name = server_name

    def tls(self, ca_file: Path | None = None) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(ca_file or self.ca_file))

    def connect(self, ca_file: Path | None = None, timeout: float = 10) -> HTTPSConnection:
        return _Connection(self.port, self.tls(ca_file), self.server_name, timeout)

    def post(
        self,
        body: bytes,
        content_type: str | None = "application/json",
        connection: HTTPSConnection | None = None,
        path: str = "/mutate?timeout=10s",
    ) -> tuple[int, dict[str, Any], HTTPResponse]:
        """POST like the API server does; the status, the decoded JSON body and the response."""
        conn = connection or self.connect()
        headers = {"Accept": "application/json, */*"}
        if content_type is not None:
            headers["Content-Type"] = content_type
        conn.request("POST", path, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        if connection is None:
            conn.close()
        return response.status, json.loads(data), response

    def get(self, path: str, connection: HTTPSConnection | None = None) -> tuple[int, str]:
        conn = connection or self.connect()
        conn.request("GET", path)
        response = conn.getresponse()
        text = response.read().decode()
        if connection is None:
            conn.close()
        return response.status, text

    def workers(self) -> list[int]:
        """The pids of gunicorn's workers now."""
        pid = self.process.pid
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]

    def log_lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise


@contextmanager
def serving(
    certs: Path,
    log: Path,
    *arguments: str,
    env: dict[str, str] | None = None,
    ready_path: str = "/readyz",
    server_name: str = "127.0.0.1",
    module: str = "webhook.cli",
) -> Iterator[Webhook]:
    """`trainhook serve` on an ephemeral port of 127.0.0.1, answering `ready_path` with 200 when
    this yields. Without `--lookup` among `arguments`, it runs with `--no-lookup`. `module`
    names another entry point that takes serve's arguments (the benchmark's apps).

    Bound by address as in a cluster: each worker listens on its own socket (`reserved_port`)."""
    with reserved_port() as port:
        command = [
            sys.executable,
            "-m",
            module,
            *(["serve"] if module == "webhook.cli" else []),
            f"--bind=127.0.0.1:{port}",
            f"--cert-file={certs / 'tls.crt'}",
            f"--key-file={certs / 'tls.key'}",
            *([] if "--lookup" in arguments else ["--no-lookup"]),
            *arguments,
        ]
        environment = {k: v for k, v in os.environ.items() if not k.startswith("TRAINHOOK_")}
        environment.pop("PROMETHEUS_MULTIPROC_DIR", None)
        environment.update(env or {})
        with open(log, "wb") as log_file:
            process = subprocess.Popen(
                command,
                cwd=ROOT,
                env=environment,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        webhook = Webhook(process, port, certs / "ca.crt", log, server_name)
        try:
            _wait_ready(webhook, ready_path)
            yield webhook
        finally:
            webhook.stop()


@contextmanager
def reserved_port() -> Iterator[int]:
    """An ephemeral port of 127.0.0.1 for a server whose workers each bind it with SO_REUSEPORT.

    A socket of the same kind holds the port until the server is gone; it never listens, so it
    takes no connections."""
    reserved = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    reserved.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        reserved.bind(("127.0.0.1", 0))
        yield reserved.getsockname()[1]
    finally:
        reserved.close()


class _Connection(HTTPSConnection):
    """HTTPS to 127.0.0.1, checking the certificate against `server_name`, as the API server
    checks the name of the Service it calls."""

    def __init__(
        self, port: int, context: ssl.SSLContext, server_name: str, timeout: float
    ) -> None:
        super().__init__("127.0.0.1", port, context=context, timeout=timeout)
        self.tls_context = context
        self.server_name = server_name

    def connect(self) -> None:
        raw = socket.create_connection((self.host, self.port), self.timeout)
        self.sock = self.tls_context.wrap_socket(raw, server_hostname=self.server_name)


def _wait_ready(webhook: Webhook, path: str) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if webhook.process.poll() is not None:
            raise RuntimeError(f"trainhook serve exited: {webhook.log.read_text()}")
        try:
            if webhook.get(path)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(
        f"trainhook serve not ready in {STARTUP_SECONDS}s: {webhook.log.read_text()}"
    )
