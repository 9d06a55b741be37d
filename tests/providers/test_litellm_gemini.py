"""LiteLLMProvider against the fake Gemini API (real HTTP on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.providers.base import UpstreamCall, UpstreamError
from gateway.providers.litellm_adapter import LiteLLMProvider
from tests.fakes.gemini_server import FakeGemini, field
from tests.fakes.native_base import png_data_url, read_sse

MODEL = "gemini/gemini-2.5-flash"
KEY = "fake-gemini-key"
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
async def fake() -> AsyncIterator[FakeGemini]:
    async with FakeGemini(api_key=KEY) as server:
        yield server


@pytest.fixture
def provider(fake: FakeGemini) -> LiteLLMProvider:
    return LiteLLMProvider("gemini", {"model": MODEL, "api_base": fake.base_url, "api_key": KEY})


async def complete(provider: LiteLLMProvider, body: dict[str, Any]) -> dict[str, Any]:
    response = await provider.send(UpstreamCall(body=body, stream=False))
    raw = b"".join([chunk async for chunk in response.chunks()])
    parsed: dict[str, Any] = orjson.loads(raw)
    return parsed


async def test_plain_chat_with_system_instruction(
    fake: FakeGemini, provider: LiteLLMProvider
) -> None:
    body = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hello gemini"},
        ],
        "max_tokens": 100,
        "temperature": 0.3,
    }
    answer = await complete(provider, body)
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"] == "you said: hello gemini"
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["prompt_tokens"] > 0
    sent = fake.requests[-1]
    assert sent.path == "/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == KEY
    assert field(sent.body, "systemInstruction")["parts"] == [{"text": "Be brief."}]
    config = field(sent.body, "generationConfig")
    assert field(config, "maxOutputTokens") == 100 and config["temperature"] == 0.3


async def test_multi_turn_tool_calls(fake: FakeGemini, provider: LiteLLMProvider) -> None:
    history: list[dict[str, Any]] = [{"role": "user", "content": "please use the TOOL"}]
    first = await complete(provider, {"messages": history, "tools": TOOLS})
    assert first["choices"][0]["finish_reason"] == "tool_calls"
    call = first["choices"][0]["message"]["tool_calls"][0]
    assert call["function"]["name"] == "lookup"
    assert orjson.loads(call["function"]["arguments"]) == {"query": "please use the TOOL"}
    history += [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": "42"},
    ]
    second = await complete(provider, {"messages": history, "tools": TOOLS})
    assert second["choices"][0]["message"]["content"].startswith("tool results: ")
    assert "42" in second["choices"][0]["message"]["content"]
    contents = field(fake.requests[-1].body, "contents")
    assert [c["role"] for c in contents] == ["user", "model", "user"]
    assert field(contents[1]["parts"][0], "functionCall")["name"] == "lookup"
    assert field(contents[2]["parts"][0], "functionResponse")["name"] == "lookup"


async def test_stream_text_with_usage(fake: FakeGemini, provider: LiteLLMProvider) -> None:
    body = {
        "messages": [{"role": "user", "content": "a long and winding story please"}],
        "stream_options": {"include_usage": True},
    }
    response = await provider.send(UpstreamCall(body=body, stream=True))
    events = await read_sse(response.chunks())
    assert fake.requests[-1].path.endswith(":streamGenerateContent")
    assert fake.requests[-1].query == {"alt": "sse"}
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "you said: a long and winding story please"
    assert [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]][-1] == "stop"
    usage = [c["usage"] for c in chunks if c.get("usage")]
    assert usage and usage[-1]["completion_tokens"] > 0


async def test_stream_tool_call(provider: LiteLLMProvider) -> None:
    body = {"messages": [{"role": "user", "content": "TOOL now"}], "tools": TOOLS}
    response = await provider.send(UpstreamCall(body=body, stream=True))
    events = await read_sse(response.chunks())
    deltas = [c["choices"][0] for c in events[:-1] if c["choices"]]
    calls = [tc for d in deltas for tc in d["delta"].get("tool_calls", [])]
    assert calls[0]["function"]["name"] == "lookup"
    arguments = "".join(tc["function"].get("arguments", "") for tc in calls)
    assert orjson.loads(arguments) == {"query": "TOOL now"}
    assert deltas[-1]["finish_reason"] == "tool_calls"


async def test_image_reaches_gemini_as_inline_data(
    fake: FakeGemini, provider: LiteLLMProvider
) -> None:
    content = [
        {"type": "text", "text": "what is this"},
        {"type": "image_url", "image_url": {"url": png_data_url()}},
    ]
    answer = await complete(provider, {"messages": [{"role": "user", "content": content}]})
    assert answer["choices"][0]["message"]["content"] == "you said: what is this | [images: 1]"
    parts = field(fake.requests[-1].body, "contents")[0]["parts"]
    inline = field(parts[1], "inlineData")
    assert field(inline, "mimeType") == "image/png"


async def test_broken_history_is_refused_with_native_message(provider: LiteLLMProvider) -> None:
    history = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_orphan",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": "{}"},
                }
            ],
        },
        {"role": "user", "content": "where is my answer?"},
    ]
    with pytest.raises(UpstreamError) as caught:
        await provider.send(UpstreamCall(body={"messages": history, "tools": TOOLS}, stream=False))
    failure = caught.value.failure
    assert failure.status == 400
    assert failure.message == (
        "Please ensure that the number of function response parts is equal to the number of "
        "function call parts of the function call turn."
    )


async def test_client_prompt_cache_key_is_not_forwarded(
    fake: FakeGemini, provider: LiteLLMProvider
) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "session-9"}
    answer = await complete(provider, body)
    assert answer["choices"][0]["message"]["content"] == "you said: hi"
    assert b"session-9" not in fake.requests[-1].raw
