"""Hypothesis strategies: valid chat histories, and histories broken the ways agents break them."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from tests.factories import (
    assistant,
    developer,
    image_part,
    system,
    text_part,
    tool,
    tool_call,
    user,
)

Message = dict[str, Any]
Draw = Callable[[st.SearchStrategy[Any]], Any]

BLANKS = ["", " ", "\n", " \t\n ", "\u3000"]

words = st.text(min_size=1, max_size=12).filter(lambda s: not s.isspace())
extra_fields = st.dictionaries(
    st.sampled_from(["x_trace", "metadata", "x_flags"]),
    st.one_of(st.integers(), words, st.lists(st.integers(), max_size=2)),
    max_size=2,
)


@st.composite
def _parts(draw: Draw, *, images: bool = True) -> list[Message]:
    kinds = st.sampled_from(["text", "cached", "image"] if images else ["text", "cached"])
    parts: list[Message] = []
    for kind in draw(st.lists(kinds, min_size=1, max_size=3)):
        if kind == "image":
            parts.append(image_part(f"https://example.com/{len(parts)}.png"))
        elif kind == "cached":
            parts.append(text_part(draw(words), cache_control={"type": "ephemeral"}))
        else:
            parts.append(text_part(draw(words)))
    return parts


def _content(draw: Draw, *, images: bool = True) -> Any:
    return draw(st.one_of(words, _parts(images=images)))


def _user(draw: Draw, *, plain_allowed: bool) -> Message:
    extra: dict[str, Any] = {}
    if not plain_allowed or draw(st.booleans()):
        extra = {"name": draw(st.sampled_from(["alice", "bob"]))}
    return user(_content(draw), **extra)


def _assistant_text(draw: Draw) -> Message:
    extra = draw(extra_fields)
    if draw(st.booleans()):
        extra["reasoning_content"] = draw(words)
    return assistant(_content(draw, images=False), **extra)


def _exchange(draw: Draw, ids: itertools.count[int]) -> list[Message]:
    call_ids = [f"call_{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
    content = draw(st.one_of(st.none(), words))
    extra = draw(extra_fields)
    message = assistant(content, [tool_call(c, f"tool_{c}") for c in call_ids], **extra)
    results = [
        tool(c, _content(draw, images=False), **draw(st.sampled_from([{}, {"name": "fn"}])))
        for c in call_ids
    ]
    return [message, *results]


@st.composite
def valid_histories(draw: Draw) -> list[Message]:
    """A history project() must leave untouched."""
    ids = itertools.count()
    history: list[Message] = []
    if draw(st.booleans()):
        history.append(system(draw(words), **draw(extra_fields)))
    if draw(st.booleans()):
        history.append(developer(_content(draw, images=False)))
    turns = draw(st.integers(1, 5))
    for turn in range(turns):
        previous = history[-1] if history else None
        previous_plain = previous is not None and set(previous) == {"role", "content"}
        history.append(_user(draw, plain_allowed=not previous_plain or previous["role"] != "user"))
        last = turn == turns - 1
        for _ in range(draw(st.integers(0 if last else 1, 3))):
            if draw(st.booleans()):
                history.extend(_exchange(draw, ids))
            else:
                history.append(_assistant_text(draw))
    return history


# Breaking operations: each takes the history and returns a new list (new dicts where
# changed), the way a client, trimmer or fork would have produced it.


def _positions(history: list[Message], role: str) -> list[int]:
    return [i for i, m in enumerate(history) if m.get("role") == role]


def _calling(history: list[Message]) -> list[int]:
    return [i for i in _positions(history, "assistant") if history[i].get("tool_calls")]


def drop_result(draw: Draw, history: list[Message]) -> list[Message]:
    tools = _positions(history, "tool")
    if not tools:
        return history
    i = draw(st.sampled_from(tools))
    return history[:i] + history[i + 1 :]


def drop_call_message(draw: Draw, history: list[Message]) -> list[Message]:
    callers = _calling(history)
    if not callers:
        return history
    i = draw(st.sampled_from(callers))
    return history[:i] + history[i + 1 :]


def move_result_later(draw: Draw, history: list[Message]) -> list[Message]:
    tools = _positions(history, "tool")
    if not tools:
        return history
    i = draw(st.sampled_from(tools))
    rest = history[:i] + history[i + 1 :]
    j = draw(st.integers(i, len(rest)))
    return [*rest[:j], history[i], *rest[j:]]


def shuffle_parallel(draw: Draw, history: list[Message]) -> list[Message]:
    callers = _calling(history)
    if not callers:
        return history
    i = draw(st.sampled_from(callers)) + 1
    end = i
    while end < len(history) and history[end].get("role") == "tool":
        end += 1
    block = draw(st.permutations(history[i:end]))
    return history[:i] + list(block) + history[end:]


def duplicate_result(draw: Draw, history: list[Message]) -> list[Message]:
    tools = _positions(history, "tool")
    if not tools:
        return history
    i = draw(st.sampled_from(tools))
    copy = {**history[i], "content": f"retry of {history[i]['tool_call_id']}"}
    j = draw(st.integers(i + 1, len(history)))
    return [*history[:j], copy, *history[j:]]


def insert_empty(draw: Draw, history: list[Message]) -> list[Message]:
    blank = draw(st.sampled_from(BLANKS))
    role = draw(st.sampled_from(["user", "assistant", "system", "developer"]))
    content = draw(st.sampled_from([blank, [text_part(blank)], [], None]))
    j = draw(st.integers(0, len(history)))
    return [*history[:j], {"role": role, "content": content}, *history[j:]]


def blank_part_in_user(draw: Draw, history: list[Message]) -> list[Message]:
    users = _positions(history, "user")
    if not users:
        return history
    i = draw(st.sampled_from(users))
    content = history[i]["content"]
    parts = [text_part(content)] if isinstance(content, str) else list(content or [])
    parts.insert(draw(st.integers(0, len(parts))), text_part(draw(st.sampled_from(BLANKS))))
    return [*history[:i], {**history[i], "content": parts}, *history[i + 1 :]]


def duplicate_call_id(draw: Draw, history: list[Message]) -> list[Message]:
    calls = [(i, k) for i in _calling(history) for k in range(len(history[i]["tool_calls"]))]
    if len(calls) < 2:
        return history
    (i, k), (j, n) = sorted(draw(st.lists(st.sampled_from(calls), min_size=2, max_size=2)))
    if (i, k) == (j, n):
        return history
    first_id = history[i]["tool_calls"][k]["id"]
    tool_calls = list(history[j]["tool_calls"])
    tool_calls[n] = {**tool_calls[n], "id": first_id}
    return [*history[:j], {**history[j], "tool_calls": tool_calls}, *history[j + 1 :]]


def two_assistants(draw: Draw, history: list[Message]) -> list[Message]:
    assistants = _positions(history, "assistant")
    if not assistants:
        return history
    i = draw(st.sampled_from(assistants))
    return [*history[:i], assistant(draw(words)), *history[i:]]


def leading_non_user(draw: Draw, history: list[Message]) -> list[Message]:
    start = 0
    while start < len(history) and history[start].get("role") in ("system", "developer"):
        start += 1
    extra = draw(
        st.sampled_from(
            [
                [assistant("Where were we?")],
                [tool("call_lost", "stale output")],
                [assistant(None, [tool_call("call_lead")]), tool("call_lead", "lead output")],
            ]
        )
    )
    return history[:start] + extra + history[start:]


def split_user(draw: Draw, history: list[Message]) -> list[Message]:
    users = _positions(history, "user")
    if not users:
        return history
    i = draw(st.sampled_from(users))
    second = user(_content(draw))
    return [*history[: i + 1], second, *history[i + 1 :]]


def drop_assistant(draw: Draw, history: list[Message]) -> list[Message]:
    assistants = _positions(history, "assistant")
    if not assistants:
        return history
    i = draw(st.sampled_from(assistants))
    return history[:i] + history[i + 1 :]


def remove_users(draw: Draw, history: list[Message]) -> list[Message]:
    return [m for m in history if m.get("role") != "user"]


def _retool(
    draw: Draw, history: list[Message], change: Callable[[Message], Message]
) -> list[Message]:
    tools = _positions(history, "tool")
    if not tools:
        return history
    i = draw(st.sampled_from(tools))
    return [*history[:i], change(history[i]), *history[i + 1 :]]


def mark_error(draw: Draw, history: list[Message]) -> list[Message]:
    return _retool(draw, history, lambda m: {**m, "is_error": True})


def add_model_note(draw: Draw, history: list[Message]) -> list[Message]:
    note = draw(words)
    return _retool(draw, history, lambda m: {**m, "model_note": note})


def empty_tool_content(draw: Draw, history: list[Message]) -> list[Message]:
    content = draw(st.sampled_from([*BLANKS, None, [], [text_part(" ")]]))
    return _retool(draw, history, lambda m: {**m, "content": content})


BREAKERS = [
    drop_result,
    drop_call_message,
    move_result_later,
    shuffle_parallel,
    duplicate_result,
    insert_empty,
    blank_part_in_user,
    duplicate_call_id,
    two_assistants,
    leading_non_user,
    split_user,
    drop_assistant,
    remove_users,
    mark_error,
    add_model_note,
    empty_tool_content,
]


@st.composite
def broken_histories(draw: Draw) -> list[Message]:
    """A valid history after one to four breaking operations."""
    history = draw(valid_histories())
    for breaker in draw(st.lists(st.sampled_from(BREAKERS), min_size=1, max_size=4)):
        history = breaker(draw, history)
    return history
