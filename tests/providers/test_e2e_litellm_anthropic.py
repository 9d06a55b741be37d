"""litellm end to end: openai SDK -> gateway -> litellm -> a local Anthropic Messages API.

The fake validates like the real API (tool pairing, empty content, images, headers) and
answers with its native envelopes and SSE, so what passes here passes the native wire. The
scenarios every native provider shares are in test_e2e_litellm_natives.py; these are
Anthropic's own (parallel results in one turn, x-should-retry, 413).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, tool, tool_call, user
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.providers.e2e_litellm import (
    ANTHROPIC_MODEL,
    IGNORE_SCHEMA_WARNINGS,
    TOOLS,
    UPSTREAM_KEY,
    raw_sse,
    sdk,
    start_native_gateway,
    stream_text,
)

pytestmark = IGNORE_SCHEMA_WARNINGS


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, fake: FakeAnthropic) -> RunningGateway:
    return await start_native_gateway(gateway_factory, fake.base_url, ANTHROPIC_MODEL,
                                      name="claude")


async def test_parallel_tool_results_arrive_in_one_native_turn(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    history = [user("weather in two cities"),
               assistant(None, [tool_call("toolu_a", "weather", {"city": "Oslo"}),
                                tool_call("toolu_b", "weather", {"city": "Rome"})]),
               tool("toolu_a", "cold"), tool("toolu_b", "warm")]
    async with sdk(gw) as c:
        answer = await c.chat.completions.create(model="claude", messages=history, tools=TOOLS,
                                                 max_tokens=50)
    assert answer.choices[0].message.content == "tool results: cold; warm"
    last = fake.requests[-1].body["messages"][-1]
    assert [b["tool_use_id"] for b in last["content"]] == ["toolu_a", "toolu_b"]


async def test_stream_without_include_usage_has_no_usage_chunk(gw: RunningGateway) -> None:
    _, events = await raw_sse(gw, model="claude", messages=[user("hi")], max_tokens=20)
    assert events[-1] == "[DONE]"
    assert stream_text(events) == "you said: hi"
    assert all("usage" not in e and e["choices"] for e in events[:-1])


async def test_provider_refusal_is_relayed_with_its_own_message(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    message = "temperature: Input should be less than or equal to 1"
    fake.script(anthropic_error(400, message))
    async with sdk(gw) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="claude", messages=[user("hi")])
    body = info.value.response.json()
    assert info.value.status_code == 400
    assert body["error"]["message"] == message
    assert body["error"]["type"] == "invalid_request_error"
    assert "litellm" not in json.dumps(body) and "Exception" not in json.dumps(body)
    assert [a["verdict"] for a in body["gateway"]["attempts"]] == ["fatal"]
    assert len(fake.requests) == 1


async def test_should_not_retry_and_long_retry_after_are_relayed(
    gw: RunningGateway, fake: FakeAnthropic
) -> None:
    fake.script(anthropic_error(529, "Overloaded", "overloaded_error",
                                {"x-should-retry": "false"}),
                anthropic_error(429, "slow down", "rate_limit_error", {"retry-after": "120"}))
    async with sdk(gw) as c:
        with pytest.raises(openai.InternalServerError) as overloaded:
            await c.chat.completions.create(model="claude", messages=[user("hi")])
        with pytest.raises(openai.RateLimitError) as limited:
            await c.chat.completions.create(model="claude", messages=[user("hi")])
    assert overloaded.value.status_code == 529
    assert overloaded.value.response.json()["error"]["message"] == "Overloaded"
    assert overloaded.value.response.json()["gateway"]["attempts"][0]["verdict"] == "fatal"
    assert limited.value.status_code == 429
    assert limited.value.response.headers["retry-after"] == "120"
    assert limited.value.response.json()["error"]["message"] == "slow down"
    assert len(fake.requests) == 2  # neither was retried


async def test_request_too_large_keeps_its_413(gw: RunningGateway, fake: FakeAnthropic) -> None:
    message = "Request exceeds the maximum allowed number of bytes."
    fake.script(anthropic_error(413, message, "request_too_large"))
    async with sdk(gw) as c:
        with pytest.raises(openai.APIStatusError) as info:
            await c.chat.completions.create(model="claude", messages=[user("hi")])
    assert info.value.status_code == 413
    error = info.value.response.json()["error"]
    assert (error["type"], error["message"]) == ("request_too_large", message)
