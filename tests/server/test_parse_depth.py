"""parse_json_object reads big bodies inside padding arrays (no trial serialization): the
verdict and every error message stay those of the plain parse-then-serialize check."""

from __future__ import annotations

import orjson
import pytest

from gateway.server.errors import ClientError
from gateway.wires.chat_validation import _PADDED_FROM, MAX_JSON_DEPTH, parse_json_object

FILLER = b'"' + b"x" * _PADDED_FROM + b'"'  # makes a body big enough for the padded parse


def big(member: bytes) -> bytes:
    return b'{"model": "m", "filler": ' + FILLER + b', "x": ' + member + b"}"


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def refusal(raw: bytes) -> str:
    with pytest.raises(ClientError) as err:
        parse_json_object(raw)
    assert err.value.status == 400
    return str(err.value)


def test_big_body_at_the_depth_limit_is_read_whole() -> None:
    raw = big(nested(MAX_JSON_DEPTH - 1))  # the body object counts as one level
    assert parse_json_object(raw) == orjson.loads(raw)


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 600, 1100])
def test_big_body_past_the_depth_limit_is_refused(depth: int) -> None:
    assert "nested deeper than" in refusal(big(nested(depth)))


@pytest.mark.parametrize("raw", [
    # One value per padding level: two values separated at a padding level are not a body.
    b'{"a": ' + FILLER + b'}],[{"b": 1}',
    b'{"a": ' + FILLER + b'}, {"b": 1}',
    b'{"a": ' + FILLER + b"}]",
    b'{"a": ' + FILLER,
])
def test_big_body_that_is_not_one_json_value_is_refused_as_before(raw: bytes) -> None:
    with pytest.raises(orjson.JSONDecodeError) as plain:
        orjson.loads(raw)
    assert refusal(raw) == f"request body is not valid JSON: {plain.value}"


def test_big_body_that_is_not_an_object_is_refused_as_before() -> None:
    assert "must be a JSON object, got array" in refusal(b"[" + FILLER + b"]")


def test_big_body_with_a_byte_order_mark_is_refused_as_before() -> None:
    assert "not valid JSON" in refusal(b"\xef\xbb\xbf" + big(b"1"))
