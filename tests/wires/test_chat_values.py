"""Chat tool values sent as JSON objects: written as their JSON text up front (unit), and
through the gateway to a strict upstream over two turns of a session (end to end)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.referee import Referee
from gateway.wires.chat_values import serialized_tool_values
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import calls, tool, user
from tests.http import post

UPSTREAM_KEY = "upstream-key-chat-values"


def replayed() -> list[dict[str, Any]]:
    """A llama-server history replayed: arguments and a tool result parsed into objects."""
    return [
        user("read a.py"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "read", "arguments": {"path": "a.py", "lines": [1, 20]}}},
            {"id": "call_2", "type": "function",
             "function": {"name": "stat", "arguments": "{\"path\": \"a.py\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": {"text": "print(1)", "ok": True}},
        tool("call_2", "size: 9"),
        user("what does it print?"),
    ]


def test_object_values_become_their_json_text_and_nothing_else_changes() -> None:
    body = {"model": "m", "messages": replayed(), "temperature": 0}
    before = copy.deepcopy(body)
    fixed = serialized_tool_values(body)
    assert fixed is not None
    out, anomalies = fixed
    assert body == before  # the client's objects are never edited
    calls_out = out["messages"][1]["tool_calls"]
    assert json.loads(calls_out[0]["function"]["arguments"]) == {"path": "a.py",
                                                                  "lines": [1, 20]}
    assert calls_out[1] is body["messages"][1]["tool_calls"][1]  # text already: as sent
    assert json.loads(out["messages"][2]["content"]) == {"text": "print(1)", "ok": True}
    assert out["messages"][3] is body["messages"][3] and out["temperature"] == 0
    assert [(a.kind, a.index, a.tool_call_id) for a in anomalies] == [
        ("tool_value_serialized", 1, "call_1"), ("tool_value_serialized", 2, "call_1")]


def test_a_history_without_object_values_is_none() -> None:
    assert serialized_tool_values({"messages": [user("hi"), calls("c"), tool("c", "x")]}) is None
    assert serialized_tool_values({"messages": "nope"}) is None


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style="openai", require_auth=UPSTREAM_KEY) as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({"model_list": [
        model_entry("demo", referee.base_url, model="openai/referee", api_key=UPSTREAM_KEY)]})


async def test_a_replayed_history_is_answered_turn_after_turn(gw: RunningGateway,
                                                              referee: Referee) -> None:
    history = replayed()
    for turn in range(2):
        reply = await post(f"{gw.base_url}/chat/completions",
                           {"model": "demo", "messages": history})
        assert reply.status == 200, reply.raw[:300]
        assert reply.headers["x-gateway-repairs"] == "tool_value_serialized=2"
        sent = referee.requests[-1].json()["messages"]
        assert sent[1]["tool_calls"][0]["function"]["arguments"] == (
            '{"path":"a.py","lines":[1,20]}')
        assert sent[2]["content"] == '{"text":"print(1)","ok":true}'
        history = [*history, {"role": "assistant", "content": f"answer {turn}"},
                   user("and then?")]


async def test_another_problem_is_still_named(gw: RunningGateway) -> None:
    history = replayed()
    history.append({"role": "critic", "content": "x"})
    reply = await post(f"{gw.base_url}/chat/completions", {"model": "demo", "messages": history})
    assert reply.status == 400
    assert "messages[5].role" in reply.json["error"]["message"]
