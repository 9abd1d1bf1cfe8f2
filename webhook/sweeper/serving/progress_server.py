"""The progress endpoint's HTTPS server: the desk's reports over TLS, with bounded connections,
header and body deadlines and sizes, so slow or oversized clients cost the sweeper neither
threads nor memory beyond those bounds."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from webhook.core.job.progress import MAX_BODY
from webhook.sweeper.serving.progress import (
    DRAIN_AT_MOST,
    HEADER_BYTES,
    IO_TIMEOUT,
    Answer,
    ProgressDesk,
    failure,
)

log = logging.getLogger("trainhook.progress")


class _Certificate:
    """A certificate pair loaded again when its files change (a Secret volume is updated)."""

    def __init__(self, cert_file: str, key_file: str) -> None:
        self.files = (cert_file, key_file)
        self._loaded: tuple[tuple[float, ...], ssl.SSLContext] | None = None
        self._lock = threading.Lock()

    def context(self) -> ssl.SSLContext:
        stamp = tuple(os.stat(path).st_mtime for path in self.files)
        with self._lock:
            if self._loaded is None or self._loaded[0] != stamp:
                context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
                context.minimum_version = ssl.TLSVersion.TLSv1_2
                context.load_cert_chain(*self.files)
                self._loaded = (stamp, context)
            return self._loaded[1]


class _TooLong(Exception):
    """A request's headers over HEADER_BYTES."""


class _Capped:
    """A connection's reading side that gives at most `left` bytes more: what the headers of
    one request, then its body, may take."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.left = raw, 0

    def allow(self, size: int) -> None:
        self.left = size

    def readline(self, limit: int = -1) -> bytes:
        if self.left <= 0:
            raise _TooLong
        want = self.left if limit is None or limit < 0 else min(limit, self.left)
        line: bytes = self.raw.readline(want)
        self.left -= len(line)
        if self.left <= 0 and not line.endswith(b"\n"):
            raise _TooLong
        return line

    def read(self, size: int = -1) -> bytes:
        want = self.left if size is None or size < 0 else min(size, self.left)
        data: bytes = self.raw.read(want)
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.raw.close()


class _Connections:
    """The connections served now, each with its deadline while it reads or writes: at most
    `limit` at once, the oldest that is reading or writing dropped for a new one, and any
    past its deadline dropped. A connection costs one thread while it is held, so slow clients
    cost at most `limit` threads and never hold a report's turn."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        # connection -> (when it is dropped, or None while its report is handled; since when)
        self._held: dict[Any, tuple[float | None, float]] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._held)

    def admit(self, connection: Any, deadline: float) -> bool:
        """Hold a new connection, dropping the oldest slow one when full; False: all are busy
        with reports, and the new one is dropped."""
        with self._lock:
            if len(self._held) >= self.limit:
                slow = [(since, c) for c, (until, since) in self._held.items() if until]
                if not slow:
                    return False
                _, oldest = min(slow, key=lambda held: held[0])
                del self._held[oldest]
                _drop(oldest)
            self._held[connection] = (deadline, time.monotonic())
            return True

    def waits(self, connection: Any, deadline: float | None) -> None:
        """The connection reads or writes until `deadline`; None: its report is handled."""
        with self._lock:
            if connection in self._held:
                self._held[connection] = (deadline, self._held[connection][1])

    def release(self, connection: Any) -> None:
        with self._lock:
            self._held.pop(connection, None)

    def drop_late(self, now: float) -> None:
        with self._lock:
            late = [c for c, (until, _) in self._held.items() if until is not None and until < now]
            for connection in late:
                del self._held[connection]
        for connection in late:
            _drop(connection)


def _drop(connection: Any) -> None:
    """End a connection under its thread's feet: its blocked read or write returns at once."""
    with contextlib.suppress(OSError):
        socket.socket.shutdown(connection, socket.SHUT_RDWR)


def serve(
    desk: ProgressDesk, bind: str, cert_file: str, key_file: str
) -> tuple[ThreadingHTTPServer, threading.Event]:
    """Serve the endpoint over TLS on HOST:PORT, and flush every half second, in daemon
    threads; set the event and `shutdown()` the server to stop.

    What a client costs is bounded whatever it does: at most `connections` connections (and
    threads) at once, the oldest slow one dropped for a new one; the handshake and headers
    within `header_seconds` and HEADER_BYTES, the body within `body_seconds` and MAX_BODY;
    `concurrent` reports handled at once. A client that stalls loses its connection, never
    another client's turn."""
    limits = desk.limits
    certificate = _Certificate(cert_file, key_file)
    certificate.context()  # a missing or bad pair fails here, at start
    slots = threading.BoundedSemaphore(limits.concurrent)
    held = _Connections(limits.connections)

    class Handler(BaseHTTPRequestHandler):
        timeout = IO_TIMEOUT  # one blocking read or write; the deadlines bound the whole
        protocol_version = "HTTP/1.1"
        rfile: Any

        def setup(self) -> None:
            super().setup()
            self.rfile = _Capped(self.rfile)

        def handle_one_request(self) -> None:
            held.waits(self.request, time.monotonic() + limits.header_seconds)
            self.rfile.allow(HEADER_BYTES)
            try:
                super().handle_one_request()
            except _TooLong:
                self.close_connection = True
                message = f"the request line and headers are over {HEADER_BYTES} bytes"
                self._answer(failure(431, "RequestHeaderFieldsTooLarge", message))

        def do_POST(self) -> None:
            length = self.headers.get("Content-Length")
            if length is None or not length.isdigit():
                self.close_connection = True
                self._answer(failure(411, "LengthRequired", "send a Content-Length"))
                return
            if int(length) > MAX_BODY:
                # Read and dropped, in small pieces and within the body's deadline, so the
                # client sees the answer rather than a reset; past DRAIN_AT_MOST the connection
                # is simply closed.
                held.waits(self.request, time.monotonic() + limits.body_seconds)
                left = int(length) if int(length) <= DRAIN_AT_MOST else 0
                self.rfile.allow(left)
                while left > 0 and (piece := self.rfile.read(min(left, 16384))):
                    left -= len(piece)
                self.close_connection = True
                message = f"the body is {length} bytes; at most {MAX_BODY} are read"
                self._answer(failure(413, "RequestEntityTooLarge", message))
                return
            held.waits(self.request, time.monotonic() + limits.body_seconds)
            self.rfile.allow(int(length))
            body = self.rfile.read(int(length))
            if len(body) < int(length):
                self.close_connection = True
                return  # the client went away, or was too slow
            if not slots.acquire(blocking=False):
                self._answer(failure(503, "ServiceUnavailable", "busy: retry later"))
                return
            try:
                held.waits(self.request, None)
                path = self.path.split("?", 1)[0]
                answer = desk.handle(path, dict(self.headers.items()), body)
            finally:
                slots.release()
            self._answer(answer)

        def do_GET(self) -> None:
            self.close_connection = True
            self._answer(failure(405, "MethodNotAllowed", "POST a report"))

        do_PUT = do_PATCH = do_DELETE = do_GET

        def _answer(self, answer: Answer) -> None:
            held.waits(self.request, time.monotonic() + IO_TIMEOUT)
            data = json.dumps(answer.body).encode()
            self.send_response(answer.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if answer.status == 429:
                self.send_header("Retry-After", "1")
            if self.close_connection:
                self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 128

        def get_request(self) -> tuple[Any, Any]:
            connection, address = super().get_request()
            # The handshake happens in the request's thread, under its deadline, not here;
            # each connection gets the certificate as it is on disk now (a mounted Secret
            # renews).
            tls = certificate.context().wrap_socket(
                connection, server_side=True, do_handshake_on_connect=False
            )
            return tls, address

        def process_request(self, request: Any, client_address: Any) -> None:
            if not held.admit(request, time.monotonic() + limits.header_seconds):
                self.shutdown_request(request)  # every connection is handling a report
                return
            super().process_request(request, client_address)

        def process_request_thread(self, request: Any, client_address: Any) -> None:
            try:
                super().process_request_thread(request, client_address)
            finally:
                held.release(request)

        def handle_error(self, request: Any, client_address: Any) -> None:
            # A failed handshake, a client gone or dropped mid-request: its own problem only.
            log.debug("progress: connection from %s failed", client_address, exc_info=True)

    host, _, port = bind.rpartition(":")
    server = Server((host.strip("[]") or "0.0.0.0", int(port)), Handler)
    server.connections = held  # type: ignore[attr-defined]  # for tests and metrics
    stop = threading.Event()

    def flusher() -> None:
        while not stop.wait(0.5):
            try:
                desk.flush()
            except Exception:  # one bad write must not stop the others
                log.exception("progress: flush failed")

    def reaper() -> None:
        while not stop.wait(0.2):
            held.drop_late(time.monotonic())

    threading.Thread(target=server.serve_forever, name="progress", daemon=True).start()
    threading.Thread(target=flusher, name="progress-flush", daemon=True).start()
    threading.Thread(target=reaper, name="progress-deadlines", daemon=True).start()
    return server, stop
