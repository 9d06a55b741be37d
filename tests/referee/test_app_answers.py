"""Accepted requests get real-looking answers, read by the real openai SDK."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import openai
import pytest

from gateway.referee import Referee
from tests.referee.support import chat, tool, user

TOOLS: list[Any] = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {"type": "object"}}},
]


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee("strict", "openai") as ref:
        yield ref


@pytest.fixture
async def client(referee: Referee) -> AsyncIterator[openai.AsyncOpenAI]:
    sdk = openai.AsyncOpenAI(base_url=referee.base_url, api_key="sk-test", max_retries=0)
    yield sdk
    await sdk.close()


async def test_completion_is_deterministic_text(
    referee: Referee, client: openai.AsyncOpenAI
) -> None:
    messages: Any = [{"role": "system", "content": "s"}, user("hi")]
    response = await client.chat.completions.create(model="gpt-x", messages=messages)
    assert response.object == "chat.completion"
    assert response.id.startswith("chatcmpl-")
    assert response.model == "gpt-x"
    choice = response.choices[0]
    assert choice.message.content == "referee: accepted 2 messages"
    assert choice.finish_reason == "stop"
    assert response.usage is not None
    assert response.usage.total_tokens == (
        response.usage.prompt_tokens + response.usage.completion_tokens
    )
    assert response.usage.prompt_tokens > 0
    assert referee.requests[0].json()["messages"] == messages
    assert referee.requests[0].header("authorization") == "Bearer sk-test"


async def test_tool_call_round_trip_is_accepted(client: openai.AsyncOpenAI) -> None:
    messages: list[Any] = [user("please use a TOOL")]
    first = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls is not None and len(calls) == 1
    assert calls[0].function.name == "read_file"
    assert calls[0].function.arguments == "{}"
    # The call, echoed back with its result, is a valid strict history.
    messages += [choice.message.model_dump(exclude_none=True), tool(calls[0].id, "contents")]
    second = await client.chat.completions.create(model="m", messages=messages, tools=TOOLS)
    assert second.choices[0].message.content == "referee: accepted 3 messages"


async def test_word_tool_without_tools_gets_text(client: openai.AsyncOpenAI) -> None:
    response = await client.chat.completions.create(model="m", messages=[user("TOOL")])
    assert response.choices[0].finish_reason == "stop"


async def test_stream_is_parsed_by_the_sdk(client: openai.AsyncOpenAI) -> None:
    stream = await client.chat.completions.create(
        model="m",
        messages=[user("hi")],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "referee: accepted 1 messages"
    content_chunks = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content_chunks) >= 3
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and set(finishes[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


async def test_stream_tool_call_is_assembled_by_the_sdk(client: openai.AsyncOpenAI) -> None:
    async with client.chat.completions.stream(
        model="m", messages=[user("run the TOOL now")], tools=TOOLS
    ) as stream:
        final = await stream.get_final_completion()
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.id.startswith("call_")
    assert (call.function.name, call.function.arguments) == ("read_file", "{}")


async def test_stream_wire_format(referee: Referee) -> None:
    body = chat(user("hi"), stream=True)
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{referee.base_url}/chat/completions", json=body) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert response.headers["x-request-id"].startswith("req_")
        raw = (await response.read()).decode()
    events = raw.split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    payloads = [json.loads(e.removeprefix("data: ")) for e in events[:-2]]
    assert all("usage" not in p for p in payloads)  # no include_usage: no usage field


async def test_refusal_reaches_the_sdk_as_bad_request(client: openai.AsyncOpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        await client.chat.completions.create(model="m", messages=[user(), user()])
    error = caught.value
    assert error.status_code == 400
    assert error.type == "invalid_request_error"
    assert "roles must alternate" in error.message
    assert error.response.headers["x-request-id"].startswith("req_")


async def test_models_endpoint() -> None:
    async with Referee(models=("small", "large")) as ref:
        sdk = openai.AsyncOpenAI(base_url=ref.base_url, api_key="k", max_retries=0)
        listed = [m.id async for m in sdk.models.list()]
        await sdk.close()
    assert listed == ["small", "large"]


async def test_recorded_requests_endpoint_redacts_keys(
    referee: Referee, client: openai.AsyncOpenAI
) -> None:
    await client.chat.completions.create(model="m", messages=[user("hi")])
    with pytest.raises(openai.BadRequestError):
        await client.chat.completions.create(
            model="m", messages=[{"role": "assistant", "content": "x"}]
        )
    root = referee.base_url.removesuffix("/v1")
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{root}/_referee/requests") as response,
    ):
        listing = await response.json()
    assert [(r["status"], r["situation"]) for r in listing] == [(200, None), (400, "f")]
    assert listing[0]["body"]["messages"] == [user("hi")]
    headers = {k.lower(): v for k, v in listing[0]["headers"].items()}
    assert headers["authorization"] == "***"


@pytest.mark.parametrize("style", ["openai", "anthropic"])
async def test_unknown_endpoint_is_a_json_404(style: Any) -> None:
    async with (
        Referee(style=style) as ref,
        aiohttp.ClientSession() as session,
        session.post(f"{ref.base_url}/responses", json={}) as response,
    ):
        assert response.status == 404
        body = await response.json()
    assert ("error" in body) if style == "openai" else (body["type"] == "error")
