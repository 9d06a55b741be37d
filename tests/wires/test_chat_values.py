"""Chat tool values sent as JSON objects: written as their JSON text up front (unit), and
through the gateway to a strict upstream over two turns of a session (end to end)."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.projection.call_ids import add_call_ids
from gateway.referee import Referee
from gateway.wires.chat_values import serialized_tool_values, typed_content_parts
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


def ollama_style() -> list[dict[str, Any]]:
    """A client written for Ollama's API: calls without ids, results naming their tool."""
    return [
        user("weather in Paris and the time?"),
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "weather", "arguments": "{}"}},
            {"type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
        {"role": "tool", "tool_name": "clock", "content": "12:00"},
        {"role": "tool", "tool_name": "weather", "content": "sunny"},
        user("thanks; and tomorrow?"),
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
        {"role": "tool", "content": "rain"},
        user("ok"),
    ]


def synthesized_call_ids(body: dict[str, Any]) -> tuple[dict[str, Any], list[Any]] | None:
    entries, anomalies = add_call_ids(list(enumerate(body["messages"])))
    return ({**body, "messages": [m for _, m in entries]}, anomalies) if anomalies else None


def test_calls_without_ids_get_them_and_their_results_follow() -> None:
    body = {"model": "m", "messages": ollama_style()}
    before = copy.deepcopy(body)
    fixed = synthesized_call_ids(body)
    assert fixed is not None and body == before
    out, anomalies = fixed
    first, second = out["messages"][1]["tool_calls"], out["messages"][5]["tool_calls"]
    assert [c["id"] for c in first + second] == ["call_gw_1", "call_gw_2", "call_gw_3"]
    # By the tool each result names, then in order.
    assert out["messages"][2]["tool_call_id"] == "call_gw_2"  # clock
    assert out["messages"][3]["tool_call_id"] == "call_gw_1"  # weather
    assert out["messages"][6]["tool_call_id"] == "call_gw_3"
    assert [a.kind for a in anomalies] == ["call_id_synthesized"] * 3


def test_ids_are_never_taken_from_the_client_and_ided_calls_are_left_alone() -> None:
    messages = [user("q"), {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_gw_1", "type": "function", "function": {"name": "a", "arguments": "{}"}},
        {"type": "function", "function": {"name": "b", "arguments": "{}"}}]},
        tool("call_gw_1", "x"), {"role": "tool", "content": "y"}]
    fixed = synthesized_call_ids({"messages": messages})
    assert fixed is not None
    out = fixed[0]["messages"]
    assert out[1]["tool_calls"][0] is messages[1]["tool_calls"][0]
    assert out[1]["tool_calls"][1]["id"] == "call_gw_2"
    assert out[2] is messages[2] and out[3]["tool_call_id"] == "call_gw_2"
    assert synthesized_call_ids({"messages": [user("q"), calls("c"), tool("c")]}) is None


async def test_an_ollama_style_history_keeps_its_results(gw: RunningGateway,
                                                        referee: Referee) -> None:
    reply = await post(f"{gw.base_url}/chat/completions",
                       {"model": "demo", "messages": ollama_style()})
    assert reply.status == 200, reply.raw[:300]
    assert "call_id_synthesized=3" in reply.headers["x-gateway-repairs"]
    sent = referee.requests[-1].json()["messages"]
    results = {m["tool_call_id"]: m["content"] for m in sent if m["role"] == "tool"}
    names = {c["id"]: c["function"]["name"] for m in sent if m.get("tool_calls")
             for c in m["tool_calls"]}
    assert sorted((names[i], r) for i, r in results.items()) == [
        ("clock", "12:00"), ("weather", "rain"), ("weather", "sunny")]  # none lost, each paired


def test_the_strict_rung_gives_ids_to_calls_that_nothing_answered() -> None:
    # A trailing call without an id is valid as sent where ids are optional (project()
    # leaves it); a refusal's strict rung gives it one and a result.
    from gateway.projection import project, project_strict

    messages = [user("q"), {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "w", "arguments": "{}"}}]}, user("next")]
    assert project(messages).anomalies == ()
    strict = project_strict(messages)
    kinds = [a.kind for a in strict.anomalies]
    assert "call_id_synthesized" in kinds and "tool_result_synthesized" in kinds
    call_id = strict.messages[1]["tool_calls"][0]["id"]
    assert strict.messages[2] == {"role": "tool", "tool_call_id": call_id,
                                  "content": strict.messages[2]["content"]}


# -- content parts without their type ------------------------------------------------------

PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42"
         "mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")


def untyped() -> list[dict[str, Any]]:
    """Parts as hand-rolled clients write them: no ``type``, a bare string, a lone part."""
    return [
        {"role": "system", "content": {"type": "text", "text": "Be brief."}},
        {"role": "user", "content": [{"text": "what is in this picture?"},
                                     {"image_url": {"url": PIXEL}}, "and say hi"]},
        {"role": "assistant", "content": "A pixel."},
        {"role": "user", "content": [{"type": "text", "text": "thanks"}]},  # fine as it is
    ]


def test_parts_without_a_type_are_typed_and_nothing_else_changes() -> None:
    body = {"model": "m", "messages": untyped()}
    before = copy.deepcopy(body)
    fixed = typed_content_parts(body)
    assert fixed is not None and body == before
    out, anomalies = fixed
    assert out["messages"][0]["content"] == [{"type": "text", "text": "Be brief."}]
    assert out["messages"][1]["content"] == [
        {"type": "text", "text": "what is in this picture?"},
        {"type": "image_url", "image_url": {"url": PIXEL}},
        {"type": "text", "text": "and say hi"}]
    assert out["messages"][2:] == body["messages"][2:]
    assert out["messages"][3] is body["messages"][3]
    assert [(a.kind, a.index) for a in anomalies] == [("content_part_typed", 0),
                                                      ("content_part_typed", 1)]
    # A part nothing names (two payloads, or none) is left for the 400 to name.
    assert typed_content_parts({"messages": [
        {"role": "user", "content": [{"text": "a", "image_url": {"url": PIXEL}}]}]}) is None
    assert typed_content_parts({"messages": [{"role": "user", "content": [{"x": 1}]}]}) is None
    # A tool result sent as an object is JSON text, not a part (serialized_tool_values).
    assert typed_content_parts({"messages": [tool("c", {"text": "x"})]}) is None


async def test_untyped_parts_reach_a_strict_upstream_typed(gw: RunningGateway,
                                                          referee: Referee) -> None:
    reply = await post(f"{gw.base_url}/chat/completions",
                       {"model": "demo", "messages": untyped()})
    assert reply.status == 200, reply.raw[:300]
    assert reply.headers["x-gateway-repairs"] == "content_part_typed=2"
    sent = referee.requests[-1].json()["messages"]
    assert sent[1]["content"][1] == {"type": "image_url", "image_url": {"url": PIXEL}}
    assert sent[3] == untyped()[3]
    broken = untyped()
    broken[1]["content"].append({"what": "is this"})
    reply = await post(f"{gw.base_url}/chat/completions", {"model": "demo", "messages": broken})
    assert reply.status == 400
    assert "messages[1].content[3]" in reply.json["error"]["message"]
