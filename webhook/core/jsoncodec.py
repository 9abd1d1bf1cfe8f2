"""JSON on the admission path: orjson's speed with the json module's answers.

Decoding a review and encoding the patch and the response are a large share of an admission;
orjson does both several times faster than the json module. What orjson refuses (text that is
not UTF-8, NaN and Infinity, lone surrogates, more than 1024 levels of nesting) is handed to the
json module, which then decides and words any error exactly as before. The one value read
differently is an integer beyond 64 bits, which orjson reads as a float; no Kubernetes object
carries one (the API server's own decoding refuses them). Encoding is compact
(`separators=(",", ":")`), with text outside ASCII written as UTF-8 rather than `\\u` escapes,
which decodes to the same value.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """The value of a JSON document; raises what `json.loads` raises for one it refuses."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(value: Any) -> bytes:
    """Compact JSON of a value made of dicts, lists, strings, numbers, booleans and None.

    A float NaN or infinity, which only the json module's reading can produce, is written as
    null (the json module would write a literal that is not JSON).
    """
    try:
        return orjson.dumps(value)
    except TypeError:  # orjson.JSONEncodeError: e.g. an integer beyond 64 bits
        return json.dumps(value, separators=(",", ":")).encode()
