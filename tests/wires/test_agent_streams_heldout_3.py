"""Held-out, round 3: streams with the quirks real servers put on the wire, on all three
wires, native and translated (a chat-only upstream answering Messages and Responses).

A raw socket upstream (tests/fakes/faulty_upstream) sends the exact bytes: bare ``\\r``
line endings, a byte-order mark, ``data:`` split over several lines, every byte its own
write, a gzip-compressed stream, an HTTP/1.0 close-delimited stream, Azure's content-filter
chunks, Groq's ``x_groq`` usage, Together's usage on every chunk, Mistral's whole tool call
in one chunk, tool call indexes that skip, two choices, logprobs, ``finish_reason:
"length"``, ``[DONE]`` twice and data after it, Responses events without
``sequence_number``, a stall past the stream timeout. The official SDKs read the gateway's
stream; asserted is what their user sees.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.faulty_upstream import FaultyUpstream, Received, Writer, head, stream, trickle
from tests.fakes.real_world_chat import chunked
from tests.wires.test_agent_streams_heldout import a_block, a_end, a_ev, a_start
from tests.wires.test_agent_streams_heldout_2 import r_said
from tests.wires.test_wire_situations import CLAUDE, GPT

RECOVERY = {"backoff_base": 0.01, "backoff_cap": 0.05}


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


def config(up: FaultyUpstream, **params: Any) -> dict[str, Any]:
    """A chat-only model "m" (its Messages and Responses clients are translated) and both
    native wires, all on the raw upstream."""
    chat = model_entry("m", up.base_url, responses_api=False)
    chat["litellm_params"].update(params)
    return {"model_list": [
        chat,
        {"model_name": GPT, "litellm_params": {"model": f"openai/{GPT}",
                                               "api_base": up.base_url, "api_key": "k-up"}},
        {"model_name": CLAUDE, "litellm_params": {
            "model": f"anthropic/{CLAUDE}", "api_base": f"http://127.0.0.1:{up.port}",
            "api_key": "k-up"}}], "recovery": RECOVERY}


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, up: FaultyUpstream) -> RunningGateway:
    return await gateway_factory(config(up))


def an(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0)


def oa(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)


def ev(delta: dict[str, Any] | None = None, finish: str | None = None, *,
       usage: dict[str, Any] | None = None, no_choices: bool = False, index: int = 0,
       **extra: Any) -> bytes:
    """One ``chat.completion.chunk`` event."""
    data: dict[str, Any] = {"id": "chatcmpl-3", "object": "chat.completion.chunk",
                            "created": 1, "model": "m-upstream"}
    data["choices"] = [] if no_choices else [
        {"index": index, "delta": delta or {}, "finish_reason": finish, "logprobs": None}]
    if usage is not None:
        data["usage"] = usage
    data.update(extra)
    return b"data: " + json.dumps(data, ensure_ascii=False).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
USAGE = {"prompt_tokens": 40, "completion_tokens": 6, "total_tokens": 46}
HELLO = [ev({"role": "assistant", "content": ""}), ev({"content": "Hel"}),
         ev({"content": "lo ü!"}), ev(finish="stop"), ev(usage=USAGE, no_choices=True), DONE]
HI: Any = [{"role": "user", "content": "hi"}]


async def chat_final(gw: RunningGateway, model: str = "m", **extra: Any) -> Any:
    """The chat stream helper's final completion."""
    async with oa(gw) as c, c.chat.completions.stream(
            model=model, messages=HI, stream_options={"include_usage": True},
            **extra) as s:
        async for _ in s:
            pass
        return await s.get_final_completion()


async def a_final(gw: RunningGateway, model: str = "m", **extra: Any) -> Any:
    """``messages.stream()``'s final message."""
    async with an(gw) as c, c.messages.stream(model=model, max_tokens=64, messages=HI,
                                              **extra) as s:
        async for _ in s:
            pass
        return await s.get_final_message()


async def r_final(gw: RunningGateway, model: str = "m", **extra: Any) -> tuple[Any, list[Any]]:
    """``responses.stream()``'s final response and its events."""
    async with oa(gw) as c, c.responses.stream(model=model, input="hi", **extra) as s:
        events = [e async for e in s]
        return await s.get_final_response(), events


async def on_three_wires(gw: RunningGateway, up: FaultyUpstream, answer: Any, *,
                         chat_usage: bool = True) -> None:
    """The same chat stream read as chat, Messages and Responses: "Hello ü!" each time,
    with the upstream's usage (on chat, where the upstream put it: ``chat_usage``)."""
    up.then(answer)
    final = await chat_final(gw)
    assert final.choices[0].message.content == "Hello ü!"
    if chat_usage:
        assert final.usage is not None and final.usage.completion_tokens == 6
    up.then(answer)
    message = await a_final(gw)
    assert [b.text for b in message.content] == ["Hello ü!"]
    assert message.stop_reason == "end_turn" and message.usage.output_tokens == 6
    up.then(answer)
    response, events = await r_final(gw)
    assert response.output_text == "Hello ü!" and response.status == "completed"
    assert response.usage is not None and response.usage.output_tokens == 6
    assert [e.sequence_number for e in events] == list(range(len(events)))


# -- SSE framing quirks -------------------------------------------------------------------

async def test_bare_cr_line_endings_read_as_the_same_stream(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    await on_three_wires(gw, up, stream(*(p.replace(b"\n", b"\r") for p in HELLO)))


async def test_a_byte_order_mark_before_the_first_event_is_not_a_broken_stream(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    await on_three_wires(gw, up, stream(b"\xef\xbb\xbf" + HELLO[0], *HELLO[1:]))


async def test_data_split_over_several_lines_and_comments_between_every_event(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    parts = []
    for part in HELLO[:-1]:
        body = part[len(b"data: "):-2]
        cut = body.index(b'"choices"')
        parts += [b": keep-alive\n\n", b"retry: 3000\n",
                  b"data: " + body[:cut] + b"\ndata: " + body[cut:] + b"\n\n"]
    # A named event without data, and one of a retry field only, are no events: a chat
    # client (whose SDK would parse their empty data as JSON) does not get them.
    await on_three_wires(gw, up, stream(*parts, b"event: done\n\n", b"retry: 10\n\n", DONE))


async def test_every_byte_its_own_write_streams_the_same_answer(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    whole = b"".join(HELLO)
    await on_three_wires(gw, up, stream(*(whole[i:i + 1] for i in range(len(whole)))))


async def test_a_gzip_compressed_stream_is_decompressed(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    body = gzip.compress(b"".join(HELLO))

    async def run(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Content-Encoding: gzip\r\nConnection: close\r\n\r\n")
        for i in range(0, len(body), 7):
            w.write(body[i:i + 7])
            await w.drain()
    await on_three_wires(gw, up, run)


async def test_an_http_1_0_close_delimited_stream(gw: RunningGateway, up: FaultyUpstream,
                                                  ) -> None:
    async def run(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for part in HELLO:
            w.write(part)
            await w.drain()
    await on_three_wires(gw, up, run)


async def test_chunked_framing_with_odd_chunk_sizes(gw: RunningGateway, up: FaultyUpstream,
                                                   ) -> None:
    whole = b"".join(HELLO)
    sizes = [1, 3, 17, 2, 250, 5, 64]
    pieces, at = [], 0
    while at < len(whole):
        size = sizes[len(pieces) % len(sizes)]
        pieces.append(whole[at:at + size])
        at += size
    await on_three_wires(gw, up, chunked(*pieces))


# -- provider-specific chunks -------------------------------------------------------------

AZURE_FILTER = {"hate": {"filtered": False, "severity": "safe"},
                "violence": {"filtered": False, "severity": "safe"}}


async def test_azure_content_filter_chunks_are_not_content(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    prompt = ev(no_choices=True, prompt_filter_results=[
        {"prompt_index": 0, "content_filter_results": AZURE_FILTER}])
    # Azure's last chunk: an empty delta, no finish, the content filter's verdict.
    verdict = (b"data: " + orjson.dumps({
        "id": "chatcmpl-3", "object": "chat.completion.chunk", "created": 1,
        "model": "m-upstream", "choices": [{"index": 0, "delta": {}, "finish_reason": None,
                                            "content_filter_offsets": {
                                                "check_offset": 0, "start_offset": 0,
                                                "end_offset": 8},
                                            "content_filter_results": AZURE_FILTER}]})
        + b"\n\n")
    answer = stream(prompt, *HELLO[:3], verdict, *HELLO[3:])
    await on_three_wires(gw, up, answer)


async def test_groq_usage_in_x_groq_is_counted(gw: RunningGateway, up: FaultyUpstream) -> None:
    # A chat client gets Groq's chunk as sent (its usage in x_groq, as from Groq itself);
    # the translated wires count it as the answer's usage.
    answer = stream(*HELLO[:3], ev(finish="stop", x_groq={"id": "req_1", "usage": USAGE}),
                    DONE)
    await on_three_wires(gw, up, answer, chat_usage=False)


async def test_together_usage_on_every_chunk_counts_the_last(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    def counted(n: int) -> dict[str, Any]:
        return {"prompt_tokens": 40, "completion_tokens": n, "total_tokens": 40 + n}
    answer = stream(ev({"role": "assistant", "content": ""}, usage=counted(0)),
                    ev({"content": "Hel"}, usage=counted(2)),
                    ev({"content": "lo ü!"}, usage=counted(4)),
                    ev(finish="stop", usage=counted(6)), DONE)
    await on_three_wires(gw, up, answer)


WHOLE_CALL = {"index": 0, "id": "D681PevKs", "type": "function", "function": {
    "name": "read_file", "arguments": '{"path": "a.txt"}'}}
TOOLS_A: Any = [{"name": n, "input_schema": {"type": "object", "properties": {}}}
                for n in ("read_file", "list_dir")]
TOOLS_R: Any = [{"type": "function", "name": n, "parameters": {
    "type": "object", "properties": {}}} for n in ("read_file", "list_dir")]
TOOLS_C: Any = [{"type": "function", "function": t} for t in (
    {"name": n, "parameters": {"type": "object", "properties": {}}}
    for n in ("read_file", "list_dir"))]


async def test_a_mistral_tool_call_whole_in_its_finishing_chunk(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    answer = stream(ev({"role": "assistant", "content": ""}),
                    ev({"tool_calls": [WHOLE_CALL]}, "tool_calls", usage=USAGE), DONE)
    up.then(answer)
    final = await chat_final(gw, tools=TOOLS_C)
    (c_call,) = final.choices[0].message.tool_calls or []
    assert (c_call.id, c_call.function.arguments) == ("D681PevKs", '{"path": "a.txt"}')
    up.then(answer)
    message = await a_final(gw, tools=TOOLS_A)
    (use,) = message.content
    assert use.type == "tool_use" and use.input == {"path": "a.txt"}
    assert message.stop_reason == "tool_use"
    up.then(answer)
    response, _ = await r_final(gw, tools=TOOLS_R)
    (item,) = response.output
    assert item.type == "function_call" and json.loads(item.arguments) == {"path": "a.txt"}


async def test_tool_call_indexes_that_skip_numbers_give_two_calls(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    second = {**WHOLE_CALL, "index": 2, "id": "call_2",
              "function": {"name": "list_dir", "arguments": "{}"}}
    answer = stream(ev({"role": "assistant", "content": None}),
                    ev({"tool_calls": [WHOLE_CALL]}), ev({"tool_calls": [second]}),
                    ev(finish="tool_calls"), DONE)
    up.then(answer)
    message = await a_final(gw, tools=TOOLS_A)
    assert [(b.name, b.input) for b in message.content] == [  # type: ignore[union-attr]
        ("read_file", {"path": "a.txt"}), ("list_dir", {})]
    up.then(answer)
    response, _ = await r_final(gw, tools=TOOLS_R)
    assert [i.name for i in response.output] == [  # type: ignore[union-attr]
        "read_file", "list_dir"]


async def test_two_choices_stream_to_a_chat_client_as_two(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    up.then(stream(ev({"role": "assistant", "content": "A"}, index=0),
                   ev({"role": "assistant", "content": "B"}, index=1),
                   ev({"content": "a"}, index=0), ev({"content": "b"}, index=1),
                   ev(finish="stop", index=0), ev(finish="stop", index=1), DONE))
    final = await chat_final(gw, n=2)
    assert [(c.message.content, c.finish_reason) for c in final.choices] == [
        ("Aa", "stop"), ("Bb", "stop")]


async def test_logprobs_chunks_reach_a_chat_client_and_translate_as_text(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    def with_logprobs(text: str) -> bytes:
        data = orjson.loads(ev({"content": text})[6:])
        data["choices"][0]["logprobs"] = {"content": [
            {"token": text, "logprob": -0.25, "bytes": list(text.encode()),
             "top_logprobs": []}], "refusal": None}
        return b"data: " + orjson.dumps(data) + b"\n\n"
    answer = stream(ev({"role": "assistant", "content": ""}), with_logprobs("Hel"),
                    with_logprobs("lo ü!"), *HELLO[3:])
    up.then(answer)
    final = await chat_final(gw, logprobs=True)
    logprobs = final.choices[0].logprobs
    assert logprobs is not None and [t.token for t in logprobs.content or []] == [
        "Hel", "lo ü!"]
    await on_three_wires(gw, up, answer)


async def test_finish_reason_length_is_each_wires_truncation(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    answer = stream(*HELLO[:3], ev(finish="length", usage=USAGE), DONE)
    up.then(answer)
    async with oa(gw) as c:  # (the stream helper raises LengthFinishReasonError itself)
        chunks = [ch async for ch in await c.chat.completions.create(
            model="m", messages=HI, stream=True)]
    assert [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1] == "length"
    up.then(answer)
    message = await a_final(gw)
    assert message.stop_reason == "max_tokens"
    up.then(answer)
    async with oa(gw) as c:
        events = [e async for e in await c.responses.create(model="m", input="hi",
                                                            stream=True)]
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.output_text == "Hello ü!"
    assert last.response.usage.output_tokens == 6


async def test_done_twice_and_data_after_done_add_nothing(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    answer = stream(*HELLO, DONE, ev({"content": " LATE"}), DONE)
    await on_three_wires(gw, up, answer)
    up.then(answer)
    async with oa(gw) as c:
        chunks = [ch async for ch in await c.chat.completions.create(
            model="m", messages=HI, stream=True)]
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks
                   if ch.choices) == "Hello ü!"


# -- native wires -------------------------------------------------------------------------

async def test_a_ping_then_overloaded_error_after_message_start_is_resent_once(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    overloaded = a_ev({"type": "error", "error": {"type": "overloaded_error",
                                                  "message": "Overloaded"}})
    up.then(stream(a_start(), a_ev({"type": "ping"}), overloaded),
            stream(a_start(), *a_block(0, {"type": "text", "text": ""},
                                       {"type": "text_delta", "text": "Hi"}),
                   *a_end("end_turn", 2)))
    message = await a_final(gw, model=CLAUDE)
    assert [b.text for b in message.content] == ["Hi"]  # type: ignore[union-attr]
    assert len(up.received) == 2


async def test_r_events_without_sequence_numbers_still_give_the_final_response(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    parts = []
    for part in r_said([], "Done."):
        data = json.loads(part.split(b"data: ", 1)[1])
        del data["sequence_number"]
        parts.append(f"event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n")
    up.then(stream(*parts))
    response, events = await r_final(gw, model=GPT)
    # (relayed as sent: the native relay does not renumber a stream without numbers)
    assert response.output_text == "Done." and events[-1].type == "response.completed"
    assert [e.type for e in events][:2] == ["response.created", "response.in_progress"]


async def test_r_a_close_after_text_without_a_terminal_event_is_response_failed(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    seq: list[int] = []
    parts = r_said(seq, "Done.")[:-1]  # everything but response.completed
    up.then(stream(*parts))
    async with oa(gw) as c:
        events = [e async for e in await c.responses.create(model=GPT, input="hi",
                                                            stream=True)]
    assert events[-1].type == "response.failed"
    assert len(up.received) == 1  # content had reached the client: not resent


async def test_a_stall_past_the_stream_timeout_ends_each_wire_with_its_error(
        gateway_factory: GatewayFactory, up: FaultyUpstream) -> None:
    gw = await gateway_factory(config(up, stream_timeout=0.5))
    hold = asyncio.Event()
    try:
        up.then(stream(*HELLO[:3], hold=hold))
        texts: list[str] = []
        async with an(gw) as c:
            with pytest.raises(anthropic.APIStatusError):
                async with c.messages.stream(model="m", max_tokens=64, messages=HI) as s:
                    async for text in s.text_stream:
                        texts.append(text)
        assert "".join(texts) == "Hello ü!"
        up.then(stream(*HELLO[:3], hold=hold))
        async with oa(gw) as c:
            events = [e async for e in await c.responses.create(model="m", input="hi",
                                                                stream=True)]
        assert events[-1].type == "response.failed"
        up.then(stream(*HELLO[:3], hold=hold))
        pieces: list[str] = []
        async with oa(gw) as c:
            with pytest.raises(openai.APIError):
                async for chunk in await c.chat.completions.create(
                        model="m", messages=HI, stream=True):
                    pieces.extend(ch.delta.content or "" for ch in chunk.choices)
        assert "".join(pieces) == "Hello ü!"
    finally:
        hold.set()


# -- usage counted, deadlines, hang-ups, the ladder before the first byte ------------------

async def access_fields(caplog: pytest.LogCaptureFixture, path: str) -> dict[str, Any]:
    """The access log's fields of the last request to ``path`` (written right after the
    stream ends)."""
    for _ in range(500):
        found = [r.access for r in caplog.records  # type: ignore[attr-defined]
                 if r.name == "gateway.access" and r.access.get("path") == path]
        if found:
            return found[-1]  # type: ignore[no-any-return]
        await asyncio.sleep(0.01)
    raise AssertionError(f"no access line for {path}")


@pytest.mark.parametrize("quirk", ["x_groq", "together"])
async def test_the_access_log_counts_a_streams_usage_once(
        gw: RunningGateway, up: FaultyUpstream, caplog: pytest.LogCaptureFixture,
        quirk: str) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    if quirk == "x_groq":
        answer = stream(*HELLO[:3], ev(finish="stop", x_groq={"id": "r", "usage": USAGE}),
                        DONE)
    else:  # usage on every chunk, growing: the last is the answer's, not their sum
        answer = stream(*(p.replace(b'"logprobs": null}]', b'"logprobs": null}], "usage": '
                                    + orjson.dumps(USAGE)) for p in HELLO[:4]), DONE)
    for path in ("/v1/messages", "/v1/responses", "/v1/chat/completions"):
        caplog.clear()
        up.then(answer)
        if path == "/v1/messages":
            await a_final(gw)
        elif path == "/v1/responses":
            await r_final(gw)
        else:
            await chat_final(gw)
        fields = await access_fields(caplog, path)
        assert fields["stream"] is True and fields["status"] == 200
        assert (fields.get("input_tokens"), fields.get("output_tokens")) == (40, 6), path


async def test_a_native_stall_past_the_stream_timeout_ends_in_each_wires_error(
        gateway_factory: GatewayFactory, up: FaultyUpstream) -> None:
    cfg = config(up)
    for entry in cfg["model_list"]:
        entry["litellm_params"]["stream_timeout"] = 0.5
    gw = await gateway_factory(cfg)
    hold = asyncio.Event()
    try:
        up.then(stream(a_start(), a_ev({"type": "content_block_start", "index": 0,
                                        "content_block": {"type": "text", "text": ""}}),
                       a_ev({"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": "Hal"}}), hold=hold))
        texts: list[str] = []
        async with an(gw) as c:
            with pytest.raises(anthropic.APIStatusError, match="timed out"):
                async with c.messages.stream(model=CLAUDE, max_tokens=64, messages=HI) as s:
                    async for text in s.text_stream:
                        texts.append(text)
        assert texts == ["Hal"]
        up.then(stream(*r_said([], "Done.")[:5], hold=hold))
        async with oa(gw) as c:
            events = [e async for e in await c.responses.create(model=GPT, input="hi",
                                                                stream=True)]
        assert [e.type for e in events][-2:] == ["error", "response.failed"]
        assert [e.sequence_number for e in events] == list(range(len(events)))
        assert len(up.received) == 2  # output had reached the clients: nothing resent
    finally:
        hold.set()


@pytest.mark.parametrize("wire", ["messages", "responses", "chat"])
async def test_a_client_hanging_up_on_a_native_stream_releases_the_upstream(
        gw: RunningGateway, up: FaultyUpstream, wire: str) -> None:
    stop = asyncio.Event()
    opening = {"messages": a_start() + b"".join(a_block(0, {"type": "text", "text": ""},
                                                        {"type": "text_delta",
                                                         "text": "first "})[:2]),
               "responses": b"".join(r_said([], "first ")[:5]),
               "chat": HELLO[0] + HELLO[1]}[wire]
    up.then(trickle(head(200, {"Content-Type": "text/event-stream"}) + opening,
                    b": keep-alive\n\n", stop))
    try:
        async with (an(gw) if wire == "messages" else oa(gw)) as c:  # type: ignore[attr-defined]
            if wire == "messages":
                async with c.messages.stream(model=CLAUDE, max_tokens=64, messages=HI) as s:
                    async for _ in s.text_stream:
                        break
            elif wire == "responses":
                async with c.responses.stream(model=GPT, input="hi") as s:
                    async for event in s:
                        if event.type == "response.output_text.delta":
                            break
            else:
                got = await c.chat.completions.create(model="m", messages=HI, stream=True)
                async for _ in got:
                    break
                await got.close()
        await asyncio.wait_for(up.disconnected.wait(), 30)
    finally:
        stop.set()


async def test_an_error_first_after_a_bom_and_comments_is_retried_unseen(
        gw: RunningGateway, up: FaultyUpstream) -> None:
    error = b'data: {"error": {"message": "Provider returned error", "code": 502}}\n\n'
    up.then(stream(b"\xef\xbb\xbf: OPENROUTER PROCESSING\r\n\r\n", error), stream(*HELLO))
    message = await a_final(gw)
    assert [b.text for b in message.content] == ["Hello ü!"]  # type: ignore[union-attr]
    assert len(up.received) == 2
    up.then(stream(b": OPENROUTER PROCESSING\r\r", error.replace(b"\n", b"\r")),
            stream(*HELLO))
    response, events = await r_final(gw)
    assert response.output_text == "Hello ü!"
    assert [e.type for e in events].count("response.created") == 1
    assert len(up.received) == 4
