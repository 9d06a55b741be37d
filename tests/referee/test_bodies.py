"""The error bodies are the providers' own, byte for byte where the record is whole."""

from __future__ import annotations

import ast
import json
import re

import pytest

from gateway.referee import bodies
from tests.referee.support import record, record_body

# (record, template kind, values) for Anthropic records that are complete wire bodies.
ANTHROPIC_RECORDS = [
    (5, "tool_result_without_call", {"ai": 0, "ci": 0, "id": "toolu_01FxdGdpPyaZq3sCLqXtgJki"}),
    (15, "tool_call_without_result", {"ai": 63, "ids": "toolu_01Qimu3Y5DwauzoDUuBv2DmZ"}),
    (26, "empty_text", {}),
    (30, "empty_message", {"ai": 0}),
    (35, "whitespace_text", {}),
    (52, "duplicate_tool_call_id", {"ai": 1, "ci": 1}),
    (69, "image_invalid", {"ai": 2, "ci": 0, "media_type": "image/png"}),
    (75, "image_dimensions", {"ai": 59, "ci": 12, "limit": 2000}),
    (86, "context_overflow", {"tokens": 219898, "window": 200000}),
]


@pytest.mark.parametrize(("n", "kind", "values"), ANTHROPIC_RECORDS)
def test_anthropic_bodies_are_byte_equal_to_records(n: int, kind: str, values: dict) -> None:
    recorded = record_body(n)
    request_id = json.loads(recorded)["request_id"]
    status, _, body = bodies.render(kind, "anthropic", values, request_id)
    assert status == record(n)["status"]
    assert body == recorded.encode()


def test_anthropic_body_without_request_id_matches_older_record() -> None:
    _, _, body = bodies.render("empty_message", "anthropic", {"ai": 11})
    assert body == record_body(28).encode()


def test_transient_bodies_are_byte_equal_to_records() -> None:
    overloaded = bodies.overloaded("anthropic")
    assert (overloaded.status, overloaded.body) == (529, record_body(104).encode())
    assert len(overloaded.body) == 75  # the content-length in record 107
    assert ("x-should-retry", "true") in overloaded.headers

    limited = bodies.rate_limited("anthropic", retry_after=7)
    assert (limited.status, limited.body) == (429, record_body(111).encode())
    assert ("Retry-After", "7") in limited.headers

    openai_overloaded = bodies.overloaded("openai")
    assert (openai_overloaded.status, openai_overloaded.body) == (503, record_body(115).encode())

    request_id = json.loads(record_body(117))["request_id"]
    assert bodies.server_error("anthropic", request_id=request_id).body == record_body(117).encode()


def test_openai_invalid_image_body_is_byte_equal() -> None:
    status, _, body = bodies.render("image_invalid", "openai", {"ai": 0, "ci": 0, "media_type": ""})
    assert (status, body) == (400, record_body(67).encode())


def _python_repr(text: str) -> object:
    return ast.literal_eval(text)


def _openai_error(kind: str, values: dict) -> dict:
    _, _, body = bodies.render(kind, "openai", values)
    return json.loads(body)


def test_openai_orphan_tool_result_matches_records() -> None:
    for n, index in ((3, 2), (6, 4)):
        assert _openai_error("tool_result_without_call", {"i": index}) == _python_repr(
            record_body(n)
        )
    # Record 1 went through a relay that appended its own request ids to the message.
    relayed = json.loads(record_body(1))["error"]
    ours = _openai_error("tool_result_without_call", {"i": 3})["error"]
    assert relayed["message"].startswith(ours["message"] + " (request id: ")
    assert {k: v for k, v in relayed.items() if k != "message"} == {
        k: v for k, v in ours.items() if k != "message"
    }


def test_openai_missing_tool_result_matches_record() -> None:
    # The record was wrapped by a terminal (raw newlines are not even valid JSON): one line.
    recorded = json.loads(re.sub(r"\s*\n", " ", record_body(12)))
    values = {"ids": "call_RTlWVuE5MqEb3WZJgTIl7Rsb", "param": "messages.[6].role"}
    assert _openai_error("tool_call_without_result", values) == recorded


def test_openai_overflow_matches_records() -> None:
    plain = bodies.overflow("openai", window=4097, message_tokens=6988)
    assert json.loads(plain.body) == _python_repr(record_body(82))
    with_tools = bodies.overflow("openai", window=128000, message_tokens=202767, tool_tokens=101)
    assert json.loads(with_tools.body) == _python_repr(record_body(83))


def test_openai_null_content_matches_record() -> None:
    recorded = json.loads(record_body(32).split("}   (")[0] + "}")
    assert _openai_error("null_content", {"i": 0, "ai": 0}) == recorded


def test_openai_texts_match_records() -> None:
    limited = json.loads(bodies.rate_limited("openai").body)["error"]
    assert "429 " + limited["message"] == record_body(105)
    assert (limited["type"], limited["code"]) == ("tokens", "rate_limit_exceeded")

    quota = bodies.insufficient_quota()
    assert quota.status == 429
    assert json.loads(quota.body) == json.loads(record_body(110).split("}   (")[0] + "}")

    formats = "['png', 'jpeg', 'gif', 'webp']"
    message = _openai_error("image_media_type", {"formats": formats})["error"]["message"]
    assert message == record_body(72)

    duplicate = _openai_error("duplicate_tool_result", {"id": "call_3", "first": 4, "i": 5})
    assert duplicate["error"]["message"].startswith(
        "Invalid parameter: Duplicate value for 'tool_call_id' of 'call_3, in messages[4]"
    )
    assert json.loads(bodies.server_error("openai").body)["error"]["message"] in record_body(131)


def test_anthropic_texts_match_partial_records() -> None:
    _, too_large, _ = bodies.render(
        "image_too_large",
        "anthropic",
        {"ai": 58, "ci": 2, "mb": "5", "size": 6500712, "limit": 5242880},
    )
    assert too_large == _python_repr(record_body(62))["error"]["message"]  # type: ignore[index]

    _, media, _ = bodies.render(
        "image_media_type",
        "anthropic",
        {
            "ai": 10,
            "ci": 3,
            "media_types": "'image/jpeg', 'image/png', 'image/gif' or 'image/webp'",
        },
    )
    assert media == record_body(77)

    _, mismatch, _ = bodies.render(
        "image_media_type_mismatch",
        "anthropic",
        {"ai": 83, "ci": 0, "media_type": "image/jpeg", "actual": "image/png"},
    )
    recorded = json.loads(record_body(73))["error"]["message"]
    assert mismatch.split("image.source.base64: ")[1] == recorded.split("image.source.base64: ")[1]

    _, users, _ = bodies.render("consecutive_roles", "anthropic", {"role": "user"})
    assert users + " (type: invalid_request_error)" == record_body(43)

    _, first, _ = bodies.render("first_not_user", "anthropic", {})
    assert record_body(49).endswith("Bad Request - " + first)


@pytest.mark.parametrize("style", bodies.STYLES)
def test_auth_failures_are_401_in_the_style_envelope(style: bodies.Style) -> None:
    missing = bodies.unauthorized(style, None)
    wrong = bodies.unauthorized(style, "sk-wrong-key-123456")
    assert missing.status == wrong.status == 401
    if style == "openai":
        assert json.loads(wrong.body)["error"]["code"] == "invalid_api_key"
        assert "sk-wrong-key-123456" not in wrong.body.decode()
    else:
        assert json.loads(wrong.body)["error"]["type"] == "authentication_error"
