"""Reading a new Messages body that is plain, without building its messages (pure).

The Messages twin of :mod:`gateway.wires.chat_typed`. A body the gateway never saw is most
often plain (:mod:`gateway.wires.anthropic_plain`) and goes upstream as its client's bytes;
parsing its history into Python objects (thousands of dicts and strings for an agent's
history), walking them and freeing them later was most of what it cost. Here the messages
are decoded into typed structs instead (``msgspec``: the shapes checked in C, every key
not in a plain block refused), walked once for the plain verdict, the state its later
turns are checked against, the neutral view's length and context counts and what the
session fingerprint hashes; the request gets :class:`LazyMessages` (the client's messages,
parsed from their bytes only when something reads them) and a deferred view.

It only ever says "plain" for what :func:`~gateway.wires.anthropic_plain.plain_body` calls
plain; anything else (a block it does not know, a key plain blocks do not have, a lone
surrogate, bytes it cannot decode) returns None, and the caller reads the body the general
way. ``tests/wires/test_anthropic_typed.py`` checks both on the same bodies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec
import orjson

from gateway.projection.lazy_messages import LazyMessages
from gateway.telemetry.context import (
    CALL_OVERHEAD,
    CHARS_PER_TOKEN,
    MESSAGE_OVERHEAD,
    CountedMessages,
)
from gateway.wires.anthropic_plain import TOOL_ID, Plain, breakpoints_fit, fixed_breakpoints
from gateway.wires.anthropic_rules import MAX_CACHE_BREAKPOINTS, thinking_on
from gateway.wires.base import Message
from gateway.wires.chat_typed import read_history_body

_UNSET = msgspec.UNSET


class _Cache(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    type: Literal["ephemeral"]
    ttl: Literal["5m", "1h"] | msgspec.UnsetType = _UNSET


class _Text(msgspec.Struct, tag_field="type", tag="text", forbid_unknown_fields=True,
            gc=False, omit_defaults=True):
    text: str
    cache_control: _Cache | msgspec.UnsetType = _UNSET


class _ToolUse(msgspec.Struct, tag_field="type", tag="tool_use", forbid_unknown_fields=True,
               gc=False):
    id: str
    name: str
    input: dict[str, Any]
    cache_control: _Cache | msgspec.UnsetType = _UNSET


class _Thinking(msgspec.Struct, tag_field="type", tag="thinking", forbid_unknown_fields=True,
                gc=False):
    thinking: str
    signature: str


class _Redacted(msgspec.Struct, tag_field="type", tag="redacted_thinking",
                forbid_unknown_fields=True, gc=False):
    data: str


class _ToolResult(msgspec.Struct, tag_field="type", tag="tool_result",
                  forbid_unknown_fields=True, gc=False):
    tool_use_id: str
    content: str | list[_Text]
    is_error: bool | msgspec.UnsetType = _UNSET
    cache_control: _Cache | msgspec.UnsetType = _UNSET


class _User(msgspec.Struct, tag_field="role", tag="user", forbid_unknown_fields=True,
            gc=False):
    content: str | list[_Text | _ToolResult]


class _Assistant(msgspec.Struct, tag_field="role", tag="assistant",
                 forbid_unknown_fields=True, gc=False):
    content: str | list[_Text | _ToolUse | _Thinking | _Redacted]


_MESSAGES = msgspec.json.Decoder(list[_User | _Assistant])
_THINKING = (_Thinking, _Redacted)


@dataclass(frozen=True, slots=True)
class PlainMessages:
    """A body :func:`read_plain_messages_typed` found plain (see there)."""

    body: dict[str, Any]  # the top-level fields parsed; "messages" holds ``messages``
    messages: LazyMessages
    plain: Plain
    start: int  # offset of the messages array's opening bracket in the body
    close: int  # offset of its closing bracket
    neutral: int  # how many neutral messages its view holds
    counted: CountedMessages  # their context counts
    lead: list[Message]  # the neutral messages the session fingerprint hashes


def read_plain_messages_typed(raw: bytes) -> PlainMessages | None:
    """``raw`` read as a Messages body whose history is plain, without building it; None
    when it is not, or not in a shape this reader knows (then read it the general way).
    The top-level fields are checked by the caller, as on the general way."""
    read = read_history_body(raw, _MESSAGES, "messages")
    if read is None:
        return None
    body, messages = read.body, read.decoded
    fixed = fixed_breakpoints(body)
    if fixed is None:
        return None
    tools = body.get("tools")
    most = MAX_CACHE_BREAKPOINTS - (type(body.get("cache_control")) is dict)
    walked = _walk(messages, fixed, isinstance(tools, list) and bool(tools), most,
                   thinking_on(body))
    if walked is None:
        return None
    plain, neutral, counted, lead = walked
    return PlainMessages(body, read.lazy, plain, read.start, read.close, neutral, counted,
                         lead)


def _walk(messages: list[_User | _Assistant], fixed: tuple[int, bool], tools: bool,
          most: int, thinking: bool
          ) -> tuple[Plain, int, CountedMessages, list[Message]] | None:
    """:func:`~gateway.wires.anthropic_plain.plain_after` of a whole history on its typed
    messages (the same verdict, the same :class:`Plain`), with what
    :mod:`gateway.wires.anthropic_deferred` reads of the view. One flat loop over locals:
    it runs for every message of every new body."""
    ids: dict[str, int] = {}
    marks: list[tuple[int, bool]] = []
    owed: list[str] = []
    previous: type | None = None
    overhead, per_token = MESSAGE_OVERHEAD, CHARS_PER_TOKEN
    t = o = n = 0
    turn = at_t = at_o = 0
    lead: list[Message] = []
    tool_id = TOOL_ID.fullmatch
    for index, message in enumerate(messages):
        if type(message) is previous:
            return None  # (roles alternate in a plain history)
        previous = type(message)
        said_text = message.content
        if isinstance(said_text, str):
            if owed or not said_text or said_text.isspace():
                return None
            t += overhead + -(-len(said_text) // per_token)
            n += 1
            if isinstance(message, _Assistant):
                turn, at_t, at_o = n, t, o
            elif not lead:
                lead.append({"role": "user", "content": said_text})
            continue
        if isinstance(message, _Assistant):
            blocks = message.content
            if not blocks or isinstance(blocks, str):
                return None
            calls: list[str] = []
            said = False  # a block other than thinking came
            text = chars = 0
            for block in blocks:
                if isinstance(block, _Text):
                    words = block.text
                    if not words or words.isspace():
                        return None
                    text += len(words)
                elif isinstance(block, _ToolUse):
                    ref, name = block.id, block.name
                    if not tool_id(ref) or ref in ids or not name:
                        return None
                    ids[ref] = index
                    calls.append(ref)
                    try:
                        chars += len(name) + len(orjson.dumps(block.input).decode())
                    except orjson.JSONEncodeError:
                        return None  # (an integer past 64 bits: read the general way)
                elif said or not (block.signature if isinstance(block, _Thinking)
                                  else block.data):
                    return None  # thinking after words, or unsigned
                else:
                    continue
                said = True
                mark = block.cache_control
                if mark is not _UNSET:
                    marks.append((index, mark.ttl == "1h"))
            if not said:
                return None  # (a turn of thinking alone loses it)
            if calls and not tools:
                return None  # (the finishing rules would declare the tools)
            t += overhead + -(-text // per_token)
            if calls:
                t += -(-chars // per_token) + CALL_OVERHEAD * len(calls)
            n += 1
            turn, at_t, at_o = n, t, o
            owed = calls
            continue
        parts = message.content
        if not parts or isinstance(parts, str):
            return None
        answered = text = 0
        run: list[_Text] = []
        for part in parts:
            if isinstance(part, _ToolResult):
                if answered >= len(owed) or part.tool_use_id != owed[answered]:
                    return None
                result = part.content
                if isinstance(result, str):
                    if not result or result.isspace():
                        return None
                    chars = len(result)
                else:
                    if not result:
                        return None
                    chars = 0
                    for inner in result:
                        words = inner.text
                        if not words or words.isspace():
                            return None
                        chars += len(words)
                        if inner.cache_control is not _UNSET:
                            marks.append((index, inner.cache_control.ttl == "1h"))
                if part.cache_control is not _UNSET:
                    marks.append((index, part.cache_control.ttl == "1h"))
                answered += 1
                tokens = overhead + -(-chars // per_token)
                t += tokens
                o += tokens
                n += 1
            else:
                words = part.text
                if answered < len(owed) or not words or words.isspace():
                    return None
                if part.cache_control is not _UNSET:
                    marks.append((index, part.cache_control.ttl == "1h"))
                text += len(words)
                run.append(part)
        if answered != len(owed):
            return None
        owed = []
        if run:
            t += overhead + -(-text // per_token)
            n += 1
            if not lead:
                lead.append({"role": "user", "content": msgspec.to_builtins(run)})
    if previous is not _User:
        return None  # an assistant turn to continue: trimmed, its thinking checked
    if not breakpoints_fit(marks, *fixed, most):
        return None
    if thinking and len(messages) > 1 and _unthought(messages):
        return None
    plain = Plain(ids, tuple(marks), fixed[0], fixed[1], tools)
    totals = (t, 0, o, 0)
    counted = (CountedMessages(0, totals) if turn == 0
               else CountedMessages(0, totals, turn, (at_t, 0, at_o, 0)))
    return plain, n, counted, lead


def _unthought(messages: list[_User | _Assistant]) -> bool:
    """``anthropic_rules.unthought_tool_turn`` of a plain history (roles alternate, the
    last message a user's): its last message answers calls of an assistant turn that does
    not open with thinking."""
    last, before = messages[-1].content, messages[-2].content
    if isinstance(last, str) or not any(isinstance(b, _ToolResult) for b in last):
        return False
    return isinstance(before, str) or not isinstance(before[0], _THINKING)
