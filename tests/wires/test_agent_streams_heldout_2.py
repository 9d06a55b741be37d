"""Held-out, round 2: STREAMED agent requests on the native wires, against the bytes
Anthropic and OpenAI actually send.

A raw socket upstream (tests/fakes/faulty_upstream) speaks the Anthropic Messages and OpenAI
Responses event streams byte for byte: ``ping`` storms and SSE comments before
``message_start``, thinking with ``signature_delta``, ``redacted_thinking``, server tool use
and its search results, ``citations_delta``, tool input split inside a unicode escape,
``pause_turn`` / ``refusal`` / ``model_context_window_exceeded`` stop reasons, reasoning items
with ``encrypted_content``, custom tool input deltas, ``response.incomplete``,
``response.failed`` with ``context_length_exceeded``, ``data:``-only framing, sequence-number
gaps, ``Transfer-Encoding: chunked`` with events split across chunks, a model silent until
the first byte's deadline. The official SDKs (and their stream helpers) read the gateway's
stream; what is asserted is what their user sees: the final message / response equals the
upstream's, a failure before the first content is retried unseen, one after it ends in the
wire's own error event, unretried.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.faulty_upstream import FaultyUpstream, Received, Writer, answer, stream
from tests.fakes.real_world_chat import chunked
from tests.wires.test_agent_streams_heldout import (
    A_HEADERS,
    A_TOOLS,
    R_HEADERS,
    USAGE_R,
    a_block,
    a_end,
    a_ev,
    a_start,
    assert_messages_order,
    assert_responses_order,
    data_only,
    r_ev,
    r_response,
    raw_events,
)
from tests.wires.test_wire_situations import CLAUDE, GPT

RECOVERY = {"backoff_base": 0.01, "backoff_cap": 0.05}
SIGNATURE = "EqQBCkYIARgCKkD+round2sig/AB=="
ENCRYPTED = "gAAAAABo-round2-encrypted-reasoning=="


@pytest.fixture
async def raw() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


def config(raw: FaultyUpstream, **recovery: Any) -> dict[str, Any]:
    """Both native wires on the raw upstream, with a long enough context to never compact
    unless the upstream says so."""
    info = {"max_input_tokens": 200000}
    return {"model_list": [
        {"model_name": GPT, "litellm_params": {"model": f"openai/{GPT}",
                                               "api_base": raw.base_url, "api_key": "k-up"},
         "model_info": info},
        {"model_name": CLAUDE, "litellm_params": {
            "model": f"anthropic/{CLAUDE}", "api_base": f"http://127.0.0.1:{raw.port}",
            "api_key": "k-up"}, "model_info": info}],
        "recovery": {**RECOVERY, **recovery}}


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, raw: FaultyUpstream) -> RunningGateway:
    return await gateway_factory(config(raw))


def an(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0)


def oa(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)


HI: Any = [{"role": "user", "content": "hi"}]
PING = a_ev({"type": "ping"})
A_NAMES = ("message_start", "content_block_start", "content_block_delta",
           "content_block_stop", "message_delta", "message_stop")


def a_text(index: int, *pieces: str) -> list[bytes]:
    return a_block(index, {"type": "text", "text": ""},
                   *({"type": "text_delta", "text": p} for p in pieces))


def a_said(text: str, tokens: int = 2) -> list[bytes]:
    """A whole one-text-block message."""
    return [a_start(), *a_text(0, text), *a_end("end_turn", tokens)]


def a_error(kind: str, message: str) -> bytes:
    return a_ev({"type": "error", "error": {"type": kind, "message": message}})


def split_every(parts: list[bytes], size: int) -> list[bytes]:
    """The stream's bytes cut into pieces of ``size`` bytes, regardless of event bounds."""
    whole = b"".join(parts)
    return [whole[i:i + size] for i in range(0, len(whole), size)]


async def final_message(gw: RunningGateway, **extra: Any) -> tuple[Any, list[str], Any]:
    """(final message, event names seen, response headers) through ``messages.stream()``."""
    body: Any = {"model": CLAUDE, "max_tokens": 2048, "messages": HI, **extra}
    async with an(gw) as c, c.messages.stream(**body) as s:
        names = [e.type async for e in s if e.type in A_NAMES]
        final = await s.get_final_message()
        headers = s.response.headers
    return final, names, headers


# -- Anthropic: opening noise -----------------------------------------------------------------


async def test_a_ping_storm_before_message_start_leaves_one_clean_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*[PING] * 12, *a_said("After the storm.")))
    final, names, _ = await final_message(gw)
    assert_messages_order(names)
    assert final.content[0].text == "After the storm."
    assert final.stop_reason == "end_turn" and final.usage.output_tokens == 2


async def test_sse_comments_around_the_opening_events_are_not_content(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    said_ = a_said("Fine.")
    raw.then(stream(b": keep-alive\n\n", said_[0], b":\n\n", PING, b": still here\n\n",
                    *said_[1:]))
    final, names, _ = await final_message(gw)
    assert_messages_order(names)
    assert final.content[0].text == "Fine."
    assert len(raw.received) == 1


async def test_pings_between_blocks_do_not_disturb_the_message(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    first, second = a_text(0, "one "), a_text(1, "two")
    raw.then(stream(a_start(), PING, *first, PING, PING, *second, PING,
                    *a_end("end_turn", 4)))
    final, names, _ = await final_message(gw)
    assert_messages_order(names)
    assert [b.text for b in final.content] == ["one ", "two"]


# -- Anthropic: the blocks Claude streams -------------------------------------------------------


THINKING = [
    a_start(),
    *a_block(0, {"type": "thinking", "thinking": "", "signature": ""},
             {"type": "thinking_delta", "thinking": "Let me look "},
             {"type": "thinking_delta", "thinking": "at a.txt — über-carefully."},
             {"type": "signature_delta", "signature": SIGNATURE}),
    *a_text(1, "Reading it."),
    *a_block(2, {"type": "tool_use", "id": "toolu_up2", "name": "read_file", "input": {}},
             {"type": "input_json_delta", "partial_json": ""},
             {"type": "input_json_delta", "partial_json": '{"path": "caf\\u00'},
             {"type": "input_json_delta", "partial_json": 'e9 \\ud83d'},
             {"type": "input_json_delta", "partial_json": '\\ude00.txt"}'}),
    *a_end("tool_use", 91)]


def thinking_request() -> dict[str, Any]:
    return {"tools": A_TOOLS, "thinking": {"type": "enabled", "budget_tokens": 1024}}


async def test_thinking_signature_and_a_tool_input_split_inside_unicode_escapes_arrive_whole(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*THINKING))
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=2048, messages=HI,
                                              **thinking_request()) as s:
        events = [e async for e in s]
        final = await s.get_final_message()
    assert [e.signature for e in events if e.type == "signature"] == [SIGNATURE]
    assert "".join(e.partial_json for e in events if e.type == "input_json") == \
        '{"path": "caf\\u00e9 \\ud83d\\ude00.txt"}'
    assert [b.model_dump(exclude_none=True) for b in final.content] == [
        {"type": "thinking", "thinking": "Let me look at a.txt — über-carefully.",
         "signature": SIGNATURE},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_up2", "name": "read_file",
         "input": {"path": "café 😀.txt"}}]
    assert final.stop_reason == "tool_use" and final.usage.output_tokens == 91


async def test_a_multibyte_character_cut_between_two_writes_is_not_mangled(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    # The UTF-8 bytes of "ü" and "😀" land in different TCP writes.
    raw.then(stream(*split_every(THINKING, 7)))
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=2048, messages=HI,
                                              **thinking_request()) as s:
        final = await s.get_final_message()
    assert final.content[0].thinking == "Let me look at a.txt — über-carefully."  # type: ignore[union-attr]
    assert final.content[0].signature == SIGNATURE  # type: ignore[union-attr]
    assert final.content[2].input == {"path": "café 😀.txt"}  # type: ignore[union-attr]


async def test_chunked_framing_with_events_split_across_chunks_streams_the_same_message(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(chunked(*split_every(THINKING, 11)))
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=2048, messages=HI,
                                              **thinking_request()) as s:
        final = await s.get_final_message()
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].signature == SIGNATURE  # type: ignore[union-attr]
    assert final.content[2].input == {"path": "café 😀.txt"}  # type: ignore[union-attr]
    assert len(raw.received) == 1


async def test_the_relayed_events_are_the_upstreams_own_event_for_event(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*THINKING))
    response, events = await raw_events(
        f"{gw.root}/v1/messages", {"model": CLAUDE, "max_tokens": 2048, "stream": True,
                                   "messages": HI, **thinking_request()}, A_HEADERS)
    sent = [json.loads(e.split(b"data: ", 1)[1]) for e in THINKING]
    got = [data for _, data in events]
    assert response.status_code == 200
    assert got[1:] == sent[1:]
    assert got[0]["message"]["usage"] == sent[0]["message"]["usage"]
    assert [n for n, _ in events] == [d["type"] for d in got]


async def test_redacted_thinking_streams_through_with_its_data(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(
        a_start(),
        *a_block(0, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"}),
        *a_block(1, {"type": "thinking", "thinking": "", "signature": ""},
                 {"type": "thinking_delta", "thinking": "Visible part."},
                 {"type": "signature_delta", "signature": SIGNATURE}),
        *a_text(2, "Answer."), *a_end("end_turn", 30)))
    final, names, _ = await final_message(gw, **thinking_request())
    assert_messages_order(names)
    assert [b.model_dump(exclude_none=True) for b in final.content] == [
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "thinking", "thinking": "Visible part.", "signature": SIGNATURE},
        {"type": "text", "text": "Answer."}]


WEB_RESULTS = [{"type": "web_search_result", "url": "https://example.com/r2",
                "title": "R2", "encrypted_content": "enc-r2", "page_age": "2 days"}]


async def test_a_web_search_paused_turn_ends_with_pause_turn_and_its_server_tool_usage(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(
        a_start(),
        *a_block(0, {"type": "server_tool_use", "id": "srvtoolu_r2", "name": "web_search",
                     "input": {}},
                 {"type": "input_json_delta", "partial_json": '{"query": '},
                 {"type": "input_json_delta", "partial_json": '"tides"}'}),
        *a_block(1, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_r2",
                     "content": WEB_RESULTS}),
        a_ev({"type": "message_delta", "delta": {"stop_reason": "pause_turn",
                                                 "stop_sequence": None},
              "usage": {"output_tokens": 40, "server_tool_use": {"web_search_requests": 1}}}),
        a_ev({"type": "message_stop"})))
    final, names, _ = await final_message(
        gw, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert_messages_order(names)
    assert final.stop_reason == "pause_turn"
    assert final.content[0].input == {"query": "tides"}
    assert final.content[1].model_dump(exclude_none=True)["content"] == WEB_RESULTS
    assert final.usage.server_tool_use is not None
    assert final.usage.server_tool_use.web_search_requests == 1
    assert len(raw.received) == 1


async def test_citations_deltas_on_a_document_answer_stream_through(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    cite = {"type": "char_location", "cited_text": "The grass is green.", "document_index": 0,
            "document_title": "Facts", "start_char_index": 0, "end_char_index": 19}
    raw.then(stream(
        a_start(),
        *a_block(0, {"type": "text", "text": "", "citations": []},
                 {"type": "citations_delta", "citation": cite},
                 {"type": "text_delta", "text": "the grass is green"}),
        *a_end("end_turn", 9)))
    final, _, _ = await final_message(gw)
    block = final.content[0]
    assert block.text == "the grass is green"
    assert [c.model_dump(exclude_none=True) for c in block.citations] == [cite]


@pytest.mark.parametrize("stop", ["refusal", "model_context_window_exceeded", "max_tokens"])
async def test_a_stop_reason_after_content_is_the_clients_and_nothing_is_resent(
        gw: RunningGateway, raw: FaultyUpstream, stop: str) -> None:
    raw.then(stream(a_start(), *a_text(0, "I started, "), *a_end(stop, 5)))
    final, names, headers = await final_message(gw)
    assert_messages_order(names)
    assert final.content[0].text == "I started, "
    assert final.stop_reason == stop
    assert "x-gateway-recovery" not in headers and len(raw.received) == 1


async def test_usage_with_cache_fields_in_message_delta_is_reported(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(
        a_start({"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 4000,
                 "cache_read_input_tokens": 0}),
        *a_text(0, "ok"),
        a_ev({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                 "stop_sequence": None},
              "usage": {"input_tokens": 12, "output_tokens": 17,
                        "cache_creation_input_tokens": 4000, "cache_read_input_tokens": 0}}),
        a_ev({"type": "message_stop"})))
    final, _, _ = await final_message(gw)
    assert (final.usage.input_tokens, final.usage.output_tokens,
            final.usage.cache_creation_input_tokens) == (12, 17, 4000)


# -- Anthropic: failures before and after the first content --------------------------------------


@pytest.mark.parametrize(("kind", "message"), [
    ("overloaded_error", "Overloaded"),
    ("api_error", "Internal server error"),
    ("rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit"),
])
async def test_an_error_after_message_start_and_pings_is_resent_as_one_stream(
        gw: RunningGateway, raw: FaultyUpstream, kind: str, message: str) -> None:
    raw.then(stream(a_start(), PING, PING, b": comment\n\n", a_error(kind, message)),
             stream(*a_said("Second.")))
    final, names, headers = await final_message(gw)
    assert_messages_order(names)
    assert names.count("message_start") == 1
    assert final.content[0].text == "Second."
    assert headers["x-gateway-recovery"] == "retry" and len(raw.received) == 2


async def test_an_overload_after_thinking_started_ends_in_the_error_event_unretried(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*THINKING[:3], a_error("overloaded_error", "Overloaded")))
    seen: list[str] = []
    async with an(gw) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(model=CLAUDE, max_tokens=2048, messages=HI,
                                         **thinking_request()) as s:
                async for e in s:
                    if e.type == "thinking":
                        seen.append(e.thinking)
    assert seen == ["Let me look "]
    assert "Overloaded" in str(caught.value)
    assert len(raw.received) == 1


async def test_a_hang_up_after_the_last_block_but_before_message_stop_is_an_error_event(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_start(), *a_text(0, "All of it.")))
    _, events = await raw_events(
        f"{gw.root}/v1/messages", {"model": CLAUDE, "max_tokens": 64, "stream": True,
                                   "messages": HI}, A_HEADERS)
    names = [n for n, _ in events]
    assert_messages_order(names)
    assert names[-1] == "error" and "message_stop" not in names
    assert len(raw.received) == 1


async def test_an_overflow_error_event_after_message_start_is_compacted_then_streamed(
        gateway_factory: GatewayFactory, raw: FaultyUpstream) -> None:
    long: Any = []
    for i in range(6):
        long += [{"role": "user", "content": f"task {i}: " + "explain the code " * 30},
                 {"role": "assistant", "content": f"done with task {i}"}]
    long.append({"role": "user", "content": "and now the last step"})
    summary = orjson.dumps({
        "id": "msg_summary", "type": "message", "role": "assistant", "model": CLAUDE,
        "stop_reason": "end_turn", "stop_sequence": None,
        "content": [{"type": "text", "text": "## Task\nSix tasks done."}],
        "usage": {"input_tokens": 600, "output_tokens": 20}})
    raw.then(stream(a_start(), a_error("invalid_request_error",
                                       "prompt is too long: 3100 tokens > 1500 maximum")),
             answer(200, summary, {"Content-Type": "application/json"}),
             stream(*a_said("Last step done.")))
    gw = await gateway_factory(config(raw))
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=64,
                                              messages=long) as s:
        starts = [e async for e in s if e.type == "message_start"]
        final = await s.get_final_message()
        headers = s.response.headers
    assert len(starts) == 1 and final.content[0].text == "Last step done."  # type: ignore[union-attr]
    assert headers["x-gateway-recovery"] == "compact"
    assert raw.received[-1].json()["stream"] is True
    assert len(raw.received[-1].json()["messages"]) < len(long)


def held_then(opening: list[bytes], rest: list[bytes], release: asyncio.Event) -> Any:
    """An upstream that sends its opening events, then nothing until ``release`` is set
    (the client has the opening), then the rest."""
    async def run(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Connection: close\r\n\r\n" + b"".join(opening))
        await w.drain()
        await release.wait()
        w.write(b"".join(rest))
        await w.drain()
    return run


async def test_a_model_silent_until_the_first_byte_deadline_gets_its_message_start_relayed(
        gateway_factory: GatewayFactory, raw: FaultyUpstream) -> None:
    release = asyncio.Event()
    whole = a_said("Thought it over.")
    raw.then(held_then([*whole[:1], PING], whole[1:], release))
    gw = await gateway_factory(config(raw, deadline=2.0, max_transient_retries=0))
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=64,
                                              messages=HI) as s:
        events = s.__aiter__()
        first = await anext(events)
        assert first.type == "message_start"
        release.set()
        rest = [e.type async for e in events]
        final = await s.get_final_message()
    assert final.content[0].text == "Thought it over."  # type: ignore[union-attr]
    assert rest.count("message_start") == 0 and rest[-1] == "message_stop"
    assert len(raw.received) == 1


# -- Responses --------------------------------------------------------------------------------


def r_created(seq: list[int], *kinds: str) -> list[bytes]:
    """The opening events named (``response.created``, ``in_progress``, ``queued``)."""
    status = {"response.queued": "queued"}
    return [r_ev(seq, {"type": k, "response": r_response(status.get(k, "in_progress"), [],
                                                          None)}) for k in kinds]


MSG_DONE = {"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}


def r_message(seq: list[int], index: int, text: str, *pieces: str) -> list[bytes]:
    """A whole message item streamed at ``index`` in ``pieces``."""
    item = {**MSG_DONE, "content": [{"type": "output_text", "text": text, "annotations": []}]}
    at = {"item_id": "msg_up", "output_index": index, "content_index": 0}
    return [
        r_ev(seq, {"type": "response.output_item.added", "output_index": index,
                   "item": {**item, "status": "in_progress", "content": []}}),
        r_ev(seq, {"type": "response.content_part.added", **at,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        *(r_ev(seq, {"type": "response.output_text.delta", **at, "delta": p,
                     "logprobs": []}) for p in pieces or (text,)),
        r_ev(seq, {"type": "response.output_text.done", **at, "text": text, "logprobs": []}),
        r_ev(seq, {"type": "response.content_part.done", **at, "part": item["content"][0]}),
        r_ev(seq, {"type": "response.output_item.done", "output_index": index, "item": item})]


def r_said(seq: list[int], text: str, *, opening: tuple[str, ...] = (
        "response.created", "response.in_progress")) -> list[bytes]:
    """A whole text response."""
    item = {**MSG_DONE, "content": [{"type": "output_text", "text": text, "annotations": []}]}
    return [*r_created(seq, *opening), *r_message(seq, 0, text),
            r_ev(seq, {"type": "response.completed",
                       "response": r_response("completed", [item], USAGE_R)})]


async def final_response(gw: RunningGateway, **extra: Any) -> tuple[Any, list[Any], Any]:
    """(final response, events, headers) through ``responses.stream()``."""
    async with oa(gw) as c, c.responses.stream(model=GPT, input="hi", **extra) as s:
        events = [e async for e in s]
        final = await s.get_final_response()
        headers = s._response.headers if hasattr(s, "_response") else {}
    return final, events, headers


async def r_events(gw: RunningGateway) -> list[Any]:
    """The events of a ``create(stream=True)``."""
    async with oa(gw) as c:
        return [e async for e in await c.responses.create(model=GPT, input="hi",
                                                          stream=True)]


async def test_r_queued_created_and_in_progress_open_one_stream_with_usage(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*r_said([], "Done.", opening=(
        "response.created", "response.queued", "response.in_progress"))))
    final, events, _ = await final_response(gw)
    assert_responses_order(events)
    assert [e.type for e in events][:3] == ["response.created", "response.queued",
                                            "response.in_progress"]
    assert final.output_text == "Done."
    assert final.usage.model_dump(exclude_none=True) == USAGE_R


REASONING = {"type": "reasoning", "id": "rs_r2", "summary": [],
             "encrypted_content": ENCRYPTED}
SUMMARY = [{"type": "summary_text", "text": "**Reading** the file first."}]


def r_reasoning(seq: list[int]) -> list[bytes]:
    where = {"item_id": "rs_r2", "output_index": 0, "summary_index": 0}
    return [
        r_ev(seq, {"type": "response.output_item.added", "output_index": 0,
                   "item": REASONING}),
        r_ev(seq, {"type": "response.reasoning_summary_part.added", **where,
                   "part": {"type": "summary_text", "text": ""}}),
        r_ev(seq, {"type": "response.reasoning_summary_text.delta", **where,
                   "delta": "**Reading** "}),
        r_ev(seq, {"type": "response.reasoning_summary_text.delta", **where,
                   "delta": "the file first."}),
        r_ev(seq, {"type": "response.reasoning_summary_text.done", **where,
                   "text": SUMMARY[0]["text"]}),
        r_ev(seq, {"type": "response.reasoning_summary_part.done", **where,
                   "part": SUMMARY[0]}),
        r_ev(seq, {"type": "response.output_item.done", "output_index": 0,
                   "item": {**REASONING, "summary": SUMMARY}})]


CALL = {"type": "function_call", "id": "fc_r2", "call_id": "call_r2", "name": "read_file",
        "arguments": '{"path": "naïve.txt"}', "status": "completed"}


def r_call(seq: list[int], index: int, *pieces: str) -> list[bytes]:
    at = {"item_id": "fc_r2", "output_index": index}
    return [
        r_ev(seq, {"type": "response.output_item.added", "output_index": index,
                   "item": {**CALL, "arguments": "", "status": "in_progress"}}),
        *(r_ev(seq, {"type": "response.function_call_arguments.delta", **at, "delta": p})
          for p in pieces),
        r_ev(seq, {"type": "response.function_call_arguments.done", **at,
                   "arguments": CALL["arguments"]}),
        r_ev(seq, {"type": "response.output_item.done", "output_index": index, "item": CALL})]


def reasoning_then_call(seq: list[int]) -> list[bytes]:
    done = r_response("completed", [{**REASONING, "summary": SUMMARY}, CALL], USAGE_R)
    return [*r_created(seq, "response.created", "response.in_progress"), *r_reasoning(seq),
            *r_call(seq, 1, '{"path": ', '"na', 'ïve.txt"}'),
            r_ev(seq, {"type": "response.completed", "response": done})]


R_TOOLS: Any = [{"type": "function", "name": "read_file", "description": "read a file",
                 "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                                "required": ["path"]}}]


async def test_r_encrypted_reasoning_summary_and_argument_deltas_reach_the_final_response(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*reasoning_then_call([])))
    final, events, _ = await final_response(gw, tools=R_TOOLS, include=[
        "reasoning.encrypted_content"], reasoning={"summary": "auto"})
    assert_responses_order(events)
    assert "".join(e.delta for e in events
                   if e.type == "response.function_call_arguments.delta") == CALL["arguments"]
    assert final.output[0].model_dump(exclude_none=True) == {**REASONING, "summary": SUMMARY}
    assert final.output[1].model_dump(exclude_none=True) == CALL
    assert final.usage.output_tokens_details.reasoning_tokens == 30


async def test_r_the_relayed_events_are_the_upstreams_own_event_for_event(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    sent_bytes = reasoning_then_call([])
    raw.then(stream(*sent_bytes))
    response, events = await raw_events(
        f"{gw.base_url}/responses", {"model": GPT, "input": "hi", "stream": True,
                                     "tools": R_TOOLS}, R_HEADERS)
    sent = [json.loads(e.split(b"data: ", 1)[1]) for e in sent_bytes]
    assert response.status_code == 200
    assert [data for _, data in events] == sent


async def test_r_chunked_framing_split_mid_event_and_mid_character_streams_the_same(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(chunked(*split_every(reasoning_then_call([]), 13)))
    final, events, _ = await final_response(gw, tools=R_TOOLS)
    assert_responses_order(events)
    assert final.output[0].encrypted_content == ENCRYPTED
    assert final.output[1].arguments == CALL["arguments"]
    assert len(raw.received) == 1


async def test_r_data_only_framing_with_reasoning_keeps_the_encrypted_content(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*map(data_only, reasoning_then_call([]))))
    final, events, _ = await final_response(gw, tools=R_TOOLS)
    assert_responses_order(events)
    assert final.output[0].encrypted_content == ENCRYPTED
    assert final.output[0].summary[0].text == SUMMARY[0]["text"]


async def test_r_custom_tool_input_deltas_stream_through(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    patch = "*** Begin Patch\n*** Update File: a.py\n-x = 1\n+x = 2\n*** End Patch"
    call = {"type": "custom_tool_call", "id": "ctc_r2", "call_id": "call_patch",
            "name": "apply_patch", "input": patch, "status": "completed"}
    at = {"item_id": "ctc_r2", "output_index": 0}
    raw.then(stream(
        *r_created(seq, "response.created", "response.in_progress"),
        r_ev(seq, {"type": "response.output_item.added", "output_index": 0,
                   "item": {**call, "input": "", "status": "in_progress"}}),
        r_ev(seq, {"type": "response.custom_tool_call_input.delta", **at,
                   "delta": patch[:20]}),
        r_ev(seq, {"type": "response.custom_tool_call_input.delta", **at,
                   "delta": patch[20:]}),
        r_ev(seq, {"type": "response.custom_tool_call_input.done", **at, "input": patch}),
        r_ev(seq, {"type": "response.output_item.done", "output_index": 0, "item": call}),
        r_ev(seq, {"type": "response.completed",
                   "response": r_response("completed", [call], USAGE_R)})))
    final, events, _ = await final_response(
        gw, tools=[{"type": "custom", "name": "apply_patch", "description": "patch"}])
    assert_responses_order(events)
    assert "".join(e.delta for e in events
                   if e.type == "response.custom_tool_call_input.delta") == patch
    assert final.output[0].model_dump(exclude_none=True) == call


async def test_r_incomplete_at_max_output_tokens_is_relayed_unretried(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    item = {**MSG_DONE, "status": "incomplete",
            "content": [{"type": "output_text", "text": "Half an ans", "annotations": []}]}
    ended = {**r_response("incomplete", [item], USAGE_R),
             "incomplete_details": {"reason": "max_output_tokens"}}
    raw.then(stream(*r_created(seq, "response.created", "response.in_progress"),
                    *r_message(seq, 0, "Half an ans", "Half ", "an ans")[:4],  # events 2-5 of 8
                    r_ev(seq[:6], {"type": "response.incomplete", "response": ended})))
    events = await r_events(gw)
    assert [e.sequence_number for e in events] == list(range(7))
    assert "error" not in [e.type for e in events]
    last = events[-1]
    assert last.type == "response.incomplete"
    assert last.response.incomplete_details.reason == "max_output_tokens"
    assert last.response.usage.output_tokens == 40
    assert len(raw.received) == 1


async def test_r_context_length_exceeded_as_the_first_event_is_compacted_then_streamed(
        gateway_factory: GatewayFactory, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    failed = {**r_response("failed", [], None), "error": {
        "code": "context_length_exceeded",
        "message": "Your input exceeds the context window of this model. "
                   "Please adjust your input and try again."}}
    # gpt-5 is also served at /chat/completions: the summary is asked there.
    summary = orjson.dumps({
        "id": "chatcmpl-sum", "object": "chat.completion", "created": 0, "model": GPT,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "## Task\nTwelve tasks done."}}],
        "usage": {"prompt_tokens": 600, "completion_tokens": 20, "total_tokens": 620}})
    raw.then(stream(*r_created(seq, "response.created", "response.in_progress"),
                    r_ev(seq, {"type": "response.failed", "response": failed})),
             answer(200, summary, {"Content-Type": "application/json"}),
             stream(*r_said([], "Last step done.")))
    gw = await gateway_factory(config(raw))
    items: Any = []
    for i in range(12):
        items += [{"role": "user", "content": f"task {i}: " + "explain the code " * 80},
                  {"role": "assistant", "content": f"task {i} done"}]
    items.append({"role": "user", "content": "and now the last step"})
    async with oa(gw) as c:
        response = await c.responses.with_raw_response.create(model=GPT, input=items,
                                                              stream=True)
        events = [e async for e in response.parse()]
    assert_responses_order(events)
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Last step done."
    assert response.headers["x-gateway-recovery"] == "compact"
    assert [r.path for r in raw.received] == ["/v1/responses", "/v1/chat/completions",
                                              "/v1/responses"]
    assert raw.received[-1].json()["stream"] is True
    assert len(raw.received[-1].json()["input"]) < len(items)


@pytest.mark.parametrize(("code", "message"), [
    ("rate_limit_exceeded", "Rate limit reached for gpt-5 on tokens per min (TPM)."),
    ("server_error", "The server had an error processing your request."),
])
async def test_r_an_error_event_after_in_progress_is_resent_as_one_stream(
        gw: RunningGateway, raw: FaultyUpstream, code: str, message: str) -> None:
    refused: list[int] = []
    raw.then(stream(*r_created(refused, "response.created", "response.in_progress"),
                    r_ev(refused, {"type": "error", "code": code, "message": message,
                                   "param": None})),
             stream(*r_said([], "Done.")))
    final, events, _ = await final_response(gw)
    assert_responses_order(events)
    assert "error" not in [e.type for e in events]
    assert final.output_text == "Done." and len(raw.received) == 2


async def test_r_failed_with_server_error_as_the_first_event_is_resent(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    refused: list[int] = []
    failed = {**r_response("failed", [], None),
              "error": {"code": "server_error", "message": "The server had an error."}}
    raw.then(stream(*r_created(refused, "response.created"),
                    r_ev(refused, {"type": "response.failed", "response": failed})),
             stream(*r_said([], "Done.")))
    final, events, _ = await final_response(gw)
    assert [e.type for e in events].count("response.created") == 1
    assert final.output_text == "Done." and len(raw.received) == 2


async def test_r_an_error_event_after_argument_deltas_ends_the_stream_unretried(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    raw.then(stream(*r_created(seq, "response.created", "response.in_progress"),
                    *r_call(seq, 0, '{"path": ')[:2],  # events 2-3 of 5
                    r_ev(seq[:4], {"type": "error", "code": "server_error", "param": None,
                               "message": "The server had an error."})))
    events = await r_events(gw)
    types = [e.type for e in events]
    assert "response.function_call_arguments.delta" in types
    assert types[-2:] == ["error", "response.failed"] and "response.completed" not in types
    assert events[-1].response.error.message == "The server had an error."  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len(raw.received) == 1


async def test_r_failed_with_context_length_exceeded_after_content_is_relayed_not_compacted(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    failed = {**r_response("failed", [], None), "error": {
        "code": "context_length_exceeded", "message": "Your input exceeds the context window "
                                                      "of this model."}}
    raw.then(stream(*r_created(seq, "response.created"),
                    *r_message(seq, 0, "Hal", "Hal")[:3],
                    r_ev(seq, {"type": "response.failed", "response": failed})))
    events = await r_events(gw)
    types = [e.type for e in events]
    assert types[-1] == "response.failed" and "response.output_text.delta" in types
    assert events[-1].response.error.code == "context_length_exceeded"
    assert len(raw.received) == 1


async def test_r_sequence_number_gaps_from_the_upstream_do_not_break_the_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    parts = r_said(seq, "Done.")
    gapped = []
    for n, part in enumerate(parts):
        data = json.loads(part.split(b"data: ", 1)[1])
        data["sequence_number"] = n * 3 + 5
        gapped.append(f"event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n")
    raw.then(stream(*gapped))
    final, events, _ = await final_response(gw)
    numbers = [e.sequence_number for e in events]
    assert numbers == sorted(set(numbers))
    assert final.output_text == "Done." and events[-1].type == "response.completed"


async def test_r_keep_alive_comments_and_crlf_lines_are_read_as_the_same_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    parts = r_said([], "Done.")
    crlf = [p.replace(b"\n", b"\r\n") for p in parts]
    raw.then(stream(b": keep-alive\r\n\r\n", crlf[0], b": keep-alive\r\n\r\n", *crlf[1:]))
    final, events, _ = await final_response(gw)
    assert_responses_order(events)
    assert final.output_text == "Done."


async def test_r_a_model_silent_until_the_first_byte_deadline_gets_its_opening_relayed(
        gateway_factory: GatewayFactory, raw: FaultyUpstream) -> None:
    release = asyncio.Event()
    whole = r_said([], "Thought it over.", opening=("response.created",
                                                    "response.in_progress"))
    raw.then(held_then(whole[:2], whole[2:], release))
    gw = await gateway_factory(config(raw, deadline=2.0, max_transient_retries=0))
    async with oa(gw) as c, c.responses.stream(model=GPT, input="hi") as s:
        events = s.__aiter__()
        first = await anext(events)
        assert first.type == "response.created"
        release.set()
        rest = [e async for e in events]
        final = await s.get_final_response()
    assert_responses_order([first, *rest])
    assert final.output_text == "Thought it over."
    assert len(raw.received) == 1


# -- more openings: errors as the very first event, hang-ups inside the held window ------------


async def test_an_overload_as_the_very_first_event_is_resent_as_one_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_ev({"type": "error", "error": {
        "details": None, "type": "overloaded_error", "message": "Overloaded"},
        "request_id": "req_011CVxyz"})), stream(*a_said("Second.")))
    final, names, headers = await final_message(gw)
    assert_messages_order(names)
    assert final.content[0].text == "Second."
    assert headers["x-gateway-recovery"] == "retry" and len(raw.received) == 2


async def test_a_ping_storm_then_a_hang_up_is_resent_as_one_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*[PING] * 5, a_start(), *[PING] * 5), stream(*a_said("Second.")))
    final, names, _ = await final_message(gw)
    assert names.count("message_start") == 1
    assert final.content[0].text == "Second." and len(raw.received) == 2


async def test_an_overload_after_a_relayed_slow_opening_ends_in_the_error_event(
        gateway_factory: GatewayFactory, raw: FaultyUpstream) -> None:
    # The opening went to the client at the deadline: from then on nothing can be resent.
    release = asyncio.Event()
    raw.then(held_then([a_start()], [a_error("overloaded_error", "Overloaded")], release))
    gw = await gateway_factory(config(raw, deadline=2.0, max_transient_retries=0))
    async with an(gw) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(model=CLAUDE, max_tokens=64, messages=HI) as s:
                events = s.__aiter__()
                assert (await anext(events)).type == "message_start"
                release.set()
                async for _ in events:
                    pass
    assert "Overloaded" in str(caught.value)
    assert len(raw.received) == 1


async def test_r_a_hang_up_after_queued_is_resent_as_one_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*r_created([], "response.created", "response.queued")),
             stream(*r_said([], "Done.")))
    final, events, _ = await final_response(gw)
    assert_responses_order(events)
    assert "response.queued" not in [e.type for e in events]
    assert final.output_text == "Done." and len(raw.received) == 2


async def test_r_an_opening_echoing_long_codex_instructions_and_tools_streams_through(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    # response.created and in_progress echo the request: Codex's instructions run long.
    instructions = "You are Codex, a coding agent. " * 8000
    seq: list[int] = []
    opening = {**r_response("in_progress", [], None), "instructions": instructions,
               "tools": R_TOOLS * 40}
    item = {**MSG_DONE}
    raw.then(stream(
        r_ev(seq, {"type": "response.created", "response": opening}),
        r_ev(seq, {"type": "response.in_progress", "response": opening}),
        *r_message(seq, 0, "Done."),
        r_ev(seq, {"type": "response.completed", "response": {
            **r_response("completed", [item], USAGE_R), "instructions": instructions}})))
    final, events, _ = await final_response(gw)
    assert_responses_order(events)
    assert events[0].response.instructions == instructions
    assert final.output_text == "Done."


async def test_r_an_upstream_error_event_after_text_is_followed_by_response_failed(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    raw.then(stream(*r_created(seq, "response.created"), *r_message(seq, 0, "Hal")[:3],
                    r_ev(seq[:4], {"type": "error", "code": "rate_limit_exceeded",
                                   "param": None, "message": "Rate limit reached."})))
    events = await r_events(gw)
    types = [e.type for e in events]
    assert types[-2:] == ["error", "response.failed"], types
    assert events[-2].code == "rate_limit_exceeded"  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len(raw.received) == 1


async def test_an_error_event_split_across_chunks_in_crlf_framing_is_resent_as_one_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    refused = [a_start(), PING, a_error("overloaded_error", "Overloaded")]
    raw.then(chunked(*split_every([p.replace(b"\n", b"\r\n") for p in refused], 9)),
             stream(*a_said("Second.")))
    final, names, _ = await final_message(gw)
    assert names.count("message_start") == 1
    assert final.content[0].text == "Second." and len(raw.received) == 2


async def test_a_hang_up_inside_the_message_start_event_is_resent_as_one_stream(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(PING, a_start()[:40]), stream(*a_said("Second.")))
    final, names, _ = await final_message(gw)
    assert names.count("message_start") == 1
    assert final.content[0].text == "Second." and len(raw.received) == 2


async def test_a_refusal_with_no_content_block_is_the_models_answer_not_retried(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_start(), PING, *a_end("refusal", 0)))
    final, names, _ = await final_message(gw)
    assert_messages_order(names)
    assert final.content == [] and final.stop_reason == "refusal"
    assert len(raw.received) == 1


@pytest.mark.parametrize("framing", ["event lines", "data only"])
async def test_r_a_rate_limit_failed_response_right_after_created_is_resent(
        gw: RunningGateway, raw: FaultyUpstream, framing: str) -> None:
    refused: list[int] = []
    failed = {**r_response("failed", [], None), "error": {
        "code": "rate_limit_exceeded", "message": "Rate limit reached for gpt-5."}}
    opening = [*r_created(refused, "response.created", "response.in_progress"),
               r_ev(refused, {"type": "response.failed", "response": failed})]
    if framing == "data only":
        opening = [data_only(e) for e in opening]
    raw.then(stream(*opening), stream(*r_said([], "Done.")))
    final, events, _ = await final_response(gw)
    assert_responses_order(events)
    assert final.output_text == "Done." and len(raw.received) == 2


async def test_r_a_data_only_error_event_right_after_created_is_resent(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    refused: list[int] = []
    raw.then(stream(*map(data_only, [
        *r_created(refused, "response.created"),
        r_ev(refused, {"type": "error", "code": "server_error", "param": None,
                       "message": "The server had an error."})])),
        stream(*r_said([], "Done.")))
    final, events, _ = await final_response(gw)
    assert "error" not in [e.type for e in events]
    assert final.output_text == "Done." and len(raw.received) == 2


async def test_r_an_incomplete_response_before_any_output_is_relayed_as_the_answer(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    ended = {**r_response("incomplete", [], USAGE_R),
             "incomplete_details": {"reason": "max_output_tokens"}}
    raw.then(stream(*r_created(seq, "response.created", "response.in_progress"),
                    r_ev(seq, {"type": "response.incomplete", "response": ended})))
    events = await r_events(gw)
    assert [e.type for e in events] == ["response.created", "response.in_progress",
                                        "response.incomplete"]
    assert events[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
    assert len(raw.received) == 1


# -- cut short mid-event, and numbered with gaps ---------------------------------------------------


async def test_a_hang_up_in_the_middle_of_an_event_after_text_ends_in_a_clean_error_event(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    cut = a_ev({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": "more"}})[:45]
    raw.then(stream(a_start(), *a_text(0, "Half")[:2], cut))
    seen: list[str] = []
    async with an(gw) as c:
        with pytest.raises(anthropic.APIStatusError):
            async with c.messages.stream(model=CLAUDE, max_tokens=64, messages=HI) as s:
                async for text in s.text_stream:
                    seen.append(text)
    assert seen == ["Half"]
    assert len(raw.received) == 1


async def test_r_a_hang_up_in_the_middle_of_an_event_after_text_ends_with_failed(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    opening = [*r_created(seq, "response.created"), *r_message(seq, 0, "Hal")[:3]]
    raw.then(stream(*opening, r_message(seq, 0, "Hal")[3][:50]))
    events = await r_events(gw)
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_r_a_gapped_stream_cut_short_numbers_its_failure_after_the_last_event(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    gapped = []
    for n, part in enumerate([*r_created([], "response.created"),
                              *r_message([], 0, "Hal")[:3]]):
        data = json.loads(part.split(b"data: ", 1)[1])
        data["sequence_number"] = n * 3 + 5
        gapped.append(f"event: {data['type']}\ndata: ".encode() + orjson.dumps(data) + b"\n\n")
    raw.then(stream(*gapped))
    events = await r_events(gw)
    numbers = [e.sequence_number for e in events]
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert numbers == sorted(set(numbers)), numbers


# -- a whole answer to a stream request (a proxy that ignores "stream": true) ------------------


async def test_a_whole_message_with_redacted_thinking_and_web_search_streams_as_sent(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    cite = {"type": "web_search_result_location", "url": "https://example.com/r2",
            "title": "R2", "encrypted_index": "idx-r2", "cited_text": "high tide at 6"}
    content = [
        {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4a"},
        {"type": "thinking", "thinking": "Search first.", "signature": SIGNATURE},
        {"type": "server_tool_use", "id": "srvtoolu_w", "name": "web_search",
         "input": {"query": "tides"}},
        {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_w",
         "content": WEB_RESULTS},
        {"type": "text", "text": "High tide is at 6.", "citations": [cite]}]
    whole = {"id": "msg_whole", "type": "message", "role": "assistant", "model": CLAUDE,
             "content": content, "stop_reason": "end_turn", "stop_sequence": None,
             "usage": {"input_tokens": 50, "output_tokens": 70,
                       "server_tool_use": {"web_search_requests": 1}}}
    raw.then(answer(200, orjson.dumps(whole), {"Content-Type": "application/json"}))
    final, names, _ = await final_message(
        gw, tools=[{"type": "web_search_20250305", "name": "web_search"}])
    assert_messages_order(names)
    assert [b.model_dump(exclude_none=True) for b in final.content] == content
    assert final.usage.output_tokens == 70
    assert final.usage.server_tool_use.web_search_requests == 1


async def test_r_a_whole_response_with_encrypted_reasoning_and_a_custom_call_streams_as_sent(
        gw: RunningGateway, raw: FaultyUpstream) -> None:
    call = {"type": "custom_tool_call", "id": "ctc_w", "call_id": "call_w",
            "name": "apply_patch", "input": "*** Begin Patch\n*** End Patch",
            "status": "completed"}
    output = [{**REASONING, "summary": SUMMARY}, call]
    raw.then(answer(200, orjson.dumps(r_response("completed", output, USAGE_R)),
                    {"Content-Type": "application/json"}))
    final, events, _ = await final_response(
        gw, tools=[{"type": "custom", "name": "apply_patch", "description": "patch"}])
    assert_responses_order(events)
    assert [o.model_dump(exclude_none=True) for o in final.output] == output
    assert final.usage.model_dump(exclude_none=True) == USAGE_R


async def test_r_a_context_length_error_event_right_after_created_is_compacted_then_streamed(
        gateway_factory: GatewayFactory, raw: FaultyUpstream) -> None:
    refused: list[int] = []
    summary = orjson.dumps({
        "id": "chatcmpl-sum", "object": "chat.completion", "created": 0, "model": GPT,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "## Task\nTwelve tasks done."}}],
        "usage": {"prompt_tokens": 600, "completion_tokens": 20, "total_tokens": 620}})
    raw.then(stream(*r_created(refused, "response.created"),
                    r_ev(refused, {"type": "error", "code": "context_length_exceeded",
                                   "param": "input",
                                   "message": "Your input exceeds the context window of this "
                                              "model. Please adjust your input and try again."})),
             answer(200, summary, {"Content-Type": "application/json"}),
             stream(*r_said([], "Last step done.")))
    gw = await gateway_factory(config(raw))
    items: Any = []
    for i in range(12):
        items += [{"role": "user", "content": f"task {i}: " + "explain the code " * 80},
                  {"role": "assistant", "content": f"task {i} done"}]
    items.append({"role": "user", "content": "and now the last step"})
    async with oa(gw) as c:
        response = await c.responses.with_raw_response.create(model=GPT, input=items,
                                                              stream=True)
        events = [e async for e in response.parse()]
    assert_responses_order(events)
    assert "error" not in [e.type for e in events]
    assert events[-1].response.output_text == "Last step done."  # type: ignore[union-attr]
    assert response.headers["x-gateway-recovery"] == "compact"
    assert len(raw.received[-1].json()["input"]) < len(items)


@pytest.mark.parametrize("streamed", [True, False], ids=["stream", "whole"])
async def test_a_window_full_before_any_output_is_compacted_not_relayed_empty(
        gateway_factory: GatewayFactory, raw: FaultyUpstream, streamed: bool) -> None:
    # Claude's stop_reason model_context_window_exceeded with no content: the window was
    # full before the model said anything. That is an overflow: compacted and answered, not
    # an empty message for the client.
    long: Any = []
    for i in range(6):  # (the model's long answers are what a summary replaces)
        long += [{"role": "user", "content": f"task {i}"},
                 {"role": "assistant", "content": f"done with task {i}: " + "the code " * 300}]
    long.append({"role": "user", "content": "and now the last step"})
    summary = orjson.dumps({
        "id": "msg_summary", "type": "message", "role": "assistant", "model": CLAUDE,
        "stop_reason": "end_turn", "stop_sequence": None,
        "content": [{"type": "text", "text": "## Task\nSix tasks done."}],
        "usage": {"input_tokens": 600, "output_tokens": 20}})
    full = {"id": "msg_full", "type": "message", "role": "assistant", "model": CLAUDE,
            "content": [], "stop_reason": "model_context_window_exceeded",
            "stop_sequence": None, "usage": {"input_tokens": 3100, "output_tokens": 0}}
    said = {**full, "id": "msg_said", "stop_reason": "end_turn",
            "content": [{"type": "text", "text": "Last step done."}]}
    if streamed:
        raw.then(stream(a_start(), *a_end("model_context_window_exceeded", 0)),
                 answer(200, summary, {"Content-Type": "application/json"}),
                 stream(*a_said("Last step done.")))
    else:
        raw.then(answer(200, orjson.dumps(full), {"Content-Type": "application/json"}),
                 answer(200, summary, {"Content-Type": "application/json"}),
                 answer(200, orjson.dumps(said), {"Content-Type": "application/json"}))
    gw = await gateway_factory(config(raw))
    async with an(gw) as c:
        if streamed:
            async with c.messages.stream(model=CLAUDE, max_tokens=64, messages=long) as s:
                final = await s.get_final_message()
                headers = s.response.headers
        else:
            got = await c.messages.with_raw_response.create(model=CLAUDE, max_tokens=64,
                                                            messages=long)
            final, headers = await got.parse(), got.headers
    assert final.content[0].text == "Last step done."  # type: ignore[union-attr]
    assert headers["x-gateway-recovery"] == "compact"
    assert len(raw.received[-1].json()["messages"]) < len(long)
