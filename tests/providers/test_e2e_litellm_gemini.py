"""litellm end to end: openai SDK -> gateway -> litellm -> a local Gemini generateContent API.

The fake validates like the real API (function call / response pairing, parts, inline data,
unknown fields) and answers with its native ``{"error": {code, message, status}}`` envelope
and its native SSE framing.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, calls, image_part, system, text_part, tool, user
from tests.fakes.gemini_server import (
    CALL_AFTER_USER,
    PART_COUNT,
    FakeGemini,
    field,
    gemini_error,
)
from tests.fakes.native_base import MidStreamError, png_data_url
from tests.providers.e2e_litellm import (
    GEMINI_MODEL,
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
async def fake() -> AsyncIterator[FakeGemini]:
    async with FakeGemini(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, fake: FakeGemini) -> RunningGateway:
    return await start_native_gateway(gateway_factory, fake.base_url, GEMINI_MODEL, name="gem")


async def test_plain_chat(gw: RunningGateway, fake: FakeGemini) -> None:
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="gem", messages=[system("Be brief."), user("hello gemini")], max_tokens=100,
            temperature=0.3)
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "you said: hello gemini"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens == 4  # the fake counts words
    assert raw.headers["x-gateway-attempts"] == "1" and "x-gateway-repairs" not in raw.headers
    sent = fake.requests[-1]
    assert sent.path == "/models/gemini-2.5-flash:generateContent"
    assert sent.headers["x-goog-api-key"] == UPSTREAM_KEY
    assert field(sent.body, "systemInstruction")["parts"] == [{"text": "Be brief."}]
    assert field(sent.body, "contents") == [{"role": "user", "parts": [{"text": "hello gemini"}]}]
    config = field(sent.body, "generationConfig")
    assert (field(config, "maxOutputTokens"), config["temperature"]) == (100, 0.3)


async def test_tool_calls_across_several_turns(gw: RunningGateway, fake: FakeGemini) -> None:
    history: list[dict[str, Any]] = [user("please use the TOOL")]
    async with sdk(gw) as c:
        for turn, result in enumerate(("42", "sunny")):
            answer = await c.chat.completions.create(model="gem", messages=history, tools=TOOLS)
            choice = answer.choices[0]
            assert choice.finish_reason == "tool_calls"
            assert choice.message.tool_calls is not None
            call = choice.message.tool_calls[0]
            assert call.function.name == "lookup"
            assert json.loads(call.function.arguments)["query"].endswith("TOOL")
            history += [choice.message.model_dump(exclude_none=True), tool(call.id, result)]
            answered = await c.chat.completions.create(model="gem", messages=history,
                                                       tools=TOOLS)
            content = answered.choices[0].message.content
            assert content is not None and content.startswith("tool results: ")
            assert result in content
            history += [assistant(content),
                        user("and once more, TOOL" if turn == 0 else "thanks")]
        final = await c.chat.completions.create(model="gem", messages=history, tools=TOOLS)
    assert final.choices[0].message.content == "you said: thanks"
    contents = field(fake.requests[-1].body, "contents")
    kinds = [next(iter(p))[:8] for c in contents for p in c["parts"]]
    assert kinds.count("function") == 4  # two calls, two responses, each in its own turn
    assert [c["role"] for c in contents][-1] == "user"


async def test_stream_text_with_usage_ends_with_done(gw: RunningGateway,
                                                    fake: FakeGemini) -> None:
    headers, events = await raw_sse(
        gw, model="gem", messages=[user("a long and winding story please")],
        stream_options={"include_usage": True})
    assert fake.requests[-1].path.endswith(":streamGenerateContent")
    assert headers["content-type"].startswith("text/event-stream")
    assert events[-1] == "[DONE]" and events.count("[DONE]") == 1
    chunks = events[:-1]
    assert chunks and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert stream_text(chunks) == "you said: a long and winding story please"
    assert len([c for c in chunks if c["choices"]]) > 2
    assert [c["choices"][0].get("finish_reason") for c in chunks if c["choices"]][-1] == "stop"
    assert chunks[-1]["choices"] == []  # the usage chunk, as OpenAI sends it
    usage = chunks[-1]["usage"]
    assert usage["prompt_tokens"] > 0 and usage["completion_tokens"] == 8


async def test_stream_tool_call_through_the_sdk(gw: RunningGateway) -> None:
    async with sdk(gw) as c:
        stream = await c.chat.completions.create(
            model="gem", messages=[user("TOOL now")], tools=TOOLS, stream=True,
            stream_options={"include_usage": True})
        deltas, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.choices:
                deltas += chunk.choices[0].delta.tool_calls or []
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
    assert deltas[0].function is not None and deltas[0].function.name == "lookup"
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"query": "TOOL now"}
    assert finish == "tool_calls"
    assert usage is not None and usage.prompt_tokens > 0


async def test_image_arrives_as_native_inline_data(gw: RunningGateway, fake: FakeGemini) -> None:
    content = [text_part("what is this"), image_part(png_data_url())]
    async with sdk(gw) as c:
        answer = await c.chat.completions.create(model="gem", messages=[user(content)])
    assert answer.choices[0].message.content == "you said: what is this | [images: 1]"
    parts = field(fake.requests[-1].body, "contents")[0]["parts"]
    inline = field(parts[1], "inlineData")
    assert field(inline, "mimeType") == "image/png"
    assert png_data_url().endswith(inline["data"])


BROKEN: dict[str, tuple[list[dict[str, Any]], str, str]] = {
    # history, the repair reported, what the native server says without the repair
    "missing tool result": (
        [user("read it"), calls("call_a"), user("never mind, something else")],
        "tool_result_synthesized",
        PART_COUNT,
    ),
    "result separated from its call": (
        [user("read it"), calls("call_a"), user("hurry up"), tool("call_a", "done")],
        "tool_result_reordered",
        PART_COUNT,
    ),
}


@pytest.mark.parametrize("case", list(BROKEN))
async def test_broken_history_is_repaired_and_accepted(
    gateway_factory: GatewayFactory, fake: FakeGemini, case: str
) -> None:
    history, repair, refusal = BROKEN[case]
    gw = await start_native_gateway(gateway_factory, fake.base_url, GEMINI_MODEL)
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="native", messages=history, tools=TOOLS)
    assert raw.parse().choices[0].message.content
    assert raw.headers["x-gateway-repairs"].split("=")[0] == repair
    assert raw.headers["x-gateway-attempts"] == "1"  # accepted at once: no ladder step
    assert len(fake.requests) == 1
    plain = await start_native_gateway(gateway_factory, fake.base_url, GEMINI_MODEL,
                                       extra={"repair": {"enabled": False}})
    async with sdk(plain) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="native", messages=history, tools=TOOLS)
    assert info.value.status_code == 400
    error = info.value.response.json()["error"]
    assert (error["message"], error["code"]) == (refusal, "INVALID_ARGUMENT")


async def test_strict_step_fixes_what_the_default_projection_keeps(
    gw: RunningGateway, fake: FakeGemini
) -> None:
    # A history opening with the model's turn is left alone by the default projection;
    # Gemini refuses it (structural), and the ladder's strict projection drops it.
    history = [calls("call_a"), tool("call_a", "ok"), user("go on")]
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="gem", messages=history,
                                                                tools=TOOLS)
    assert raw.parse().choices[0].message.content == "you said: go on"
    assert (raw.headers["x-gateway-attempts"], raw.headers["x-gateway-recovery"]) == (
        "2", "strict")
    assert "leading_non_user_dropped" in raw.headers["x-gateway-repairs"]
    assert len(fake.requests) == 2
    assert [c["role"] for c in field(fake.requests[-1].body, "contents")] == ["user"]
    attempts = sorted((s for s in gw.spans.get_finished_spans() if s.name == "gateway.attempt"),
                      key=lambda s: (s.attributes or {})["gateway.attempt"])
    first = attempts[0]
    assert (first.attributes or {})["gateway.verdict"] == "structural"
    assert first.status.description == CALL_AFTER_USER  # Gemini's own words


async def test_quota_refusal_is_relayed_with_its_own_message(gw: RunningGateway,
                                                             fake: FakeGemini) -> None:
    message = "You exceeded your current quota, please check your plan and billing details."
    fake.script(gemini_error(429, message))
    async with sdk(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="gem", messages=[user("hi")])
    body = info.value.response.json()
    assert info.value.status_code == 429
    assert (body["error"]["message"], body["error"]["code"]) == (message, "RESOURCE_EXHAUSTED")
    assert "litellm" not in json.dumps(body) and "Exception" not in json.dumps(body)
    assert len(fake.requests) == 1  # an exhausted quota is not retried


@pytest.mark.parametrize("stream", [False, True])
async def test_unavailable_is_retried_by_the_ladder(gw: RunningGateway, fake: FakeGemini,
                                                    stream: bool) -> None:
    fake.script(gemini_error(503, "The model is overloaded. Please try again later.",
                             headers={"retry-after": "0"}))
    body = {"model": "gem", "messages": [user("hi")]}
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


async def test_unavailable_with_a_long_retry_after_keeps_503(gw: RunningGateway,
                                                             fake: FakeGemini) -> None:
    message = "The model is overloaded. Please try again later."
    fake.script(gemini_error(503, message, headers={"retry-after": "600"}))
    async with sdk(gw) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(model="gem", messages=[user("hi")])
    assert info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "600"
    assert info.value.response.json()["error"]["message"] == message


async def test_failure_mid_stream_is_an_sse_error_event(gw: RunningGateway,
                                                        fake: FakeGemini) -> None:
    fake.script(MidStreamError("The model is overloaded.", code=503))
    _, events = await raw_sse(gw, model="gem", messages=[user("one two three four five six")])
    assert stream_text(events) == "you said: one "
    assert events[-1] == "[DONE]"  # the stream still ends as chat streams end
    assert events[-2]["error"]["message"] == "The model is overloaded."
    assert events[-2]["error"]["code"] == "UNAVAILABLE"


async def test_models_report_capabilities(gateway_factory: GatewayFactory,
                                          fake: FakeGemini) -> None:
    gw = await gateway_factory({"model_list": [
        {"model_name": "gem", "litellm_params": {"model": GEMINI_MODEL,
                                                 "api_base": fake.base_url}},
        {"model_name": "gem-tools-off", "litellm_params": {"model": GEMINI_MODEL,
                                                           "api_base": fake.base_url},
         "model_info": {"supports_function_calling": False, "max_output_tokens": 1000}},
    ]})
    async with sdk(gw) as c:
        page = await c.models.list()
    models = {m.id: m.to_dict() for m in page.data}
    fields = ("context_window", "max_output_tokens", "supports_images", "supports_tools")
    assert {k: models["gem"][k] for k in fields} == {
        "context_window": 1_048_576, "max_output_tokens": 65_536, "supports_images": True,
        "supports_tools": True}
    assert {k: models["gem-tools-off"][k] for k in fields} == {
        "context_window": 1_048_576, "max_output_tokens": 1000, "supports_images": True,
        "supports_tools": False}
    assert models["gem"]["owned_by"] == "gemini"
