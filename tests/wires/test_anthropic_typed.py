"""A new Messages body read typed is plain exactly when it is plain read the general way,
with the same state for its later turns and what the deferred view would give; its
messages, parsed when read, are the client's."""

from __future__ import annotations

import json
from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.sessions.hashing import session_fingerprint
from gateway.wires.anthropic_deferred import DeferredAnthropicView
from gateway.wires.anthropic_plain import plain_body
from gateway.wires.anthropic_typed import read_plain_messages_typed
from tests.wires.test_anthropic_plain import bodies

# What plain blocks never hold, put on a block now and then: the typed read must refuse
# each (an unknown key, another block type) as the general way finds it not plain.
_ODD = [("key", "citations", []), ("key", "id", "x"), ("key", "cache_control", None),
        ("key", "cache_control", {"type": "ephemeral", "ttl": "2h"}),
        ("block", {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}),
        ("block", {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                   "input": {}}),
        ("message", {"role": "system", "content": "be brief"}),
        ("message", {"role": "user", "content": []})]


@st.composite
def odd_bodies(draw: st.DrawFn) -> dict[str, Any]:
    body = draw(bodies())
    messages = body["messages"]
    if draw(st.integers(0, 3)) == 0:
        what, *rest = draw(st.sampled_from(_ODD))
        at = draw(st.integers(0, len(messages) - 1))
        content = messages[at]["content"]
        if what == "message":
            messages.insert(at, rest[0])
        elif isinstance(content, list) and content:
            if what == "key":
                content[draw(st.integers(0, len(content) - 1))][rest[0]] = rest[1]
            else:
                content.insert(draw(st.integers(0, len(content))), rest[0])
    if draw(st.integers(0, 9)) == 0:  # an input of the kind JSON writes differently
        for message in messages:
            for block in message["content"] if isinstance(message["content"], list) else ():
                if block.get("type") == "tool_use":
                    block["input"] = {"path": "é/\u2028", "n": [1.5, -0.0, 10**18],
                                      "deep": {"a": [None, True]}}
    return body


@settings(max_examples=1500, deadline=None)
@given(odd_bodies(), st.booleans())
def test_read_typed_is_plain_exactly_when_plain_read_whole(body: dict[str, Any],
                                                           spaced: bool) -> None:
    raw = json.dumps(body, indent=1, ensure_ascii=False).encode() if spaced \
        else orjson.dumps(body)
    parsed = orjson.loads(raw)
    whole = plain_body(parsed) if isinstance(parsed.get("messages"), list) and all(
        isinstance(m, dict) for m in parsed["messages"]) else None
    typed = read_plain_messages_typed(raw)
    assert (typed is None) == (whole is None)
    if typed is None:
        return
    assert typed.plain == whole
    assert not typed.messages.parsed
    view = DeferredAnthropicView(parsed["messages"])
    assert (typed.neutral, typed.counted) == (len(view.messages), view.counted)
    assert session_fingerprint(typed.lead) == session_fingerprint(view.lead)
    assert {k: v for k, v in typed.body.items() if k != "messages"} == \
        {k: v for k, v in parsed.items() if k != "messages"}
    assert list(typed.body.keys()) == list(parsed.keys())
    assert typed.messages == parsed["messages"]
    assert raw[typed.start:typed.close + 1].startswith(b"[") and raw[typed.close] == ord("]")


def test_what_the_typed_read_leaves_to_the_general_way() -> None:
    def raw(messages: Any, **fields: Any) -> bytes:
        return json.dumps({"model": "claude", "max_tokens": 8, "messages": messages,
                           **fields}).encode()

    ask = {"role": "user", "content": "hi"}
    use = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"n": 10**20}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                           "content": "x"}]}
    tools = [{"name": "read", "input_schema": {"type": "object"}}]
    assert read_plain_messages_typed(raw([ask])) is not None
    # An integer no 64 bits hold, a lone surrogate, a history nested in another field.
    assert read_plain_messages_typed(raw([ask, use, result], tools=tools)) is None
    assert read_plain_messages_typed(
        b'{"model": "c", "messages": [{"role": "user", "content": "a\\ud800"}]}') is None
    assert read_plain_messages_typed(
        b'{"model": "c", "x": {"messages": []}, "messages": [{"role": "user", '
        b'"content": "a"}]}') is None
