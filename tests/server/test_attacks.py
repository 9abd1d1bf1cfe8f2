"""Serving that holds while clients attack it: slow or silent connections, malformed requests.

Every attack runs against the real server (gunicorn, TLS) on 127.0.0.1. A few attackers of each
kind are enough here: more than a worker has threads. `make bench` runs 200 of each.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from tests.server.test_review import labelled_pod
from tests.support.attacks import KINDS, describe, under_attack
from tests.support.reviews import encoded, review
from tests.support.serving import Webhook, serving
from webhook.server import gunicorn_conf
from webhook.server.admission import MAX_BODY_BYTES
from webhook.server.worker import BUFFER_BUDGET, REQUEST_SECONDS

THREADS = gunicorn_conf.threads


def test_admissions_and_probes_all_succeed_while_slow_and_silent_clients_hold_connections(
    certs: Path, tmp_path: Path
) -> None:
    # One worker, more attackers of each kind than it has threads.
    with serving(certs, tmp_path / "serve.log", "--workers=1") as webhook:
        report = under_attack(webhook, KINDS, THREADS + 4, seconds=8, pause=0.1)

    assert report.workers_died == 0, describe(report)
    for outcomes in report.outcomes:
        assert outcomes.total >= 10, describe(report)
        assert outcomes.failures == [], describe(report)
        assert outcomes.p99_ms < 2000, describe(report)


def tls_client(webhook: Webhook) -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", webhook.port), timeout=30)
    return webhook.tls().wrap_socket(raw, server_hostname="127.0.0.1")


def answer_to(client: ssl.SSLSocket) -> tuple[int, dict[str, Any], http.client.HTTPResponse]:
    response = http.client.HTTPResponse(client)
    response.begin()
    body = response.read()
    assert response.getheader("Content-Type") == "application/json", body
    return response.status, json.loads(body), response


def raw_answer(webhook: Webhook, request: bytes) -> tuple[int, dict[str, Any]]:
    client = tls_client(webhook)
    try:
        client.sendall(request)
        status, answer, _ = answer_to(client)
    finally:
        client.close()
    return status, answer


def head(content: str, **headers: str) -> bytes:
    lines = [
        content,
        "Host: trainhook",
        *(f"{k.replace('_', '-')}: {v}" for k, v in headers.items()),
    ]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_a_request_that_stalls_mid_body_gets_a_408_status_after_the_request_deadline(
    webhook: Webhook,
) -> None:
    body = encoded(review(labelled_pod()))
    client = tls_client(webhook)
    started = time.monotonic()
    client.sendall(
        head(
            "POST /mutate?timeout=10s HTTP/1.1",
            Content_Type="application/json",
            Content_Length=str(len(body)),
        )
        + body[:100]
    )
    status, answer, _ = answer_to(client)
    waited = time.monotonic() - started
    client.close()

    assert status == 408
    assert answer == {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": 408,
        "reason": "Timeout",
        "message": f"request not received whole within {REQUEST_SECONDS:g} s",
    }
    assert REQUEST_SECONDS - 0.5 < waited < REQUEST_SECONDS + 2.5


def test_a_client_trickling_its_head_is_cut_off_however_steadily_it_sends(
    webhook: Webhook,
) -> None:
    client = tls_client(webhook)
    started = time.monotonic()
    cut_off = None
    request = b"POST /mutate?timeout=10s HTTP/1.1\r\nHost: trainhook\r\nX-Slow: " + b"a" * 100
    for byte in request:
        try:
            client.sendall(bytes([byte]))
            client.settimeout(0.3)
            if client.recv(1) == b"":
                cut_off = time.monotonic() - started
                break
        except TimeoutError:
            continue
        except OSError:
            cut_off = time.monotonic() - started
            break
    client.close()

    assert cut_off is not None
    assert REQUEST_SECONDS - 0.5 < cut_off < REQUEST_SECONDS + 2.5


def test_stalled_handshakes_hold_no_thread_and_are_logged_as_one_line(
    certs: Path, tmp_path: Path
) -> None:
    with serving(certs, tmp_path / "serve.log", "--workers=1") as webhook:
        stalled = []
        for _ in range(THREADS * 2):
            client = socket.create_connection(("127.0.0.1", webhook.port))
            client.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, then silence
            stalled.append(client)
        time.sleep(0.2)
        try:
            started = time.monotonic()
            status, _, _ = webhook.post(encoded(review(labelled_pod())))
            waited = time.monotonic() - started
            deadline = time.monotonic() + REQUEST_SECONDS + 15
            while time.monotonic() < deadline:
                stalls = [line for line in webhook.log_lines() if "stalled" in line["message"]]
                if stalls:
                    break
                time.sleep(0.2)
        finally:
            for client in stalled:
                client.close()

    assert status == 200
    assert waited < 1.0  # served at once, not behind the stalled connections
    assert [(line["level"], line["message"]) for line in stalls] == [
        (
            "warning",
            f"closed {THREADS * 2} connections that stalled for {REQUEST_SECONDS:g} s "
            f"(TLS handshake: {THREADS * 2})",
        )
    ]


def test_chunked_body_over_the_limit_gets_413_instead_of_being_cut(webhook: Webhook) -> None:
    chunk = b" " * (1 << 20)
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(4)) + b"0\r\n\r\n"

    status, answer = raw_answer(
        webhook,
        head(
            "POST /mutate HTTP/1.1",
            Content_Type="application/json",
            Transfer_Encoding="chunked",
        )
        + body,
    )

    assert (status, answer["code"]) == (413, 413)
    assert answer["message"] == "request body is larger than that; the limit is 3 MiB"


def test_chunked_body_within_the_limit_is_admitted(webhook: Webhook) -> None:
    document = encoded(review(labelled_pod()))
    body = b"%x\r\n%s\r\n" % (100, document[:100])
    body += b"%x\r\n%s\r\n0\r\n\r\n" % (len(document) - 100, document[100:])

    status, answer = raw_answer(
        webhook,
        head(
            "POST /mutate HTTP/1.1",
            Content_Type="application/json",
            Transfer_Encoding="chunked",
        )
        + body,
    )

    assert status == 200
    assert answer["response"]["allowed"] is True


@pytest.mark.parametrize(
    ("request_bytes", "status", "message"),
    [
        (
            head("POST /mutate HTTP/1.1", Transfer_Encoding="chunked") + b"zz\r\n{}\r\n0\r\n\r\n",
            400,
            "malformed chunked request body: chunk size 'zz' is not a hexadecimal number of 1 to 8 "
            "digits",
        ),
        (
            head("POST /mutate HTTP/1.1", Transfer_Encoding="chunked") + b"2\r\n{}XX0\r\n\r\n",
            400,
            "malformed chunked request body: a chunk not followed by CRLF",
        ),
        (
            head("GET /" + "a" * 9000 + " HTTP/1.1"),
            414,
            "malformed HTTP request: Request Line is too large (9014 > 8190)",
        ),
        (
            head("GET /healthz HTTP/1.1", X_Big="b" * 9000),
            431,
            "malformed HTTP request: limit request headers fields size",
        ),
        (
            head("GET /healthz HTTP/1.1", **{f"X_{n}": "v" for n in range(120)}),
            431,
            "malformed HTTP request: limit request headers fields",
        ),
        (
            b"NOT HTTP AT ALL\r\n\r\n",
            400,
            "malformed HTTP request: Invalid HTTP request line: 'NOT HTTP AT ALL'",
        ),
        (
            head("POST /mutate HTTP/1.1", Content_Length=str(MAX_BODY_BYTES * 4)),
            413,
            f"request body is {MAX_BODY_BYTES * 4} bytes; the limit is 3 MiB",
        ),
        (
            b"GET /healthz HTTP/1.1\r\n" + b"X: " + b"y" * 70000,
            431,
            "request head over 65536 bytes",
        ),
    ],
    ids=[
        "chunk size not hex",
        "chunk without CRLF",
        "request line too long",
        "header too large",
        "too many headers",
        "not HTTP",
        "announced body far over the limit",
        "head without end",
    ],
)
def test_malformed_requests_get_a_one_line_json_status_never_html(
    webhook: Webhook, request_bytes: bytes, status: int, message: str
) -> None:
    got, answer = raw_answer(webhook, request_bytes)

    assert (got, answer["code"], answer["kind"]) == (status, status, "Status")
    assert answer["message"] == message


def test_two_requests_sent_in_one_write_get_both_answers_at_once(webhook: Webhook) -> None:
    body = encoded(review(labelled_pod()))
    one = (
        head(
            "POST /mutate?timeout=10s HTTP/1.1",
            Content_Type="application/json",
            Content_Length=str(len(body)),
        )
        + body
    )
    client = tls_client(webhook)
    started = time.monotonic()
    client.sendall(one + one)
    statuses = []
    for _ in range(2):
        status, answer, _ = answer_to(client)
        statuses.append((status, answer["response"]["allowed"]))
    waited = time.monotonic() - started
    client.close()

    assert statuses == [(200, True), (200, True)]
    assert waited < 2.0


def test_an_admission_is_served_while_large_slow_bodies_fill_the_workers_budget(
    certs: Path, tmp_path: Path
) -> None:
    almost = MAX_BODY_BYTES - 1
    announced = head(
        "POST /mutate HTTP/1.1", Content_Type="application/json", Content_Length=str(MAX_BODY_BYTES)
    )
    with serving(certs, tmp_path / "serve.log", "--workers=1") as webhook:
        # Bodies of 3 MiB less one byte, never finished, until the worker's 64 MiB hold all but
        # 200 bytes: less than an admission takes.
        sizes = [len(announced) + almost] * (BUFFER_BUDGET // (len(announced) + almost))
        sizes.append(BUFFER_BUDGET - sum(sizes) - 200)
        hoarders = [tls_client(webhook) for _ in sizes]
        try:
            for client, size in zip(hoarders, sizes, strict=True):
                client.sendall((announced + b" " * almost)[:size])
            time.sleep(0.5)  # the worker has read them all (loopback)
            document = encoded(review(labelled_pod()))
            status, answer = raw_answer(
                webhook,
                head(
                    "POST /mutate HTTP/1.1",
                    Content_Type="application/json",
                    Content_Length=str(len(document)),
                )
                + document,
            )
        finally:
            for client in hoarders:
                client.close()

    assert status == 200, answer
    assert answer["response"]["allowed"] is True
