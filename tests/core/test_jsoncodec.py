"""The admission path's JSON codec answers as the json module does, only faster."""

import json
import math
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def test_literals_the_fast_reader_refuses_are_read_as_the_json_module_reads_them() -> None:
    assert math.isnan(jsoncodec.loads(b'{"x": NaN}')["x"])
    assert jsoncodec.loads(b'"\\ud800"') == "\ud800"
    assert jsoncodec.loads("\ufeff{}".encode()) == {}


def test_an_integer_beyond_64_bits_is_encoded_exactly() -> None:
    assert jsoncodec.dumps({"n": 2**70}) == b'{"n":1180591620717411303424}'


def test_an_integer_beyond_64_bits_is_read_exactly_as_the_json_module_reads_it() -> None:
    value = jsoncodec.loads(b'{"n": 1180591620717411303425}')["n"]
    assert (type(value), value) == (int, 2**70 + 1)


def _nested(depth: int, levels: int) -> object:
    """`jsoncodec.loads` of a document `levels` deep, called `depth` frames down."""
    if depth:
        return _nested(depth - 1, levels)
    return jsoncodec.loads(b"[" * levels + b"]" * levels)


@pytest.mark.parametrize("depth", [0, 300])
def test_a_document_1024_levels_deep_is_read_however_deep_the_caller_is(depth: int) -> None:
    value = _nested(depth, 1024)
    for _ in range(1023):
        assert isinstance(value, list) and len(value) == 1
        value = value[0]
    assert value == []


def test_reading_a_large_document_takes_no_more_memory_than_the_json_module() -> None:
    body = json.dumps(
        {
            "items": [
                {"name": f"c{i}", "image": "registry.example.com/" + "i" * 100} for i in range(8000)
            ]
        }
    ).encode()

    def peak(read: object) -> float:
        assert callable(read)
        tracemalloc.start()
        try:
            read(body)
            return tracemalloc.get_traced_memory()[1] / 2**20
        finally:
            tracemalloc.stop()

    assert peak(jsoncodec.loads) <= peak(json.loads)


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats()
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4)
    ),
    max_leaves=10,
)


@st.composite
def _texts(draw: st.DrawFn) -> bytes:
    """JSON as the json module writes it (lone surrogates and NaN included), sometimes with a
    few bytes replaced by any others."""
    text = json.dumps(draw(_values), ensure_ascii=draw(st.booleans()))
    data = text.encode("utf-8", "surrogatepass")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(data)))
        replaced = draw(st.binary(min_size=1, max_size=3))
        data = data[:at] + replaced + data[at + draw(st.integers(0, 2)) :]
    return data


def _outcome(read: object, data: bytes) -> tuple[str, ...]:
    assert callable(read)
    try:
        return ("value", repr(read(data)))
    except json.JSONDecodeError as error:
        return ("JSONDecodeError", error.msg, str(error.pos))
    except ValueError as error:  # UnicodeDecodeError, too many digits
        return (type(error).__name__, str(error))


@settings(max_examples=500, deadline=None)
@given(data=_texts())
def test_any_text_reads_as_the_json_module_reads_it_or_fails_as_it_fails(data: bytes) -> None:
    assert _outcome(jsoncodec.loads, data) == _outcome(json.loads, data)
