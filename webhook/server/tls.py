"""The serving certificate: loaded into an SSLContext, reloaded when its files change on disk.

gunicorn asks for the SSLContext each time it wraps a new connection (its `ssl_context` hook),
so handing out a fresh context after the files change rotates the certificate without a
restart. Connections already open keep the context they were made with. A half-written pair
(a new certificate next to the old key, as when the two files are replaced one after the other)
does not load; the previous context stays in use until the pair matches again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import threading

from webhook.certs.material import CertificateError, expires_at, load_certs
from webhook.server import metrics

log = logging.getLogger("trainhook.tls")

# How long a connection may hold a worker thread without sending or reading anything: the TLS
# handshake, a request the client stops sending halfway, a response it does not read.
IO_TIMEOUT = 5.0

Signature = tuple[tuple[int, int, int], tuple[int, int, int]]


class ServingCertificate:
    def __init__(self, cert_file: str, key_file: str) -> None:
        self.cert_file = cert_file
        self.key_file = key_file
        self._context: ssl.SSLContext | None = None
        self._loaded: Signature | None = None
        self._failed: Signature | None = None
        self._lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._context is not None

    def load(self) -> ssl.SSLContext:
        """Load the files now; raise CertificateError with a one-line reason if unusable."""
        with self._lock:
            signature = self._signature()
            context = _context(self.cert_file, self.key_file)
            self._install(context, signature)
            return context

    def context(self) -> ssl.SSLContext:
        """The context for a new connection: reloaded first if the files changed since."""
        try:
            signature = self._signature()
        except CertificateError as error:
            return self._keep(error, None)
        if signature == self._loaded and self._context is not None:
            return self._context
        with self._lock:
            if signature == self._loaded and self._context is not None:
                return self._context
            if signature == self._failed and self._context is not None:
                return self._context
            try:
                context = _context(self.cert_file, self.key_file)
            except CertificateError as error:
                return self._keep(error, signature)
            self._install(context, signature)
            metrics.CERTIFICATE_RELOADS.labels("loaded").inc()
            log.info("serving certificate reloaded", extra={"cert_file": self.cert_file})
            return context

    def _install(self, context: ssl.SSLContext, signature: Signature) -> None:
        self._context = context
        self._loaded = signature
        self._failed = None
        # The certificate loaded; if its expiry cannot be read, only the metric goes without.
        with contextlib.suppress(OSError, ValueError, CertificateError):
            metrics.CERTIFICATE_EXPIRY.set(_expiry(self.cert_file))

    def _keep(self, error: CertificateError, signature: Signature | None) -> ssl.SSLContext:
        if self._context is None:
            raise error
        if signature is None or signature != self._failed:
            self._failed = signature
            metrics.CERTIFICATE_RELOADS.labels("failed").inc()
            log.warning(
                "serving certificate changed but does not load; still serving the previous one",
                extra={"reason": str(error)},
            )
        return self._context

    def _signature(self) -> Signature:
        return (_stat(self.cert_file), _stat(self.key_file))


def _stat(path: str) -> tuple[int, int, int]:
    try:
        status = os.stat(path)  # follows symlinks, as a mounted Secret's files are
    except OSError as error:
        raise CertificateError(f"{path}: {error.strerror}") from None
    return (status.st_ino, status.st_mtime_ns, status.st_size)


class BoundedSocket(ssl.SSLSocket):
    """A server-side TLS connection whose blocking reads and writes give up after IO_TIMEOUT.

    gunicorn's gthread worker reads a request in blocking mode with no timeout, so a client that
    completes the handshake and then sends nothing would hold one of its threads until it
    disconnects; a few such clients would stall admission for the whole cluster. Kept-alive
    connections wait in the worker's poller, not in a thread, so this bounds only stalls.
    """

    def setblocking(self, flag: bool) -> None:
        if flag:
            self.settimeout(IO_TIMEOUT)
        else:
            super().setblocking(False)

    def do_handshake(self, block: bool = False) -> None:
        if self.gettimeout() is None:
            self.settimeout(IO_TIMEOUT)
        super().do_handshake(block)


def _context(cert_file: str, key_file: str) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.sslsocket_class = BoundedSocket
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.options |= ssl.OP_NO_COMPRESSION
    try:
        context.load_cert_chain(cert_file, key_file)
    except FileNotFoundError as error:
        raise CertificateError(f"{error.filename}: no such file") from None
    except OSError as error:  # ssl.SSLError is an OSError
        reason = getattr(error, "reason", None) or error.strerror or str(error)
        raise CertificateError(f"{cert_file} with {key_file}: {reason}") from None
    return context


def _expiry(cert_file: str) -> float:
    with open(cert_file, "rb") as pem:
        first, *_chain = load_certs(pem.read(), cert_file)
    return expires_at(first).timestamp()


_serving: dict[tuple[str, str], ServingCertificate] = {}
_serving_lock = threading.Lock()


def serving_certificate(cert_file: str, key_file: str) -> ServingCertificate:
    """This process's ServingCertificate for a pair of files, made on first use."""
    key = (cert_file, key_file)
    certificate = _serving.get(key)
    if certificate is None:
        with _serving_lock:
            certificate = _serving.setdefault(key, ServingCertificate(cert_file, key_file))
    return certificate
