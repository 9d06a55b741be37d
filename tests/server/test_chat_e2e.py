"""End to end through the real openai SDK: gateway on loopback, referee as the upstream."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.projection import SYNTHETIC_TOOL_RESULT_TEXT
from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.factories import (
    assistant,
    calls,
    image_part,
    system,
    text_part,
    tool,
    tool_call,
    user,
)

UPSTREAM_KEY = "upstream-secret-key-7f3a"


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", require_auth=UPSTREAM_KEY) as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({
        "model_list": [model_entry("demo", referee.base_url, model="openai/referee",
                                   api_key=UPSTREAM_KEY)],
    })


def client(gw: RunningGateway, key: str = "client-key") -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)


def user_texts(messages: list[dict[str, Any]]) -> list[str]:
    out = []
    for m in messages:
        if m.get("role") != "user":
            continue
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(p["text"] for p in content if p.get("type") == "text")
    return [t for t in out if t.strip()]


BROKEN: dict[str, tuple[list[dict[str, Any]], set[str]]] = {
    "orphan result": ([user("hi"), tool("call_ghost", "stale")],
                      {"orphan_tool_result_dropped"}),
    "result separated from call": (
        [user("read it"), calls("call_a"), user("hurry up"), tool("call_a", "done")],
        {"tool_result_reordered"}),
    "cancelled call mid history": (
        [user("read it"), calls("call_a"), user("never mind, something else")],
        {"tool_result_synthesized"}),
    "call at the tail": ([user("read it"), calls("call_a")], {"tool_result_synthesized"}),
    "duplicate result": (
        [user("read"), calls("call_a"), tool("call_a", "first"), tool("call_a", "second"),
         user("ok")],
        {"duplicate_tool_result_dropped"}),
    "a parallel result separated from its call": (
        [user("both"), calls("call_a", "call_b"), tool("call_b", "B"), user("hurry"),
         tool("call_a", "A"), user("thanks")],
        {"tool_result_reordered"}),
    "empty turns": (
        [user("hello"), assistant(""), user("   "), assistant("fine"), user("next")],
        {"empty_content_dropped"}),
    "empty tool_calls array (SDK default)": (
        [user("hi"), assistant("hello", tool_calls=[]), user("again")],
        {"empty_content_dropped"}),
    "everything at once": (
        [system("be brief"), tool("call_zombie", "orphan"), user("start"),
         calls("call_a", "call_b"), tool("call_b", "B"), user("interjection"),
         tool("call_a", "A"), tool("call_a", "A again"), assistant("  "), user("more"),
         user("and more"), calls("call_c")],
        {"orphan_tool_result_dropped", "tool_result_reordered", "duplicate_tool_result_dropped",
         "empty_content_dropped", "tool_result_synthesized"}),
}


@pytest.mark.parametrize("name", list(BROKEN))
async def test_broken_history_is_repaired_and_accepted(
    gw: RunningGateway, referee: Referee, name: str
) -> None:
    messages, kinds = BROKEN[name]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="demo",
                                                                messages=messages)
    completion = raw.parse()
    assert completion.choices[0].message.content
    header = raw.headers["x-gateway-repairs"]
    reported = {item.split("=")[0] for item in header.split(",")}
    assert reported == kinds
    sent = referee.requests[-1].json()
    assert referee.requests[-1].status == 200
    # No user text is lost by a repair.
    upstream_text = json.dumps(sent["messages"])
    for text in user_texts(messages):
        assert text in upstream_text


async def test_synthesized_result_text_reaches_upstream(gw: RunningGateway,
                                                        referee: Referee) -> None:
    async with client(gw) as c:
        await c.chat.completions.create(model="demo", messages=[user("go"), calls("call_x"),
                                                                user("stop")])
    sent = referee.requests[-1].json()["messages"]
    assert sent[2] == {"role": "tool", "tool_call_id": "call_x",
                       "content": SYNTHETIC_TOOL_RESULT_TEXT}


VALID: dict[str, list[dict[str, Any]]] = {
    "parallel tool calls": [
        system("sys"), user("weather in two cities"),
        assistant(None, [tool_call("call_1", "weather", {"city": "Oslo"}),
                         tool_call("call_2", "weather", {"city": "Rome"})]),
        tool("call_1", "cold"), tool("call_2", "warm"), assistant("Oslo cold, Rome warm."),
        user("thanks")],
    "parallel results in the order the tools finished": [
        user("weather in two cities"),
        assistant(None, [tool_call("call_1", "weather", {"city": "Oslo"}),
                         tool_call("call_2", "weather", {"city": "Rome"})]),
        tool("call_2", "warm"), tool("call_1", "cold"), user("and tomorrow?")],
    "images and names": [
        user([text_part("what is this?"), image_part("https://example.com/a.png")],
             name="alice"),
        assistant("a cat", name="bot"), user("sure?")],
    "cache_control and reasoning_content and unknown fields": [
        system([text_part("long stable prompt", cache_control={"type": "ephemeral"})]),
        user("q", x_custom_field={"nested": [1, 2.5, None, True]}),
        assistant("a", reasoning_content="thinking...", refusal=None),
        user([text_part("next", cache_control={"type": "ephemeral"})])],
}


@pytest.mark.parametrize("name", list(VALID))
async def test_valid_history_reaches_upstream_unchanged(
    gw: RunningGateway, referee: Referee, name: str
) -> None:
    messages = VALID[name]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=messages, temperature=0.3, max_tokens=50, seed=7,
            extra_body={"some_future_field": {"a": [1, "two"]}, "top_k": 3},
        )
    assert "x-gateway-repairs" not in raw.headers
    got = referee.requests[-1].json()
    assert got["messages"] == messages
    assert got["model"] == "referee"
    assert got["some_future_field"] == {"a": [1, "two"]}
    assert got["top_k"] == 3 and got["seed"] == 7 and got["temperature"] == 0.3


async def test_streaming_passes_through_with_headers(gw: RunningGateway,
                                                     referee: Referee) -> None:
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("stream please"), tool("call_orphan", "x")],
            stream=True, stream_options={"include_usage": True})
        assert raw.headers["x-gateway-repairs"] == "orphan_tool_result_dropped=1"
        assert raw.headers["content-type"].startswith("text/event-stream")
        text, usage = "", None
        async for chunk in raw.parse():
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            if chunk.usage:
                usage = chunk.usage
    assert text.startswith("referee")
    assert usage is not None and usage.total_tokens > 0
    assert referee.requests[-1].json()["stream"] is True


async def test_tool_call_round_trip(gw: RunningGateway, referee: Referee) -> None:
    tools = [{"type": "function", "function": {
        "name": "get_time", "description": "time", "parameters": {"type": "object",
                                                                  "properties": {}}}}]
    history: list[dict[str, Any]] = [user("TOOL: what time is it?")]
    async with client(gw) as c:
        first = await c.chat.completions.create(model="demo", messages=history, tools=tools)
        call = first.choices[0].message.tool_calls
        assert call and call[0].function.name == "get_time"
        assert first.choices[0].finish_reason == "tool_calls"
        history.append(first.choices[0].message.model_dump(exclude_none=True))
        history.append(tool(call[0].id, "12:00"))
        second = await c.chat.completions.create(model="demo", messages=history, tools=tools)
        assert second.choices[0].message.content
        # Streamed tool calls too.
        stream = await c.chat.completions.create(model="demo", tools=tools, stream=True,
                                                 messages=[user("TOOL now")])
        names = [tc.function.name async for ch in stream for tc in (
            ch.choices[0].delta.tool_calls or []) if ch.choices and tc.function
            and tc.function.name]
    assert names == ["get_time"]


async def test_upstream_error_relayed_with_status_and_body(gw: RunningGateway,
                                                           referee: Referee) -> None:
    body = {"error": {"message": "The model `referee` does not exist", "type":
                      "invalid_request_error", "param": None, "code": "model_not_found"}}
    referee.script(404, body)
    async with client(gw) as c:
        with pytest.raises(openai.NotFoundError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")])
    assert info.value.status_code == 404
    got = info.value.response.json()
    assert got["error"] == body["error"]
    assert got["gateway"]["attempts"][0]["verdict"] == "fatal"


async def test_models_and_health(gw: RunningGateway) -> None:
    async with client(gw) as c:
        models = await c.models.list()
    assert [m.id for m in models.data] == ["demo"]
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/healthz") as r:
        assert r.status == 200


async def test_dry_run_project(gw: RunningGateway, referee: Referee) -> None:
    messages = [assistant("leading"), user("hi"), tool("call_gone", "x")]
    async with aiohttp.ClientSession() as s:
        async with s.post(gw.base_url + "/gateway/project", json={"messages": messages}) as r:
            plain = await r.json()
        async with s.post(gw.base_url + "/gateway/project?strict=true",
                          json={"model": "demo", "messages": messages}) as r:
            strict = await r.json()
    assert [a["kind"] for a in plain["anomalies"]] == ["orphan_tool_result_dropped"]
    assert plain["anomalies"][0] == {"kind": "orphan_tool_result_dropped", "index": 2,
                                     "tool_call_id": "call_gone", "trailing": False}
    assert plain["messages"] == messages[:2]
    assert strict["messages"] == [user("hi")]
    assert "leading_non_user_dropped" in {a["kind"] for a in strict["anomalies"]}
    assert referee.requests == []  # no upstream contacted
