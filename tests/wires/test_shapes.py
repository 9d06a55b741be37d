"""The Messages shape check's one-pass path never accepts what the block-by-block check
refuses, and takes the histories agents send."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.errors import ClientError
from gateway.wires.reading import read_plain_messages
from gateway.wires.shapes import (
    check_each_message,
    check_messages_blocks,
    check_messages_fields,
    common_messages,
)

_VALUE = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=4),
                   st.just({}), st.just([]), st.just({"type": "text", "text": "x"}))
_SOURCE = st.one_of(
    st.fixed_dictionaries({"type": st.just("base64"), "media_type": st.just("image/png"),
                           "data": st.just("iVBOR")}),
    st.fixed_dictionaries({"type": st.just("url"), "url": st.just("https://x/y.png")}),
    st.fixed_dictionaries({"type": st.sampled_from(["file", "text", "content", 3])}),
    st.dictionaries(st.sampled_from(["type", "url", "data", "media_type"]), _VALUE,
                    max_size=3))
_BLOCK_KEYS = {
    "text": ["text", "cache_control", "citations"],
    "image": ["source", "cache_control"],
    "document": ["source", "title"],
    "tool_use": ["id", "name", "input", "cache_control"],
    "tool_result": ["tool_use_id", "content", "is_error"],
    "thinking": ["thinking", "signature"],
    "redacted_thinking": ["data"],
    "server_tool_use": ["id", "name", "input"],
}
_GOOD = {"text": "hi", "source": None, "id": "toolu_1", "name": "read", "input": {},
         "tool_use_id": "toolu_1", "content": "ok", "is_error": False, "thinking": "hm",
         "signature": "sig", "data": "abc", "cache_control": {"type": "ephemeral"},
         "citations": [], "title": "t"}


@st.composite
def blocks(draw: st.DrawFn, depth: int = 0) -> Any:
    """A content block: mostly well formed, sometimes with a field of another type, a
    field missing, an unknown type or not an object at all."""
    if draw(st.integers(0, 19)) == 0:
        return draw(_VALUE)
    kind = draw(st.sampled_from([*_BLOCK_KEYS, "mystery", None, 7]))
    block: dict[str, Any] = {} if kind is None else {"type": kind}
    for key in _BLOCK_KEYS.get(kind, ["text"]) if isinstance(kind, str) else ["text"]:
        roll = draw(st.integers(0, 9))
        if roll == 0:
            continue  # left out
        if key == "source":
            block[key] = draw(_SOURCE)
        elif key == "content" and depth == 0 and roll > 6:
            block[key] = draw(st.lists(blocks(depth + 1), max_size=3))
        else:
            block[key] = draw(_VALUE) if roll == 1 else _GOOD[key]
    return block


@st.composite
def bodies(draw: st.DrawFn) -> dict[str, Any]:
    messages = draw(st.lists(st.fixed_dictionaries({
        "role": st.sampled_from(["user", "assistant", "system", "tool", 1]),
        "content": st.one_of(st.text(max_size=3), st.lists(blocks(), max_size=4),
                             _VALUE)}), max_size=5))
    body: dict[str, Any] = {"model": "claude", "max_tokens": 10, "messages": messages}
    if draw(st.booleans()):
        body["system"] = draw(st.one_of(st.text(max_size=3), st.lists(blocks(), max_size=2)))
    return body


@settings(max_examples=400, deadline=None)
@given(bodies())
def test_what_the_one_pass_check_takes_the_block_by_block_check_takes(
        body: dict[str, Any]) -> None:
    if common_messages(body):
        check_each_message(body)  # never raises


def test_an_agent_history_takes_the_one_pass_check() -> None:
    png = {"type": "base64", "media_type": "image/png", "data": "iVBOR"}
    body = {"model": "claude", "max_tokens": 10,
            "system": [{"type": "text", "text": "You are Claude Code.",
                        "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "fix it"},
                                             {"type": "image", "source": png}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "look first", "signature": "EqQB"},
                    {"type": "text", "text": "Reading."},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read",
                     "input": {"file_path": "/a.py"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "x = 1"},
                                 {"type": "image", "source": png}]},
                    {"type": "text", "text": "go on", "cache_control": {"type": "ephemeral"}}]},
                {"role": "assistant", "content": "Done."}]}
    assert common_messages(body)
    assert check_messages_fields(body) is body["messages"]
    check_messages_blocks(body)


@pytest.mark.parametrize(("block", "named"), [
    ({"type": "text", "text": 5}, "messages.0.content.0.text"),
    ({"type": "tool_use", "name": "x", "input": {}}, "messages.0.content.0.id"),
    ({"type": "image", "source": {"type": "base64", "data": "x"}},
     "messages.0.content.0.source.media_type"),
])
def test_a_misshapen_block_is_still_refused_by_its_path(block: dict[str, Any],
                                                        named: str) -> None:
    body = {"model": "claude", "max_tokens": 10,
            "messages": [{"role": "assistant", "content": [block]}]}
    with pytest.raises(ClientError) as refused:
        read_plain_messages(body)
    assert refused.value.status == 400 and refused.value.param == named
