"""Held-out: STREAMED agent requests (``/v1/messages`` and ``/v1/responses`` with
``stream: true``, as Claude Code, Codex CLI and the Agents SDK send them) whose histories are
broken, repaired, refused and retried, read through the official SDKs' stream helpers.

Three upstreams: the native fakes (tests/fakes/anthropic_server, responses_server), a raw
socket upstream speaking the native wire byte for byte (thinking with ``signature_delta``,
server tool use, reasoning summaries, failures after the first event), and a chat-only
upstream (the translated path). What is asserted is what the SDK user sees: the assembled
message / response equals what the upstream produced, the SDK's accumulator takes every
event in order, a refused first attempt leaves no event in the client's stream, and a
failure after the first event ends the stream with the wire's own error event, unretried.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest
from agents import Agent, OpenAIResponsesModel, Runner, function_tool, set_tracing_disabled

from tests.conftest import GatewayFactory, RunningGateway, model_entry
from tests.fakes.anthropic_rules import sign_thinking
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.faulty_upstream import FaultyUpstream, answer, stream
from tests.fakes.native_base import Canned, MidStreamError
from tests.fakes.responses_server import REASONING_ALONE, FakeResponses, responses_error
from tests.wires.test_wire_situations import CLAUDE, FN, GPT, fcall, fout, rs, said, u

A_TOOLS: list[Any] = [{"name": "read_file", "description": "read a file",
                       "input_schema": {"type": "object", "properties": {}}}]
CHAT = "m"  # a chat-only upstream: both agent wires are translated
RECOVERY = {"backoff_base": 0.01, "backoff_cap": 0.05}


# -- upstreams and gateways ----------------------------------------------------------------


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(model_bound=True) as server:
        yield server


@pytest.fixture
async def gpt() -> AsyncIterator[FakeResponses]:
    async with FakeResponses() as server:
        yield server


@pytest.fixture
async def raw() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


def natives(responses_base: str, anthropic_base: str) -> dict[str, Any]:
    return {"model_list": [
        {"model_name": GPT, "litellm_params": {"model": f"openai/{GPT}",
                                               "api_base": responses_base, "api_key": "k-up"}},
        {"model_name": CLAUDE, "litellm_params": {"model": f"anthropic/{CLAUDE}",
                                                  "api_base": anthropic_base,
                                                  "api_key": "k-up"}}],
        "recovery": RECOVERY}


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, claude: FakeAnthropic,
             gpt: FakeResponses) -> RunningGateway:
    return await gateway_factory(natives(f"{gpt.base_url}/v1", claude.base_url))


@pytest.fixture
async def gw_raw(gateway_factory: GatewayFactory, raw: FaultyUpstream) -> RunningGateway:
    """Both native wires answered by the raw upstream's scripted bytes; ``m`` is chat-only."""
    config = natives(raw.base_url, f"http://127.0.0.1:{raw.port}")
    config["model_list"].append(model_entry(CHAT, raw.base_url, responses_api=False))
    return await gateway_factory(config)


def an(gw: RunningGateway) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0)


def oa(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0)


# -- raw native events -----------------------------------------------------------------------


def sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


def a_ev(data: dict[str, Any]) -> bytes:
    return sse(str(data["type"]), data)


def a_start(usage: dict[str, Any] | None = None) -> bytes:
    return a_ev({"type": "message_start", "message": {
        "id": "msg_up_1", "type": "message", "role": "assistant", "model": CLAUDE,
        "content": [], "stop_reason": None, "stop_sequence": None,
        "usage": usage or {"input_tokens": 321, "output_tokens": 1,
                           "cache_creation_input_tokens": 0, "cache_read_input_tokens": 200}}})


def a_block(index: int, block: dict[str, Any], *deltas: dict[str, Any]) -> list[bytes]:
    return [a_ev({"type": "content_block_start", "index": index, "content_block": block}),
            *(a_ev({"type": "content_block_delta", "index": index, "delta": d})
              for d in deltas),
            a_ev({"type": "content_block_stop", "index": index})]


def a_end(stop: str, output_tokens: int) -> list[bytes]:
    return [a_ev({"type": "message_delta",
                  "delta": {"stop_reason": stop, "stop_sequence": None},
                  "usage": {"output_tokens": output_tokens}}),
            a_ev({"type": "message_stop"})]


def r_ev(seq: list[int], data: dict[str, Any]) -> bytes:
    data = {**data, "sequence_number": len(seq)}
    seq.append(1)
    return sse(str(data["type"]), data)


def r_response(status: str, output: list[Any], usage: dict[str, Any] | None) -> dict[str, Any]:
    return {"id": "resp_up_1", "object": "response", "created_at": 1700000000,
            "status": status, "model": GPT, "output": output, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
            "usage": usage}


USAGE_R = {"input_tokens": 900, "output_tokens": 40, "total_tokens": 940,
           "input_tokens_details": {"cached_tokens": 512},
           "output_tokens_details": {"reasoning_tokens": 30}}


def chat_ev(delta: dict[str, Any] | None = None, finish: str | None = None,
            usage: dict[str, Any] | None = None) -> bytes:
    data: dict[str, Any] = {"id": "chatcmpl-s", "object": "chat.completion.chunk",
                            "created": 1, "model": "m-upstream",
                            "choices": [] if delta is None and finish is None else [
                                {"index": 0, "delta": delta or {}, "finish_reason": finish}]}
    if usage is not None:
        data["usage"] = usage
    return b"data: " + orjson.dumps(data) + b"\n\n"


DONE = b"data: [DONE]\n\n"
CHAT_USAGE = {"prompt_tokens": 77, "completion_tokens": 9, "total_tokens": 86}


def chat_text(*pieces: str) -> list[bytes]:
    return [chat_ev({"role": "assistant", "content": ""}),
            *(chat_ev({"content": p}) for p in pieces), chat_ev(finish="stop"),
            chat_ev(usage=CHAT_USAGE), DONE]


def chat_refusal(status: int, message: str) -> Any:
    body = orjson.dumps({"error": {"message": message, "type": "invalid_request_error",
                                   "param": None, "code": None}})
    return answer(status, body, {"Content-Type": "application/json"})


async def raw_events(url: str, body: dict[str, Any], headers: dict[str, str],
                     ) -> tuple[httpx.Response, list[tuple[str, dict[str, Any]]]]:
    """The stream's events as sent (name, data), read without any SDK."""
    async with httpx.AsyncClient() as c, c.stream(
            "POST", url, content=orjson.dumps(body),
            headers={**headers, "content-type": "application/json"}) as response:
        text = (await response.aread()).decode()
    events = []
    for block in text.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in lines:
            events.append((lines.get("event", ""), json.loads(lines["data"])))
    return response, events


A_HEADERS = {"x-api-key": "k", "anthropic-version": "2023-06-01"}
R_HEADERS = {"authorization": "Bearer k"}


def assert_messages_order(names: list[str]) -> None:
    """One message_start first, message_stop (or error) last, blocks opened and closed
    one at a time."""
    names = [n for n in names if n != "ping"]
    assert names[0] == "message_start" and names.count("message_start") == 1
    assert names[-1] in ("message_stop", "error")
    depth = 0
    for name in names:
        depth += {"content_block_start": 1, "content_block_stop": -1}.get(name, 0)
        assert depth in (0, 1), names
        if name == "content_block_delta":
            assert depth == 1, names


def assert_responses_order(events: list[Any]) -> None:
    """One response.created first, sequence numbers 0.., every item added before its
    deltas and done after them, in output order."""
    types = [e.type for e in events]
    assert types[0] == "response.created" and types.count("response.created") == 1
    assert [e.sequence_number for e in events] == list(range(len(events)))
    opened: list[int] = []
    done: list[int] = []
    for e in events:
        if e.type == "response.output_item.added":
            assert e.output_index == len(opened)
            opened.append(e.output_index)
        elif e.type == "response.output_item.done":
            done.append(e.output_index)
        elif hasattr(e, "output_index"):
            assert e.output_index in opened and e.output_index not in done, e.type
    assert done == opened


# -- Anthropic Messages, native -----------------------------------------------------------


async def test_a_dangling_tool_use_is_repaired_up_front_and_the_stream_reports_it(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    messages: Any = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "read_file", "input": {}}]},
        {"role": "user", "content": "never mind, say hi"}]
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=64, tools=A_TOOLS,
                                              messages=messages) as s:
        names = [e.type async for e in s if e.type in (
            "message_start", "content_block_start", "content_block_delta",
            "content_block_stop", "message_delta", "message_stop")]
        final = await s.get_final_message()
        headers = s.response.headers
    assert "tool_result_synthesized=1" in headers["x-gateway-repairs"]
    assert_messages_order(names)
    assert final.content[0].type == "text"
    assert final.content[0].text.endswith("| you said: never mind, say hi")
    sent = claude.requests[-1].body
    assert sent["stream"] is True and len(claude.requests) == 1
    assert sent["messages"][2]["content"][0]["type"] == "tool_result"


async def test_a_tool_use_streams_its_input_as_json_deltas(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    async with an(gw) as c, c.messages.stream(
            model=CLAUDE, max_tokens=64, tools=A_TOOLS,
            messages=[{"role": "user", "content": "read TOOL a"}]) as s:
        partial = "".join([e.partial_json async for e in s if e.type == "input_json"])
        final = await s.get_final_message()
    block = final.content[0]
    assert block.type == "tool_use" and block.name == "read_file"
    assert json.loads(partial) == block.input == {"query": "read TOOL a"}
    assert final.stop_reason == "tool_use"


async def test_the_streamed_message_and_its_usage_equal_the_upstreams_own(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    body: Any = {"model": CLAUDE, "max_tokens": 64, "messages": [
        {"role": "user", "content": "what is in a.txt"}],
        "system": [{"type": "text", "text": "be brief " * 40,
                    "cache_control": {"type": "ephemeral"}}]}
    async with anthropic.AsyncAnthropic(base_url=claude.base_url, api_key="k-up",
                                        default_headers={"x-api-key": "k-up"},
                                        max_retries=0) as direct, \
            direct.messages.stream(**body) as s:
        own = await s.get_final_message()
    async with an(gw) as c, c.messages.stream(**body) as s:
        relayed = await s.get_final_message()
    mine, theirs = relayed.model_dump(), own.model_dump()
    assert mine.pop("id") != theirs.pop("id")
    # The same prefix twice: written to the upstream's cache first, read from it then.
    mine["usage"]["cache_creation_input_tokens"] = mine["usage"].pop("cache_read_input_tokens")
    mine["usage"]["cache_read_input_tokens"] = theirs["usage"]["cache_read_input_tokens"]
    assert mine == theirs
    assert relayed.usage.cache_read_input_tokens and relayed.usage.output_tokens == 6


async def test_a_failure_after_the_first_event_ends_with_the_error_event_unretried(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    claude.script(MidStreamError("Overloaded", "overloaded_error"))
    seen: list[str] = []
    async with an(gw) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(
                    model=CLAUDE, max_tokens=64,
                    messages=[{"role": "user", "content": "one two three four five"}]) as s:
                async for text in s.text_stream:
                    seen.append(text)
    assert "Overloaded" in str(caught.value)
    assert seen == ["you said: one "]
    assert len(claude.requests) == 1


async def test_the_raw_failed_stream_has_one_start_and_nothing_after_its_error(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    claude.script(MidStreamError("Overloaded", "overloaded_error"))
    response, events = await raw_events(
        f"{gw.root}/v1/messages", {"model": CLAUDE, "max_tokens": 64, "stream": True,
                                   "messages": [{"role": "user", "content": "a b c d e"}]},
        A_HEADERS)
    assert response.status_code == 200
    names = [n for n, _ in events]
    assert_messages_order(names)
    assert names[-1] == "error" and names.count("error") == 1
    assert events[-1][1]["error"]["type"] == "overloaded_error"


async def test_a_thinking_signature_another_model_made_is_dropped_and_one_stream_seen(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    other = sign_thinking("need a", "claude-opus-4-1")
    messages: Any = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "need a", "signature": other},
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "alpha"}, {"type": "text", "text": "and?"}]}]
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=64, tools=A_TOOLS,
                                              messages=messages) as s:
        names = [e.type async for e in s if e.type in (
            "message_start", "content_block_start", "content_block_delta",
            "content_block_stop", "message_delta", "message_stop")]
        final = await s.get_final_message()
        headers = s.response.headers
    assert_messages_order(names)
    assert final.content[0].text == "tool results: alpha | you said: and?"  # type: ignore[union-attr]
    assert "strict" in headers["x-gateway-recovery"]
    refused, resent = claude.requests[0].body, claude.requests[-1].body
    assert refused["messages"] == messages
    assert "thinking" not in [b["type"] for b in resent["messages"][1]["content"]]


async def test_an_overflow_before_the_stream_is_compacted_and_then_streamed(
        gateway_factory: GatewayFactory) -> None:
    long: Any = []
    for i in range(6):
        long += [{"role": "user", "content": f"task {i}: " + "explain the code " * 30},
                 {"role": "assistant", "content": f"done with task {i}"}]
    long.append({"role": "user", "content": "and now the last step"})
    async with FakeAnthropic(context_window=1500) as fake:
        fake.script(
            anthropic_error(400, "prompt is too long: 3100 tokens > 1500 maximum"),
            Canned(200, {"id": "msg_summary", "type": "message", "role": "assistant",
                         "model": CLAUDE, "stop_reason": "end_turn", "stop_sequence": None,
                         "content": [{"type": "text", "text": "## Task\nSix tasks done."}],
                         "usage": {"input_tokens": 600, "output_tokens": 20}}))
        gw = await gateway_factory({"model_list": [{"model_name": CLAUDE, "litellm_params": {
            "model": f"anthropic/{CLAUDE}", "api_base": fake.base_url, "api_key": "k"},
            "model_info": {"max_input_tokens": 200000}}]})
        async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=64,
                                                  messages=long) as s:
            starts = [e async for e in s if e.type == "message_start"]
            final = await s.get_final_message()
            headers = s.response.headers
    assert len(starts) == 1
    assert final.content[0].text == "you said: and now the last step"  # type: ignore[union-attr]
    assert headers["x-gateway-recovery"] == "compact"
    assert fake.requests[-1].body["stream"] is True


# -- Anthropic Messages, native bytes ------------------------------------------------------

THINKING_STREAM = [
    a_start(),
    *a_block(0, {"type": "thinking", "thinking": "", "signature": ""},
             {"type": "thinking_delta", "thinking": "The user wants "},
             {"type": "thinking_delta", "thinking": "a.txt read."},
             {"type": "signature_delta", "signature": "EqQBCkYIARgCKkD+sig=="}),
    *a_block(1, {"type": "text", "text": ""}, {"type": "text_delta", "text": "Reading it."}),
    *a_block(2, {"type": "tool_use", "id": "toolu_up", "name": "read_file", "input": {}},
             {"type": "input_json_delta", "partial_json": ""},
             {"type": "input_json_delta", "partial_json": '{"path": "a'},
             {"type": "input_json_delta", "partial_json": '.txt"}'}),
    *a_end("tool_use", 57)]


async def test_thinking_with_its_signature_delta_streams_through_as_signed(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*THINKING_STREAM))
    async with an(gw_raw) as c, c.messages.stream(
            model=CLAUDE, max_tokens=2048, tools=A_TOOLS,
            thinking={"type": "enabled", "budget_tokens": 1024},
            messages=[{"role": "user", "content": "read a.txt"}]) as s:
        signatures = [e.signature async for e in s if e.type == "signature"]
        final = await s.get_final_message()
    assert signatures == ["EqQBCkYIARgCKkD+sig=="]
    assert [b.model_dump(exclude_none=True) for b in final.content] == [
        {"type": "thinking", "thinking": "The user wants a.txt read.",
         "signature": "EqQBCkYIARgCKkD+sig=="},
        {"type": "text", "text": "Reading it."},
        {"type": "tool_use", "id": "toolu_up", "name": "read_file",
         "input": {"path": "a.txt"}}]
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens,
            final.usage.cache_read_input_tokens) == (321, 57, 200)


async def test_server_tool_use_and_its_search_results_stream_through(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    results = [{"type": "web_search_result", "url": "https://example.com/w", "title": "W",
                "encrypted_content": "enc-1", "page_age": None}]
    citation = {"type": "web_search_result_location", "url": "https://example.com/w",
                "title": "W", "encrypted_index": "idx-1", "cited_text": "sunny"}
    raw.then(stream(
        a_start(),
        *a_block(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search",
                     "input": {}},
                 {"type": "input_json_delta", "partial_json": '{"query": "weather"}'}),
        *a_block(1, {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1",
                     "content": results}),
        *a_block(2, {"type": "text", "text": "", "citations": []},
                 {"type": "citations_delta", "citation": citation},
                 {"type": "text_delta", "text": "It is sunny."}),
        *a_end("end_turn", 12)))
    async with an(gw_raw) as c, c.messages.stream(
            model=CLAUDE, max_tokens=256, messages=[{"role": "user", "content": "weather?"}],
            tools=[{"type": "web_search_20250305", "name": "web_search"}]) as s:
        final = await s.get_final_message()
    use, found, said_ = final.content
    assert use.type == "server_tool_use" and use.input == {"query": "weather"}
    assert found.type == "web_search_tool_result"
    assert found.model_dump(exclude_none=True)["content"] == [
        {k: v for k, v in r.items() if v is not None} for r in results]
    assert said_.type == "text" and said_.text == "It is sunny."
    assert said_.citations and said_.citations[0].url == "https://example.com/w"  # type: ignore[union-attr]


async def test_an_upstream_that_hangs_up_mid_block_ends_the_stream_with_an_error_event(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_start(), *a_block(0, {"type": "text", "text": ""},
                                        {"type": "text_delta", "text": "Half"})[:2]))
    _, events = await raw_events(
        f"{gw_raw.root}/v1/messages", {"model": CLAUDE, "max_tokens": 64, "stream": True,
                                       "messages": [{"role": "user", "content": "hi"}]},
        A_HEADERS)
    names = [n for n, _ in events]
    assert names[:3] == ["message_start", "content_block_start", "content_block_delta"]
    assert names[-1] == "error" and "message_stop" not in names
    assert events[-1][1]["type"] == "error" and events[-1][1]["error"]["message"]
    assert len(raw.received) == 1


async def test_an_upstream_error_event_is_relayed_once_and_the_sdk_raises_it(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_start(), *a_block(0, {"type": "text", "text": ""},
                                        {"type": "text_delta", "text": "Hal"})[:2],
                    a_ev({"type": "error", "error": {"type": "overloaded_error",
                                                     "message": "Overloaded"}})))
    async with an(gw_raw) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(model=CLAUDE, max_tokens=64,
                                         messages=[{"role": "user", "content": "hi"}]) as s:
                await s.get_final_message()
    assert caught.value.body == {"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}} or "Overloaded" in str(
        caught.value)
    assert len(raw.received) == 1


# -- Anthropic Messages, translated from a chat-only upstream ---------------------------------


async def test_translated_a_repaired_history_streams_with_its_repairs_reported(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*chat_text("hel", "lo")))
    messages: Any = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "read_file", "input": {}}]},
        {"role": "user", "content": "forget it"}]
    async with an(gw_raw) as c, c.messages.stream(model=CHAT, max_tokens=64, tools=A_TOOLS,
                                                  messages=messages) as s:
        final = await s.get_final_message()
        headers = s.response.headers
    assert "tool_result_synthesized=1" in headers["x-gateway-repairs"]
    assert final.content[0].text == "hello"  # type: ignore[union-attr]
    assert (final.usage.input_tokens, final.usage.output_tokens) == (77, 9)
    sent = raw.received[-1].json()
    assert [m["role"] for m in sent["messages"]] == ["user", "assistant", "tool", "user"]
    assert sent["messages"][2]["tool_call_id"] == "toolu_1"


async def test_translated_a_structural_refusal_then_one_clean_strict_stream(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    # Mistral's words on a call id it does not take: the strict rung rewrites the ids.
    raw.then(chat_refusal(400, "Tool call id was toolu_1 but must be a-z, A-Z, 0-9, with a "
                               "length of 9."), stream(*chat_text("fi", "ne")))
    messages: Any = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "read_file", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": "alpha"}, {"type": "text", "text": "ok?"}]}]
    async with an(gw_raw) as c, c.messages.stream(model=CHAT, max_tokens=64, tools=A_TOOLS,
                                                  messages=messages) as s:
        names = [e.type async for e in s if e.type in (
            "message_start", "content_block_start", "content_block_delta",
            "content_block_stop", "message_delta", "message_stop")]
        final = await s.get_final_message()
        headers = s.response.headers
    assert_messages_order(names)
    assert final.content[0].text == "fine"  # type: ignore[union-attr]
    assert "strict" in headers["x-gateway-recovery"]
    assert len(raw.received) == 2
    first, resent = (r.json()["messages"] for r in raw.received)
    assert first[2]["tool_call_id"] == "toolu_1"
    assert resent[2]["tool_call_id"] == resent[1]["tool_calls"][0]["id"] != "toolu_1"


async def test_translated_an_error_chunk_mid_stream_ends_with_the_error_event_unretried(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(chat_ev({"role": "assistant", "content": "Par"}),
                    b'data: {"error": {"message": "upstream overloaded", '
                    b'"type": "server_error", "code": 503}}\n\n'))
    seen: list[str] = []
    async with an(gw_raw) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(model=CHAT, max_tokens=64,
                                         messages=[{"role": "user", "content": "hi"}]) as s:
                async for text in s.text_stream:
                    seen.append(text)
    assert seen == ["Par"]
    assert "upstream overloaded" in str(caught.value)
    assert len(raw.received) == 1


async def test_translated_a_tool_call_streams_input_json_deltas_and_usage(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(
        chat_ev({"role": "assistant", "content": None}),
        chat_ev({"tool_calls": [{"index": 0, "id": "call_q", "type": "function",
                                 "function": {"name": "read_file", "arguments": ""}}]}),
        chat_ev({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
        chat_ev({"tool_calls": [{"index": 0, "function": {"arguments": ' "b.txt"}'}}]}),
        chat_ev(finish="tool_calls"), chat_ev(usage=CHAT_USAGE), DONE))
    async with an(gw_raw) as c, c.messages.stream(
            model=CHAT, max_tokens=64, tools=A_TOOLS,
            messages=[{"role": "user", "content": "read b"}]) as s:
        partial = "".join([e.partial_json async for e in s if e.type == "input_json"])
        final = await s.get_final_message()
    assert json.loads(partial) == {"path": "b.txt"}
    assert final.content[0].model_dump(exclude_none=True) == {
        "type": "tool_use", "id": "call_q", "name": "read_file", "input": {"path": "b.txt"}}
    assert final.stop_reason == "tool_use"
    assert (final.usage.input_tokens, final.usage.output_tokens) == (77, 9)


# -- Responses, native ------------------------------------------------------------------------


async def test_r_a_call_without_output_is_repaired_and_the_stream_reports_it(
        gw: RunningGateway, gpt: FakeResponses) -> None:
    items: Any = [u("read a"), fcall("call_1"), u("never mind")]
    async with oa(gw) as c:
        response = await c.responses.with_raw_response.create(
            model=GPT, input=items, tools=FN, stream=True)  # type: ignore[arg-type]
        events = [e async for e in response.parse()]
    assert "tool_result_synthesized=1" in response.headers["x-gateway-repairs"]
    assert_responses_order(events)
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "you said: never mind"  # type: ignore[union-attr]
    sent = gpt.requests[-1].body
    assert sent["stream"] is True
    assert [i.get("type") for i in sent["input"]][2] == "function_call_output"


async def test_r_function_call_arguments_deltas_come_between_added_and_done(
        gw: RunningGateway, gpt: FakeResponses) -> None:
    async with oa(gw) as c, c.responses.stream(model=GPT, input="read TOOL a",
                                               tools=FN) as s:  # type: ignore[arg-type]
        events = [e async for e in s]
        final = await s.get_final_response()
    assert_responses_order(events)
    types = [e.type for e in events]
    assert types.index("response.output_item.added") < types.index(
        "response.function_call_arguments.delta") < types.index("response.output_item.done")
    deltas = "".join(e.delta for e in events
                     if e.type == "response.function_call_arguments.delta")
    call = final.output[0]
    assert call.type == "function_call" and deltas == call.arguments
    assert json.loads(call.arguments) == {"query": "read TOOL a"}


async def test_r_a_reasoning_answer_streams_items_in_order_with_the_upstreams_usage(
        gw: RunningGateway, gpt: FakeResponses) -> None:
    async with oa(gw) as c, c.responses.stream(model=GPT, input="hello",
                                               reasoning={"effort": "low"}) as s:
        events = [e async for e in s]
        final = await s.get_final_response()
    assert_responses_order(events)
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.output_text == "you said: hello"
    stored = gpt.stored[final.id]
    assert final.output[0].encrypted_content == stored[-2]["encrypted_content"]
    assert final.usage is not None and final.usage.input_tokens > 0
    assert final.usage.output_tokens == 5


async def test_r_a_structural_refusal_then_the_strict_resend_is_the_only_stream(
        gw: RunningGateway, gpt: FakeResponses) -> None:
    gpt.script(responses_error(400, REASONING_ALONE.format(id="rs_1")))
    items: Any = [u("hi"), rs("rs_1"), said("hello"), u("again")]
    async with oa(gw) as c:
        response = await c.responses.with_raw_response.create(
            model=GPT, input=items, stream=True)
        events = [e async for e in response.parse()]
    assert_responses_order(events)
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "you said: again"  # type: ignore[union-attr]
    assert "strict" in response.headers["x-gateway-recovery"]
    assert "reasoning" not in [i.get("type") for i in gpt.requests[-1].body["input"]]
    assert len(gpt.requests) == 2


async def test_r_an_overflow_before_the_stream_is_compacted_then_streamed(
        gateway_factory: GatewayFactory, gpt: FakeResponses) -> None:
    # gpt-5-codex is served at /responses alone: the summary is asked there too.
    gpt.script(responses_error(400, "Your input exceeds the context window of this model. "
                                    "Please adjust your input and try again.",
                               code="context_length_exceeded"),
               Canned(200, {"id": "resp_summary", "object": "response",
                            "created_at": 1700000000, "status": "completed",
                            "model": "gpt-5-codex", "output": [{
                                "type": "message", "id": "msg_summary",
                                "status": "completed", "role": "assistant",
                                "content": [{"type": "output_text", "annotations": [],
                                             "text": "## Task\nSix tasks done."}]}]}))
    gw = await gateway_factory({"model_list": [{"model_name": "codex", "litellm_params": {
        "model": "openai/gpt-5-codex", "api_base": f"{gpt.base_url}/v1", "api_key": "k"},
        "model_info": {"max_input_tokens": 3000}}]})
    items: Any = []
    for i in range(5):
        items += [u(f"task {i}: " + "explain the code " * 40),
                  said(f"task {i}: " + "the code reads " * 40)]
    items.append(u("and now the last step"))
    async with oa(gw) as c:
        response = await c.responses.with_raw_response.create(model="codex", input=items,
                                                              stream=True)
        events = [e async for e in response.parse()]
    assert_responses_order(events)
    assert events[-1].type == "response.completed"
    assert "and now the last step" in events[-1].response.output_text  # type: ignore[union-attr]
    assert response.headers["x-gateway-recovery"] == "compact"
    assert gpt.requests[-1].body["stream"] is True


# -- Responses, native bytes -------------------------------------------------------------------


async def test_r_reasoning_summary_deltas_stream_through_to_the_final_response(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    reasoning = {"type": "reasoning", "id": "rs_up", "summary": [],
                 "encrypted_content": "gAAAA-up"}
    summary = [{"type": "summary_text", "text": "**Plan** read the file."}]
    message = {"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    where = {"item_id": "rs_up", "output_index": 0, "summary_index": 0}
    text_at = {"item_id": "msg_up", "output_index": 1, "content_index": 0}
    done = r_response("completed", [{**reasoning, "summary": summary}, message], USAGE_R)
    raw.then(stream(
        r_ev(seq, {"type": "response.created",
                   "response": r_response("in_progress", [], None)}),
        r_ev(seq, {"type": "response.output_item.added", "output_index": 0,
                   "item": reasoning}),
        r_ev(seq, {"type": "response.reasoning_summary_part.added", **where,
                   "part": {"type": "summary_text", "text": ""}}),
        r_ev(seq, {"type": "response.reasoning_summary_text.delta", **where,
                   "delta": "**Plan** "}),
        r_ev(seq, {"type": "response.reasoning_summary_text.delta", **where,
                   "delta": "read the file."}),
        r_ev(seq, {"type": "response.reasoning_summary_text.done", **where,
                   "text": summary[0]["text"]}),
        r_ev(seq, {"type": "response.reasoning_summary_part.done", **where,
                   "part": summary[0]}),
        r_ev(seq, {"type": "response.output_item.done", "output_index": 0,
                   "item": {**reasoning, "summary": summary}}),
        r_ev(seq, {"type": "response.output_item.added", "output_index": 1,
                   "item": {**message, "status": "in_progress", "content": []}}),
        r_ev(seq, {"type": "response.content_part.added", **text_at,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        r_ev(seq, {"type": "response.output_text.delta", **text_at, "delta": "Done.",
                   "logprobs": []}),
        r_ev(seq, {"type": "response.output_text.done", **text_at, "text": "Done.",
                   "logprobs": []}),
        r_ev(seq, {"type": "response.content_part.done", **text_at,
                   "part": message["content"][0]}),  # type: ignore[index]
        r_ev(seq, {"type": "response.output_item.done", "output_index": 1, "item": message}),
        r_ev(seq, {"type": "response.completed", "response": done})))
    async with oa(gw_raw) as c, c.responses.stream(model=GPT, input="read it",
                                                   reasoning={"summary": "auto"}) as s:
        events = [e async for e in s]
        final = await s.get_final_response()
    assert_responses_order(events)
    assert "".join(e.delta for e in events
                   if e.type == "response.reasoning_summary_text.delta") == summary[0]["text"]
    assert final.output[0].model_dump(exclude_none=True) == {**reasoning, "summary": summary}
    assert final.output_text == "Done."
    assert final.usage is not None and final.usage.model_dump(exclude_none=True) == USAGE_R


async def test_r_a_failure_after_the_first_item_ends_with_response_failed_unretried(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    message = {"type": "message", "id": "msg_up", "role": "assistant",
               "status": "in_progress", "content": []}
    at = {"item_id": "msg_up", "output_index": 0, "content_index": 0}
    failed = {**r_response("failed", [], None),
              "error": {"code": "server_error", "message": "The server had an error."}}
    raw.then(stream(
        r_ev(seq, {"type": "response.created",
                   "response": r_response("in_progress", [], None)}),
        r_ev(seq, {"type": "response.output_item.added", "output_index": 0,
                   "item": message}),
        r_ev(seq, {"type": "response.content_part.added", **at,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        r_ev(seq, {"type": "response.output_text.delta", **at, "delta": "Hal",
                   "logprobs": []}),
        r_ev(seq, {"type": "response.failed", "response": failed})))
    async with oa(gw_raw) as c:
        events = [e async for e in await c.responses.create(model=GPT, input="hi",
                                                            stream=True)]
    types = [e.type for e in events]
    assert types[0] == "response.created" and types.count("response.created") == 1
    assert types[-1] == "response.failed" and "response.completed" not in types
    assert events[-1].response.error.message == "The server had an error."  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len(raw.received) == 1


def r_text_opening(seq: list[int], text: str) -> list[bytes]:
    """response.created, a message item and the first piece of its text."""
    at = {"item_id": "msg_up", "output_index": 0, "content_index": 0}
    return [
        r_ev(seq, {"type": "response.created",
                   "response": r_response("in_progress", [], None)}),
        r_ev(seq, {"type": "response.output_item.added", "output_index": 0,
                   "item": {"type": "message", "id": "msg_up", "role": "assistant",
                            "status": "in_progress", "content": []}}),
        r_ev(seq, {"type": "response.content_part.added", **at,
                   "part": {"type": "output_text", "text": "", "annotations": []}}),
        r_ev(seq, {"type": "response.output_text.delta", **at, "delta": text,
                   "logprobs": []})]


async def test_r_an_upstream_that_hangs_up_mid_text_ends_with_error_and_failed(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*r_text_opening([], "Hal")))
    async with oa(gw_raw) as c:
        events = [e async for e in await c.responses.create(model=GPT, input="hi",
                                                            stream=True)]
    types = [e.type for e in events]
    assert types[0] == "response.created" and types.count("response.created") == 1
    assert "response.output_text.delta" in types
    assert types[-2:] == ["error", "response.failed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len(raw.received) == 1


async def test_r_a_hang_up_right_after_created_is_resent_and_one_stream_seen(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    # Nothing but response.created reached the gateway: it may resend, and the client's
    # stream must then be the second attempt's alone.
    seq: list[int] = []
    opening = r_text_opening(seq, "Done.")
    message = {"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    raw.then(stream(r_ev([], {"type": "response.created",
                              "response": r_response("in_progress", [], None)})),
             stream(*opening,
                    r_ev(seq, {"type": "response.output_item.done", "output_index": 0,
                               "item": message}),
                    r_ev(seq, {"type": "response.completed",
                               "response": r_response("completed", [message], USAGE_R)})))
    async with oa(gw_raw) as c, c.responses.stream(model=GPT, input="hi") as s:
        events = [e async for e in s]
        final = await s.get_final_response()
    types = [e.type for e in events]
    assert types.count("response.created") == 1 and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert final.output_text == "Done."
    assert len(raw.received) in (1, 2)


# -- Responses, translated from a chat-only upstream --------------------------------------------


async def test_translated_r_an_orphan_output_is_dropped_and_the_stream_reports_it(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*chat_text("o", "k")))
    items: Any = [u("hi"), fout("call_gone"), u("go on")]
    async with oa(gw_raw) as c:
        response = await c.responses.with_raw_response.create(
            model=CHAT, input=items, tools=FN, stream=True)  # type: ignore[arg-type]
        events = [e async for e in response.parse()]
    assert "orphan_tool_result_dropped=1" in response.headers["x-gateway-repairs"]
    assert_responses_order(events)
    assert events[-1].response.output_text == "ok"  # type: ignore[union-attr]
    sent = raw.received[-1].json()
    assert "tool" not in [m["role"] for m in sent["messages"]]


async def test_translated_r_a_developer_role_refused_then_one_clean_strict_stream(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(chat_refusal(400, "Invalid value: 'developer'. Supported values are: 'system', "
                               "'assistant', 'user', 'function', and 'tool'."),
             stream(*chat_text("se", "en")))
    items: Any = [{"role": "developer", "content": "be terse"}, u("hi")]
    async with oa(gw_raw) as c:
        response = await c.responses.with_raw_response.create(model=CHAT, input=items,
                                                              stream=True)
        events = [e async for e in response.parse()]
    assert_responses_order(events)
    assert events[-1].response.output_text == "seen"  # type: ignore[union-attr]
    assert "strict" in response.headers["x-gateway-recovery"]
    assert raw.received[-1].json()["messages"][0]["role"] == "system"


async def test_translated_r_an_error_chunk_mid_stream_ends_with_error_and_failed(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(chat_ev({"role": "assistant", "content": "Par"}),
                    b'data: {"error": {"message": "upstream overloaded", '
                    b'"type": "server_error", "code": 503}}\n\n'))
    async with oa(gw_raw) as c:
        events = [e async for e in await c.responses.create(model=CHAT, input="hi",
                                                            stream=True)]
    types = [e.type for e in events]
    assert "response.output_text.delta" in types
    assert types[-2:] == ["error", "response.failed"]
    assert "upstream overloaded" in events[-2].message  # type: ignore[union-attr]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert len(raw.received) == 1


async def test_translated_r_a_tool_call_streams_argument_deltas_and_usage(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(
        chat_ev({"role": "assistant", "content": None}),
        chat_ev({"tool_calls": [{"index": 0, "id": "call_q", "type": "function",
                                 "function": {"name": "read_file", "arguments": ""}}]}),
        chat_ev({"tool_calls": [{"index": 0, "function": {"arguments": '{"path":'}}]}),
        chat_ev({"tool_calls": [{"index": 0, "function": {"arguments": ' "b.txt"}'}}]}),
        chat_ev(finish="tool_calls"), chat_ev(usage=CHAT_USAGE), DONE))
    async with oa(gw_raw) as c, c.responses.stream(model=CHAT, input="read b",
                                                   tools=FN) as s:  # type: ignore[arg-type]
        events = [e async for e in s]
        final = await s.get_final_response()
    assert_responses_order(events)
    deltas = "".join(e.delta for e in events
                     if e.type == "response.function_call_arguments.delta")
    call = final.output[0]
    assert call.type == "function_call" and call.call_id == "call_q"
    assert json.loads(deltas) == json.loads(call.arguments) == {"path": "b.txt"}
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (77, 9)


# -- refusals inside the stream, before its first content ----------------------------------


async def test_an_overloaded_error_right_after_message_start_is_resent_as_one_stream(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_start(), a_ev({"type": "error", "error": {
        "type": "overloaded_error", "message": "Overloaded"}})),
        stream(a_start(), *a_block(0, {"type": "text", "text": ""},
                                   {"type": "text_delta", "text": "Second."}),
               *a_end("end_turn", 2)))
    async with an(gw_raw) as c, c.messages.stream(
            model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        names = [e.type async for e in s if e.type in (
            "message_start", "content_block_start", "content_block_delta",
            "content_block_stop", "message_delta", "message_stop", "error")]
        final = await s.get_final_message()
        headers = s.response.headers
    assert_messages_order(names)
    assert final.content[0].text == "Second."  # type: ignore[union-attr]
    assert headers["x-gateway-recovery"] == "retry" and len(raw.received) == 2


FOREIGN: Any = [
    {"role": "user", "content": "read a"},
    {"role": "assistant", "content": [
        {"type": "thinking", "thinking": "need a", "signature": "sig-from-elsewhere"},
        {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                  "content": "alpha"}]}]


async def test_a_signature_refused_inside_the_stream_is_resent_strict_as_one_stream(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_start(), a_ev({"type": "error", "error": {
        "type": "invalid_request_error",
        "message": "messages.1.content.0: Invalid `signature` in `thinking` block"}})),
        stream(a_start(), *a_block(0, {"type": "text", "text": ""},
                                   {"type": "text_delta", "text": "Alpha it is."}),
               *a_end("end_turn", 4)))
    async with an(gw_raw) as c, c.messages.stream(model=CLAUDE, max_tokens=64,
                                                  tools=A_TOOLS, messages=FOREIGN) as s:
        starts = [e async for e in s if e.type == "message_start"]
        final = await s.get_final_message()
        headers = s.response.headers
    assert len(starts) == 1 and final.content[0].text == "Alpha it is."  # type: ignore[union-attr]
    assert "strict" in headers["x-gateway-recovery"]
    resent = raw.received[1].json()["messages"][1]["content"]
    assert [b["type"] for b in resent] == ["tool_use"]


async def test_a_structural_refusal_inside_the_stream_that_strict_cannot_fix_is_a_clean_400(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    words = ("messages.2.content.0: unexpected `tool_use_id` found in `tool_result` blocks: "
             "toolu_9. Each `tool_result` block must have a corresponding `tool_use` block "
             "in the previous message.")
    raw.then(stream(a_start(), a_ev({"type": "error", "error": {
        "type": "invalid_request_error", "message": words}})))
    async with an(gw_raw) as c:
        with pytest.raises(anthropic.BadRequestError) as caught:
            async with c.messages.stream(
                    model=CLAUDE, max_tokens=64, messages=[
                        {"role": "user", "content": "hi"},
                        {"role": "assistant", "content": "hello"},
                        {"role": "user", "content": "again"}]) as s:
                await s.get_final_message()
    assert caught.value.body["error"]["message"] == words  # type: ignore[index]
    assert caught.value.body["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert len(raw.received) == 1


async def test_r_a_reasoning_refusal_inside_the_stream_is_resent_strict_as_one_stream(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    first: list[int] = []
    seq: list[int] = []
    message = {"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    raw.then(stream(
        r_ev(first, {"type": "response.created",
                     "response": r_response("in_progress", [], None)}),
        r_ev(first, {"type": "response.failed", "response": {
            **r_response("failed", [], None), "error": {
                "code": "invalid_request_error",
                "message": REASONING_ALONE.format(id="rs_1")}}})),
        stream(*r_text_opening(seq, "Done."),
               r_ev(seq, {"type": "response.output_item.done", "output_index": 0,
                          "item": message}),
               r_ev(seq, {"type": "response.completed",
                          "response": r_response("completed", [message], USAGE_R)})))
    items: Any = [u("hi"), rs("rs_1"), said("hello"), u("again")]
    async with oa(gw_raw) as c:
        response = await c.responses.with_raw_response.create(model=GPT, input=items,
                                                              stream=True)
        events = [e async for e in response.parse()]
    assert_responses_order(events)
    assert events[-1].type == "response.completed"
    assert events[-1].response.output_text == "Done."  # type: ignore[union-attr]
    assert "strict" in response.headers["x-gateway-recovery"]
    assert "reasoning" not in [i.get("type") for i in raw.received[1].json()["input"]]


# -- an upstream that answers a streamed request whole ----------------------------------------


async def test_a_whole_native_message_to_a_stream_request_is_streamed_with_its_signature(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    content = [{"type": "thinking", "thinking": "hm", "signature": "sig-w"},
               {"type": "text", "text": "Whole."},
               {"type": "tool_use", "id": "toolu_w", "name": "read_file",
                "input": {"path": "x"}}]
    whole = {"id": "msg_w", "type": "message", "role": "assistant", "model": CLAUDE,
             "content": content, "stop_reason": "tool_use", "stop_sequence": None,
             "usage": {"input_tokens": 10, "output_tokens": 3}}
    raw.then(answer(200, orjson.dumps(whole), {"Content-Type": "application/json"}))
    async with an(gw_raw) as c, c.messages.stream(
            model=CLAUDE, max_tokens=64, tools=A_TOOLS,
            messages=[{"role": "user", "content": "hi"}]) as s:
        signatures = [e.signature async for e in s if e.type == "signature"]
        final = await s.get_final_message()
    assert signatures == ["sig-w"]
    assert final.model_dump(exclude_none=True) == {k: v for k, v in whole.items() if v is not None}


async def test_r_a_whole_native_response_to_a_stream_request_is_streamed_in_order(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    output = [{"type": "message", "id": "msg_w", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Whole.", "annotations": []}]},
              {"type": "function_call", "id": "fc_w", "call_id": "call_w",
               "name": "read_file", "arguments": '{"path": "x"}', "status": "completed"}]
    whole = r_response("completed", output, USAGE_R)
    raw.then(answer(200, orjson.dumps(whole), {"Content-Type": "application/json"}))
    async with oa(gw_raw) as c, c.responses.stream(model=GPT, input="hi") as s:
        events = [e async for e in s]
        final = await s.get_final_response()
    assert_responses_order(events)
    assert [o.model_dump(exclude_none=True) for o in final.output] == output
    assert final.usage is not None and final.usage.model_dump(exclude_none=True) == USAGE_R


# -- reasoning from a chat-only upstream -------------------------------------------------------


THINKING_CHAT = [chat_ev({"role": "assistant", "content": None, "reasoning_content": "Think"}),
                 chat_ev({"reasoning_content": "ing hard."}), *chat_text("An", "swer")[1:]]


async def test_translated_reasoning_content_streams_as_a_thinking_block(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*THINKING_CHAT))
    async with an(gw_raw) as c, c.messages.stream(
            model=CHAT, max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        thinking = "".join([e.thinking async for e in s if e.type == "thinking"])
        final = await s.get_final_message()
    assert thinking == "Thinking hard."
    assert [(b.type, getattr(b, "thinking", None) or getattr(b, "text", None))
            for b in final.content] == [("thinking", "Thinking hard."), ("text", "Answer")]


async def test_translated_r_reasoning_content_streams_as_a_reasoning_item_first(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*THINKING_CHAT))
    async with oa(gw_raw) as c, c.responses.stream(model=CHAT, input="hi") as s:
        events = [e async for e in s]
        final = await s.get_final_response()
    assert_responses_order(events)
    assert "".join(e.delta for e in events
                   if e.type == "response.reasoning_text.delta") == "Thinking hard."
    reasoning, message = final.output
    assert reasoning.type == "reasoning" and message.type == "message"
    assert reasoning.content is not None and reasoning.content[0].text == "Thinking hard."
    assert final.output_text == "Answer"


# -- agent loops, streamed turn after turn -----------------------------------------------------


async def test_a_claude_code_loop_sends_back_unsigned_thinking_a_chat_upstream_made(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    # Turn 1 streams reasoning (an unsigned thinking block) and a tool call from a chat-only
    # upstream; the client sends the assembled content back with the tool's result.
    raw.then(stream(
        chat_ev({"role": "assistant", "content": None, "reasoning_content": "Need b."}),
        chat_ev({"tool_calls": [{"index": 0, "id": "call_q", "type": "function",
                                 "function": {"name": "read_file",
                                              "arguments": '{"path": "b"}'}}]}),
        chat_ev(finish="tool_calls"), DONE), stream(*chat_text("B ", "read.")))
    async with an(gw_raw) as c:
        async with c.messages.stream(model=CHAT, max_tokens=64, tools=A_TOOLS, messages=[
                {"role": "user", "content": "read b"}]) as s:
            first = await s.get_final_message()
        history: Any = [
            {"role": "user", "content": "read b"},
            {"role": "assistant",
             "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_q",
                                          "content": "bbb"}]}]
        async with c.messages.stream(model=CHAT, max_tokens=64, tools=A_TOOLS,
                                     messages=history) as s:
            second = await s.get_final_message()
            headers = s.response.headers
    assert [b.type for b in first.content] == ["thinking", "tool_use"]
    assert second.content[0].text == "B read."  # type: ignore[union-attr]
    assert headers["x-gateway-repairs"] == "thinking_block_dropped=1"
    assert raw.received[-1].json()["messages"][1:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_q", "type": "function",
             "function": {"name": "read_file", "arguments": '{"path":"b"}'}}]},
        {"role": "tool", "tool_call_id": "call_q", "content": "bbb"}]


tool_calls: list[str] = []


@function_tool
def look_up(query: str = "") -> str:
    """Look the query up."""
    tool_calls.append(query)
    return "the file says 42"


def helper(gw: RunningGateway, c: openai.AsyncOpenAI) -> Agent[Any]:
    set_tracing_disabled(True)  # the SDK would export traces to OpenAI otherwise
    return Agent(name="helper", instructions="Use tools when asked.", tools=[look_up],
                 model=OpenAIResponsesModel(model=GPT, openai_client=c))


async def test_an_agents_sdk_streamed_run_loops_through_a_tool(
        gw: RunningGateway, gpt: FakeResponses) -> None:
    tool_calls.clear()
    async with oa(gw) as c:
        run = Runner.run_streamed(helper(gw, c), "read it with the TOOL")
        kinds = [e.data.type async for e in run.stream_events() if e.type == "raw_response_event"]
    assert tool_calls == ["read it with the TOOL"]
    assert run.final_output == "tool results: the file says 42"
    assert kinds.count("response.created") == 2 and kinds.count("response.completed") == 2
    assert "response.function_call_arguments.delta" in kinds
    assert [r.body["stream"] for r in gpt.requests] == [True, True]


async def test_an_agents_sdk_streamed_run_after_an_interrupted_tool_is_repaired(
        gw: RunningGateway, gpt: FakeResponses) -> None:
    # The first run's call without its output (the process died while the tool ran), then
    # the user goes on: the streamed run is answered, the output synthesized.
    tool_calls.clear()
    async with oa(gw) as c:
        first = await Runner.run(helper(gw, c), "read it with the TOOL")
        cut = [i for i in first.to_input_list()
               if not (isinstance(i, dict) and i.get("type") == "function_call_output")]
        cut = cut[:next(n for n, i in enumerate(cut)
                        if isinstance(i, dict) and i.get("type") == "function_call") + 1]
        run = Runner.run_streamed(helper(gw, c), [*cut, {"role": "user", "content": "go on"}])
        async for _ in run.stream_events():
            pass
    assert run.final_output == "you said: go on"
    sent = gpt.requests[-1].body
    assert sent["stream"] is True
    kinds = [i.get("type", "message") for i in sent["input"]]
    assert kinds.count("function_call") == kinds.count("function_call_output") == 1


# -- what a failure after the first content says -----------------------------------------------

# LiteLLM's proxy ends a stream that failed upstream with the status as a string code;
# OpenRouter sends a chunk with both its error and a choice finished with "error".
LITELLM_429 = (b'data: {"error": {"message": "litellm.RateLimitError: rate limited, retry '
               b'in 20s", "type": "None", "param": "None", "code": "429"}}\n\n')
OPENROUTER_ERROR = chat_ev({"content": ""}, finish="error")[:-3] + (
    b', "error": {"code": "server_error", "message": "Provider disconnected"}}\n\n')


async def test_translated_a_rate_limit_after_text_is_a_rate_limit_error_event(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(chat_ev({"role": "assistant", "content": "Par"}), LITELLM_429))
    _, events = await raw_events(
        f"{gw_raw.root}/v1/messages", {"model": CHAT, "max_tokens": 64, "stream": True,
                                       "messages": [{"role": "user", "content": "hi"}]},
        A_HEADERS)
    assert [n for n, _ in events][-1] == "error"
    assert events[-1][1]["error"]["type"] == "rate_limit_error"
    assert "rate limited" in events[-1][1]["error"]["message"]
    assert len(raw.received) == 1


async def test_translated_r_a_rate_limit_after_text_is_rate_limit_exceeded(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(chat_ev({"role": "assistant", "content": "Par"}), LITELLM_429))
    async with oa(gw_raw) as c:
        events = [e async for e in await c.responses.create(model=CHAT, input="hi",
                                                            stream=True)]
    error, failed = events[-2:]
    assert error.type == "error" and error.code == "rate_limit_exceeded"  # type: ignore[union-attr]
    assert failed.type == "response.failed"
    assert failed.response.error is not None  # type: ignore[union-attr]
    assert failed.response.error.code == "rate_limit_exceeded"  # type: ignore[union-attr]


async def test_translated_an_openrouter_error_chunk_keeps_the_text_and_ends_in_error(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(chat_ev({"role": "assistant", "content": "Par"}), OPENROUTER_ERROR))
    seen: list[str] = []
    async with an(gw_raw) as c:
        with pytest.raises(anthropic.APIStatusError) as caught:
            async with c.messages.stream(model=CHAT, max_tokens=64,
                                         messages=[{"role": "user", "content": "hi"}]) as s:
                async for text in s.text_stream:
                    seen.append(text)
    assert seen == ["Par"]
    assert caught.value.body["error"] == {  # type: ignore[index]
        "type": "api_error", "message": "Provider disconnected"}
    assert len(raw.received) == 1


# -- Responses streams sent as data lines only -------------------------------------------------


def data_only(event: bytes) -> bytes:
    """The event without its ``event:`` line (the type is in the data, the SDK reads it)."""
    return event.split(b"\n", 1)[1]


async def test_r_a_data_only_stream_ends_at_its_completed_event(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    seq: list[int] = []
    message = {"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    raw.then(stream(*map(data_only, [
        *r_text_opening(seq, "Done."),
        r_ev(seq, {"type": "response.output_item.done", "output_index": 0, "item": message}),
        r_ev(seq, {"type": "response.completed",
                   "response": r_response("completed", [message], USAGE_R)})])))
    async with oa(gw_raw) as c, c.responses.stream(model=GPT, input="hi") as s:
        events = [e async for e in s]
        final = await s.get_final_response()
    assert [e.type for e in events][-1] == "response.completed"
    assert "error" not in [e.type for e in events]
    assert final.output_text == "Done."


async def test_r_a_data_only_stream_cut_short_fails_with_the_next_sequence_numbers(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(*map(data_only, r_text_opening([], "Hal"))))
    async with oa(gw_raw) as c:
        events = [e async for e in await c.responses.create(model=GPT, input="hi",
                                                            stream=True)]
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))


async def test_r_text_that_mentions_event_lines_leaves_the_sequence_numbers_whole(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    # A coding agent writing an SSE parser: the text itself says "event:" and "data:".
    raw.then(stream(*r_text_opening([], "event: ping\\ndata: {}\\n\\nevent: done")))
    async with oa(gw_raw) as c:
        events = [e async for e in await c.responses.create(model=GPT, input="hi",
                                                            stream=True)]
    assert [e.type for e in events][-2:] == ["error", "response.failed"]
    assert [e.sequence_number for e in events] == list(range(len(events)))


# -- more agent loops ---------------------------------------------------------------------------


async def test_an_up_front_repair_and_a_strict_resend_are_both_on_the_streams_headers(
        gw: RunningGateway, claude: FakeAnthropic) -> None:
    # A dangling tool_use (repaired before sending) and thinking another model signed
    # (refused, dropped by the strict resend): the one stream reports both.
    messages: Any = [
        {"role": "user", "content": "read a"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "need a",
             "signature": sign_thinking("need a", "claude-opus-4-1")},
            {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}}]},
        {"role": "user", "content": "skip it, just say hi"}]
    async with an(gw) as c, c.messages.stream(model=CLAUDE, max_tokens=64, tools=A_TOOLS,
                                              messages=messages) as s:
        starts = [e async for e in s if e.type == "message_start"]
        final = await s.get_final_message()
        headers = s.response.headers
    assert len(starts) == 1
    assert final.content[0].text.endswith("you said: skip it, just say hi")  # type: ignore[union-attr]
    assert "tool_result_synthesized=1" in headers["x-gateway-repairs"]
    assert "strict" in headers["x-gateway-recovery"]
    assert len(claude.requests) == 2


async def test_an_agents_sdk_streamed_run_loops_through_a_tool_on_a_chat_only_model(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    tool_calls.clear()
    raw.then(stream(
        chat_ev({"role": "assistant", "content": None}),
        chat_ev({"tool_calls": [{"index": 0, "id": "call_lk", "type": "function",
                                 "function": {"name": "look_up", "arguments": ""}}]}),
        chat_ev({"tool_calls": [{"index": 0, "function": {"arguments": '{"query": "a"}'}}]}),
        chat_ev(finish="tool_calls"), DONE), stream(*chat_text("It says ", "42.")))
    async with oa(gw_raw) as c:
        agent = Agent(name="helper", instructions="Use tools.", tools=[look_up],
                      model=OpenAIResponsesModel(model=CHAT, openai_client=c))
        set_tracing_disabled(True)
        run = Runner.run_streamed(agent, "what does a say?")
        kinds = [e.data.type async for e in run.stream_events() if e.type == "raw_response_event"]
    assert tool_calls == ["a"]
    assert run.final_output == "It says 42."
    assert kinds.count("response.completed") == 2
    sent = raw.received[-1].json()["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool"]
    assert sent[2]["tool_calls"][0]["id"] == sent[3]["tool_call_id"] == "call_lk"
    assert sent[3]["content"] == "the file says 42"


async def test_a_hang_up_after_message_start_and_ping_is_resent_as_one_stream(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    raw.then(stream(a_start(), a_ev({"type": "ping"})),
             stream(a_start(), *a_block(0, {"type": "text", "text": ""},
                                        {"type": "text_delta", "text": "Second."}),
                    *a_end("end_turn", 2)))
    async with an(gw_raw) as c, c.messages.stream(
            model=CLAUDE, max_tokens=64, messages=[{"role": "user", "content": "hi"}]) as s:
        starts = [e async for e in s if e.type == "message_start"]
        final = await s.get_final_message()
        headers = s.response.headers
    assert len(starts) == 1 and final.content[0].text == "Second."  # type: ignore[union-attr]
    assert headers["x-gateway-recovery"] == "retry" and len(raw.received) == 2


async def test_r_a_bare_server_error_event_after_created_is_resent_as_one_stream(
        gw_raw: RunningGateway, raw: FaultyUpstream) -> None:
    refused: list[int] = []
    seq: list[int] = []
    message = {"type": "message", "id": "msg_up", "role": "assistant", "status": "completed",
               "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}
    raw.then(stream(r_ev(refused, {"type": "response.created",
                                   "response": r_response("in_progress", [], None)}),
                    r_ev(refused, {"type": "error", "code": "server_error", "param": None,
                                   "message": "The server had an error while processing "
                                              "your request."})),
             stream(*r_text_opening(seq, "Done."),
                    r_ev(seq, {"type": "response.output_item.done", "output_index": 0,
                               "item": message}),
                    r_ev(seq, {"type": "response.completed",
                               "response": r_response("completed", [message], USAGE_R)})))
    async with oa(gw_raw) as c, c.responses.stream(model=GPT, input="hi") as s:
        events = [e async for e in s]
        final = await s.get_final_response()
    assert_responses_order(events)
    assert "error" not in [e.type for e in events]
    assert final.output_text == "Done." and len(raw.received) == 2
