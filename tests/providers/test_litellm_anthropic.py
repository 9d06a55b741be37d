"""LiteLLMProvider against the fake Anthropic Messages API (real HTTP on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.litellm_adapter import LiteLLMProvider
from gateway.providers.litellm_loader import load_litellm
from gateway.providers.prompt_cache import apply_anthropic_breakpoint
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import png_data_url, read_sse

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


async def complete(provider: LiteLLMProvider, body: dict[str, Any]) -> dict[str, Any]:
    response = await provider.send(UpstreamCall(body=body, stream=False))
    raw = b"".join([chunk async for chunk in response.chunks()])
    await response.aclose()
    assert response.status == 200 and response.content_type == "application/json"
    parsed: dict[str, Any] = orjson.loads(raw)
    return parsed


async def test_plain_chat_translates_both_ways(
    fake: FakeAnthropic, provider: LiteLLMProvider
) -> None:
    body = {
        "model": "claude",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
        ],
        "max_tokens": 100,
        "temperature": 0.2,
        "user": "end-user-7",
    }
    answer = await complete(provider, body)
    assert answer["object"] == "chat.completion"
    assert answer["id"] and answer["created"] and answer["model"]
    assert answer["choices"][0]["message"]["content"] == "you said: hello there"
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] > 0
    sent = fake.requests[-1]
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == KEY and "anthropic-version" in sent.headers
    assert sent.body["model"] == "claude-sonnet-4-5"
    assert sent.body["system"] == [{"type": "text", "text": "Be brief."}]
    assert sent.body["temperature"] == 0.2 and sent.body["max_tokens"] == 100
    assert sent.body["metadata"] == {"user_id": "end-user-7"}


async def test_multi_turn_tool_calls(fake: FakeAnthropic, provider: LiteLLMProvider) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "please use the TOOL"}]
    first = await complete(provider, {"messages": history, "tools": TOOLS, "max_tokens": 50})
    message = first["choices"][0]["message"]
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    call = message["tool_calls"][0]
    assert call["function"]["name"] == "lookup"
    assert orjson.loads(call["function"]["arguments"]) == {"query": "please use the TOOL"}
    history += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "42"},
    ]
    second = await complete(provider, {"messages": history, "tools": TOOLS, "max_tokens": 50})
    assert second["choices"][0]["message"]["content"] == "tool results: 42"
    sent = fake.requests[-1].body["messages"]
    assert sent[1]["content"][0]["type"] == "tool_use"
    assert sent[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call["id"],
        "content": "42",
    }


async def test_stream_text_with_usage(provider: LiteLLMProvider) -> None:
    body = {
        "messages": [{"role": "user", "content": "tell me a long and winding story"}],
        "max_tokens": 100,
        "stream_options": {"include_usage": True},
    }
    response = await provider.send(UpstreamCall(body=body, stream=True))
    assert response.content_type == "text/event-stream"
    events = await read_sse(response.chunks())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "you said: tell me a long and winding story"
    finishes = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]]
    assert finishes[-1] == "stop"
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["prompt_tokens"] > 0 and usage[-1]["completion_tokens"] > 0


async def test_stream_tool_call(provider: LiteLLMProvider) -> None:
    body = {
        "messages": [{"role": "user", "content": "TOOL time"}],
        "tools": TOOLS,
        "max_tokens": 50,
    }
    response = await provider.send(UpstreamCall(body=body, stream=True))
    events = await read_sse(response.chunks())
    deltas = [c["choices"][0] for c in events[:-1] if c["choices"]]
    calls = [tc for d in deltas for tc in d["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "lookup" and calls[0]["id"].startswith("toolu_")
    arguments = "".join(tc["function"].get("arguments", "") for tc in calls)
    assert orjson.loads(arguments) == {"query": "TOOL time"}
    assert deltas[-1]["finish_reason"] == "tool_calls"
    assert events[-1] == "[DONE]"


async def test_image_reaches_anthropic_as_base64_block(
    fake: FakeAnthropic, provider: LiteLLMProvider
) -> None:
    content = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": png_data_url()}},
    ]
    answer = await complete(
        provider, {"messages": [{"role": "user", "content": content}], "max_tokens": 50}
    )
    assert answer["choices"][0]["message"]["content"] == "you said: what is this | [images: 1]"
    image = fake.requests[-1].body["messages"][0]["content"][1]
    assert image["type"] == "image"
    assert image["source"]["type"] == "base64" and image["source"]["media_type"] == "image/png"


async def test_broken_history_is_refused_with_native_message(provider: LiteLLMProvider) -> None:
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_orphan",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
            ],
        },
        {"role": "user", "content": "where is my answer?"},
    ]
    with pytest.raises(UpstreamError) as caught:
        await provider.send(
            UpstreamCall(body={"messages": history, "tools": TOOLS, "max_tokens": 50}, stream=True)
        )
    failure = caught.value.failure
    assert failure.status == 400
    assert failure.provider == "claude"
    assert failure.message == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: "
        "toolu_orphan. Each `tool_use` block must have a corresponding `tool_result` block in "
        "the next message."
    )


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


async def test_client_cache_key_and_control_fields_are_not_forwarded(
    fake: FakeAnthropic, provider: LiteLLMProvider
) -> None:
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 50,
        "prompt_cache_key": "session-1",
        "api_base": "http://127.0.0.1:9/steal",
        "api_key": "client-supplied",
        "mock_response": "not from upstream",
    }
    answer = await complete(provider, body)
    assert answer["choices"][0]["message"]["content"] == "you said: hi"
    sent = fake.requests[-1]
    assert sent.headers["x-api-key"] == KEY
    assert "prompt_cache_key" not in sent.body and "api_base" not in sent.body


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
