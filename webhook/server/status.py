"""A `metav1.Status` as a whole HTTP response, for answers written without the app."""

from __future__ import annotations

import json
from collections.abc import Mapping
from http import HTTPStatus
from typing import Any


def status_response(code: int, status: Mapping[str, Any]) -> bytes:
    """HTTP/1.1 `code` with `status` as its JSON body; the connection closes after it."""
    body = json.dumps(status, separators=(",", ":")).encode()
    try:
        phrase = HTTPStatus(code).phrase
    except ValueError:
        phrase = "Error"
    head = (
        f"HTTP/1.1 {code} {phrase}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("latin-1") + body
