"""litellm end to end: openai SDK -> gateway -> litellm -> a local Anthropic Messages API.

The fake validates like the real API (tool pairing, empty content, images, headers) and
answers with its native envelopes and SSE, so what passes here passes the native wire.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, calls, image_part, system, text_part, tool, tool_call, user
from tests.fakes.anthropic_rules import MISSING_TOOL_RESULT
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.native_base import MidStreamError, png_data_url
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


async def test_plain_chat(gw: RunningGateway, fake: FakeAnthropic) -> None:
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="claude", messages=[system("Be brief."), user("hello there")],
            max_tokens=100, temperature=0.2)
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "you said: hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens == 4  # the fake counts words
    assert raw.headers["x-gateway-attempts"] == "1" and "x-gateway-repairs" not in raw.headers
    sent = fake.requests[-1]
    assert sent.path == "/v1/messages" and sent.headers["x-api-key"] == UPSTREAM_KEY
    assert sent.body["model"] == "claude-sonnet-4-5-20250929"
    assert sent.body["system"][0]["text"] == "Be brief."
    assert sent.body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "hello there"}]}]
    assert (sent.body["max_tokens"], sent.body["temperature"]) == (100, 0.2)


async def test_tool_calls_across_several_turns(gw: RunningGateway, fake: FakeAnthropic) -> None:
    history: list[dict[str, Any]] = [user("please use the TOOL")]
    async with sdk(gw) as c:
        for turn, result in enumerate(("42", "sunny")):
            answer = await c.chat.completions.create(model="claude", messages=history,
                                                     tools=TOOLS, max_tokens=50)
            choice = answer.choices[0]
            assert choice.finish_reason == "tool_calls"
            assert choice.message.tool_calls is not None
            call = choice.message.tool_calls[0]
            assert call.function.name == "lookup" and call.id.startswith("toolu_")
            assert json.loads(call.function.arguments)["query"].endswith("TOOL")
            history += [choice.message.model_dump(exclude_none=True), tool(call.id, result)]
            answered = await c.chat.completions.create(model="claude", messages=history,
                                                       tools=TOOLS, max_tokens=50)
            assert answered.choices[0].message.content == f"tool results: {result}"
            assert answered.choices[0].finish_reason == "stop"
            history += [assistant(answered.choices[0].message.content),
                        user("and once more, TOOL" if turn == 0 else "thanks")]
        final = await c.chat.completions.create(model="claude", messages=history, tools=TOOLS,
                                                max_tokens=50)
    assert final.choices[0].message.content == "you said: thanks"
    native = fake.requests[-1].body["messages"]
    uses = [b for m in native for b in m["content"] if isinstance(b, dict)
            and b.get("type") == "tool_use"]
    results = [b for m in native for b in m["content"] if isinstance(b, dict)
               and b.get("type") == "tool_result"]
    assert [u["id"] for u in uses] == [r["tool_use_id"] for r in results]
    assert len(uses) == 2
    assert native[-1] == {"role": "user", "content": [{"type": "text", "text": "thanks"}]}


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


async def test_stream_text_with_usage_ends_with_done(gw: RunningGateway) -> None:
    headers, events = await raw_sse(
        gw, model="claude", messages=[user("tell me a long and winding story")],
        max_tokens=100, stream_options={"include_usage": True})
    assert headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = events[:-1]
    assert chunks and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert stream_text(chunks) == "you said: tell me a long and winding story"
    assert len([c for c in chunks if c["choices"]]) > 2  # really chunk by chunk
    finishes = [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]]
    assert finishes[-1] == "stop"
    assert chunks[-1]["choices"] == []  # the usage chunk, as OpenAI sends it
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] == 9
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


async def test_stream_without_include_usage_has_no_usage_chunk(gw: RunningGateway) -> None:
    _, events = await raw_sse(gw, model="claude", messages=[user("hi")], max_tokens=20)
    assert events[-1] == "[DONE]"
    assert stream_text(events) == "you said: hi"
    assert all("usage" not in e and e["choices"] for e in events[:-1])


async def test_stream_tool_call_through_the_sdk(gw: RunningGateway) -> None:
    async with sdk(gw) as c:
        stream = await c.chat.completions.create(
            model="claude", messages=[user("TOOL time")], tools=TOOLS, max_tokens=50,
            stream=True, stream_options={"include_usage": True})
        deltas, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.choices:
                deltas += chunk.choices[0].delta.tool_calls or []
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
    assert deltas[0].function is not None and deltas[0].function.name == "lookup"
    assert deltas[0].id is not None and deltas[0].id.startswith("toolu_")
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"query": "TOOL time"}
    assert finish == "tool_calls"
    assert usage is not None and usage.completion_tokens > 0


async def test_image_arrives_as_a_native_image_block(gw: RunningGateway,
                                                     fake: FakeAnthropic) -> None:
    content = [text_part("what is this"), image_part(png_data_url())]
    async with sdk(gw) as c:
        answer = await c.chat.completions.create(model="claude", messages=[user(content)],
                                                 max_tokens=50)
    assert answer.choices[0].message.content == "you said: what is this | [images: 1]"
    block = fake.requests[-1].body["messages"][0]["content"][1]
    assert block["type"] == "image"
    assert block["source"]["type"] == "base64" and block["source"]["media_type"] == "image/png"
    assert png_data_url().endswith(block["source"]["data"])


LITELLM_PLACEHOLDER = "Empty message content sanitised"
BROKEN: dict[str, tuple[list[dict[str, Any]], str, str | None]] = {
    # history, the repair reported, what the native server says without the repair
    "missing tool result": (
        [user("read it"), calls("toolu_a"), user("never mind, something else")],
        "tool_result_synthesized",
        MISSING_TOOL_RESULT.format(i=1, ids="toolu_a"),
    ),
    "orphan tool result": (
        [user("hi"), tool("toolu_ghost", "stale"), user("go on")],
        "orphan_tool_result_dropped",
        # litellm folds the tool result into the user turn before it: messages.0.content.1
        "messages.0.content.1: unexpected `tool_use_id` found in `tool_result` blocks: "
        "toolu_ghost. Each `tool_result` block must have a corresponding `tool_use` block in "
        "the previous message.",
    ),
    # Without the repair litellm itself would replace the empty text by a placeholder (it
    # does so whatever modify_params says); the gateway's reported repair comes first.
    "empty assistant text": ([user("hello"), assistant(" "), user("next")],
                             "empty_content_dropped", None),
}


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_history_is_repaired_and_accepted(
    gateway_factory: GatewayFactory, fake: FakeAnthropic, case: str
) -> None:
    history, repair, refusal = BROKEN[case]
    gw = await start_native_gateway(gateway_factory, fake.base_url, ANTHROPIC_MODEL)
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="native", messages=history, tools=TOOLS, max_tokens=50)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-repairs"].split("=")[0] == repair
    assert raw.headers["x-gateway-attempts"] == "1"  # accepted at once: no ladder step
    assert len(fake.requests) == 1
    assert LITELLM_PLACEHOLDER not in fake.requests[0].raw.decode()
    if refusal is None:
        return
    # Control: the same history without the gateway's repair is refused natively, and that
    # refusal reaches the client with the provider's status and its own words.
    plain = await start_native_gateway(gateway_factory, fake.base_url, ANTHROPIC_MODEL,
                                       extra={"repair": {"enabled": False}})
    async with sdk(plain) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="native", messages=history, tools=TOOLS,
                                            max_tokens=50)
    assert info.value.status_code == 400
    error = info.value.response.json()["error"]
    assert error["message"] == refusal
    assert error["type"] == "invalid_request_error"


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


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "refusal",
    [
        anthropic_error(429, "This request would exceed the rate limit for your organization",
                        "rate_limit_error", {"retry-after": "0"}),
        anthropic_error(529, "Overloaded", "overloaded_error",
                        {"retry-after": "0", "x-should-retry": "true"}),
    ],
    ids=["429", "529"],
)
async def test_transient_refusal_is_retried_by_the_ladder(
    gw: RunningGateway, fake: FakeAnthropic, refusal: Any, stream: bool
) -> None:
    fake.script(refusal)
    body = {"model": "claude", "messages": [user("hi")], "max_tokens": 20}
    if stream:
        headers, events = await raw_sse(gw, **body)
        assert stream_text(events) == "you said: hi" and events[-1] == "[DONE]"
    else:
        async with sdk(gw) as c:
            raw = await c.chat.completions.with_raw_response.create(**body)
        headers = dict(raw.headers)
        assert raw.parse().choices[0].message.content == "you said: hi"
    assert headers["x-gateway-attempts"] == "2" and headers["x-gateway-recovery"] == "retry"
    assert len(fake.requests) == 2


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


async def test_failure_mid_stream_is_an_sse_error_event(gw: RunningGateway,
                                                        fake: FakeAnthropic) -> None:
    fake.script(MidStreamError("Overloaded"))
    _, events = await raw_sse(gw, model="claude", max_tokens=50,
                              messages=[user("one two three four five six")])
    assert stream_text(events) == "you said: one "
    assert events[-1] == "[DONE]"  # the stream still ends as chat streams end
    assert events[-2]["error"]["message"] == "Overloaded"


async def test_models_report_capabilities(gateway_factory: GatewayFactory,
                                          fake: FakeAnthropic) -> None:
    gw = await gateway_factory({"model_list": [
        {"model_name": "claude", "litellm_params": {"model": ANTHROPIC_MODEL,
                                                    "api_base": fake.base_url}},
        {"model_name": "claude-small", "litellm_params": {"model": ANTHROPIC_MODEL,
                                                          "api_base": fake.base_url},
         "model_info": {"max_input_tokens": 50_000, "supports_vision": False}},
        {"model_name": "mystery", "litellm_params": {"model": "anthropic/claude-unreleased-9",
                                                     "api_base": fake.base_url}},
    ]})
    async with sdk(gw) as c:
        page = await c.models.list()
    models = {m.id: m.to_dict() for m in page.data}
    fields = ("context_window", "max_output_tokens", "supports_images", "supports_tools")
    assert {k: models["claude"][k] for k in fields} == {
        "context_window": 200_000, "max_output_tokens": 64_000, "supports_images": True,
        "supports_tools": True}
    assert {k: models["claude-small"][k] for k in fields} == {
        "context_window": 50_000, "max_output_tokens": 64_000, "supports_images": False,
        "supports_tools": True}
    assert {k: models["mystery"][k] for k in fields} == {
        "context_window": 128_000, "max_output_tokens": 4_096, "supports_images": True,
        "supports_tools": True}
    assert models["claude"]["owned_by"] == "anthropic"
    assert fake.requests == []
