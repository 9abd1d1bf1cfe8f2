"""Bounds on what a review can make the core do, checked before any work depends on it.

Every number a label or annotation holds is read only when it is a short run of ASCII digits
(Python converts at most 4,300 digits, and a number that long costs time on every use), and every
name Trainhook builds from user strings must be the DNS label it becomes.
"""

from __future__ import annotations

import re
from typing import Final

MAX_INT32: Final = 2**31 - 1
MAX_LABEL: Final = 63
DNS_1035_LABEL: Final = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
DNS_1123_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# A value is quoted at most this long in a message.
SHOWN_AT_MOST: Final = 80
# Admission warnings longer than this are cut by the API server's clients: kubectl, Argo CD.
WARNING_AT_MOST: Final = 120


def whole_number(text: str, high: int = MAX_INT32) -> int | None:
    """`text` as a whole number from 0 to `high`, or None: only ASCII digits, at most as many as
    `high` has."""
    digits = text.strip()
    if not digits or len(digits) > len(str(high)) or not (digits.isascii() and digits.isdigit()):
        return None
    number = int(digits)
    return number if number <= high else None


def is_dns_1035_label(name: object) -> bool:
    """A Service name: lower-case letters, digits and '-', starting with a letter, <= 63."""
    return isinstance(name, str) and len(name) <= MAX_LABEL and bool(DNS_1035_LABEL.match(name))


def is_dns_1123_label(name: object) -> bool:
    """A pod hostname: lower-case letters, digits and '-', <= 63."""
    return isinstance(name, str) and len(name) <= MAX_LABEL and bool(DNS_1123_LABEL.match(name))


def shown(value: object) -> str:
    """`value` quoted for a one-line message, cut to SHOWN_AT_MOST characters."""
    if isinstance(value, str) and len(value) > SHOWN_AT_MOST and ("'" not in value or '"' in value):
        # A long text's quotes are repr's single ones: only the part shown is quoted, so that a
        # value of megabytes costs no more than a short one.
        text = repr(value[:SHOWN_AT_MOST])
    else:
        text = repr(value)
        if len(text) <= SHOWN_AT_MOST:
            return text
    return f"{text[: SHOWN_AT_MOST - 20]}... ({len(str(value))} characters)"


def one_line(message: str, at_most: int = 1024) -> str:
    """A message as one line: runs of whitespace (newlines included) become one space, and
    one longer than `at_most` characters is cut to them, ending in an ellipsis."""
    line = " ".join(message.split())
    return line if len(line) <= at_most else line[: at_most - 1] + "…"
