"""JSON on the admission path: fast libraries with the json module's answers.

Decoding a review and encoding the patch and the response are a large share of an admission;
msgspec decodes and orjson encodes several times faster than the json module. msgspec builds the
Python values straight from the text, so reading a review takes no more memory than the json
module needs for it (orjson first parses into a buffer of twelve times the text's size, 36 MiB
for the API server's largest body). What msgspec refuses (text that is not UTF-8, NaN and
Infinity, lone surrogates, numbers beyond 64 bits or a double's range) is handed to the json
module, which then decides and words any error exactly as before, and reads an integer beyond 64
bits exactly. A document nested deeper than this thread's stack lets msgspec read is read as
orjson reads it: up to 1024 levels, so how deep a document may nest does not depend on the
caller. Encoding is compact (`separators=(",", ":")`), with text outside ASCII written as UTF-8
rather than `\\u` escapes, which decodes to the same value.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
import orjson


def loads(data: bytes | str) -> Any:
    """The value of a JSON document; raises what `json.loads` raises for one it refuses."""
    try:
        return msgspec.json.decode(data)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return json.loads(data)
    except RecursionError:
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
