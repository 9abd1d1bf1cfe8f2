"""A TCP relay on 127.0.0.1 that can go silent: an API server that stops answering.

Until `cut()` it relays every connection to the target; after it, data in both directions is
dropped and new connections are accepted and never answered, so clients wait for their own
timeouts, as they do when a network partition hides the API server.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class Cutoff:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._silent = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="cutoff", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def cut(self) -> None:
        self._silent.set()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.close()

    def _keep(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                incoming, _ = self._listener.accept()
            except OSError:
                return
            self._keep(incoming)
            if self._silent.is_set():
                continue  # held open, never answered
            try:
                outgoing = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                incoming.close()
                continue
            self._keep(outgoing)
            for source, sink in ((incoming, outgoing), (outgoing, incoming)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                with contextlib.suppress(OSError):
                    sink.shutdown(socket.SHUT_WR)
                return
            if self._silent.is_set():
                continue
            try:
                sink.sendall(data)
            except OSError:
                return
