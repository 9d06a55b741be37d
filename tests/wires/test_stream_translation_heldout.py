"""Chat streams with real providers' quirks, translated to Anthropic Messages and Responses,
read by the official SDKs' stream helpers: what the SDK assembles must be what it would
assemble from the real provider. The upstream is a raw socket server sending the exact
bytes (tests/fakes/faulty_upstream); a chat client of an Anthropic upstream goes through
litellm to the fake Anthropic server."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.faulty_upstream import FaultyUpstream, head, stream, trickle

A_TOOLS: list[Any] = [
    {"name": n, "description": n, "input_schema": {"type": "object", "properties": {}}}
    for n in ("read_file", "list_dir")]
R_TOOLS: list[Any] = [
    {"type": "function", "name": n, "description": n,
     "parameters": {"type": "object", "properties": {}}} for n in ("read_file", "list_dir")]


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic() as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, up: FaultyUpstream,
             claude: FakeAnthropic) -> RunningGateway:
    return await gateway_factory({"model_list": [
        model_entry("m", up.base_url, responses_api=False),  # chat only: translated
        {"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
            "api_key": "upstream-secret-key"}},
    ], "recovery": {"backoff_base": 0.01, "backoff_cap": 0.05}})


def an(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0)


def oa(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)


def ev(delta: dict[str, Any] | None = None, finish: str | None = None, *,
       usage: dict[str, Any] | None = None, no_choices: bool = False) -> bytes:
    """One ``chat.completion.chunk`` event as OpenAI-compatible servers send it."""
    data: dict[str, Any] = {"id": "chatcmpl-q", "object": "chat.completion.chunk",
                            "created": 1, "model": "m-upstream"}
    data["choices"] = [] if no_choices else [
        {"index": 0, "delta": delta or {}, "finish_reason": finish, "logprobs": None}]
    if usage is not None:
        data["usage"] = usage
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


def call(index: int, *, id: str | None = None, name: str | None = None,
         args: str | None = None) -> dict[str, Any]:
    """One tool call delta."""
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if args is not None:
        function["arguments"] = args
    out: dict[str, Any] = {"index": index, "function": function}
    if id is not None:
        out |= {"id": id, "type": "function"}
    return out


DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 120, "completion_tokens": 7, "total_tokens": 127,
         "prompt_tokens_details": {"cached_tokens": 100},
         "completion_tokens_details": {"reasoning_tokens": 3}}
INTERLEAVED = [
    ev({"role": "assistant", "content": None}),
    ev({"tool_calls": [call(0, id="call_a", name="read_file", args="")]}),
    ev({"tool_calls": [call(1, id="call_b", name="list_dir", args="")]}),
    ev({"tool_calls": [call(0, args='{"path": ')]}),
    ev({"tool_calls": [call(1, args='{"dir": "/tmp"}')]}),
    ev({"tool_calls": [call(0, args='"a.txt"}')]}),
    ev(finish="tool_calls"), DONE]


def a_stream(c: anthropic.AsyncAnthropic, **extra: Any) -> Any:
    return c.messages.stream(model="m", max_tokens=64, tools=A_TOOLS,
                             messages=[{"role": "user", "content": "go"}], **extra)


def r_stream(c: openai.AsyncOpenAI, **extra: Any) -> Any:
    return c.responses.stream(model="m", input="go", tools=R_TOOLS, **extra)


async def test_interleaved_parallel_tool_calls_become_two_tool_use_blocks(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    up.then(stream(*INTERLEAVED))
    async with an(gw) as c, a_stream(c) as s:
        final = await s.get_final_message()
    assert [(b.type, getattr(b, "id", None), getattr(b, "name", None),
             getattr(b, "input", None)) for b in final.content] == [
        ("tool_use", "call_a", "read_file", {"path": "a.txt"}),
        ("tool_use", "call_b", "list_dir", {"dir": "/tmp"})]
    assert final.stop_reason == "tool_use"


async def test_interleaved_parallel_tool_calls_become_two_function_call_items(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    up.then(stream(*INTERLEAVED))
    async with oa(gw) as c, r_stream(c) as s:
        done = [e async for e in s if e.type == "response.function_call_arguments.done"]
        final = await s.get_final_response()
    calls = [(o.call_id, o.name, json.loads(o.arguments)) for o in final.output
             if o.type == "function_call"]
    assert calls == [("call_a", "read_file", {"path": "a.txt"}),
                     ("call_b", "list_dir", {"dir": "/tmp"})]
    assert sorted(json.loads(e.arguments)["path" if "path" in e.arguments else "dir"]
                  for e in done) == ["/tmp", "a.txt"]


async def test_arguments_split_mid_escape_and_bytes_split_mid_character(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    # The argument text splits a \\u escape; the socket bytes split a 3-byte character.
    first = ev({"tool_calls": [call(0, id="call_u", name="read_file",
                                    args='{"path": "caf\\u00')]})
    second = ev({"tool_calls": [call(0, args='e9/\u20ac.txt", "n": "\\"q\\""}')]})
    cut = second.index("\u20ac".encode()) + 1
    for wire in ("anthropic", "responses"):
        up.then(stream(ev({"role": "assistant"}), first, second[:cut], second[cut:],
                       ev(finish="tool_calls"), DONE))
        if wire == "anthropic":
            async with an(gw) as c, a_stream(c) as s:
                final = await s.get_final_message()
            assert final.content[0].input == {"path": "caf\u00e9/\u20ac.txt",  # type: ignore[union-attr]
                                              "n": '"q"'}
        else:
            async with oa(gw) as c, r_stream(c) as s:
                response = await s.get_final_response()
            assert json.loads(response.output[0].arguments) == {  # type: ignore[union-attr]
                "path": "caf\u00e9/\u20ac.txt", "n": '"q"'}


async def test_a_tool_call_whose_id_and_name_come_after_its_first_arguments(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    late = [ev({"role": "assistant"}),
            ev({"tool_calls": [call(0, args='{"path"')]}),
            ev({"tool_calls": [call(0, id="call_late", name="read_file", args=': "x"}')]}),
            ev(finish="tool_calls"), DONE]
    up.then(stream(*late))
    async with an(gw) as c, a_stream(c) as s:
        final = await s.get_final_message()
    block = final.content[0]
    assert (block.type, block.id, block.name, block.input) == (  # type: ignore[union-attr]
        "tool_use", "call_late", "read_file", {"path": "x"})
    up.then(stream(*late))
    async with oa(gw) as c, r_stream(c) as s:
        added = [e.item for e in [e async for e in s]
                 if e.type == "response.output_item.added"]
        response = await s.get_final_response()
    assert [(i.call_id, i.name) for i in added] == [("call_late", "read_file")]  # type: ignore[union-attr]
    assert response.output[0].arguments == '{"path": "x"}'  # type: ignore[union-attr]


async def test_a_tool_call_with_empty_arguments_reads_as_no_input(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    empty = [ev({"role": "assistant"}),
             ev({"tool_calls": [call(0, id="call_e", name="list_dir", args="")]}),
             ev(finish="tool_calls"), DONE]
    up.then(stream(*empty))
    async with an(gw) as c, a_stream(c) as s:
        final = await s.get_final_message()
    assert final.content[0].input == {}  # type: ignore[union-attr]
    up.then(stream(*empty))
    async with oa(gw) as c, r_stream(c) as s:
        response = await s.get_final_response()
    # As OpenAI's own function calls without parameters: "{}", which json.loads reads.
    assert response.output[0].arguments == "{}"  # type: ignore[union-attr]


async def test_a_chunk_with_content_and_tool_calls_gives_text_then_the_tool(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    both = [ev({"role": "assistant", "content": "Let me look. ",
                "tool_calls": [call(0, id="call_t", name="read_file", args='{"path": "a"}')]}),
            ev(finish="tool_calls"), DONE]
    up.then(stream(*both))
    async with an(gw) as c, a_stream(c) as s:
        texts = [t async for t in s.text_stream]
        final = await s.get_final_message()
    assert texts == ["Let me look. "]
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[1].input == {"path": "a"}  # type: ignore[union-attr]


async def test_refusal_deltas_reach_both_wires(gw: RunningGateway, up: FaultyUpstream) -> None:
    refused = [ev({"role": "assistant", "content": None, "refusal": ""}),
               ev({"refusal": "I can't help "}), ev({"refusal": "with that."}),
               ev(finish="stop"), DONE]
    up.then(stream(*refused))
    async with oa(gw) as c, r_stream(c) as s:
        kinds = [e.type async for e in s]
        response = await s.get_final_response()
    assert "response.refusal.delta" in kinds and "response.refusal.done" in kinds
    part = response.output[0].content[0]  # type: ignore[union-attr]
    assert (part.type, part.refusal) == ("refusal", "I can't help with that.")  # type: ignore[union-attr]
    up.then(stream(*refused))
    async with an(gw) as c, a_stream(c) as s:
        final = await s.get_final_message()
    # Claude's own refusals: stop_reason "refusal", its words as text.
    assert final.stop_reason == "refusal"
    assert final.content[0].text == "I can't help with that."  # type: ignore[union-attr]


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
async def test_reasoning_deltas_become_thinking_and_reasoning_items(
        gw: RunningGateway, up: FaultyUpstream, field: str) -> None:
    thought = [ev({"role": "assistant", "content": ""}),
               ev({field: "The user wants "}), ev({field: "a greeting."}),
               ev({"content": "Hello"}), ev({"content": "!"}),
               ev(finish="stop", usage=USAGE), DONE]
    up.then(stream(*thought))
    async with an(gw) as c, a_stream(c, thinking={"type": "enabled", "budget_tokens": 1024},
                                      ) as s:
        texts = [t async for t in s.text_stream]
        final = await s.get_final_message()
    assert texts == ["Hello", "!"]
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].thinking == "The user wants a greeting."  # type: ignore[union-attr]
    up.then(stream(*thought))
    async with oa(gw) as c, r_stream(c) as s:
        kinds = [e.type async for e in s]
        response = await s.get_final_response()
    assert "response.reasoning_text.delta" in kinds
    reasoning, message = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.content[0].text == "The user wants a greeting."  # type: ignore[union-attr, index]
    assert response.output_text == "Hello!"
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 3
    assert message.type == "message"


@pytest.mark.parametrize(("finish", "stop_reason", "status", "reason"), [
    ("length", "max_tokens", "incomplete", "max_output_tokens"),
    ("content_filter", "refusal", "incomplete", "content_filter"),
    ("function_call", "tool_use", "completed", None),
])
async def test_finish_reasons_map_to_each_wires_own(
        gw: RunningGateway, up: FaultyUpstream, finish: str, stop_reason: str, status: str,
        reason: str | None) -> None:
    body = [ev({"role": "assistant", "content": "partial"}), ev(finish=finish), DONE]
    up.then(stream(*body))
    async with an(gw) as c, a_stream(c) as s:
        final = await s.get_final_message()
    assert final.stop_reason == stop_reason
    up.then(stream(*body))
    async with oa(gw) as c:
        events = [e async for e in await c.responses.create(model="m", input="go",
                                                            stream=True)]
    last = events[-1]
    assert last.type == f"response.{status}"
    details = last.response.incomplete_details  # type: ignore[union-attr]
    assert (details.reason if details else None) == reason


async def test_usage_only_chunk_after_a_null_finish_gives_cached_tokens(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    body = [ev({"role": "assistant", "content": "hi"}), ev(finish="stop"),
            ev(no_choices=True, usage=USAGE), DONE]
    up.then(stream(*body))
    async with an(gw) as c, a_stream(c) as s:
        final = await s.get_final_message()
    # Anthropic counts cache reads apart from input_tokens.
    assert (final.usage.input_tokens, final.usage.cache_read_input_tokens,
            final.usage.output_tokens) == (20, 100, 7)
    up.then(stream(*body))
    async with oa(gw) as c, r_stream(c, stream_options={"include_obfuscation": False}) as s:
        response = await s.get_final_response()
    assert response.usage is not None
    assert (response.usage.input_tokens, response.usage.input_tokens_details.cached_tokens,
            response.usage.total_tokens) == (120, 100, 127)


async def test_an_error_object_mid_stream_raises_in_both_sdks(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    broken = [ev({"role": "assistant", "content": "Hel"}),
              b'data: {"error": {"message": "upstream model crashed", "type": "server_error",'
              b' "code": 500}}\n\n']
    up.then(stream(*broken))
    async with an(gw) as c:
        with pytest.raises(anthropic.APIStatusError, match="upstream model crashed"):
            async with a_stream(c) as s:
                await s.get_final_message()
    up.then(stream(*broken))
    async with oa(gw) as c:
        events = [e async for e in await c.responses.create(model="m", input="go",
                                                            stream=True)]
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert "upstream model crashed" in events[-2].message  # type: ignore[union-attr]


async def test_pings_comments_and_event_lines_on_a_chat_stream_are_ignored(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    noisy = [b": ping\n\n", b"event: message\n" + ev({"role": "assistant", "content": "A"}),
             b": OPENROUTER PROCESSING\n\n", b"retry: 100\n" + ev({"content": "B"}),
             ev(finish="stop"), DONE]
    up.then(stream(*noisy))
    async with an(gw) as c, a_stream(c) as s:
        texts = [t async for t in s.text_stream]
    assert texts == ["A", "B"]
    up.then(stream(*noisy))
    async with oa(gw) as c, r_stream(c) as s:
        done = [e.text async for e in s if e.type == "response.output_text.done"]
    assert done == ["AB"]


async def test_a_stream_ending_without_done_after_its_finish_is_a_clear_stream_error(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    # The gateway reads a chat stream without [DONE] as cut short (as on the chat route):
    # the SDK raises the wire's error event, after the text it streamed.
    up.then(stream(ev({"role": "assistant", "content": "whole"}), ev(finish="stop")))
    texts: list[str] = []
    async with an(gw) as c:
        with pytest.raises(anthropic.APIStatusError, match="without its final event"):
            async with a_stream(c) as s:
                async for text in s.text_stream:
                    texts.append(text)
    assert texts == ["whole"]


async def test_a_stream_cut_before_any_finish_raises_instead_of_a_short_answer(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    up.then(stream(ev({"role": "assistant", "content": "half an ans"})))
    async with oa(gw) as c:
        events = [e async for e in await c.responses.create(model="m", input="go",
                                                            stream=True)]
    assert events[-1].type == "response.failed"


async def test_responses_stream_helper_events_match_the_final_response(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    up.then(stream(ev({"role": "assistant", "content": "Reading"}), ev({"content": " it."}),
                   ev({"tool_calls": [call(0, id="call_r", name="read_file",
                                           args='{"path":')]}),
                   ev({"tool_calls": [call(0, args='"b"}')]}),
                   ev(finish="tool_calls", usage=USAGE), DONE))
    async with oa(gw) as c, r_stream(c) as s:
        events = [e async for e in s]
        response = await s.get_final_response()
    text_done = [e for e in events if e.type == "response.output_text.done"]
    args_done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert [e.text for e in text_done] == ["Reading it."]
    assert [(e.arguments, e.item_id) for e in args_done] == [
        ('{"path":"b"}', response.output[1].id)]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert response.output_text == "Reading it."


async def test_chat_stream_helper_of_an_anthropic_upstream_gives_tool_call_and_usage(
        gw: RunningGateway) -> None:
    tools: list[Any] = [{"type": "function", "function": {
        "name": "lookup", "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}}}}}]
    async with oa(gw) as c, c.chat.completions.stream(
            model="claude", tools=tools, stream_options={"include_usage": True},
            messages=[{"role": "user", "content": "use the TOOL please"}]) as s:
        kinds = [e.type async for e in s]
        final = await s.get_final_completion()
    call_ = final.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert call_.function.name == "lookup"  # type: ignore[union-attr]
    assert json.loads(call_.function.arguments) == {  # type: ignore[union-attr]
        "query": "use the TOOL please"}
    assert final.choices[0].finish_reason == "tool_calls"
    assert "tool_calls.function.arguments.done" in kinds
    assert final.usage is not None and final.usage.prompt_tokens > 0
    assert final.usage.completion_tokens > 0


async def test_a_client_that_leaves_midway_releases_the_upstream(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    stop = asyncio.Event()
    up.then(trickle(head(200, {"Content-Type": "text/event-stream"})
                    + ev({"role": "assistant", "content": "first "}), b": keep-alive\n\n",
                    stop))
    for wire in ("anthropic", "responses"):
        up.disconnected.clear()
        if wire == "anthropic":
            async with an(gw) as c, a_stream(c) as s:
                async for text in s.text_stream:
                    assert text == "first "
                    break
        else:
            async with oa(gw) as c, r_stream(c) as s:
                async for event in s:
                    if event.type == "response.output_text.delta":
                        break
        # The SDK closed the connection: the gateway hangs up on the upstream too.
        await asyncio.wait_for(up.disconnected.wait(), 30)
        up.then(trickle(head(200, {"Content-Type": "text/event-stream"})
                        + ev({"role": "assistant", "content": "first "}),
                        b": keep-alive\n\n", stop))
    stop.set()


async def test_translated_thinking_and_reasoning_sent_back_next_turn_are_accepted(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    thought = [ev({"role": "assistant", "reasoning_content": "Think."}),
               ev({"content": "Answer."}), ev(finish="stop"), DONE]
    up.then(stream(*thought), stream(*thought), stream(*thought), stream(*thought))
    async with an(gw) as c:
        async with a_stream(c) as s:
            first = await s.get_final_message()
        async with c.messages.stream(model="m", max_tokens=64, messages=[
                {"role": "user", "content": "go"},
                {"role": "assistant", "content": [b.model_dump() for b in first.content]},
                {"role": "user", "content": "again"}]) as s:
            again = await s.get_final_message()
    assert again.content[-1].text == "Answer."  # type: ignore[union-attr]
    sent = up.received[-1].json()["messages"]
    assert sent[1] == {"role": "assistant", "content": "Answer."} or (
        sent[1]["role"] == "assistant" and "Think." not in json.dumps(sent[1]))
    async with oa(gw) as c:
        async with r_stream(c) as s:
            response = await s.get_final_response()
        replay = [o.model_dump(exclude_none=True) for o in response.output]
        async with c.responses.stream(model="m", input=[
                {"role": "user", "content": "go"}, *replay,  # type: ignore[list-item]
                {"role": "user", "content": "again"}]) as s:
            later = await s.get_final_response()
    assert later.output_text == "Answer."
    assert "Think." not in up.received[-1].body.decode()
