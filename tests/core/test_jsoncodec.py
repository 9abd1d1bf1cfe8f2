"""The admission path's JSON codec answers as the json module does, only faster."""

import json
import math

import pytest

from webhook.core import jsoncodec


def test_a_review_body_decodes_to_the_same_value_as_with_the_json_module() -> None:
    body = b'{"request":{"uid":"1","object":{"spec":{"replicas":3,"x":[1.5,null,true]}}}}'
    assert jsoncodec.loads(body) == json.loads(body)


def test_encoding_is_compact_like_the_json_module_with_separators() -> None:
    value = {"op": "add", "path": "/metadata/labels/a~1b", "value": [1, 2.5, None, True]}
    assert jsoncodec.dumps(value) == json.dumps(value, separators=(",", ":")).encode()


def test_text_outside_ascii_is_written_as_utf8_and_reads_back_the_same() -> None:
    assert jsoncodec.dumps({"name": "zoë"}) == '{"name":"zoë"}'.encode()
    assert jsoncodec.loads(jsoncodec.dumps({"name": "zoë"})) == {"name": "zoë"}


def test_invalid_json_raises_the_json_modules_error_with_its_position() -> None:
    with pytest.raises(json.JSONDecodeError) as raised:
        jsoncodec.loads(b"{not json")
    assert (raised.value.msg, raised.value.lineno, raised.value.colno) == (
        "Expecting property name enclosed in double quotes",
        1,
        2,
    )


def test_bytes_that_are_not_utf8_raise_a_unicode_error_as_before() -> None:
    with pytest.raises(UnicodeDecodeError):
        jsoncodec.loads(b'{"kind": "Adm\xffssionReview"}')


def test_nesting_too_deep_raises_the_recursion_error_the_server_words_as_before() -> None:
    with pytest.raises(RecursionError):
        jsoncodec.loads(b"[" * 100_000 + b"]" * 100_000)


def test_literals_orjson_refuses_are_read_as_the_json_module_reads_them() -> None:
    assert math.isnan(jsoncodec.loads(b'{"x": NaN}')["x"])
    assert jsoncodec.loads(b'"\\ud800"') == "\ud800"
    assert jsoncodec.loads("\ufeff{}".encode()) == {}


def test_an_integer_beyond_64_bits_is_encoded_exactly() -> None:
    assert jsoncodec.dumps({"n": 2**70}) == b'{"n":1180591620717411303424}'
