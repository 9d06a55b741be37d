"""litellm end to end, the scenarios every native provider shares: openai SDK -> gateway ->
litellm -> a local native API (Anthropic Messages, Gemini generateContent).

Each fake validates like the real API and answers with its native envelopes and SSE, so what
passes here passes the native wire. What only one provider does stays in its own suite
(test_e2e_litellm_anthropic.py, test_e2e_litellm_gemini.py).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, image_part, system, text_part, tool, user
from tests.fakes.native_base import FakeServer, png_data_url
from tests.providers.e2e_litellm import (
    ANTHROPIC,
    GEMINI,
    IGNORE_SCHEMA_WARNINGS,
    NATIVES,
    TOOLS,
    UPSTREAM_KEY,
    Native,
    raw_sse,
    sdk,
    start_native_gateway,
    stream_text,
)

pytestmark = IGNORE_SCHEMA_WARNINGS
LITELLM_PLACEHOLDER = "Empty message content sanitised"
# (provider, case) pairs for the scenarios whose cases differ by provider.
BROKEN = [pytest.param(n, case, id=f"{n.id}-{case}") for n in (ANTHROPIC, GEMINI)
          for case in n.broken]
TRANSIENT = [pytest.param(n, code, id=f"{n.id}-{code}") for n in (ANTHROPIC, GEMINI)
             for code in n.transient]


@pytest.fixture(params=NATIVES)
def native(request: pytest.FixtureRequest) -> Native:
    described: Native = request.param
    return described


@pytest.fixture
async def fake(native: Native) -> AsyncIterator[FakeServer]:
    async with native.fake(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, native: Native, fake: FakeServer) -> RunningGateway:
    return await start_native_gateway(gateway_factory, fake.base_url, native.model,
                                      name=native.name)


async def test_plain_chat(gw: RunningGateway, native: Native, fake: FakeServer) -> None:
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model=native.name, messages=[system("Be brief."), user("hello there")],
            max_tokens=100, temperature=0.2)
    completion = raw.parse()
    assert completion.object == "chat.completion"
    assert completion.choices[0].message.content == "you said: hello there"
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None and completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens == 4  # the fake counts words
    assert raw.headers["x-gateway-attempts"] == "1" and "x-gateway-repairs" not in raw.headers
    native.check_plain(fake.requests[-1])


async def test_tool_calls_across_several_turns(
    gw: RunningGateway, native: Native, fake: FakeServer
) -> None:
    history: list[dict[str, Any]] = [user("please use the TOOL")]
    ask = {"model": native.name, "tools": TOOLS, "max_tokens": 50}
    async with sdk(gw) as c:
        for turn, result in enumerate(("42", "sunny")):
            answer = await c.chat.completions.create(messages=history, **ask)
            choice = answer.choices[0]
            assert choice.finish_reason == "tool_calls"
            assert choice.message.tool_calls is not None
            call = choice.message.tool_calls[0]
            assert call.function.name == "lookup" and call.id.startswith(native.call_id)
            assert json.loads(call.function.arguments)["query"].endswith("TOOL")
            history += [choice.message.model_dump(exclude_none=True), tool(call.id, result)]
            answered = await c.chat.completions.create(messages=history, **ask)
            assert answered.choices[0].message.content == native.tool_answer(result)
            assert answered.choices[0].finish_reason == "stop"
            history += [assistant(answered.choices[0].message.content),
                        user("and once more, TOOL" if turn == 0 else "thanks")]
        final = await c.chat.completions.create(messages=history, **ask)
    assert final.choices[0].message.content == "you said: thanks"
    kinds = native.tool_kinds(fake.requests[-1].body)
    assert kinds.count("call") == 2 and kinds.count("result") == 2  # each in its own turn


async def test_stream_text_with_usage_ends_with_done(
    gw: RunningGateway, native: Native, fake: FakeServer
) -> None:
    headers, events = await raw_sse(
        gw, model=native.name, messages=[user("tell me a long and winding story")],
        max_tokens=100, stream_options={"include_usage": True})
    assert fake.requests[-1].path.endswith(native.stream_path)
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


async def test_stream_tool_call_through_the_sdk(gw: RunningGateway, native: Native) -> None:
    async with sdk(gw) as c:
        stream = await c.chat.completions.create(
            model=native.name, messages=[user("TOOL time")], tools=TOOLS, max_tokens=50,
            stream=True, stream_options={"include_usage": True})
        deltas, finish, usage = [], None, None
        async for chunk in stream:
            if chunk.choices:
                deltas += chunk.choices[0].delta.tool_calls or []
                finish = chunk.choices[0].finish_reason or finish
            usage = chunk.usage or usage
    assert deltas[0].function is not None and deltas[0].function.name == "lookup"
    assert deltas[0].id is not None and deltas[0].id.startswith(native.call_id)
    arguments = "".join(d.function.arguments or "" for d in deltas if d.function)
    assert json.loads(arguments) == {"query": "TOOL time"}
    assert finish == "tool_calls"
    assert usage is not None and usage.prompt_tokens > 0 and usage.completion_tokens > 0


async def test_image_arrives_as_native_image_data(
    gw: RunningGateway, native: Native, fake: FakeServer
) -> None:
    content = [text_part("what is this"), image_part(png_data_url())]
    async with sdk(gw) as c:
        answer = await c.chat.completions.create(model=native.name, messages=[user(content)],
                                                 max_tokens=50)
    assert answer.choices[0].message.content == "you said: what is this | [images: 1]"
    media_type, data = native.native_image(fake.requests[-1].body)
    assert media_type == "image/png"
    assert png_data_url().endswith(data)


@pytest.mark.parametrize(("native", "case"), BROKEN, indirect=["native"])
async def test_broken_history_is_repaired_and_accepted(
    gateway_factory: GatewayFactory, native: Native, fake: FakeServer, case: str
) -> None:
    history, repair, refusal = native.broken[case]
    gw = await start_native_gateway(gateway_factory, fake.base_url, native.model)
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
    plain = await start_native_gateway(gateway_factory, fake.base_url, native.model,
                                       extra={"repair": {"enabled": False}})
    async with sdk(plain) as c:
        with pytest.raises(openai.BadRequestError) as info:
            await c.chat.completions.create(model="native", messages=history, tools=TOOLS,
                                            max_tokens=50)
    assert info.value.status_code == 400
    error = info.value.response.json()["error"]
    key, value = native.refusal_field
    assert (error["message"], error[key]) == (refusal, value)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("native", "refusal"), TRANSIENT, indirect=["native"])
async def test_transient_refusal_is_retried_by_the_ladder(
    gw: RunningGateway, native: Native, fake: FakeServer, refusal: str, stream: bool
) -> None:
    fake.script(native.transient[refusal])
    body = {"model": native.name, "messages": [user("hi")], "max_tokens": 20}
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


async def test_failure_mid_stream_is_an_sse_error_event(
    gw: RunningGateway, native: Native, fake: FakeServer
) -> None:
    fake.script(native.mid_stream)
    _, events = await raw_sse(gw, model=native.name, max_tokens=50,
                              messages=[user("one two three four five six")])
    assert stream_text(events) == "you said: one "
    assert events[-1] == "[DONE]"  # the stream still ends as chat streams end
    error = events[-2]["error"]
    assert {k: error[k] for k in native.mid_stream_error} == native.mid_stream_error


async def test_models_report_capabilities(
    gateway_factory: GatewayFactory, native: Native, fake: FakeServer
) -> None:
    gw = await gateway_factory({"model_list": native.models(fake.base_url)})
    async with sdk(gw) as c:
        page = await c.models.list()
    models = {m.id: m.to_dict() for m in page.data}
    fields = ("context_window", "max_output_tokens", "supports_images", "supports_tools")
    assert {name: {k: models[name][k] for k in fields} for name in models} == (
        native.capabilities)
    assert models[native.name]["owned_by"] == native.id
    assert fake.requests == []
