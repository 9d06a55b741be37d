"""LiteLLMProvider against the fake Anthropic Messages API (real HTTP on 127.0.0.1): what only
Anthropic does (prompt-cache breakpoints, configured headers, modify_params); the scenarios
every native provider shares are in test_litellm_natives.py."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.litellm_adapter import LiteLLMProvider
from gateway.providers.litellm_loader import load_litellm
from gateway.providers.prompt_cache import apply_anthropic_breakpoint
from tests.fakes.anthropic_server import FakeAnthropic
from tests.providers.e2e_litellm import complete

MODEL = "anthropic/claude-sonnet-4-5"
KEY = "sk-ant-fake-key"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look something up",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}},
        },
    }
]

# litellm builds pydantic schemas lazily and pydantic warns about ReadOnly TypedDict items
# then; harmless, but -W error would turn it into a failed upstream call.
pytestmark = pytest.mark.filterwarnings("ignore:.*using the `ReadOnly` qualifier:UserWarning")


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=KEY) as server:
        yield server


@pytest.fixture
def provider(fake: FakeAnthropic) -> LiteLLMProvider:
    return LiteLLMProvider("claude", {"model": MODEL, "api_base": fake.base_url, "api_key": KEY})


async def test_modify_params_stays_off(provider: LiteLLMProvider) -> None:
    # With modify_params on, litellm would insert a placeholder user turn and the call would
    # pass; off, the history reaches Anthropic as sent and is refused there.
    litellm = await load_litellm()
    assert litellm.modify_params is False
    body = {
        "messages": [
            {"role": "assistant", "content": "I speak first"},
            {"role": "user", "content": "hi"},
        ],
        "max_tokens": 50,
    }
    with pytest.raises(UpstreamError) as caught:
        await provider.send(UpstreamCall(body=body, stream=False))
    assert caught.value.failure.message == 'messages: first message must use the "user" role'


async def test_breakpoints_arrive_as_cache_control_and_hit_the_cache(
    fake: FakeAnthropic, provider: LiteLLMProvider
) -> None:
    body = apply_anthropic_breakpoint(
        {
            "messages": [
                {"role": "system", "content": "You are a careful assistant. " * 40},
                {"role": "user", "content": "hi"},
            ],
            "tools": TOOLS,
            "max_tokens": 50,
        }
    )
    first = await complete(provider, body)
    second = await complete(provider, body)
    sent = fake.requests[-1].body
    assert sent["system"][-1]["cache_control"] == {"type": "ephemeral"}
    assert sent["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > 0


async def test_configured_headers_and_key_reach_upstream(fake: FakeAnthropic) -> None:
    # (``os.environ/`` references are resolved by the config loader, before any provider.)
    provider = LiteLLMProvider(
        "claude",
        {"model": MODEL, "api_base": fake.base_url, "api_key": KEY,
         "extra_headers": {"x-trace-tag": "abc"}},
    )
    call = UpstreamCall(
        body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9},
        stream=False,
    )
    response = await provider.send(call)
    await response.aclose()
    assert fake.requests[-1].headers["x-trace-tag"] == "abc"
    assert fake.requests[-1].headers["x-api-key"] == KEY


async def test_trace_context_reaches_upstream_beside_configured_headers(
    fake: FakeAnthropic,
) -> None:
    provider = LiteLLMProvider(
        "claude",
        {"model": MODEL, "api_base": fake.base_url, "api_key": KEY,
         "extra_headers": {"x-trace-tag": "abc"}},
    )
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    call = UpstreamCall(
        body={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 9},
        stream=False, headers=(("traceparent", parent),),
    )
    response = await provider.send(call)
    await response.aclose()
    assert fake.requests[-1].headers["traceparent"] == parent
    assert fake.requests[-1].headers["x-trace-tag"] == "abc"


async def test_closing_a_stream_early_is_clean(provider: LiteLLMProvider) -> None:
    body = {
        "messages": [{"role": "user", "content": "one two three four five six seven"}],
        "max_tokens": 50,
    }
    response = await provider.send(UpstreamCall(body=body, stream=True))
    chunks = response.chunks()
    first = await anext(chunks)
    assert first.startswith(b"data: {")
    await chunks.aclose()
    await response.aclose()
    await response.aclose()
    again = await complete(provider, body)
    assert again["choices"][0]["message"]["content"].startswith("you said: one")
