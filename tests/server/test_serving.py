"""The admission server as the API server meets it: real gunicorn, real TLS, keep-alive."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.server.test_review import BAD_REQUESTS, labelled_pod
from tests.support.reviews import encoded, patched, review, validate
from tests.support.serving import Webhook, serving
from tests.support.waiting import eventually
from webhook.core import contract
from webhook.server.admission import MAX_BODY_BYTES, Context
from webhook.server.admission import review as answer_in_process


def test_healthz_answers_over_tls_verified_against_the_generated_ca(webhook: Webhook) -> None:
    assert webhook.get("/healthz") == (200, "ok\n")


def test_readyz_is_ready_once_the_certificate_is_loaded(webhook: Webhook) -> None:
    assert webhook.get("/readyz") == (200, "ready\n")


def test_connection_negotiates_tls_1_2_or_newer(webhook: Webhook) -> None:
    connection = webhook.connect()
    connection.connect()
    assert isinstance(connection.sock, ssl.SSLSocket)
    assert connection.sock.version() in ("TLSv1.2", "TLSv1.3")
    connection.close()


def test_client_that_does_not_trust_the_ca_cannot_connect(webhook: Webhook, tmp_path: Path) -> None:
    from webhook.certs.material import generate

    generate(tmp_path, "trainhook", "trainhook-system")

    with pytest.raises(ssl.SSLCertVerificationError):
        webhook.get("/healthz", webhook.connect(ca_file=tmp_path / "ca.crt"))


@pytest.mark.parametrize(("body", "content_type", "status", "message"), BAD_REQUESTS)
def test_bad_request_over_https_gets_its_4xx_and_one_line_reason(
    webhook: Webhook, body: bytes, content_type: str | None, status: int, message: str
) -> None:
    got, answer, response = webhook.post(body, content_type)

    assert got == status
    assert answer["code"] == status
    assert answer["message"] == message
    assert response.getheader("Content-Type") == "application/json"


def test_unknown_path_and_wrong_method_get_one_line_statuses(webhook: Webhook) -> None:
    status, answer, _ = webhook.post(encoded(review(labelled_pod())), path="/validate")
    assert (status, answer["message"]) == (404, "POST /validate: Not Found")

    status, text = webhook.get("/mutate")
    assert status == 405
    assert text == (
        '{"apiVersion":"v1","kind":"Status","status":"Failure","code":405,'
        '"reason":"MethodNotAllowed","message":"GET /mutate: Method Not Allowed"}'
    )


def test_labelled_pod_gets_a_patch_that_applies_and_validates_strictly(webhook: Webhook) -> None:
    pod = labelled_pod()
    document = review(pod)

    status, answer, _ = webhook.post(encoded(document))

    assert status == 200
    assert answer["apiVersion"] == "admission.k8s.io/v1"
    assert answer["kind"] == "AdmissionReview"
    assert answer["response"]["uid"] == document["request"]["uid"]
    mutated = patched(pod, answer)
    validate(mutated)
    assert mutated["metadata"]["labels"][contract.RANK] == "0"


def test_invalid_setting_is_refused_with_the_cores_message(webhook: Webhook) -> None:
    pod = labelled_pod()
    pod["metadata"]["annotations"] = {contract.SHM_SIZE: "lots"}

    status, answer, _ = webhook.post(encoded(review(pod)))

    assert status == 200
    assert answer["response"]["allowed"] is False
    assert answer["response"]["status"]["code"] == 400
    assert answer["response"]["status"]["message"].startswith("trainhook.io/shm-size: ")


def test_dry_run_over_https_is_answered_like_the_real_request(webhook: Webhook) -> None:
    real = review(labelled_pod())
    dry = review(labelled_pod(), dry_run=True)
    dry["request"]["uid"] = real["request"]["uid"]

    assert webhook.post(encoded(dry))[1] == webhook.post(encoded(real))[1]


def test_one_connection_carries_many_admissions(webhook: Webhook) -> None:
    connection = webhook.connect()
    for _ in range(5):
        status, _, response = webhook.post(encoded(review(labelled_pod())), connection=connection)
        assert status == 200
        assert response.getheader("Connection") != "close"
    first_socket = connection.sock
    webhook.post(encoded(review(labelled_pod())), connection=connection)
    assert connection.sock is first_socket
    connection.close()


def test_200_concurrent_admissions_over_keep_alive_connections_all_get_the_right_patch(
    webhook: Webhook,
) -> None:
    connections, per_connection = 50, 4
    documents = [
        review(labelled_pod(**{contract.INDEX: str(n % 8), contract.JOB: f"job-{n % 5}"}))
        for n in range(connections * per_connection)
    ]
    for n, document in enumerate(documents):  # give each one its own topology
        pod = document["request"]["object"]
        pod["metadata"]["annotations"] = {contract.TOPOLOGY: f'{{"master":1,"worker":{8 + n}}}'}
        pod["metadata"]["labels"][contract.ROLE] = "worker"
    expected = [
        answer_in_process(encoded(document), "application/json", Context()).body
        for document in documents
    ]
    start = threading.Barrier(connections)

    def client(first: int) -> list[tuple[int, dict[str, Any]]]:
        start.wait()
        connection = webhook.connect(timeout=60)
        got = []
        for document in documents[first : first + per_connection]:
            status, answer, _ = webhook.post(encoded(document), connection=connection)
            got.append((status, answer))
        connection.close()
        return got

    with ThreadPoolExecutor(connections) as pool:
        results = [
            item
            for batch in pool.map(client, range(0, len(documents), per_connection))
            for item in batch
        ]

    assert [status for status, _ in results] == [200] * len(documents)
    assert [answer for _, answer in results] == expected
    for document, (_, answer) in zip(documents, results, strict=True):
        mutated = patched(document["request"]["object"], answer)
        assert mutated["metadata"]["labels"][contract.RANK] == str(
            1 + int(document["request"]["object"]["metadata"]["labels"][contract.INDEX])
        )


def test_each_admission_leaves_one_json_log_line(webhook: Webhook) -> None:
    document = review(labelled_pod())
    uid = document["request"]["uid"]

    webhook.post(encoded(document))

    # Written by the worker's bookkeeping thread, just after the answer is sent.
    eventually(
        lambda: [line for line in webhook.log_lines() if line.get("uid") == uid],
        what="the admission's log line",
    )
    lines = [line for line in webhook.log_lines() if line.get("uid") == uid]
    assert len(lines) == 1
    line = lines[0]
    assert {k: line[k] for k in ("logger", "kind", "object", "operation", "result")} == {
        "logger": "trainhook.admission",
        "kind": "Pod",
        "object": "default/trainer",
        "operation": "CREATE",
        "result": "mutated",
    }
    assert line["patch_bytes"] > 0
    assert line["duration_ms"] > 0


def test_metrics_count_every_admission_whichever_worker_answered(webhook: Webhook) -> None:
    def admissions(text: str) -> float:
        pattern = (
            r'^trainhook_admissions_total\{kind="Pod",operation="DELETE",result="allowed"\} (\S+)$'
        )
        found = re.search(pattern, text, re.MULTILINE)
        return float(found.group(1)) if found else 0.0

    before = admissions(webhook.get("/metrics")[1])
    uids = set()
    for _ in range(60):  # new connections until both workers have answered some
        document = review(None, kind="Pod", operation="DELETE", old=labelled_pod())
        uids.add(document["request"]["uid"])
        assert webhook.post(encoded(document))[0] == 200
        pids = {line["pid"] for line in webhook.log_lines() if line.get("uid") in uids}
        if len(pids) == 2 and len(uids) >= 10:
            break
    assert len(pids) == 2

    # A worker writes its counts within a twentieth of a second of answering (a scrape waits
    # only for the counts of the worker that answers it).
    eventually(
        lambda: admissions(webhook.get("/metrics")[1]) - before == len(uids),
        what="every admission counted",
    )
    scrapes = {admissions(webhook.get("/metrics")[1]) - before for _ in range(6)}

    assert scrapes == {len(uids)}


def listening_sockets(port: int) -> dict[str, set[int]]:
    """The TCP sockets listening on `port`, by inode, with the processes holding each."""
    inodes = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if fields[1].endswith(f":{port:04X}") and fields[3] == "0A":  # 0A: LISTEN
            inodes.add(fields[9])
    holders: dict[str, set[int]] = {inode: set() for inode in inodes}
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        inode = target.removeprefix("socket:[").removesuffix("]")
        if inode in holders:
            holders[inode].add(int(fd.parts[2]))
    return holders


def test_each_worker_listens_on_its_own_socket_so_kept_alive_connections_spread(
    webhook: Webhook,
) -> None:
    # On one shared socket the first worker awake accepts; the API server keeps its connections
    # alive, so one worker could hold all of them while the other idles.
    deadline = time.monotonic() + 10
    while len(sockets := listening_sockets(webhook.port)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    workers = set(webhook.workers())

    assert len(workers) == 2
    assert sorted(map(sorted, sockets.values())) == sorted([pid] for pid in workers)

    uids = []
    for _ in range(100):  # new connections: the kernel picks a socket by the client's port
        document = review(labelled_pod())
        assert webhook.post(encoded(document))[0] == 200
        uids.append(document["request"]["uid"])
        served = {line["pid"] for line in webhook.log_lines() if line.get("uid") in uids}
        if served == workers:
            break
    assert served == workers


def test_body_over_the_limit_still_sent_when_refused_gets_its_413_not_a_reset(
    webhook: Webhook,
) -> None:
    size = MAX_BODY_BYTES + 1
    head = (
        f"POST /mutate HTTP/1.1\r\nHost: trainhook\r\nContent-Type: application/json\r\n"
        f"Content-Length: {size}\r\n\r\n"
    ).encode()
    raw = socket.create_connection(("127.0.0.1", webhook.port))
    client = webhook.tls().wrap_socket(raw, server_hostname="127.0.0.1")
    client.sendall(head + b" " * (size // 2))
    time.sleep(0.3)  # the server has seen the length and answered by now
    client.sendall(b" " * (size - size // 2))
    response = http.client.HTTPResponse(client)
    response.begin()
    answer = json.loads(response.read())
    client.close()

    assert response.status == 413
    assert answer["message"] == f"request body is {size} bytes; the limit is 3 MiB"


def test_the_start_line_says_where_the_server_listens(webhook: Webhook) -> None:
    master = webhook.process.pid  # gunicorn's master is the `trainhook serve` process
    starts = [line for line in webhook.log_lines() if line["message"].startswith("Listening at:")]
    assert [line["message"] for line in starts] == [
        f"Listening at: https://127.0.0.1:{webhook.port} ({master}; each worker binds its own "
        "socket)"
    ]


def test_metrics_say_which_version_and_python_answer(webhook: Webhook) -> None:
    import platform

    from webhook import __version__

    builds = {
        re.findall(r"^trainhook_build_info\{(.*)\} (\S+)$", webhook.get("/metrics")[1], re.M)[0]
        for _ in range(4)
    }
    assert builds == {(f'python="{platform.python_version()}",version="{__version__}"', "1.0")}


def test_metrics_show_when_the_served_certificate_expires(webhook: Webhook) -> None:
    from cryptography import x509

    served = x509.load_pem_x509_certificate((webhook.ca_file.parent / "tls.crt").read_bytes())

    text = webhook.get("/metrics")[1]

    found = re.search(r"^trainhook_certificate_expiry_timestamp_seconds (\S+)$", text, re.MULTILINE)
    assert found is not None
    assert float(found.group(1)) == served.not_valid_after_utc.timestamp()


def test_admissions_answered_just_before_shutdown_all_leave_their_log_line(
    certs: Path, tmp_path: Path
) -> None:
    log = tmp_path / "webhook.log"
    uids = []
    with serving(certs, log, "--workers=1") as webhook:
        connection = webhook.connect()
        for _ in range(30):
            document = review(labelled_pod())
            uids.append(document["request"]["uid"])
            assert webhook.post(encoded(document), connection=connection)[0] == 200
        assert webhook.stop() == 0  # SIGTERM right after the last answer

    logged = [line["uid"] for line in webhook.log_lines() if line.get("uid") in uids]
    assert logged == uids
