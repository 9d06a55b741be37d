"""A plain Messages body is one the wire's rules leave as it is, and a turn checked over a
plain one is plain exactly when it is plain checked whole.

Histories are drawn from what agents send (text, tool calls and their results, signed
thinking, breakpoints) with the faults the rules repair mixed in: an id reused or outside
the alphabet, a result out of place, a blank block, an unsigned or trailing thinking
block, a fifth breakpoint, an hour-long one after a five-minute one, a stream leftover.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.wires.anthropic_plain import plain_after, plain_body
from gateway.wires.anthropic_rules import finish_request, repair_request

_MARKS = [{"type": "ephemeral"}] * 4 + [{"type": "ephemeral", "ttl": "1h"},
                                        {"type": "ephemeral", "ttl": "5m"}]
_BAD_MARKS = [{"type": "ephemeral", "ttl": "3600"}, {"type": "persistent"}]
_TEXTS = ["look at this", "done."]
_BAD_TEXTS = [" ", "", "ends with space "]


def _fault(draw: st.DrawFn) -> bool:
    """Now and then, what the rules repair."""
    return draw(st.integers(0, 59)) == 0


def _text(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(_BAD_TEXTS if _fault(draw) else _TEXTS))


def _marked(draw: st.DrawFn, block: dict[str, Any]) -> dict[str, Any]:
    if draw(st.integers(0, 9)) == 0:
        block["cache_control"] = dict(draw(st.sampled_from(
            _BAD_MARKS if _fault(draw) else _MARKS)))
    return block


class _Ids:
    """Fresh tool ids, now and then one used before or one outside the alphabet."""

    def __init__(self) -> None:
        self.made: list[str] = []

    def next(self, draw: st.DrawFn) -> str:
        if _fault(draw):
            return draw(st.sampled_from([*self.made, "call 1", ""]))
        ref = f"toolu_{len(self.made)}_{draw(st.integers(0, 9))}"
        self.made.append(ref)
        return ref


@st.composite
def assistant(draw: st.DrawFn, ids: _Ids) -> tuple[dict[str, Any], list[str]]:
    """An assistant message and the ids it calls."""
    blocks: list[Any] = []
    if draw(st.integers(0, 3)) == 0:
        blocks.append(draw(st.sampled_from([
            {"type": "thinking", "thinking": "hm", "signature": "c2ln"},
            {"type": "redacted_thinking", "data": "ZGF0YQ"}])) if not _fault(draw) else
            draw(st.sampled_from([
                {"type": "thinking", "thinking": "hm", "signature": ""},
                {"type": "thinking", "thinking": "hm", "signature": "c2ln",
                 "cache_control": {"type": "ephemeral"}}])))
    calls: list[str] = []
    for _ in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 2)) == 0:
            blocks.append(_marked(draw, {"type": "text", "text": _text(draw)}))
            continue
        ref = ids.next(draw)
        block: dict[str, Any] = {"type": "tool_use", "id": ref,
                                 "name": draw(st.sampled_from(["read", "grep"])),
                                 "input": {"p": draw(st.integers(0, 3))}}
        if _fault(draw):
            block[draw(st.sampled_from(["index", "input"]))] = '{"p": 1}'
        blocks.append(_marked(draw, block))
        calls.append(ref)
    if _fault(draw):
        blocks.append(draw(st.sampled_from([
            {"type": "thinking", "thinking": "late", "signature": "c2ln"},
            {"type": "tool_result", "tool_use_id": "toolu_0_0", "content": "x"}])))
    return {"role": "assistant", "content": blocks}, calls


@st.composite
def user(draw: st.DrawFn, owed: list[str]) -> dict[str, Any]:
    """A user message, mostly answering ``owed`` in order."""
    if not owed and draw(st.booleans()):
        return {"role": "user", "content": _text(draw)}
    answers = list(owed)
    if _fault(draw):
        roll = draw(st.integers(0, 2))
        if roll == 0:
            answers.reverse()
        elif roll == 1 and answers:
            answers.pop()
        else:
            answers.append("toolu_0_0")
    blocks: list[Any] = []
    for ref in answers:
        content: Any = draw(st.sampled_from(["out", [{"type": "text", "text": "out"}]]))
        if _fault(draw):
            content = draw(st.sampled_from(["", [{"type": "text", "text": " "}], None]))
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": ref}
        if content is not None:
            block["content"] = content
        if draw(st.integers(0, 5)) == 0:
            block["is_error"] = True
        if isinstance(content, list) and content:
            _marked(draw, content[0])
        blocks.append(_marked(draw, block))
    if not blocks or draw(st.booleans()):
        blocks.append(_marked(draw, {"type": "text", "text": _text(draw)}))
    if _fault(draw):
        blocks.insert(draw(st.integers(0, len(blocks))),
                      {"type": "thinking", "thinking": "x", "signature": "c2ln"})
    return {"role": "user", "content": blocks}


@st.composite
def history(draw: st.DrawFn, turns: int, ids: _Ids | None = None) -> list[dict[str, Any]]:
    """A history of about ``turns`` exchanges, ending with a user message."""
    ids = ids if ids is not None else _Ids()
    messages: list[dict[str, Any]] = [draw(user([]))]
    for _ in range(turns):
        said, calls = draw(assistant(ids))
        messages += [said, draw(user(calls))]
        if _fault(draw):
            messages.append(draw(user([])))  # two user messages in a row
    return messages


@st.composite
def bodies(draw: st.DrawFn, turns: int = 4) -> dict[str, Any]:
    """A Messages body: the history, tools or none, a system prompt, thinking or not."""
    body: dict[str, Any] = {"model": "claude", "max_tokens": 64,
                            "messages": draw(history(turns))}
    if not _fault(draw):
        body["tools"] = [_marked(draw, {"name": "read", "input_schema": {"type": "object"}})]
    system = draw(st.sampled_from([None, "be brief", [{"type": "text", "text": "be brief"}]]))
    if _fault(draw):
        system = [{"type": "text", "text": " "}]
    if system is not None:
        body["system"] = copy.deepcopy(system)
        if isinstance(body["system"], list):
            _marked(draw, body["system"][0])
    if draw(st.booleans()):
        body["thinking"] = {"type": "enabled", "budget_tokens": 1024}
    if draw(st.integers(0, 9)) == 0:
        body["cache_control"] = {"type": "ephemeral"}
    return body


def _untouched(body: dict[str, Any]) -> None:
    repaired, found = repair_request(body)
    assert repaired is body and not found
    finished, found = finish_request(body)
    assert finished is body and not found, found


@settings(max_examples=1500, deadline=None)
@given(bodies())
def test_the_rules_change_nothing_in_a_plain_body(body: dict[str, Any]) -> None:
    if plain_body(body) is not None:
        _untouched(body)


@settings(max_examples=1500, deadline=None)
@given(bodies(turns=3), st.data())
def test_a_turn_checked_over_a_plain_one_is_plain_as_checked_whole(
        body: dict[str, Any], data: st.DataObject) -> None:
    before = plain_body(body)
    if before is None:
        return
    messages = body["messages"]
    # A later turn cuts after one of the last messages (a moved breakpoint rewrites the
    # rest) and adds what the agent did next.
    cut = data.draw(st.integers(max(0, len(messages) - 4), len(messages)))
    ids = _Ids()
    ids.made = [b["id"] for m in messages if isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_use"]
    added = data.draw(history(2, ids))[1:]
    if cut and messages[cut - 1]["role"] == "assistant":
        owed = [b["id"] for b in messages[cut - 1]["content"] if b.get("type") == "tool_use"]
        added = [data.draw(user(owed)), *added]
    elif cut and data.draw(st.booleans()):
        added = added[1:]  # (it starts with the assistant's answer)
    later = {**body, "messages": messages[:cut] + added}
    over = plain_after(later, before, cut)
    whole = plain_body(later)
    assert (over is None) == (whole is None) or (over is None and cut == 0)
    if over is not None:
        assert over == whole
        _untouched(later)


def test_agent_turns_with_a_moving_breakpoint_stay_plain() -> None:
    """Claude Code's shape: a breakpoint on the system prompt and on the newest message,
    thinking first in every turn."""
    marker = {"type": "ephemeral"}
    body: dict[str, Any] = {
        "model": "claude", "max_tokens": 64, "thinking": {"type": "enabled", "budget_tokens": 9},
        "system": [{"type": "text", "text": "You are an agent.", "cache_control": marker}],
        "tools": [{"name": "read", "input_schema": {"type": "object"}}],
        "messages": [{"role": "user", "content": [
            {"type": "text", "text": "fix the bug", "cache_control": marker}]}]}
    state = plain_body(body)
    assert state is not None
    for n in range(5):
        messages = body["messages"]
        last = messages[-1]
        unmarked = {**last, "content": [{k: v for k, v in b.items() if k != "cache_control"}
                                        for b in last["content"]]}
        ref = f"toolu_{n}"
        turn = [unmarked,
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "look", "signature": "c2ln"},
                    {"type": "tool_use", "id": ref, "name": "read", "input": {"p": n}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": ref, "content": "text",
                     "cache_control": marker}]}]
        body = {**body, "messages": messages[:-1] + turn}
        state = plain_after(body, state, len(messages) - 1)
        assert state is not None and state == plain_body(body)
        _untouched(body)
    # A sixth turn reusing an earlier id is not plain: the rules rename it.
    reused = {**body, "messages": [*body["messages"], {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_0", "name": "read", "input": {"p": 9}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0",
                                      "content": "again"}]}]}
    assert plain_after(reused, state, len(body["messages"])) is None
