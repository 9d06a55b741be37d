"""LiteLLMProvider against each fake native API (real HTTP on 127.0.0.1): the scenarios every
native provider shares (every Gemini scenario is one of them). What only Anthropic does stays
in test_litellm_anthropic.py."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.litellm_adapter import LiteLLMProvider
from tests.fakes.gemini_server import field
from tests.fakes.native_base import FakeServer, RecordedRequest, png_data_url, read_sse
from tests.providers.e2e_litellm import (
    ANTHROPIC,
    GEMINI,
    IGNORE_SCHEMA_WARNINGS,
    TOOLS,
    UPSTREAM_KEY,
    Native,
    complete,
)

pytestmark = IGNORE_SCHEMA_WARNINGS


@dataclass(frozen=True)
class Direct:
    """How a native provider looks when LiteLLMProvider calls it without a gateway."""

    native: Native
    provider: str  # the provider name failures carry
    key_header: str
    plain_extra: dict[str, Any]  # fields of the plain chat only this provider takes
    check_plain: Callable[[RecordedRequest], None]
    check_tool_turn: Callable[[Any, dict[str, Any]], None]  # native body, the tool call
    check_stream: Callable[[RecordedRequest], None]
    orphan_refusal: str  # the native words for a tool call left without its result


def _anthropic_plain(sent: RecordedRequest) -> None:
    assert sent.path == "/v1/messages"
    assert sent.headers["x-api-key"] == UPSTREAM_KEY and "anthropic-version" in sent.headers
    assert sent.body["model"] == "claude-sonnet-4-5-20250929"
    assert sent.body["system"] == [{"type": "text", "text": "Be brief."}]
    assert sent.body["temperature"] == 0.2 and sent.body["max_tokens"] == 100
    assert sent.body["metadata"] == {"user_id": "end-user-7"}


def _gemini_plain(sent: RecordedRequest) -> None:
    assert sent.path == "/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert field(sent.body, "systemInstruction")["parts"] == [{"text": "Be brief."}]
    config = field(sent.body, "generationConfig")
    assert field(config, "maxOutputTokens") == 100 and config["temperature"] == 0.2


def _anthropic_tool_turn(body: Any, call: dict[str, Any]) -> None:
    sent = body["messages"]
    assert sent[1]["content"][0]["type"] == "tool_use"
    assert sent[2]["content"][0] == {
        "type": "tool_result",
        "tool_use_id": call["id"],
        "content": "42",
    }


def _gemini_tool_turn(body: Any, call: dict[str, Any]) -> None:
    contents = field(body, "contents")
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert field(contents[1]["parts"][0], "functionCall")["name"] == "lookup"
    assert field(contents[2]["parts"][0], "functionResponse")["name"] == "lookup"


def _anthropic_stream(sent: RecordedRequest) -> None:
    assert sent.path == "/v1/messages" and sent.body["stream"] is True


def _gemini_stream(sent: RecordedRequest) -> None:
    assert sent.path.endswith(":streamGenerateContent")
    assert sent.query == {"alt": "sse"}


DIRECT = [
    pytest.param(Direct(
        native=ANTHROPIC,
        provider="claude",
        key_header="x-api-key",
        plain_extra={"model": "claude", "user": "end-user-7"},
        check_plain=_anthropic_plain,
        check_tool_turn=_anthropic_tool_turn,
        check_stream=_anthropic_stream,
        orphan_refusal=(
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately "
            "after: toolu_orphan. Each `tool_use` block must have a corresponding "
            "`tool_result` block in the next message."),
    ), id="anthropic"),
    pytest.param(Direct(
        native=GEMINI,
        provider="gemini",
        key_header="x-goog-api-key",
        plain_extra={},
        check_plain=_gemini_plain,
        check_tool_turn=_gemini_tool_turn,
        check_stream=_gemini_stream,
        orphan_refusal=(
            "Please ensure that the number of function response parts is equal to the number "
            "of function call parts of the function call turn."),
    ), id="gemini"),
]


@pytest.fixture(params=DIRECT)
def direct(request: pytest.FixtureRequest) -> Direct:
    described: Direct = request.param
    return described


@pytest.fixture
async def fake(direct: Direct) -> AsyncIterator[FakeServer]:
    async with direct.native.fake(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
def provider(direct: Direct, fake: FakeServer) -> LiteLLMProvider:
    return LiteLLMProvider(direct.provider, {"model": direct.native.model,
                                             "api_base": fake.base_url, "api_key": UPSTREAM_KEY})


async def test_plain_chat_translates_both_ways(
    direct: Direct, fake: FakeServer, provider: LiteLLMProvider
) -> None:
    body = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello there"},
        ],
        "max_tokens": 100,
        "temperature": 0.2,
        **direct.plain_extra,
    }
    answer = await complete(provider, body)
    assert answer["object"] == "chat.completion"
    assert answer["id"] and answer["created"] and answer["model"]
    assert answer["choices"][0]["message"]["content"] == "you said: hello there"
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["prompt_tokens"] > 0 and answer["usage"]["completion_tokens"] > 0
    direct.check_plain(fake.requests[-1])


async def test_multi_turn_tool_calls(
    direct: Direct, fake: FakeServer, provider: LiteLLMProvider
) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "please use the TOOL"}]
    first = await complete(provider, {"messages": history, "tools": TOOLS, "max_tokens": 50})
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "lookup"
    assert orjson.loads(call["function"]["arguments"]) == {"query": "please use the TOOL"}
    history += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "42"},
    ]
    second = await complete(provider, {"messages": history, "tools": TOOLS, "max_tokens": 50})
    assert second["choices"][0]["message"]["content"] == direct.native.tool_answer("42")
    direct.check_tool_turn(fake.requests[-1].body, call)


async def test_stream_text_with_usage(
    direct: Direct, fake: FakeServer, provider: LiteLLMProvider
) -> None:
    body = {
        "messages": [{"role": "user", "content": "tell me a long and winding story"}],
        "max_tokens": 100,
        "stream_options": {"include_usage": True},
    }
    response = await provider.send(UpstreamCall(body=body, stream=True))
    assert response.content_type == "text/event-stream"
    events = await read_sse(response.chunks())
    direct.check_stream(fake.requests[-1])
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "you said: tell me a long and winding story"
    finishes = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]]
    assert finishes[-1] == "stop"
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["prompt_tokens"] > 0 and usage[-1]["completion_tokens"] > 0


async def test_stream_tool_call(direct: Direct, provider: LiteLLMProvider) -> None:
    body = {
        "messages": [{"role": "user", "content": "TOOL time"}],
        "tools": TOOLS,
        "max_tokens": 50,
    }
    response = await provider.send(UpstreamCall(body=body, stream=True))
    events = await read_sse(response.chunks())
    deltas = [c["choices"][0] for c in events[:-1] if c["choices"]]
    calls = [tc for d in deltas for tc in d["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "lookup"
    assert calls[0]["id"].startswith(direct.native.call_id)
    arguments = "".join(tc["function"].get("arguments", "") for tc in calls)
    assert orjson.loads(arguments) == {"query": "TOOL time"}
    assert deltas[-1]["finish_reason"] == "tool_calls"
    assert events[-1] == "[DONE]"


async def test_image_reaches_the_provider_as_native_image_data(
    direct: Direct, fake: FakeServer, provider: LiteLLMProvider
) -> None:
    content = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": png_data_url()}},
    ]
    answer = await complete(
        provider, {"messages": [{"role": "user", "content": content}], "max_tokens": 50}
    )
    assert answer["choices"][0]["message"]["content"] == "you said: what is this | [images: 1]"
    media_type, data = direct.native.native_image(fake.requests[-1].body)
    assert media_type == "image/png" and png_data_url().endswith(data)


@pytest.mark.parametrize("stream", [False, True])
async def test_broken_history_is_refused_with_native_message(
    direct: Direct, provider: LiteLLMProvider, stream: bool
) -> None:
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
    body = {"messages": history, "tools": TOOLS, "max_tokens": 50}
    with pytest.raises(UpstreamError) as caught:
        await provider.send(UpstreamCall(body=body, stream=stream))
    failure = caught.value.failure
    assert failure.status == 400
    assert failure.provider == direct.provider
    assert failure.message == direct.orphan_refusal


async def test_client_cache_key_and_control_fields_are_not_forwarded(
    direct: Direct, fake: FakeServer, provider: LiteLLMProvider
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
    assert sent.headers[direct.key_header] == UPSTREAM_KEY
    assert b"session-1" not in sent.raw and b"client-supplied" not in sent.raw
    assert "prompt_cache_key" not in sent.body and "api_base" not in sent.body
