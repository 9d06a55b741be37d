"""Plain Messages histories: the shapes none of the wire's own rules can change (pure).

Most agent turns hold only what the Messages API always takes: text, client tool calls
with ids in the API's alphabet and object inputs, their results right after them, signed
thinking at the start of a turn, a few breakpoints. For such a history the up-front rules
(:func:`~gateway.wires.anthropic_rules.repair_request`) and the finishing rules
(:func:`~gateway.wires.anthropic_rules.finish_request`, on a history the exchange rules
left as it is) find nothing, so the gateway need not run them: :func:`plain_body` checks
a whole body in one pass, :func:`plain_after` the messages a turn added to a plain one
(the tool ids and breakpoints before them are what :class:`Plain` keeps).

It must never call a body plain that those rules would change; calling a plain body not
plain only costs time (the rules then run and find nothing). Anything it does not know
(images, documents, server tools, a block field it has not seen) is not plain.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from gateway.wires.anthropic_rules import (
    MAX_CACHE_BREAKPOINTS,
    thinking_on,
    unthought_tool_turn,
)
from gateway.wires.base import entries_before

TOOL_ID = re.compile(r"[a-zA-Z0-9_-]+")  # (the API's alphabet of tool ids)
_TEXT_KEYS = frozenset({"type", "text", "cache_control"})
_USE_KEYS = frozenset({"type", "id", "name", "input", "cache_control"})
_RESULT_KEYS = frozenset({"type", "tool_use_id", "content", "is_error", "cache_control"})
_THINKING_KEYS = frozenset({"type", "thinking", "signature"})
_REDACTED_KEYS = frozenset({"type", "data"})
_MESSAGE_KEYS = frozenset({"role", "content"})
_TTLS = frozenset({"5m", "1h"})


@dataclass(frozen=True, slots=True)
class Plain:
    """What a plain body's later turns are checked against: its client tool ids (by the
    index of the message that made each), its message breakpoints in order (message index,
    one hour long), and those outside the messages."""

    ids: dict[str, int]
    marks: tuple[tuple[int, bool], ...]
    fixed: int  # breakpoints of tools and system
    fixed_short: bool  # a five-minute one among them
    tools: bool  # the body declares tools

def plain_body(body: dict[str, Any]) -> Plain | None:
    """What :class:`Plain` keeps of ``body`` when it is plain (a validated body), else
    None."""
    fixed = fixed_breakpoints(body)
    if fixed is None:
        return None
    count, short = fixed
    tools = body.get("tools")
    start = Plain({}, (), count, short, isinstance(tools, list) and bool(tools))
    return plain_after(body, start, 0)


def plain_after(body: dict[str, Any], before: Plain, cut: int) -> Plain | None:
    """What :class:`Plain` keeps of ``body`` when it is plain, given that its first
    ``cut`` messages are those of a plain body (with the same top-level fields) that
    ``before`` was made of, and that message ``cut - 1`` was not that body's last unless a
    user message. None when it is not plain (or not known to be)."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or cut > len(messages):
        return None
    ids = entries_before(before.ids, cut)
    marks = [mark for mark in before.marks if mark[0] < cut]
    base = len(marks)
    count = before.fixed + base
    short = before.fixed_short or any(not long for _index, long in marks)
    most = MAX_CACHE_BREAKPOINTS - (type(body.get("cache_control")) is dict)
    # The calls the next message must answer, in order: those of message ``cut - 1``.
    owed: list[str] = []
    if cut:
        previous = messages[cut - 1]
        role = previous.get("role")
        if role == "assistant":
            owed = [b["id"] for b in previous["content"] if b.get("type") == "tool_use"] \
                if isinstance(previous["content"], list) else []
    else:
        role = None
    for index in range(cut, len(messages)):
        message = messages[index]
        if type(message) is not dict or not _MESSAGE_KEYS.issuperset(message):
            return None
        now = message.get("role")
        content = message.get("content")
        if now == role or now not in ("user", "assistant"):
            return None  # (roles alternate in a plain history)
        role = now
        if isinstance(content, str):
            if owed or not content or content.isspace():
                return None
            continue
        if not isinstance(content, list) or not content:
            return None
        if now == "assistant":
            calls = _assistant_blocks(content, index, ids, marks)
            if calls is None:
                return None
            if calls and not before.tools:
                return None  # (the finishing rules would declare the tools)
            owed = calls
        else:
            if not _user_blocks(content, index, owed, marks):
                return None
            owed = []
    if role != "user":
        return None  # an assistant turn to continue: trimmed, its thinking checked
    if not breakpoints_fit(marks[base:], count, short, most):
        return None
    if thinking_on(body) and unthought_tool_turn(messages) is not None:
        return None
    return Plain(ids, tuple(marks), before.fixed, before.fixed_short, before.tools)


def breakpoints_fit(marks: list[tuple[int, bool]], count: int, short: bool,
                    most: int) -> bool:
    """True when the message breakpoints ``marks`` (in order, each one hour long or not)
    after ``count`` others (``short``: a five-minute one among them) are ones the rules
    leave alone: at most ``most`` in all, no hour-long one after a five-minute one (the
    rules shorten it)."""
    for _index, long in marks:
        count += 1
        if long and short:
            return False
        short = short or not long
    return count <= most


def fixed_breakpoints(body: dict[str, Any]) -> tuple[int, bool] | None:
    """The breakpoints outside the messages (tools, then system) and whether a five-minute
    one is among them; None when the system prompt holds what the rules change. (A
    top-level ``cache_control`` only takes one of the four: see ``most``.)"""
    markers: list[Any] = []
    tools = body.get("tools")
    for tool in tools if isinstance(tools, list) else ():
        if type(tool) is dict and "cache_control" in tool:
            markers.append(tool["cache_control"])
    system = body.get("system")
    if isinstance(system, list):
        for block in system:
            if type(block) is not dict or block.get("type") != "text":
                return None
            text = block.get("text")
            if not isinstance(text, str) or not text.strip():
                return None
            if "cache_control" in block:
                markers.append(block["cache_control"])
    elif system is not None and not isinstance(system, str):
        return None
    short = False
    for marker in markers:
        long = _ttl_long(marker)
        if long is None or (long and short):
            return None  # (an hour after five minutes: the rules shorten it)
        short = short or not long
    return len(markers), short


def _ttl_long(marker: Any) -> bool | None:
    """True for a one-hour breakpoint, False for a five-minute one, None for a marker the
    rules would change (or that is not known)."""
    if type(marker) is not dict or marker.get("type") != "ephemeral" \
            or not {"type", "ttl"}.issuperset(marker):
        return None
    ttl = marker.get("ttl", "5m")
    if not isinstance(ttl, str) or ttl not in _TTLS:
        return None
    return bool(ttl == "1h")


def _marked(block: dict[str, Any], index: int, marks: list[tuple[int, bool]]) -> bool:
    """Note ``block``'s breakpoint; False when it is not one the rules leave alone."""
    if "cache_control" not in block:
        return True
    long = _ttl_long(block["cache_control"])
    if long is None:
        return False
    marks.append((index, long))
    return True


def _text(block: dict[str, Any]) -> bool:
    text = block.get("text")
    return _TEXT_KEYS.issuperset(block) and isinstance(text, str) and bool(text) \
        and not text.isspace()


def _assistant_blocks(content: list[Any], index: int, ids: dict[str, int],
                      marks: list[tuple[int, bool]]) -> list[str] | None:
    """The tool ids an assistant message's blocks call, or None when one is not plain:
    text, client tool calls with new ids, signed thinking before everything else."""
    calls: list[str] = []
    said = False  # a block other than thinking came
    for block in content:
        if type(block) is not dict:
            return None
        kind = block.get("type")
        if kind == "text":
            if not _text(block) or not _marked(block, index, marks):
                return None
        elif kind == "tool_use":
            ref = block.get("id")
            name = block.get("name")
            if not (_USE_KEYS.issuperset(block) and isinstance(ref, str)
                    and TOOL_ID.fullmatch(ref) and ref not in ids
                    and isinstance(name, str) and name
                    and type(block.get("input")) is dict and _marked(block, index, marks)):
                return None
            ids[ref] = index
            calls.append(ref)
        elif kind == "thinking":
            if said or not (_THINKING_KEYS.issuperset(block)
                            and isinstance(block.get("thinking"), str)
                            and isinstance(block.get("signature"), str)
                            and block["signature"]):
                return None
            continue
        elif kind == "redacted_thinking":
            if said or not (_REDACTED_KEYS.issuperset(block)
                            and isinstance(block.get("data"), str) and block["data"]):
                return None
            continue
        else:
            return None
        said = True
    return calls if said else None  # (a turn of thinking alone loses it)


def _user_blocks(content: list[Any], index: int, owed: list[str],
                 marks: list[tuple[int, bool]]) -> bool:
    """True when a user message's blocks are plain: the results of the calls ``owed``, in
    their order, then text."""
    answered = 0
    for block in content:
        if type(block) is not dict:
            return False
        kind = block.get("type")
        if kind == "tool_result":
            if answered >= len(owed) or block.get("tool_use_id") != owed[answered] \
                    or not _RESULT_KEYS.issuperset(block) \
                    or not isinstance(block.get("is_error", False), bool) \
                    or not _result_content(block.get("content"), index, marks) \
                    or not _marked(block, index, marks):
                return False
            answered += 1
        elif kind == "text":
            if answered < len(owed) or not _text(block) or not _marked(block, index, marks):
                return False
        else:
            return False
    return answered == len(owed)


def _result_content(content: Any, index: int, marks: list[tuple[int, bool]]) -> bool:
    """A result's output: words, or text blocks (their breakpoints counted first, as the
    rules count them)."""
    if isinstance(content, str):
        return bool(content) and not content.isspace()
    if not isinstance(content, list) or not content:
        return False
    for block in content:
        if type(block) is not dict or block.get("type") != "text" or not _text(block) \
                or not _marked(block, index, marks):
            return False
    return True
