"""JSON-legal but odd shapes: never crash, never mutate, leave what is not understood."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.projection import SYNTHETIC_TOOL_RESULT_TEXT, project, project_strict
from tests.factories import assistant, calls, tool, tool_call, user

Message = dict[str, Any]

ODD_HISTORIES: dict[str, list[Any]] = {
    "tool_calls not a list": [user("q"), assistant("a", tool_calls={"id": "call_a"})],
    "tool_calls a string": [user("q"), assistant(None, tool_calls="call_a")],
    "call without id": [user("q"), assistant(None, [{"type": "function"}])],
    "call not a dict": [user("q"), assistant(None, ["call_a"]), tool("call_a")],
    "call id not a string": [user("q"), assistant(None, [{"id": 7}]), tool("call_a")],
    "call id unhashable": [user("q"), assistant(None, [{"id": ["x"]}])],
    "tool_call_id unhashable": [
        user("q"),
        calls("call_a"),
        tool("call_a"),
        {"role": "tool", "tool_call_id": {"a": 1}, "content": "x"},
    ],
    "content a number": [user(3), assistant({"weird": True}), tool("call_a", 5)],
    "parts not dicts": [user(["plain string part", 4]), assistant("a")],
    "text part without text": [user([{"type": "text"}]), assistant([{"type": "text", "text": 5}])],
    "unknown role": [{"role": "critic", "content": ""}, user("q")],
    "role unhashable": [{"role": ["user"], "content": "x"}, user("q")],
    "no role": [{"content": "x"}, user("q")],
    "function role": [
        user("q"),
        assistant(None, function_call={"name": "f", "arguments": "{}"}),
        {"role": "function", "name": "f", "content": ""},
    ],
    "non-dict messages": [None, "hello", 3, [user("q")], user("q")],
    "empty tool_calls list": [user("q"), assistant(None, tool_calls=[])],
}


@pytest.mark.parametrize("history", ODD_HISTORIES.values(), ids=ODD_HISTORIES.keys())
def test_odd_shapes_never_crash_or_mutate(history: list[Any]) -> None:
    snapshot = copy.deepcopy(history)
    for projection in (project, project_strict):
        result = projection(history)
        assert history == snapshot
        again = projection(result.messages)
        assert again.anomalies == ()
        assert again.messages == result.messages


def test_malformed_calls_are_left_and_good_ones_paired() -> None:
    history = [user("q"), assistant(None, ["junk", {"type": "function"}, tool_call("call_a")])]
    result = project(history)
    assert result.messages[1] is history[1]
    assert result.messages[2]["content"] == SYNTHETIC_TOOL_RESULT_TEXT
    assert len(result.messages) == 3


def test_unknown_roles_and_content_shapes_are_left_untouched() -> None:
    history = ODD_HISTORIES["content a number"]
    # The number content of a tool result is kept; the tool message is an orphan, though.
    result = project(history)
    assert result.messages[:2] == history[:2]
    assert result.messages[0] is history[0]
    critic = ODD_HISTORIES["unknown role"]
    assert project(critic).messages[0] is critic[0]


def test_empty_tool_calls_array_is_dropped() -> None:
    history = [user("q"), assistant("a", tool_calls=[]), user("n")]
    result = project(history)
    assert result.messages == [user("q"), assistant("a"), user("n")]
    assert [a.kind for a in result.anomalies] == ["empty_content_dropped"]
    assert history[1]["tool_calls"] == []  # the input is not mutated


def test_legacy_function_call_is_not_empty_and_function_message_is_left() -> None:
    history = ODD_HISTORIES["function role"]
    result = project(history)
    assert result.anomalies == ()
    assert result.messages == history


def test_a_nameless_function_message_answers_the_one_open_call() -> None:
    # OpenAI refuses a function message without its name; after one unanswered call it
    # can only be that call's output (it was taken for none, and the call said "not
    # available"). With two calls open it names neither: left as sent.
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                           "arguments": "{}"}}
    history = [user("weather?"), assistant(None, tool_calls=[call]),
               {"role": "function", "content": "18C"}, user("thanks")]
    result = project(history)
    assert result.messages[2] == {"role": "tool", "tool_call_id": "c1", "content": "18C"}
    assert [a.kind for a in result.anomalies] == ["function_call_converted"]
    two = [user("weather?"), assistant(None, tool_calls=[call, {**call, "id": "c2"}]),
           {"role": "function", "content": "18C"}, user("thanks")]
    assert {"role": "function", "content": "18C"} in project(two).messages


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["", " ", "x", "call_a"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=6,
)
_field_values = {
    "role": st.sampled_from(["user", "assistant", "tool", "system", "developer", "function"])
    | _json,
    "content": st.sampled_from(["", " ", "hi", None, [], [{"type": "text", "text": " "}]])
    | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _json}), max_size=2)
    | _json,
    "tool_calls": st.lists(
        st.fixed_dictionaries({"id": st.sampled_from(["call_a", "call_b"]) | _json}), max_size=3
    )
    | _json,
    "tool_call_id": st.sampled_from(["call_a", "call_b"]) | _json,
    "name": _json,
    "is_error": _json,
    "model_note": _json,
}
_odd_message = st.one_of(
    st.fixed_dictionaries({}, optional=_field_values),
    _json,
)


@settings(max_examples=200, deadline=None)
@given(st.lists(_odd_message, max_size=8))
def test_arbitrary_json_never_crashes_and_stays_idempotent(history: list[Any]) -> None:
    snapshot = copy.deepcopy(history)
    for projection in (project, project_strict):
        result = projection(history)
        assert history == snapshot
        again = projection(result.messages)
        assert again.anomalies == ()
        assert again.messages == result.messages
