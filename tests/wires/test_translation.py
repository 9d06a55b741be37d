"""Both wires against a chat-only upstream: translated to Chat Completions and back.

The upstream is the referee (strict chat rules, real error bodies). The official SDKs must
get well-formed objects and SSE streams in their own wire, and broken histories must be
repaired by the same projection as chat.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import orjson
import pytest

from gateway.referee import Referee, bodies
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_server import FakeAnthropic
from tests.telemetry.promtext import scrape

A_TOOLS: list[Any] = [{"name": "read_file", "description": "read a file",
                       "input_schema": {"type": "object", "properties": {}}}]
R_TOOLS: list[Any] = [{"type": "function", "name": "read_file", "description": "read a file",
                       "parameters": {"type": "object", "properties": {}}}]


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await gateway_factory({
        "model_list": [{"model_name": "local", "litellm_params": {
            "model": "hosted_vllm/referee", "api_base": referee.base_url,
            "api_key": "upstream-key"}}],
        "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05},
    })


def a_client(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0)


def o_client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)


async def test_anthropic_create_translated(gw: RunningGateway, referee: Referee) -> None:
    async with a_client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="local", max_tokens=32, system="be brief",
            messages=[{"role": "user", "content": "hi"},
                      {"role": "assistant", "content": [
                          {"type": "tool_use", "id": "toolu_1", "name": "read_file",
                           "input": {}}]},
                      {"role": "user", "content": "never mind"}],
            tools=A_TOOLS)
        message = await raw.parse()
    assert message.type == "message"
    assert message.content[0].text.startswith("referee: accepted")  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    assert raw.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
    sent = orjson.loads(referee.requests[-1].body)
    assert sent["messages"][0] == {"role": "system", "content": "be brief"}
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert sent["tools"][0]["function"]["name"] == "read_file"


async def test_anthropic_stream_translated_tool_call(gw: RunningGateway) -> None:
    async with a_client(gw) as c, c.messages.stream(
        model="local", max_tokens=32, tools=A_TOOLS,
        messages=[{"role": "user", "content": "use the TOOL"}],
    ) as stream:
        final = await stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert final.content[0].type == "tool_use"
    assert final.content[0].name == "read_file"


async def test_anthropic_count_tokens_estimated(gw: RunningGateway) -> None:
    async with a_client(gw) as c:
        counted = await c.messages.count_tokens(
            model="local", messages=[{"role": "user", "content": "hello " * 50}])
    assert 40 < counted.input_tokens < 200


async def test_coding_agent_tool_loop_with_a_cancelled_call(gw: RunningGateway) -> None:
    """An Anthropic-SDK agent loop: a tool call, a cancelled one, then on again."""
    history: list[Any] = [{"role": "user", "content": "use the TOOL"}]
    async with a_client(gw) as c:
        first = await c.messages.create(model="local", max_tokens=32, tools=A_TOOLS,
                                        messages=history)
        assert first.stop_reason == "tool_use"
        history.append({"role": "assistant", "content": [b.model_dump() for b in first.content]})
        # The user cancelled the tool: no tool_result, the next user turn just goes on.
        history.append({"role": "user", "content": "stop that, use the TOOL again"})
        raw = await c.messages.with_raw_response.create(model="local", max_tokens=32,
                                                        tools=A_TOOLS, messages=history)
        second = await raw.parse()
        assert raw.headers["x-gateway-repairs"] == "tool_result_synthesized=1"
        assert second.stop_reason == "tool_use"
        history.append({"role": "assistant",
                        "content": [b.model_dump() for b in second.content]})
        history.append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": second.content[0].id,  # type: ignore[union-attr]
             "content": "file contents"}]})
        third = await c.messages.create(model="local", max_tokens=32, tools=A_TOOLS,
                                        messages=history)
    assert third.stop_reason == "end_turn"


async def test_responses_create_translated(gw: RunningGateway, referee: Referee) -> None:
    items: list[Any] = [
        {"role": "user", "content": "read"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_zz", "output": "orphan"},
        {"role": "user", "content": [{"type": "input_text", "text": "go on"}]},
    ]
    async with o_client(gw) as c:
        raw = await c.responses.with_raw_response.create(model="local", input=items,
                                                         tools=R_TOOLS, instructions="brief")
    response = raw.parse()
    assert response.object == "response"
    assert response.status == "completed"
    assert response.output_text.startswith("referee: accepted")
    counts = raw.headers["x-gateway-repairs"]
    assert "tool_result_synthesized=1" in counts and "orphan_tool_result_dropped=1" in counts
    sent = orjson.loads(referee.requests[-1].body)["messages"]
    assert sent[0] == {"role": "system", "content": "brief"}
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]


async def test_responses_stream_translated_function_call(gw: RunningGateway) -> None:
    async with o_client(gw) as c, c.responses.stream(
        model="local", input="use the TOOL", tools=R_TOOLS,
    ) as stream:
        kinds = [event.type async for event in stream]
        final = await stream.get_final_response()
    assert kinds[0] == "response.created"
    assert "response.function_call_arguments.delta" in kinds or (
        "response.function_call_arguments.done" in kinds)
    assert kinds[-1] == "response.completed"
    assert final.output[0].type == "function_call"
    assert final.output[0].name == "read_file"


async def test_responses_stream_translated_text(gw: RunningGateway) -> None:
    async with o_client(gw) as c, c.responses.stream(model="local", input="hi") as stream:
        deltas = [e.delta async for e in stream if e.type == "response.output_text.delta"]
        final = await stream.get_final_response()
    assert "".join(deltas) == final.output_text
    assert final.output_text.startswith("referee: accepted")


async def test_previous_response_id_needs_the_full_input(gw: RunningGateway) -> None:
    async with o_client(gw) as c:
        with pytest.raises(openai.BadRequestError) as refused:
            await c.responses.create(model="local", input="next", previous_response_id="resp_1")
    assert refused.value.param == "previous_response_id"
    assert "full conversation" in refused.value.message


async def test_garbled_chat_answer_is_a_clean_502_in_each_wire(
    gateway_factory: GatewayFactory,
) -> None:
    from aiohttp import web

    from tests.conftest import serve_app

    async def garbled(request: web.Request) -> web.Response:
        return web.Response(body=b"<html>oops", content_type="application/json")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", garbled)
    runner, root = await serve_app(app)
    try:
        gw = await gateway_factory({"model_list": [{"model_name": "local", "litellm_params": {
            "model": "hosted_vllm/x", "api_base": f"{root}/v1", "api_key": "k"}}]})
        async with a_client(gw) as a, o_client(gw) as o:
            with pytest.raises(anthropic.InternalServerError) as a_err:
                await a.messages.create(model="local", max_tokens=8,
                                        messages=[{"role": "user", "content": "hi"}])
            with pytest.raises(openai.InternalServerError) as o_err:
                await o.responses.create(model="local", input="hi")
    finally:
        await runner.cleanup()
    assert a_err.value.status_code == 502 and a_err.value.body["type"] == "error"  # type: ignore[index]
    assert o_err.value.status_code == 502 and "not a JSON object" in o_err.value.message


async def test_anthropic_image_and_thinking_translated(gw: RunningGateway,
                                                       referee: Referee) -> None:
    import base64

    from tests.fakes.native_base import png_bytes

    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": base64.b64encode(png_bytes()).decode()}}
    async with a_client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="local", max_tokens=16,
            messages=[{"role": "user", "content": [image, {"type": "text", "text": "what?"}]},
                      {"role": "assistant", "content": [
                          {"type": "thinking", "thinking": "a red square", "signature": "s"},
                          {"type": "text", "text": "a square"}]},
                      {"role": "user", "content": "colour?"}])
    assert "x-gateway-repairs" not in raw.headers
    sent = orjson.loads(referee.requests[-1].body)["messages"]
    assert sent[0]["content"][0]["type"] == "image_url"
    assert sent[0]["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert sent[1] == {"role": "assistant", "content": "a square"}  # thinking is not chat


async def test_requests_are_counted_by_the_wire_the_client_spoke(
    gw: RunningGateway, referee: Referee
) -> None:
    async with a_client(gw) as a, o_client(gw) as o:
        await a.messages.create(model="local", max_tokens=8,
                                messages=[{"role": "user", "content": "hi"}])
        await o.responses.create(model="local", input="hi")
        await o.chat.completions.create(model="local",
                                        messages=[{"role": "user", "content": "hi"}])
    page = await scrape(gw.root)
    for wire in ("anthropic", "responses", "chat"):
        assert page.total("gateway_requests_total", wire=wire, model="local",
                          status="200") == 1, wire


async def test_the_clients_settings_reach_the_chat_upstream(
        gw: RunningGateway, referee: Referee) -> None:
    """What a Responses or Messages request asks of the model beyond its messages is
    written in Chat Completions' words, not left out: the reasoning effort (a thinking
    budget as LiteLLM buckets it), the service tier, the safety identifier, the verbosity,
    log probabilities, top_k."""
    async with o_client(gw) as c:
        await c.responses.create(
            model="local", input="hi", reasoning={"effort": "high"}, service_tier="flex",
            safety_identifier="user-7", text={"verbosity": "low"}, top_logprobs=2)
    sent = referee.requests[-1].json()
    assert (sent["reasoning_effort"], sent["service_tier"], sent["safety_identifier"],
            sent["verbosity"], sent["logprobs"], sent["top_logprobs"]) == (
        "high", "flex", "user-7", "low", True, 2)
    async with a_client(gw) as a:
        await a.messages.create(model="local", max_tokens=4000, extra_body={"top_k": 5},
                                thinking={"type": "enabled", "budget_tokens": 2500},
                                messages=[{"role": "user", "content": "hi"}])
    sent = referee.requests[-1].json()
    assert (sent["reasoning_effort"], sent["top_k"]) == ("medium", 5)


async def test_a_setting_the_chat_upstream_does_not_take_is_left_out(
        gateway_factory: GatewayFactory) -> None:
    """Settings written in the translation that the provider does not take (litellm's
    Anthropic translation refuses a verbosity, a safety identifier and the "flex" tier) are
    left out one by one and the request answered, whatever drop_params says: the client
    did not send them in those words."""
    async with FakeAnthropic(api_key="upstream-anthropic-key") as fake:
        gw = await gateway_factory({"model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": fake.base_url,
            "api_key": "upstream-anthropic-key"}}]})
        async with o_client(gw) as c:
            raw = await c.responses.with_raw_response.create(
                model="claude", input="hi", max_output_tokens=64, service_tier="flex",
                safety_identifier="user-7", text={"verbosity": "low"})
            assert raw.parse().output_text == "you said: hi"
            assert "drop_param" in raw.headers["x-gateway-recovery"]
            assert len(fake.requests) == 1  # (litellm refused the others before sending)
            # Learned for that deployment: the next request leaves them out up front.
            again = await c.responses.with_raw_response.create(
                model="claude", input="hi again", max_output_tokens=64, service_tier="flex",
                safety_identifier="user-7", text={"verbosity": "low"})
        assert again.parse().output_text == "you said: hi again"
        assert "x-gateway-recovery" not in again.headers
        assert again.headers["x-gateway-attempts"] == "1"


PIXEL = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6k"
         "gAAAABJRU5ErkJggg==")


async def test_what_a_tool_returned_besides_text_reaches_the_chat_upstream(
        gw: RunningGateway, referee: Referee) -> None:
    """A tool's image, document or search result is not lost in translation: the image
    goes as the result's part (the strict chat server refuses it there, so it is moved to a
    user turn, reported), a text document and a search result as text."""
    call = {"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]}

    def result(*blocks: Any) -> list[Any]:
        return [{"role": "user", "content": "look"}, call, {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": list(blocks)}]}]

    async with a_client(gw) as c:
        raw = await c.messages.with_raw_response.create(
            model="local", max_tokens=32, tools=A_TOOLS, messages=result(
                {"type": "text", "text": "the screen:"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": PIXEL}}))
        assert "tool_media_moved" in raw.headers["x-gateway-repairs"]
        assert PIXEL in referee.requests[-1].body.decode()
        await c.messages.create(model="local", max_tokens=32, tools=A_TOOLS, messages=result(
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                            "data": "DOCUMENT-BODY"}},
            {"type": "search_result", "source": "https://docs.example/x", "title": "X",
             "content": [{"type": "text", "text": "SEARCH-BODY"}]}))
    sent = referee.requests[-1].json()["messages"]
    tool = next(m for m in sent if m["role"] == "tool")
    assert "DOCUMENT-BODY" in tool["content"] and "SEARCH-BODY" in tool["content"]
    async with a_client(gw) as c:  # a PDF (Claude Code's Read of one): refused in a tool
        raw = await c.messages.with_raw_response.create(  # message, moved to a user turn
            model="local", max_tokens=32, tools=A_TOOLS, messages=result(
                {"type": "document", "source": {"type": "base64",
                                                "media_type": "application/pdf",
                                                "data": "JVBERi0xLjQK"}}))
    assert "tool_media_moved" in raw.headers["x-gateway-repairs"]
    assert "JVBERi0xLjQK" in referee.requests[-1].body.decode()


async def test_an_empty_final_assistant_message_is_left_out_for_a_chat_model(
        gw: RunningGateway, referee: Referee) -> None:
    # Valid on the Messages API (the optional final assistant message may be empty), kept
    # as sent natively; a chat model gets nothing for it (it got the view's own
    # placeholder role, and the client the chat server's 400 about it).
    for empty in ([], ""):
        async with a_client(gw) as c:
            message = await c.messages.create(model="local", max_tokens=32, messages=[
                {"role": "user", "content": "hi"}, {"role": "assistant", "content": empty}])
        assert message.content[0].text.startswith("referee: accepted")  # type: ignore[union-attr]
        assert [m["role"] for m in referee.requests[-1].json()["messages"]] == ["user"]


@pytest.mark.parametrize(("status", "kind"), [(401, "authentication_error"),
                                               (404, "not_found_error")])
async def test_a_chat_servers_refusal_has_the_messages_type_of_its_status(
        gw: RunningGateway, referee: Referee, status: int, kind: str) -> None:
    # OpenAI-style servers call a bad key or an unknown model "invalid_request_error": on
    # the Messages wire the type is the status's own, as clients branch on it.
    referee.script(status, bodies.openai_error("Incorrect API key provided: sk-...",
                                               code="invalid_api_key"))
    async with a_client(gw) as c:
        with pytest.raises(anthropic.APIStatusError) as refused:
            await c.messages.create(model="local", max_tokens=8,
                                    messages=[{"role": "user", "content": "hi"}])
    assert refused.value.status_code == status
    body = refused.value.body
    assert isinstance(body, dict) and body["error"]["type"] == kind


async def test_a_second_choice_is_not_merged_into_the_answer(
        gw: RunningGateway, referee: Referee) -> None:
    # A chat server answering n > 1 alternatives: the wire holds one answer, the first.
    completion = {"id": "chatcmpl-2", "object": "chat.completion", "created": 1,
                  "model": "referee", "choices": [
                      {"index": 0, "message": {"role": "assistant", "content": "first"},
                       "finish_reason": "stop"},
                      {"index": 1, "message": {"role": "assistant", "content": "second"},
                       "finish_reason": "length"}],
                  "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    referee.script(200, completion, times=2)
    async with a_client(gw) as c:
        message = await c.messages.create(model="local", max_tokens=8,
                                          messages=[{"role": "user", "content": "hi"}])
    assert [b.text for b in message.content] == ["first"]  # type: ignore[union-attr]
    assert message.stop_reason == "end_turn"
    async with o_client(gw) as o:
        response = await o.responses.create(model="local", input="hi")
    assert response.output_text == "first" and response.status == "completed"
