"""The typed read of a new chat body (``wires.chat_typed``) against the general read.

Its verdict must never differ from the general one: when it calls a body valid and clean,
the general read (parse, validate, the projection's clean check) must agree, and every figure
it computes without building the messages (the context counts, media parts, the session
fingerprint) must be the general read's. And it must take the common agent histories, or
bodies a gateway never saw cost the general read's price again.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.compaction.session_view import media_parts
from gateway.errors import ClientError
from gateway.projection.fastpath import is_clean
from gateway.projection.lazy_messages import LazyMessages, copy_messages
from gateway.sessions.hashing import session_fingerprint
from gateway.wires.chat_typed import messages_span, read_clean_chat, top_level_fields
from gateway.wires.chat_validation import check_chat_body_fields, read_chat_body

_IDS = ("call_a", "call_b", "call_c")
_TEXTS = ("Fix the failing test.", "", "   ", "\n", "naïve — “quoted”", "ok\u00a0")
_PARTS: list[Any] = [
    {"type": "text", "text": "look at this"},
    {"type": "text", "text": " "},
    {"type": "image_url", "image_url": {"url": "https://example.test/a.png"}},
    {"type": "image_url", "image_url": {"url": "https://example.test/a.png", "detail": "low"}},
    {"type": "image_url", "image_url": "https://example.test/b.png"},
    {"type": "input_text", "text": "responses part"},
    {"type": "text", "text": "marked", "cache_control": {"type": "ephemeral"}},
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
    {"text": "no type"},
]
_MISSING = object()


def _call(call_id: Any, arguments: Any = '{"path": "a.py"}') -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": "read_file", "arguments": arguments}}


contents = st.one_of(st.sampled_from(_TEXTS), st.none(), st.just(_MISSING),
                     st.lists(st.sampled_from(_PARTS), max_size=3), st.integers(0, 3))
calls = st.lists(st.one_of(st.sampled_from(_IDS).map(_call),
                           st.just(_call(7)), st.just(_call("call_a", {"path": "a"})),
                           st.just({"id": "call_b", "function": {"name": "f"}})), max_size=3)


@st.composite
def messages(draw: st.DrawFn) -> dict[str, Any]:
    """Any message, clean or not, in shapes the typed read knows and shapes it does not."""
    role = draw(st.sampled_from(("system", "developer", "user", "assistant", "tool",
                                 "function", "bot")))
    message: dict[str, Any] = {"role": role}
    content = draw(contents)
    if content is not _MISSING:
        message["content"] = copy.deepcopy(content)
    if role == "assistant" and draw(st.booleans()):
        message["tool_calls"] = draw(st.one_of(calls, st.none()))
    if role == "tool" or draw(st.integers(0, 9)) == 0:
        message["tool_call_id"] = draw(st.one_of(st.sampled_from(_IDS), st.none()))
    extra = draw(st.sampled_from((None, ("name", "ann"), ("name", 3), ("refusal", "no"),
                                  ("reasoning_content", "hm"), ("cache_control", {}))))
    if extra is not None and draw(st.integers(0, 3)) == 0:
        message[extra[0]] = extra[1]
    return message


@st.composite
def agent_turns(draw: st.DrawFn) -> list[dict[str, Any]]:
    """A clean agent history: asks, calls answered in order, answers."""
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": draw(st.sampled_from(("system", "developer"))),
                    "content": "You are a coding agent."})
    for turn in range(draw(st.integers(1, 4))):
        ask: Any = f"step {turn}: fix module_{turn}.py"
        if draw(st.integers(0, 3)) == 0:
            ask = [{"type": "text", "text": ask},
                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA",
                                                       "detail": draw(st.sampled_from(
                                                           ("low", "high")))}}]
        out.append({"role": "user", "content": ask, **(
            {"name": "ann"} if draw(st.integers(0, 4)) == 0 else {})})
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"call_{turn}_{k}_{len(out)}" for k in range(draw(st.integers(1, 3)))]
            out.append({"role": "assistant", "content": draw(st.sampled_from((None, "", "ok"))),
                        "tool_calls": [_call(i) for i in ids]})
            out += [{"role": "tool", "tool_call_id": i, "content": draw(st.sampled_from(
                ("1  x = 1\n2  y = 2\n", "", "naïve output")))} for i in ids]
        out.append({"role": "assistant", "content": f"Fixed module_{turn}.py."})
    return out


def _general(raw: bytes) -> tuple[dict[str, Any], Any] | None:
    """The general read: the body and its validated messages' counts, or None when it
    refuses the body."""
    body = orjson.loads(raw)
    try:
        read_chat_body(body, count=True)
    except ClientError:
        return None
    return body, read_chat_body(body, count=True)[1]


def _assert_agrees(raw: bytes) -> bool:
    """The typed read's verdict and figures are the general read's; True when it took it."""
    typed = read_clean_chat(raw, count=True)
    if typed is None:
        return False
    general = _general(raw)
    try:  # (what the route checks of the other fields after the typed read)
        check_chat_body_fields(typed.body, tools_checked=typed.tools_shared)
    except ClientError:
        # Refused for a field besides the messages: the general read refuses it too.
        assert general is None, "a field the general read takes was refused"
        general = _general(orjson.dumps({"model": "m", "messages": orjson.loads(raw)["messages"]}))
    else:
        assert general is not None, "the typed read took a body the general read refuses"
    assert general is not None, "the typed read took messages the general read refuses"
    body, counted = general
    msgs = body["messages"]
    assert is_clean(msgs), "the typed read called clean a history the projection repairs"
    assert typed.counted == counted
    assert typed.media_parts == media_parts(msgs)
    assert session_fingerprint(typed.fingerprint_messages) == session_fingerprint(msgs)
    assert typed.fingerprint_final == any(m.get("role") == "user" for m in msgs)
    assert len(typed.messages) == len(msgs)
    assert not typed.messages.parsed
    assert typed.messages == msgs
    assert {k: v for k, v in typed.body.items() if k != "messages"} == {
        k: v for k, v in orjson.loads(raw).items() if k != "messages"}
    assert typed.systems == [m.get("content") for m in msgs
                             if m.get("role") in ("system", "developer")]
    uncounted = read_clean_chat(raw, count=False)  # (the context report off)
    assert uncounted is not None and uncounted.counted is None
    assert (uncounted.media_parts, uncounted.fingerprint_messages) == (
        typed.media_parts, typed.fingerprint_messages)
    return True


@settings(max_examples=400, deadline=None)
@given(st.lists(messages(), max_size=8), st.sampled_from(({}, {"stream": True},
                                                           {"tools": [], "temperature": 0})))
def test_any_history_it_takes_the_general_read_calls_valid_and_clean(
    history: list[dict[str, Any]], fields: dict[str, Any]
) -> None:
    _assert_agrees(orjson.dumps({"model": "m", "messages": history, **fields}))


@settings(max_examples=200, deadline=None)
@given(agent_turns(), st.integers(0, 40), st.sampled_from(("drop", "swap", "blank", "extra",
                                                            "dup", "rename", "none")))
def test_clean_agent_histories_are_taken_and_any_one_break_is_not_missed(
    history: list[dict[str, Any]], where: int, damage: str
) -> None:
    raw = orjson.dumps({"model": "m", "messages": history, "temperature": 0})
    assert _assert_agrees(raw), "a clean agent history in the common shapes was not taken"
    broken = copy.deepcopy(history)
    i = where % len(broken)
    if damage == "drop":
        del broken[i]
    elif damage == "swap" and i + 1 < len(broken):
        broken[i], broken[i + 1] = broken[i + 1], broken[i]
    elif damage == "blank":
        broken[i]["content"] = " "
    elif damage == "extra":
        broken[i]["reasoning_content"] = "thinking"
    elif damage == "dup":
        broken.insert(i, copy.deepcopy(broken[i]))
    elif damage == "rename":  # a result that answers no call
        for message in broken[i:]:
            if message["role"] == "tool":
                message["tool_call_id"] = "call_elsewhere"
                break
    _assert_agrees(orjson.dumps({"model": "m", "messages": broken}))


@pytest.mark.parametrize("raw", [
    b'{"model": "m", "messages": [{"role": "user", "content": "a"}], "messages": []}',
    b'{"model": "m", "x": {"messages": [{"role": "user", "content": "a"}]}}',
    b'{"model": "m", "messages": [{"role": "user", "content": "\\ud83d"}]}',
    b'[{"role": "user", "content": "a"}]',
    b'{"model": "m", "messages": [{"role": "user", "content": "a", "content": " "}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "a", "role": "assistant"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "a", "role": "tool", '
    b'"tool_call_id": "call_a"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "a"}], "tools": '
    + b"[" * 300 + b"]" * 300 + b"}",
    b'{"model": "m", "messages": [{"role": "user", "content": "a"}]',
    b'{"model": "m", "seed": 1e999999, "messages": [{"role": "user", "content": "a"}]}',
    b'{"model": "m", "seed": NaN, "messages": [{"role": "user", "content": "a"}]}',
])
def test_bodies_it_cannot_prove_are_left_to_the_general_read(raw: bytes) -> None:
    assert read_clean_chat(raw, count=True) is None


def test_a_key_sent_twice_is_read_as_the_general_read_does() -> None:
    raw = b'{"model": "m", "messages": [{"role": "user", "content": " ", "content": "a"}]}'
    assert _assert_agrees(raw)


def test_the_messages_are_parsed_only_when_read_and_then_are_the_clients_json() -> None:
    history = [{"role": "user", "content": "hi", "name": "ann"},
               {"role": "assistant", "content": "hello"}]
    raw = orjson.dumps({"model": "m", "messages": history})
    typed = read_clean_chat(raw, count=False)
    assert typed is not None and typed.counted is None
    lazy = typed.messages
    assert len(lazy) == 2 and bool(lazy) and not lazy.parsed
    twin = copy_messages(lazy)
    assert isinstance(twin, LazyMessages) and not twin.parsed
    with pytest.raises(TypeError):  # a serializer never sees an empty list
        orjson.dumps(lazy)
    assert lazy[0] == history[0] and lazy.parsed
    assert not twin.parsed  # a copy of its own
    more = [{"role": "user", "content": "and?"}]
    assert twin + more == [*history, *more] and twin.parsed
    assert list(twin) == history and history[1] in twin
    assert orjson.loads(orjson.dumps(lazy)) == history
    assert copy_messages(lazy) == history and copy_messages(lazy) is not lazy
    assert typed.body["messages"] is lazy


def test_copies_and_pickles_of_the_messages_are_the_clients_json() -> None:
    history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    raw = orjson.dumps({"model": "m", "messages": history})

    def unparsed() -> LazyMessages:
        typed = read_clean_chat(raw, count=False)
        assert typed is not None and not typed.messages.parsed
        return typed.messages

    assert copy.deepcopy(unparsed()) == history
    assert copy.copy(unparsed()) == history
    assert pickle.loads(pickle.dumps(unparsed())) == history
    assert json.loads(json.dumps(unparsed())) == history
    assert list(reversed(unparsed())) == history[::-1]
    assert sorted(unparsed(), key=lambda m: len(m["content"])) == history


_BASE: list[dict[str, Any]] = [
    {"role": "system", "content": "You are a coding agent."},
    {"role": "user", "content": [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]},
    {"role": "assistant", "content": None, "tool_calls": [_call("call_a")]},
    {"role": "tool", "tool_call_id": "call_a", "content": "1  x = 1\n"},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "next", "name": "ann"},
]
_ODD_VALUES = (b"1e999999", b"-1e400", b"NaN", b"-0", b"123456789012345678901234567890",
               b'"\\ud800"', b'"\\u0000"', b"[]", b"{}", b"null", b"true", b'""', b'" "',
               b"[" * 300 + b"]" * 300, b'"\\"', b'"\xff"', b'"caf\xc3\xa9"', b"0.5e-400")


@settings(max_examples=400, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from(_ODD_VALUES),
       st.sampled_from(("value", "insert", "cut", "junk")), st.binary(max_size=8))
def test_hostile_bytes_are_taken_only_when_the_general_read_agrees(
    where: int, odd: bytes, how: str, junk: bytes
) -> None:
    """Whatever the bytes, the typed read returns a verdict or leaves the body to the general
    read; it never raises, and what it takes the general read takes the same way."""
    base = orjson.dumps({"model": "m", "messages": _BASE, "temperature": 0,
                         "tools": [{"type": "function", "function": {"name": "read_file"}}]})
    if how == "value":  # an odd JSON value where one value stood
        starts = [i + 1 for i, b in enumerate(base) if b in b":,["]
        start = starts[where % len(starts)]
        end = start
        while end < len(base) and base[end] not in b",]}":
            end += 1
        raw = base[:start] + odd + base[end:]
    elif how == "insert":
        i = where % (len(base) + 1)
        raw = base[:i] + odd + base[i:]
    elif how == "cut":
        raw = base[:where % (len(base) + 1)]
    else:
        i = where % (len(base) + 1)
        raw = base[:i] + junk + base[i + len(junk):]
    typed = read_clean_chat(raw, count=True)  # (never raises)
    if typed is not None:
        assert _assert_agrees(raw)


@pytest.mark.parametrize("key", ["messages", "input"])
def test_the_history_span_is_the_top_level_members_or_none(key: str) -> None:
    """``messages_span`` names where the body's own history array is (the member JSON
    readers keep), never an array of the same bytes elsewhere: nested in another field,
    or a first duplicate of a key written again with an escape."""
    item = b'{"role":"user","content":"hi"}'
    escaped = (f"\\u{ord(key[0]):04x}" + key[1:]).encode()  # (\u006dessages: the same key)
    plain = b'{"model":"m", "' + key.encode() + b'" : [' + item + b'] , "tools":[]}'
    bodies = {
        "nested": b'{"x":{"' + key.encode() + b'":[' + item + b']},"' + escaped + b'":['
                  + item + b']}',
        "duplicate": b'{"' + key.encode() + b'":[' + item + b'],"' + escaped + b'":['
                     + item + b']}',
        "key in a value's text": b'{"note":"\\"' + key.encode() + b'\\":[' + item[1:-1]
                                 .replace(b'"', b'\\"') + b']","' + escaped + b'":[' + item
                                 + b']}',
    }
    found = messages_span(plain, top_level_fields(plain) or {}, key)
    assert found is not None
    start, close = found
    assert plain[start:close + 1] == b"[" + item + b"]"
    for case, raw in bodies.items():
        assert orjson.loads(raw)[key] == [orjson.loads(item)], case
        top = top_level_fields(raw)
        assert top is not None
        span = messages_span(raw, top, key)
        # (a span, if any, must hold the member JSON readers keep: the last)
        assert span is None or span[0] == raw.rindex(b"[" + item + b"]"), case
