"""validate_chat_body's inline fast check never changes a verdict or an error message.

The reference is the slow path alone: every message checked by _validate_message in order,
which names the first problem. The fast check may only skip it when that finds nothing.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.server.errors import ClientError
from gateway.wires.chat_validation import _validate_message, validate_chat_body

_scalar = st.none() | st.booleans() | st.integers() | st.sampled_from(["", "x", "call_a"])
_json = st.recursive(
    _scalar,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=5,
)
_part = st.fixed_dictionaries(
    {}, optional={"type": st.sampled_from(["text", "image_url"]) | _json, "text": _json,
                  "image_url": st.fixed_dictionaries({}, optional={"url": _json}) | _json}
)
_message = st.fixed_dictionaries(
    {},
    optional={
        "role": st.sampled_from(["user", "assistant", "tool", "system", "developer", "function"])
        | st.sampled_from(["wizard", ["user"]])
        | _json,
        "content": st.sampled_from(["hi", None]) | st.lists(_part | _json, max_size=3) | _json,
        "tool_calls": st.none() | st.lists(st.fixed_dictionaries(
            {"id": _json}, optional={"type": _json, "function": st.fixed_dictionaries(
                {}, optional={"name": _json, "arguments": _json}) | _json}) | _json) | _json,
        "tool_call_id": st.none() | st.sampled_from(["call_a"]) | _json,
        "name": _json,
    },
) | _json


def _slow(messages: list[Any]) -> tuple[str, str | None] | None:
    """The first problem as (message, param), None when there is none."""
    try:
        for i, msg in enumerate(messages):
            _validate_message(i, msg)
    except ClientError as err:
        return err.message, err.param
    return None


def _fast(messages: list[Any]) -> tuple[str, str | None] | None:
    try:
        assert validate_chat_body({"model": "m", "messages": messages}) is messages
    except ClientError as err:
        return err.message, err.param
    return None


@settings(max_examples=200, deadline=None)
@given(st.lists(_message, max_size=6))
def test_fast_check_gives_the_slow_paths_verdict_and_message(messages: list[Any]) -> None:
    # Only shapes JSON can carry: what parse_json_object hands over.
    messages = json.loads(json.dumps(messages))
    assert _fast(messages) == _slow(messages)


@pytest.mark.parametrize(
    ("messages", "problem"),
    [
        ([{"role": "user", "content": "a"}, {"role": ["user"], "content": "b"}],
         "messages[1].role is missing or not a string"),
        ([{"role": "assistant", "tool_calls": [
            {"id": "a", "function": {"name": "f", "arguments": "{}"}}, "x"]}],
         "messages[0].tool_calls[1] must be an object"),
        ([{"role": "tool", "tool_call_id": 5, "content": "r"}],
         "messages[0].tool_call_id must be a string"),
        ([{"role": "system"}], "messages[0] (system) is missing 'content'"),
        ([{"role": "user", "content": [{"type": "text", "text": None}]}],
         "messages[0].content[0].text must be a string"),
    ],
)
def test_problems_past_the_fast_check_are_named(messages: list[Any], problem: str) -> None:
    with pytest.raises(ClientError) as info:
        validate_chat_body({"model": "m", "messages": messages})
    assert info.value.message == problem
    assert info.value.status == 400


def test_common_shapes_pass() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "q"},
                                     {"type": "image_url", "image_url": {"url": "data:,"}}]},
        {"role": "assistant", "tool_calls": [{"id": "call_a", "type": "function",
                                              "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_a", "content": "r"},
        {"role": "assistant", "content": None, "tool_calls": None, "name": "x"},
    ]
    assert validate_chat_body({"model": "m", "messages": messages}) is messages


_function = st.fixed_dictionaries(
    {}, optional={"name": _json, "description": _json, "parameters": _json, "strict": _json})
_tool = st.fixed_dictionaries(
    {}, optional={"type": st.sampled_from(["function", "custom"]) | _json,
                  "function": _function | _json}) | _json


def _tools_verdict(tools: Any, fast: bool) -> tuple[str, str | None] | None:
    from gateway.wires.chat_validation import _tools_ok
    from gateway.wires.shapes import check_chat_fields

    body = {"model": "m", "messages": [], "tools": tools}
    try:
        check_chat_fields(body, tools_checked=fast and _tools_ok(tools))
    except ClientError as err:
        return err.message, err.param
    return None


@settings(max_examples=200, deadline=None)
@given(st.none() | st.lists(_tool, max_size=4) | _json)
def test_fast_tools_check_gives_the_typed_models_verdict(tools: Any) -> None:
    tools = json.loads(json.dumps(tools))
    assert _tools_verdict(tools, fast=True) == _tools_verdict(tools, fast=False)
