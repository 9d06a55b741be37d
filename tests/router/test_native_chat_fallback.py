"""A native request whose fallback group speaks only Chat Completions: LiteLLM's
``fallbacks`` from a Claude or a Responses model to a chat-only one run unchanged. The
request goes there translated, and the answer comes back in the client's own wire
(whole and streamed), through the official SDKs. Before, such a fallback was skipped and
the client got the first provider's error."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.openai_fleet import FleetUpstream
from tests.fakes.responses_server import FakeResponses, responses_error

KEY = "sk-client-chat-fallback"
CLAUDE_KEY = "sk-ant-claude-fallback-key"
OVERLOADED = anthropic_error(529, "Overloaded", "overloaded_error")
TOOLS = [{"name": "read_file", "description": "Read a file",
          "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]
HISTORY: list[dict[str, Any]] = [
    {"role": "user", "content": "open the readme"},
    {"role": "assistant", "content": [
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_01", "name": "read_file",
         "input": {"path": "README.md"}}]},
    {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": "# Project"}]},
    {"role": "user", "content": "summarize it"},
]


@pytest.fixture
async def upstreams() -> AsyncIterator[tuple[FakeAnthropic, FleetUpstream]]:
    async with FakeAnthropic(api_key=CLAUDE_KEY) as claude, FleetUpstream("gpt") as gpt:
        yield claude, gpt


@pytest.fixture
async def gw(gateway_factory: GatewayFactory,
             upstreams: tuple[FakeAnthropic, FleetUpstream]) -> RunningGateway:
    claude, gpt = upstreams
    return await gateway_factory({
        "model_list": [
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
                "api_key": CLAUDE_KEY}},
            model_entry("gpt", gpt.v1, model="openai/gpt-4o-mini", responses_api=False),
        ],
        "router_settings": {"fallbacks": [{"claude": ["gpt"]}], "allowed_fails": 0,
                            "cooldown_time": 30},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002,
                     "max_transient_retries": 1},
        "gateway": {"api_keys": [KEY]},
    })


def client(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0)


async def test_an_overloaded_claude_falls_back_to_a_chat_only_group(
    gw: RunningGateway, upstreams: tuple[FakeAnthropic, FleetUpstream]
) -> None:
    claude, gpt = upstreams
    claude.script(*[OVERLOADED] * 4)
    async with client(gw) as api:
        raw = await api.messages.with_raw_response.create(
            model="claude", max_tokens=64, system="You are terse.", tools=TOOLS,  # type: ignore[arg-type]
            messages=HISTORY)  # type: ignore[arg-type]
    assert raw.http_response.status_code == 200
    assert raw.headers["x-gateway-model-used"] == "gpt"
    assert "fallback" in raw.headers["x-gateway-recovery"].split(",")
    message = await raw.parse()
    assert message.type == "message" and message.role == "assistant"
    assert message.content[0].text.startswith("from gpt:")  # type: ignore[union-attr]
    # The chat deployment got the conversation as Chat Completions: the system prompt, the
    # call and its result paired by id, the tools as functions; and its own key only.
    sent = gpt.requests[-1]
    assert sent.body["model"] == "gpt-4o-mini"
    roles = [m["role"] for m in sent.body["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    call = sent.body["messages"][2]["tool_calls"][0]
    assert call["id"] == "toolu_01" and call["function"]["name"] == "read_file"
    assert sent.body["messages"][3]["tool_call_id"] == "toolu_01"
    assert sent.body["tools"][0]["function"]["name"] == "read_file"
    assert CLAUDE_KEY not in str(sent.headers) and KEY not in str(sent.headers)
    assert len(claude.requests) >= 1


async def test_the_fallback_streams_in_the_messages_wire(
    gw: RunningGateway, upstreams: tuple[FakeAnthropic, FleetUpstream]
) -> None:
    claude, gpt = upstreams
    claude.script(*[OVERLOADED] * 4)
    async with client(gw) as api, api.messages.stream(
            model="claude", max_tokens=64, messages=HISTORY) as stream:  # type: ignore[arg-type]
        text = "".join([chunk async for chunk in stream.text_stream])
        final = await stream.get_final_message()
    assert text.startswith("from gpt:")
    assert final.stop_reason == "end_turn"
    assert gpt.requests[-1].body["stream"] is True


async def test_a_claude_that_answers_is_not_sent_elsewhere(
    gw: RunningGateway, upstreams: tuple[FakeAnthropic, FleetUpstream]
) -> None:
    claude, gpt = upstreams
    async with client(gw) as api:
        raw = await api.messages.with_raw_response.create(
            model="claude", max_tokens=64, messages=HISTORY)  # type: ignore[arg-type]
    assert raw.headers["x-gateway-model-used"] == "claude"
    assert claude.requests[-1].body["messages"] == HISTORY  # native, as sent
    assert gpt.requests == []


async def test_a_responses_model_falls_back_to_a_chat_only_group_and_is_continued(
    gateway_factory: GatewayFactory,
) -> None:
    async with FakeResponses(api_key="k-resp") as native, FleetUpstream("local") as local:
        gw = await gateway_factory({
            "model_list": [
                {"model_name": "gpt", "litellm_params": {
                    "model": "openai/gpt-5", "api_base": f"{native.base_url}/v1",
                    "api_key": "k-resp"}},
                model_entry("local", local.v1, model="openai/qwen3", responses_api=False),
            ],
            "router_settings": {"fallbacks": [{"gpt": ["local"]}], "allowed_fails": 0,
                                "cooldown_time": 30},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002,
                         "max_transient_retries": 1},
            "gateway": {"api_keys": [KEY]}})
        native.script(*[responses_error(500, "The server had an error", param=None)] * 4)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY,
                                      max_retries=0) as api:
            raw = await api.responses.with_raw_response.create(
                model="gpt", instructions="Be brief.", input="hello there")
            assert raw.http_response.status_code == 200
            assert raw.headers["x-gateway-model-used"] == "local"
            first = raw.parse()
            assert first.output_text.startswith("from local:")
            sent = local.requests[-1].body
            assert sent["model"] == "qwen3"
            assert [m["role"] for m in sent["messages"]] == ["system", "user"]
            # The translated answer was kept: the conversation continues by its id.
            follow = await api.responses.create(
                model="local", input="and then?", previous_response_id=first.id)
            assert follow.output_text.startswith("from local:")
            history = local.requests[-1].body["messages"]
            # (instructions are not carried over by previous_response_id, as OpenAI's)
            assert [m["role"] for m in history] == ["user", "assistant", "user"]
            assert history[1]["content"] == first.output_text

            streamed = await api.responses.create(model="gpt", input="stream it", stream=True)
            kinds = [event.type async for event in streamed]
            assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
