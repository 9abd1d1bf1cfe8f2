"""Admissions back to back, as the API server sends them, while something else changes.

One kept-alive connection and a fresh connection for every round, so both a connection made
before a change and one made after it are exercised; what failed, and which certificate each
fresh connection was served, are recorded in turn.
"""

from __future__ import annotations

import http.client
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes

from tests.support.serving import Webhook

SETTLE_SECONDS = 20.0  # an upper bound on waiting; the waits end as soon as they see the change


class AdmissionLoop:
    """Sends `body` to the webhook until stopped, trusting the CAs in `ca_file` (read afresh
    for each new connection, so a client that follows a changing caBundle can be played)."""

    def __init__(self, webhook: Webhook, ca_file: Path, body: bytes) -> None:
        self.webhook = webhook
        self.ca_file = ca_file
        self.body = body
        self.failures: list[str] = []
        self.seen: list[str] = []  # the certificate each fresh connection was served
        self.seen_issuers: list[str] = []  # and the CA that signed it
        self.requests = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def served(self) -> list[str]:
        """The certificates served, each once, in the order they were first served."""
        return _changes(self.seen)

    @property
    def issuers(self) -> list[str]:
        return _changes(self.seen_issuers)

    def _run(self) -> None:
        kept_alive = self.webhook.connect(self.ca_file)
        while not self._stop.is_set():
            fresh = self.webhook.connect(self.ca_file)
            for connection in (fresh, kept_alive):
                self._admit(connection)
            if isinstance(fresh.sock, ssl.SSLSocket):
                der = fresh.sock.getpeercert(binary_form=True)
                assert der is not None
                cert = x509.load_der_x509_certificate(der)
                self.seen.append(cert.fingerprint(hashes.SHA256()).hex())
                self.seen_issuers.append(cert.issuer.rfc4514_string())
            fresh.close()
        kept_alive.close()

    def _admit(self, connection: http.client.HTTPSConnection) -> None:
        try:
            status, answer, _ = self.webhook.post(self.body, connection=connection)
            if status != 200 or answer["response"]["allowed"] is not True:
                self.failures.append(f"{status}: {answer}")
        except (OSError, http.client.HTTPException) as error:
            self.failures.append(repr(error))
            connection.close()
        self.requests += 1

    def wait_for(self, fingerprint: str) -> None:
        """Until one of the last fresh connections was served this certificate."""
        deadline = time.monotonic() + SETTLE_SECONDS
        while fingerprint not in self.seen[-3:] and time.monotonic() < deadline:
            time.sleep(0.05)

    def settle(self, requests: int = 20) -> None:
        """Let at least `requests` more admissions go through."""
        target = self.requests + requests
        deadline = time.monotonic() + SETTLE_SECONDS
        while self.requests < target and time.monotonic() < deadline:
            time.sleep(0.02)

    @contextmanager
    def running(self) -> Iterator[AdmissionLoop]:
        self._thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            self._thread.join(timeout=30)


def _changes(values: list[str]) -> list[str]:
    return [value for n, value in enumerate(values) if n == 0 or values[n - 1] != value]
