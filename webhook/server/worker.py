"""gunicorn's threaded worker, with every request gathered whole before a thread is given to it.

gunicorn's `gthread` worker hands a connection to one of its threads as soon as it is accepted
or a kept-alive one turns readable; that thread then does the TLS handshake and reads the request
in blocking mode. A client that sends a handshake, a head or a body slowly holds the thread for as
long as it trickles: 16 such clients took every thread of two workers and admission stalled for
the whole cluster. A handshake that timed out also closed the connection gracefully on the
worker's main thread, blocking the heartbeat until gunicorn killed the worker.

Here the worker's main thread, which only polls, does all the waiting without blocking:

* the TLS handshake, the request head and its body are read as they arrive, and a connection
  gets a thread only once it holds one complete request (every byte of the body buffered), so a
  thread never waits for a client;
* a request must arrive whole within REQUEST_SECONDS of its first byte (of the handshake, for a
  new connection): a client that trickles is cut off then, whatever its pace; one whose head is
  complete gets a 408 Status;
* a body over the limit is answered 413 once it has been received (read and discarded, up to
  twice the limit) or at once beyond that; malformed chunked framing gets a 400 before any thread
  sees it; the bytes held for incomplete requests are bounded per worker (BUFFER_BUDGET);
* closing a connection lingers in the poller for the client's last bytes, never on the main
  thread.

Every error answer, gunicorn's own included (a bad request line, a head over its limits), is a
`metav1.Status` in JSON with a one-line message, as the API server expects from a webhook.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import selectors
import socket
import ssl
import time
from functools import partial
from typing import Any

from gunicorn import http, sock
from gunicorn.http import errors as http_errors
from gunicorn.workers.gthread import TConn, ThreadWorker

from webhook.server import bookkeeping, metrics
from webhook.server.admission import MAX_BODY_BYTES, BadRequest, rejected, too_large
from webhook.server.reviews import failure_status
from webhook.server.status import status_response

log = logging.getLogger("trainhook.server")

# A request (for a new connection: its TLS handshake too) must arrive whole within this long of
# its first byte. The API server calls with a 10 s timeout and sends a request in milliseconds.
REQUEST_SECONDS = 5.0
# A request head larger than this is refused (431) without waiting for its end; gunicorn's own
# limits (a request line of 8190 bytes, 100 fields of 8190 bytes) apply below it.
MAX_HEAD_BYTES = 64 * 1024
# A body announced over the limit is still read and discarded up to this size, so a client still
# sending gets its 413 rather than a reset; beyond it the 413 goes out at once.
DRAINED_AT_MOST = 2 * MAX_BODY_BYTES
# Bytes of incomplete requests one worker holds at most (each holds at most the body limit, so
# this is about 20 such requests). A connection that would go beyond it makes room by closing,
# with a 503, those holding more than it would, largest first; if none does, it gets the 503.
BUFFER_BUDGET = 64 * 1024 * 1024
# How long a closing connection waits for the client's last bytes, so the answer is not lost to
# a reset; in the poller, not a thread.
LINGER_SECONDS = 2.0
# At most one log line per this many seconds about clients cut off for stalling.
STALL_LOG_SECONDS = 10.0

_RECV = 256 * 1024


class _Incoming:
    """One connection's request as it arrives: handshake, head, body."""

    def __init__(self, conn: TConn, deadline: float, handshaking: bool) -> None:
        self.conn = conn
        self.deadline = deadline
        self.handshaking = handshaking
        self.buffer = bytearray()
        self.head_end = -1  # index just past the blank line ending the head
        self.length: int | None = None  # Content-Length, when the body has one
        self.chunked = False
        self.chunk_at = 0  # where the next chunk-size line starts, in a chunked body
        self.chunked_total = 0
        self.discarding = 0  # body bytes still to read and drop before a 413
        self.refusal: BadRequest | None = None
        self.events = selectors.EVENT_READ

    @property
    def stage(self) -> str:
        if self.handshaking:
            return "TLS handshake"
        if self.head_end < 0:
            return "request head"
        return "request body"


class _Lingering:
    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline


class AdmissionWorker(ThreadWorker):  # type: ignore[misc]
    """gthread with requests gathered whole, without a thread, before one serves them."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.incoming: dict[int, _Incoming] = {}
        self.lingering: dict[int, _Lingering] = {}
        self.buffered = 0
        self.stalls: dict[str, int] = {}
        self.stalls_logged_at = 0.0

    # -- where gthread would hand a connection to a thread -----------------------------------

    def accept(self, listener: socket.socket) -> None:
        try:
            client, address = listener.accept()
        except OSError as error:
            if error.errno not in (errno.EAGAIN, errno.ECONNABORTED, errno.EWOULDBLOCK):
                raise
            return
        self.nr_conns += 1
        try:
            client.setblocking(False)
            if self.cfg.is_ssl:
                client = sock.ssl_context(self.cfg).wrap_socket(
                    client,
                    server_side=True,
                    do_handshake_on_connect=False,
                    suppress_ragged_eofs=True,
                )
        except (OSError, ValueError):
            self.nr_conns -= 1
            _close(client)
            return
        conn = TConn(self.cfg, client, address, listener.getsockname())
        conn.initialized = True  # wrapped here; the parser is made when the request is whole
        conn.data_ready = True
        incoming = _Incoming(conn, time.monotonic() + REQUEST_SECONDS, self.cfg.is_ssl)
        self._watch(incoming)
        self._advance(incoming)

    def on_client_socket_readable(self, conn: TConn, client: socket.socket) -> None:
        """A kept-alive connection has its next request coming: gather it first."""
        self.poller.unregister(client)
        self.keepalived_conns.remove(conn)
        incoming = _Incoming(conn, time.monotonic() + REQUEST_SECONDS, handshaking=False)
        self._watch(incoming)
        self._advance(incoming)

    def finish_request(self, conn: TConn, fs: Any) -> None:
        try:
            keep = fs.result() if not fs.cancelled() else False
        except Exception:
            keep = False
        if keep and self.alive and conn.parser is not None:
            ahead = conn.parser.unreader.take_buffered()
            if ahead:  # the start of the next request, read with the last one: gather the rest
                conn.parser = None
                incoming = _Incoming(conn, time.monotonic() + REQUEST_SECONDS, handshaking=False)
                self._watch(incoming)
                if self._take(incoming, ahead):  # not whole yet: read the rest as it comes
                    self._advance(incoming)
                return
            conn.parser = None
        if keep:
            # Back to the poller as gthread does; the parser is made afresh for the next request.
            conn.parser = _Idle()
            super().finish_request(conn, fs)
            return
        self.nr_conns -= 1
        self._close_lingering(conn.sock)

    def murder_keepalived(self, force: bool = False) -> None:
        super().murder_keepalived(force)
        now = time.monotonic()
        for incoming in [i for i in self.incoming.values() if i.deadline <= now or force]:
            self._stalled(incoming)
        for lingering in [x for x in self.lingering.values() if x.deadline <= now or force]:
            self._unlinger(lingering)
        self._log_stalls(now, force)

    # -- gathering ---------------------------------------------------------------------------

    def _watch(self, incoming: _Incoming) -> None:
        self.incoming[id(incoming)] = incoming
        self.poller.register(incoming.conn.sock, incoming.events, partial(self._ready, incoming))

    def _unwatch(self, incoming: _Incoming) -> None:
        self.incoming.pop(id(incoming), None)
        self.buffered -= len(incoming.buffer)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(incoming.conn.sock)

    def _ready(self, incoming: _Incoming, _fileobj: Any) -> None:
        self._advance(incoming)

    def _advance(self, incoming: _Incoming) -> None:
        conn = incoming.conn
        try:
            if incoming.handshaking:
                conn.sock.do_handshake()
                incoming.handshaking = False
            while True:
                data = conn.sock.recv(_RECV)
                if not data:  # the client went away before its request was whole
                    self._drop(incoming)
                    return
                if not self._take(incoming, data):
                    return
        except ssl.SSLWantWriteError:
            self._wait_for(incoming, selectors.EVENT_WRITE)
        except (ssl.SSLWantReadError, BlockingIOError, InterruptedError):
            self._wait_for(incoming, selectors.EVENT_READ)
        except (OSError, ValueError):  # a failed handshake, a reset: nothing to answer
            self._drop(incoming)

    def _wait_for(self, incoming: _Incoming, events: int) -> None:
        if id(incoming) not in self.incoming:
            return
        if events != incoming.events:
            incoming.events = events
            self.poller.modify(incoming.conn.sock, events, partial(self._ready, incoming))

    def _take(self, incoming: _Incoming, data: bytes) -> bool:
        """Add what arrived; False once the connection has left the gathering."""
        if incoming.discarding:
            used = min(len(data), incoming.discarding)
            incoming.discarding -= used
            if incoming.discarding == 0 and incoming.refusal is not None:
                self._refuse(incoming, incoming.refusal)
                return False
            return True
        if self.buffered + len(data) > BUFFER_BUDGET:
            self._make_room(incoming, len(incoming.buffer) + len(data))
        if self.buffered + len(data) > BUFFER_BUDGET:
            self._refuse(incoming, _busy())
            return False
        incoming.buffer += data
        self.buffered += len(data)
        verdict = self._whole(incoming)
        if verdict is None:
            return True
        if isinstance(verdict, BadRequest):
            self._refuse(incoming, verdict)
        else:
            self._dispatch(incoming)
        return False

    def _whole(self, incoming: _Incoming) -> bool | BadRequest | None:
        """True when the buffer holds a whole request, a refusal for one that cannot be served,
        None while more is to come."""
        buffer = incoming.buffer
        if incoming.head_end < 0:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    return BadRequest(
                        431, "head_too_large", f"request head over {MAX_HEAD_BYTES} bytes"
                    )
                return None
            incoming.head_end = end + 4
            problem = _framing(incoming, bytes(buffer[:end]))
            if problem is not None:
                return problem
        if incoming.chunked:
            return _chunked_whole(incoming)
        if incoming.length is None:
            return True
        return len(buffer) - incoming.head_end >= incoming.length or None

    def _make_room(self, incoming: _Incoming, size: int) -> None:
        """Refuse the connections holding more than `incoming` would, largest first, until its
        data fits: whoever fills the budget with large, slow bodies is turned away, not the
        small admissions that arrive meanwhile."""
        others = sorted(
            (i for i in self.incoming.values() if i is not incoming),
            key=lambda i: len(i.buffer),
            reverse=True,
        )
        for largest in others:
            if self.buffered + size - len(incoming.buffer) <= BUFFER_BUDGET:
                return
            if len(largest.buffer) <= size:
                return
            self._refuse(largest, _busy())

    def _dispatch(self, incoming: _Incoming) -> None:
        self._unwatch(incoming)
        conn = incoming.conn
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.parser.unreader.unread(bytes(incoming.buffer))
        self.enqueue_req(conn)

    def _refuse(self, incoming: _Incoming, bad: BadRequest) -> None:
        """A Status for a request no thread will see, then close."""
        answer = rejected(bad)
        bookkeeping.note(answer.record, 0.0)
        self._answer_and_close(incoming, status_response(bad.status, answer.body))

    def _stalled(self, incoming: _Incoming) -> None:
        self.stalls[incoming.stage] = self.stalls.get(incoming.stage, 0) + 1
        if incoming.head_end >= 0 and not incoming.discarding:
            answer = rejected(
                BadRequest(
                    408,
                    "timeout",
                    f"request not received whole within {REQUEST_SECONDS:g} s",
                )
            )
            metrics.observe(answer.record, REQUEST_SECONDS)
            self._answer_and_close(incoming, status_response(408, answer.body))
        else:
            self._drop(incoming)

    def _answer_and_close(self, incoming: _Incoming, response: bytes) -> None:
        self._unwatch(incoming)
        conn = incoming.conn
        with contextlib.suppress(OSError, ValueError):
            conn.sock.send(response)  # a few hundred bytes: the socket's buffer takes them
        self.nr_conns -= 1
        self._close_lingering(conn.sock)

    def _drop(self, incoming: _Incoming) -> None:
        self._unwatch(incoming)
        self.nr_conns -= 1
        _close(incoming.conn.sock)

    # -- closing without blocking ------------------------------------------------------------

    def _close_lingering(self, client: socket.socket) -> None:
        """Half-close, then drop what the client still sends until it closes or LINGER_SECONDS
        pass, from the poller."""
        try:
            raw = _raw(client)
        except (OSError, ValueError):
            _close(client)
            return
        try:
            raw.setblocking(False)
            raw.shutdown(socket.SHUT_WR)
            lingering = _Lingering(raw, time.monotonic() + LINGER_SECONDS)
            self.poller.register(raw, selectors.EVENT_READ, partial(self._linger, lingering))
        except (OSError, ValueError, KeyError):
            _close(raw)
            return
        self.lingering[id(lingering)] = lingering

    def _linger(self, lingering: _Lingering, _fileobj: Any) -> None:
        try:
            while lingering.sock.recv(_RECV):
                pass
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            pass
        self._unlinger(lingering)

    def _unlinger(self, lingering: _Lingering) -> None:
        self.lingering.pop(id(lingering), None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            self.poller.unregister(lingering.sock)
        _close(lingering.sock)

    def _log_stalls(self, now: float, force: bool) -> None:
        if not self.stalls or (now - self.stalls_logged_at < STALL_LOG_SECONDS and not force):
            return
        total = sum(self.stalls.values())
        where = ", ".join(f"{stage}: {count}" for stage, count in sorted(self.stalls.items()))
        log.warning(
            "closed %d connection%s that stalled for %g s (%s)",
            total,
            "" if total == 1 else "s",
            REQUEST_SECONDS,
            where,
        )
        self.stalls = {}
        self.stalls_logged_at = now

    # -- gunicorn's own error answers, as Status JSON ----------------------------------------

    def handle_error(self, req: Any, client: Any, addr: Any, exc: BaseException) -> None:
        code, reason, message = _gunicorn_error(exc)
        if code >= 500:
            log.error("error handling a request", exc_info=exc)
        else:
            log.warning("refused a request: %s", message)
        status = failure_status(code, reason, message)
        try:
            client.settimeout(1.0)
            client.sendall(status_response(code, status))
        except (OSError, ValueError):
            pass


class _Idle:
    """Stands for the parser of a connection between requests (gthread checks its read-ahead);
    the next request gets a new parser once it is whole."""

    class _Unreader:
        class _Buffer:
            @staticmethod
            def getvalue() -> bytes:
                return b""

        buf = _Buffer()

    unreader = _Unreader()


def _framing(incoming: _Incoming, head: bytes) -> BadRequest | None:
    """Read the body's framing from the head: its length, or chunked."""
    lengths: list[bytes] = []
    codings: list[bytes] = []
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            lengths.append(value.strip())
        elif name == b"transfer-encoding":
            codings.append(value.strip().lower())
    if codings:
        if lengths or codings[-1].rsplit(b",", 1)[-1].strip() != b"chunked":
            return None  # gunicorn refuses these framings itself, without reading a body
        incoming.chunked = True
        incoming.chunk_at = incoming.head_end
        return None
    if len(lengths) != 1 or not lengths[0].isdigit():
        return None  # no body, or a framing gunicorn refuses without reading one
    if len(lengths[0]) > 12:
        return too_large(None)
    length = int(lengths[0])
    if length > MAX_BODY_BYTES:
        received = len(incoming.buffer) - incoming.head_end
        incoming.refusal = too_large(length)
        if length > DRAINED_AT_MOST or received >= length:
            return incoming.refusal
        incoming.discarding = length - received
        return None
    incoming.length = length
    return None


def _chunked_whole(incoming: _Incoming) -> bool | BadRequest | None:
    """Walk the chunks that have arrived; True at the last chunk's end."""
    buffer = incoming.buffer
    while True:
        line_end = buffer.find(b"\r\n", incoming.chunk_at)
        if line_end < 0:
            if len(buffer) - incoming.chunk_at > 1024:
                return _bad_chunk("a chunk-size line over 1024 bytes")
            return None
        size_text = bytes(buffer[incoming.chunk_at : line_end]).split(b";", 1)[0].strip()
        if not size_text or len(size_text) > 8 or not _is_hex(size_text):
            shown = size_text[:20].decode("latin-1")
            return _bad_chunk(f"chunk size {shown!r} is not a hexadecimal number of 1 to 8 digits")
        size = int(size_text, 16)
        if size == 0:
            trailers = buffer.find(b"\r\n\r\n", line_end)
            if buffer[line_end + 2 : line_end + 4] == b"\r\n" or trailers >= 0:
                return True
            if len(buffer) - line_end > MAX_HEAD_BYTES:
                return _bad_chunk(f"trailers over {MAX_HEAD_BYTES} bytes")
            return None
        incoming.chunked_total += size
        if incoming.chunked_total > MAX_BODY_BYTES:
            return too_large(None)
        data_end = line_end + 2 + size
        if len(buffer) < data_end + 2:
            incoming.chunked_total -= size  # counted again once the chunk is whole
            return None
        if buffer[data_end : data_end + 2] != b"\r\n":
            return _bad_chunk("a chunk not followed by CRLF")
        incoming.chunk_at = data_end + 2


def _is_hex(text: bytes) -> bool:
    return all(c in b"0123456789abcdefABCDEF" for c in text)


def _bad_chunk(what: str) -> BadRequest:
    return BadRequest(400, "malformed_body", f"malformed chunked request body: {what}")


_GUNICORN_ERRORS: tuple[tuple[type[BaseException], int, str], ...] = (
    (http_errors.LimitRequestLine, 414, "RequestURITooLong"),
    (http_errors.LimitRequestHeaders, 431, "RequestHeaderFieldsTooLarge"),
    (http_errors.ExpectationFailed, 417, "ExpectationFailed"),
    (http_errors.UnsupportedTransferCoding, 501, "NotImplemented"),
    (http_errors.ForbiddenProxyRequest, 403, "Forbidden"),
    (http_errors.ParseException, 400, "BadRequest"),
    (ssl.SSLError, 400, "BadRequest"),
)


def _gunicorn_error(exc: BaseException) -> tuple[int, str, str]:
    for kind, code, reason in _GUNICORN_ERRORS:
        if isinstance(exc, kind):
            text = " ".join(str(exc).split())[:200] or type(exc).__name__
            return code, reason, f"malformed HTTP request: {text}"
    return 500, "InternalError", "internal error; see the webhook's log"


def _raw(client: socket.socket) -> socket.socket:
    """The TCP socket under a TLS one, which gives its descriptor up to it (a closing
    connection sends no TLS close_notify, as gunicorn's graceful close does not either)."""
    if isinstance(client, ssl.SSLSocket):
        return socket.socket(fileno=client.detach())
    return client


def _close(client: socket.socket) -> None:
    with contextlib.suppress(OSError):
        client.close()


def _busy() -> BadRequest:
    return BadRequest(503, "busy", "the webhook holds too many incomplete requests; retry")
