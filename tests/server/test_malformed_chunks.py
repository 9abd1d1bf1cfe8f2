"""A chunked body that gunicorn cannot parse (a bad chunk extension, a bad trailer) is the
client's error: 400 with one line, as for a malformed request line or header, never a 500."""

from __future__ import annotations

import pytest

from tests.server.test_attacks import head, raw_answer
from tests.support.serving import Webhook

CHUNKED = head(
    "POST /mutate?timeout=10s HTTP/1.1",
    Content_Type="application/json",
    Transfer_Encoding="chunked",
)


@pytest.mark.parametrize(
    ("body", "what"),
    [
        (b'2;a="b\r\n{}\r\n0\r\n\r\n', "Invalid chunk extension: invalid chunk extension"),
        (b"2\r\n{}\r\n0\r\nX-T: \x01\r\n\r\n", "Invalid HTTP Header: 'X-T'"),
    ],
    ids=["chunk-extension", "trailer"],
)
def test_a_chunked_body_gunicorn_cannot_parse_gets_a_400(
    webhook: Webhook, body: bytes, what: str
) -> None:
    status, answer = raw_answer(webhook, CHUNKED + body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"] == f"malformed request body: {what}"
