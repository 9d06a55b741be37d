"""Held-out hardening, second round, from the outside: odd input deep in the agent wires'
fields and at the HTTP level (encodings, hang-ups, methods, query strings), upstreams that
break in new ways, and keys sent in odd places. Bad input gets a clear 4xx in the client's
wire format, a broken upstream a clean 5xx (or the stream's own error event) within the
deadline, and no key ever comes out; the gateway keeps serving after each.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import zlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from yarl import URL

from gateway.providers.sse import BOM as BOM_BYTES
from gateway.providers.sse import LineEnds
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.faulty_upstream import FaultyUpstream, Received, Writer, answer, flood, head
from tests.fakes.raw_http import exchange
from tests.fakes.three_wires import (
    ThreeWires,
    anthropic_events,
    anthropic_whole,
    chat_events,
    chat_whole,
    responses_events,
    responses_whole,
    wire_models,
)
from tests.http import post
from tests.server.test_hardening_heldout import (
    WRONG,
    _paths,
    _with,
    assert_ended_in_error,
    assert_wire_error,
    messages_body,
    responses_body,
)

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"
COUNT_TOKENS = "/v1/messages/count_tokens"

CLIENT_KEY = "sk-client-ROUND2-1a2b3c4d5e"
MASTER_KEY = "sk-master-ROUND2-6f7a8b9c0d"
UPSTREAM_KEY = "sk-upstream-ROUND2-e1f2a3b4c5"
KEYS = (CLIENT_KEY, MASTER_KEY, UPSTREAM_KEY)


def chat_body(model: str = "chat", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def body_for(path: str, model: str | None = None, **extra: Any) -> dict[str, Any]:
    """A small valid body for the wire of ``path`` (its native model unless named)."""
    if path == COUNT_TOKENS:  # (counted by the gateway: a native model's is the upstream's)
        body = messages_body(model or "chat", **extra)
        body.pop("max_tokens")
        return body
    if path == MESSAGES:
        return messages_body(model or "claude", **extra)
    if path == RESPONSES:
        return responses_body(model or "resp", **extra)
    return chat_body(model or "chat", **extra)


def wire_of(path: str) -> str:
    return MESSAGES if path in (MESSAGES, COUNT_TOKENS) else path


def leaked(data: str | bytes) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [k for k in KEYS if k.encode() in raw]


def assert_error_shape(path: str, status: int, body: Any) -> str:
    """An error in the wire's shape (chat: OpenAI's, like Responses)."""
    return assert_wire_error(RESPONSES if path == CHAT else wire_of(path), status, body)


def assert_clean_stream_end(path: str, raw: bytes) -> None:
    """A 200 stream that ends with its wire's terminal event or its error event."""
    last = raw.rstrip(b"\r\n").rsplit(b"\n\n", 1)[-1]
    if path == CHAT:  # (an error event is followed by [DONE] too)
        assert last.endswith(b"data: [DONE]") or b'"error"' in last, raw[-400:]
    elif path == MESSAGES:
        assert last.startswith((b"event: message_stop", b"event: error")), raw[-400:]
    else:
        assert last.startswith((b"event: response.completed", b"event: response.failed",
                                b"event: error", b"event: response.incomplete")), raw[-400:]


@pytest.fixture
async def wires() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, wires: ThreeWires) -> RunningGateway:
    return await gateway_factory({
        "model_list": wire_models(wires.base_url),
        "gateway": {"max_body_bytes": 256 * 1024, "header_timeout": 0.5, "body_timeout": 0.5},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 0},
    })


async def still_serves(gw: RunningGateway) -> None:
    """A plain request on each wire is still answered."""
    for path in (CHAT, MESSAGES, RESPONSES):
        reply = await post(gw.root + path, body_for(path))
        assert reply.status == 200, (path, reply.raw[:300])
        assert b"hello there" in reply.raw


def no_crash_logged(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert bad == [], [r.getMessage()[:300] for r in bad]
    assert "Traceback" not in caplog.text


# --- 1. odd input -----------------------------------------------------------------------

# Fields the first round's rich bodies never carried.
EXTRA_MESSAGES: dict[str, Any] = {
    "model": "claude", "max_tokens": 2048, "top_k": 5, "top_p": 0.9, "service_tier": "auto",
    "thinking": {"type": "enabled", "budget_tokens": 1024},
    "tool_choice": {"type": "tool", "name": "read_file", "disable_parallel_tool_use": True},
    "tools": [{"name": "read_file", "description": "read", "cache_control": {"type": "ephemeral"},
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}},
                                "required": ["path"]}}],
    "messages": [
        {"role": "user", "content": [
            {"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                            "data": "notes"}, "title": "notes"},
            {"type": "text", "text": "read a.py"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should read it.", "signature": "c2ln"},
            {"type": "redacted_thinking", "data": "cmVk"},
            {"type": "tool_use", "id": "toolu_9", "name": "read_file",
             "input": {"path": "a.py"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_9", "content": "x = 1",
             "cache_control": {"type": "ephemeral"}}]},
    ],
}
EXTRA_RESPONSES: dict[str, Any] = {
    "model": "resp", "max_output_tokens": 64, "top_p": 0.9, "truncation": "auto",
    "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k1", "user": "u1",
    "max_tool_calls": 3, "service_tier": "auto", "store": False,
    "text": {"format": {"type": "json_schema", "name": "out", "strict": True,
                        "schema": {"type": "object", "properties": {"a": {"type": "string"}},
                                   "required": ["a"], "additionalProperties": False}}},
    "tool_choice": {"type": "function", "name": "read_file"},
    "tools": [{"type": "function", "name": "read_file", "strict": True,
               "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                              "required": ["path"], "additionalProperties": False}}],
    "input": [
        {"type": "message", "role": "developer", "content": "be brief"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "go"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "s"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "read_file",
         "arguments": '{"path":"a.py"}', "status": "completed"},
        {"type": "function_call_output", "call_id": "call_9",
         "output": [{"type": "input_text", "text": "x = 1"}]},
    ],
}


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_wrong_types_in_fields_of_agent_features_are_never_a_500(
    gw: RunningGateway, wires: ThreeWires, path: str, model: str,
) -> None:
    # thinking, documents, redacted thinking, tool_choice by name, strict schemas, reasoning
    # items, output arrays: each value replaced by each wrong type, one at a time.
    base = json.loads(json.dumps(EXTRA_MESSAGES if path == MESSAGES else EXTRA_RESPONSES))
    if model == "chat":
        base["model"] = "chat"
    failures: list[str] = []
    async with aiohttp.ClientSession() as session:
        for where in _paths(base):
            if where == ("model",):
                continue
            for value in WRONG:
                reply = await post(gw.root + path, data=json.dumps(_with(base, where, value))
                                   .encode(), session=session)
                shown = f"{'.'.join(map(str, where))}={value!r}: {reply.status} {reply.raw[:200]!r}"
                if reply.status >= 500 or (reply.status >= 400
                                           and not reply.raw.startswith(b"{")):
                    failures.append(shown)
                elif reply.status >= 400:
                    try:
                        assert_wire_error(path, reply.status, reply.json)
                    except AssertionError:
                        failures.append(shown)
    assert failures == [], "\n".join(failures[:40])


CHAT_ODD: dict[str, Any] = {
    "max_tokens_float": {"max_tokens": 16.5},
    "max_tokens_negative": {"max_tokens": -1},
    "max_tokens_2_64": {"max_tokens": 2**64},
    "max_tokens_exponent": {"max_tokens": 1e3},
    "max_completion_tokens_string": {"max_completion_tokens": "16"},
    "temperature_string": {"temperature": "0.5"},
    "seed_beyond_int64": {"seed": 2**64 + 1},
    "n_string": {"n": "2"},
    "stream_options_string": {"stream": True, "stream_options": "yes"},
    "stream_options_usage_string": {"stream": True, "stream_options": {"include_usage": "yes"}},
    "logit_bias_string": {"logit_bias": {"50256": "x"}},
    "response_format_string": {"response_format": "json"},
    "tool_choice_no_function": {"tool_choice": {"type": "function"}},
    "tool_name_number": {"tools": [{"type": "function", "function": {"name": 5}}]},
    "tool_parameters_list": {"tools": [{"type": "function",
                                        "function": {"name": "f", "parameters": []}}]},
    "message_name_number": {"messages": [{"role": "user", "content": "hi", "name": 5}]},
    "tool_call_arguments_list": {"messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": [1]}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "ok"},
        {"role": "user", "content": "go on"}]},
    "metadata_nested": {"metadata": {"a": {"b": [1, {"c": None}]}}},
    "stop_number": {"stop": 7},
    "user_object": {"user": {"id": 1}},
}


@pytest.mark.parametrize("case", sorted(CHAT_ODD))
async def test_odd_values_on_the_chat_wire_are_served_or_refused_in_its_shape(
    gw: RunningGateway, wires: ThreeWires, case: str,
) -> None:
    body = {**chat_body(), **CHAT_ODD[case]}
    reply = await post(gw.root + CHAT, data=json.dumps(body).encode())
    assert reply.status == 200 or 400 <= reply.status < 500, (reply.status, reply.raw[:300])
    if reply.status != 200:
        assert_error_shape(CHAT, reply.status, reply.json)
    elif body.get("stream"):
        assert_clean_stream_end(CHAT, reply.raw)
    await still_serves(gw)


# The same number forms on the agent wires' output budget (both models).
BUDGETS: list[Any] = [16.0, 1e3, 16.5, -5, 0, 2**63, 2**64, "16", True, 1e308]


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_odd_output_budgets_are_served_or_refused_in_the_wire_shape(
    gw: RunningGateway, wires: ThreeWires, path: str, model: str,
) -> None:
    name = "chat" if model == "chat" else None
    failures = []
    for value in BUDGETS:
        body = body_for(path, name)
        body["max_tokens" if path == MESSAGES else "max_output_tokens"] = value
        reply = await post(gw.root + path, data=json.dumps(body).encode())
        if reply.status == 200:
            continue
        try:
            assert 400 <= reply.status < 500
            assert_wire_error(path, reply.status, reply.json)
        except (AssertionError, ValueError):
            failures.append(f"{value!r}: {reply.status} {reply.raw[:200]!r}")
    assert failures == [], failures


SURROGATES = {
    # (Messages, Responses, Chat) raw bodies with a lone surrogate outside message text
    "in_a_metadata_key": (
        '{"model":"claude","max_tokens":16,"metadata":{"\\ud83d":"x"},"messages":'
        '[{"role":"user","content":"hi"}]}',
        '{"model":"resp","metadata":{"\\ud83d":"x"},"input":"hi"}',
        '{"model":"chat","metadata":{"\\ud83d":"x"},"messages":[{"role":"user","content":"hi"}]}'),
    "in_tool_input": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":"hi"},'
        '{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":'
        '{"p":"\\udc00"}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":'
        '"t1","content":"ok"}]}]}',
        '{"model":"resp","input":[{"type":"function_call","call_id":"c1","name":"f",'
        '"arguments":"{\\"p\\":\\"\\udc00\\"}"},{"type":"function_call_output","call_id":"c1",'
        '"output":"ok"}]}',
        '{"model":"chat","messages":[{"role":"user","content":"hi"},{"role":"assistant",'
        '"content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f",'
        '"arguments":"{\\"p\\":\\"\\udc00\\"}"}}]},{"role":"tool","tool_call_id":"c1",'
        '"content":"ok"}]}'),
    "in_a_tool_name": (
        '{"model":"claude","max_tokens":16,"tools":[{"name":"f\\ud800","input_schema":'
        '{"type":"object"}}],"messages":[{"role":"user","content":"hi"}]}',
        '{"model":"resp","tools":[{"type":"function","name":"f\\ud800","parameters":'
        '{"type":"object"}}],"input":"hi"}',
        '{"model":"chat","tools":[{"type":"function","function":{"name":"f\\ud800"}}],'
        '"messages":[{"role":"user","content":"hi"}]}'),
    "reversed_pair_in_system": (
        '{"model":"claude","max_tokens":16,"system":"\\udc00\\ud800","messages":'
        '[{"role":"user","content":"hi"}]}',
        '{"model":"resp","instructions":"\\udc00\\ud800","input":"hi"}',
        '{"model":"chat","messages":[{"role":"system","content":"\\udc00\\ud800"},'
        '{"role":"user","content":"hi"}]}'),
}


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT])
@pytest.mark.parametrize("case", sorted(SURROGATES))
async def test_a_lone_surrogate_outside_message_text_is_a_clear_400_or_served(
    gw: RunningGateway, wires: ThreeWires, path: str, case: str,
) -> None:
    raw = SURROGATES[case][(MESSAGES, RESPONSES, CHAT).index(path)]
    for model in ("native", "chat"):
        data = raw if model == "native" else raw.replace('"claude"', '"chat"').replace(
            '"resp"', '"chat"')
        reply = await post(gw.root + path, data=data.encode())
        assert reply.status in (200, 400), (model, reply.status, reply.raw[:300])
        if reply.status == 400:
            assert_error_shape(path, 400, reply.json)
    await still_serves(gw)


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT])
@pytest.mark.parametrize("order", ["false_then_true", "true_then_false"])
async def test_a_duplicated_stream_key_is_answered_as_the_upstream_was_asked(
    gw: RunningGateway, wires: ThreeWires, path: str, model: str, order: str,
) -> None:
    if path == CHAT and model == "native":
        pytest.skip("the chat wire has one model kind")
    first, second = ("false", "true") if order == "false_then_true" else ("true", "false")
    body = json.dumps(body_for(path, "chat" if model == "chat" else None))
    raw = body[:-1] + f', "stream": {first}, "stream": {second}}}'
    reply = await post(gw.root + path, data=raw.encode())
    assert reply.status in (200, 400), reply.raw[:300]
    if reply.status == 400:
        assert_error_shape(path, 400, reply.json)
        return
    # The reply is whole or streamed, and read the same way as it was asked upstream:
    # never a JSON answer parsed out of an event stream (or the other way round).
    if reply.headers["content-type"].startswith("text/event-stream"):
        assert second == "true"
        assert_clean_stream_end(path, reply.raw)
        assert b"hello" in reply.raw
    else:
        assert second == "false"
        assert b"hello there" in reply.raw


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT])
async def test_an_eight_kilobyte_credential_is_refused_without_echo(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await gateway_factory({"model_list": wire_models(wires.base_url),
                                "gateway": {"api_keys": [CLIENT_KEY]}})
    long_key = CLIENT_KEY + "Z" * 8000
    for headers in ({"Authorization": f"Bearer {long_key}"}, {"x-api-key": long_key},
                    {"Authorization": "Bearer " + "é" * 3000}):
        reply = await post(gw.root + path, body_for(path), headers=headers)
        assert reply.status == 401, (headers.keys(), reply.status, reply.raw[:300])
        assert_error_shape(path, 401, reply.json)
        assert CLIENT_KEY.encode() not in reply.raw and b"ZZZZ" not in reply.raw
        assert CLIENT_KEY not in json.dumps(list(reply.headers.items()))
    assert CLIENT_KEY not in caplog.text and "ZZZZZZZZ" not in caplog.text


def _raw(path: str, head_lines: bytes, data: bytes, *, close: bool = True) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\n".encode()
            + (b"Connection: close\r\n" if close else b"") + head_lines + b"\r\n" + data)


ENCODED: dict[str, Any] = {
    # name: (Content-Encoding, encode(body bytes) -> bytes, statuses allowed)
    # (no brotli decoder installed: "br" is one the gateway cannot read, named as such)
    "brotli": ("br", lambda b: b"\x8b\x03\x80" + b + b"\x03", (200, 400, 415)),
    "deflate": ("deflate", zlib.compress, (200,)),
    "gzip_then_deflate": ("gzip, deflate", lambda b: zlib.compress(gzip.compress(b)), (200, 415)),
    "identity": ("identity", lambda b: b, (200,)),
    "invalid_brotli": ("br", lambda b: b"\x00not brotli at all" + b, (400, 415)),
    "invalid_gzip": ("gzip", lambda b: b"\x1f\x8b\x08\x00garbage" + b, (400,)),
    "truncated_gzip": ("gzip", lambda b: gzip.compress(b)[:-12], (400,)),
    "unknown_coding": ("snappy", lambda b: b, (400, 415)),
    "gzip_bomb": ("gzip", lambda b: gzip.compress(b"{" + b" " * (8 * 1024 * 1024)), (413,)),
}


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, COUNT_TOKENS])
@pytest.mark.parametrize("case", sorted(ENCODED))
async def test_content_encodings_on_the_agent_wires(
    gw: RunningGateway, wires: ThreeWires, path: str, case: str,
) -> None:
    coding, encode, allowed = ENCODED[case]
    data = encode(json.dumps(body_for(path)).encode())
    got = await exchange(gw.root, _raw(path, b"Content-Type: application/json\r\n"
                                       + f"Content-Encoding: {coding}\r\n".encode()
                                       + f"Content-Length: {len(data)}\r\n".encode(), data))
    assert got.status in allowed, (got.status, got.body[:300])
    if got.status == 200:
        assert b"hello there" in got.body or b"input_tokens" in got.body
    else:
        assert_wire_error(wire_of(path), got.status, got.json())
        if got.status == 413 and path != RESPONSES:
            assert got.json()["error"]["type"] == "request_too_large"


HANG_UPS = {
    "short_content_length": lambda data: (
        f"Content-Type: application/json\r\nContent-Length: {len(data) + 5000}\r\n".encode(),
        data),
    "half_a_chunk": lambda data: (
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n",
        b"%x\r\n" % (len(data) + 100) + data),
    "chunk_size_only": lambda data: (
        b"Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n", b"400\r\n"),
    "gzip_cut": lambda data: (
        f"Content-Type: application/json\r\nContent-Encoding: gzip\r\n"
        f"Content-Length: {len(gzip.compress(data))}\r\n".encode(),
        gzip.compress(data)[:20]),
}


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT])
@pytest.mark.parametrize("case", sorted(HANG_UPS))
async def test_a_client_that_hangs_up_mid_upload_leaves_the_gateway_serving(
    gw: RunningGateway, wires: ThreeWires, path: str, case: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    head_lines, part = HANG_UPS[case](json.dumps(body_for(path)).encode())
    url = URL(gw.root)
    for _ in range(3):
        _, writer = await asyncio.open_connection(url.host, url.port)
        writer.write(_raw(path, head_lines, part, close=False))
        await writer.drain()
        writer.close()  # gone before the body is whole
        await writer.wait_closed()
    await still_serves(gw)
    no_crash_logged(caplog)


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_client_gone_mid_agent_stream_hangs_up_upstream_and_is_not_an_error(
    gw: RunningGateway, wires: ThreeWires, path: str, model: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    wires.hold = asyncio.Event()
    body = body_for(path, "chat" if model == "chat" else None, stream=True)
    async with aiohttp.ClientSession() as s:
        response = await s.post(gw.root + path, json=body)
        assert response.status == 200
        await response.content.readany()  # the stream opened and something came
        await asyncio.wait_for(wires.holding.wait(), 10)
        response.close()  # the client goes away mid-stream
    await asyncio.wait_for(wires.hung_up.wait(), 10)  # and so does the gateway, upstream
    wires.hold.set()
    wires.hold = None
    await still_serves(gw)
    no_crash_logged(caplog)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT, COUNT_TOKENS])
async def test_head_and_options_on_post_routes_are_answered_in_the_wire_shape(
    gw: RunningGateway, path: str,
) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.head(gw.root + path) as r:
            assert r.status == 405, r.status
            assert await r.read() == b""
            assert "POST" in r.headers.get("Allow", "POST")
        async with s.options(gw.root + path) as r:  # no Origin: not a CORS preflight
            assert r.status in (200, 204, 405), r.status
            if r.status == 405:
                assert_error_shape(path, 405, await r.json())
        async with s.get(gw.root + path) as r:
            assert r.status == 405
            assert_error_shape(path, 405, await r.json())
    await still_serves(gw)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT])
@pytest.mark.parametrize("query", [
    "?beta=true",  # what Claude Code sends on /v1/messages
    "?%zz=%%&a=%FF%FE&&=&b",
    "?stream=true&model=no-such-model&max_tokens=-1",
    "?" + "q=" + "x" * 6000,
    "?api-version=2024-10-21&api-version=x",
], ids=["beta", "bad_escapes", "shadow_fields", "long", "repeated"])
async def test_a_junk_query_string_never_changes_the_answer(
    gw: RunningGateway, wires: ThreeWires, path: str, query: str,
) -> None:
    reply = await post(gw.root + path + query, body_for(path))
    assert reply.status == 200, reply.raw[:300]
    assert reply.headers["content-type"].startswith("application/json")
    assert b"hello there" in reply.raw


# --- 2. bad upstreams -------------------------------------------------------------------

@pytest.fixture
async def faulty() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


@pytest.fixture
async def fgw(gateway_factory: GatewayFactory, faulty: FaultyUpstream) -> RunningGateway:
    return await gateway_factory({
        "model_list": wire_models(faulty.base_url),
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 0,
                     "deadline": 2.0},
        "gateway": {"timeouts": {"read": 0.5}},
    })


def _model(path: str, model: str) -> str | None:
    return "chat" if model == "chat" or path == CHAT else None


def _upstream_events(path: str, model: str) -> list[bytes]:
    if model == "chat" or path == CHAT:
        return chat_events("up")
    return anthropic_events("up") if path == MESSAGES else responses_events("up")


def _upstream_whole(path: str, model: str) -> dict[str, Any]:
    if model == "chat" or path == CHAT:
        return chat_whole("up")
    return anthropic_whole("up") if path == MESSAGES else responses_whole("up")


WIRE_MODELS = [(CHAT, "chat"), (MESSAGES, "native"), (MESSAGES, "chat"), (RESPONSES, "native"),
               (RESPONSES, "chat")]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_an_upstream_that_never_sends_headers_is_a_504_by_the_deadline(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str, stream: bool,
) -> None:
    never = asyncio.Event()

    async def silent(_: Received, w: Writer) -> None:
        await never.wait()

    faulty.then(silent)
    body = body_for(path, _model(path, model), stream=stream)
    reply = await post(fgw.root + path, body, timeout=30)
    never.set()
    assert reply.status == 504, reply.raw[:300]
    assert_error_shape(path, reply.status, reply.json)


def _crlf(events: list[bytes]) -> bytes:
    return b"".join(e.replace(b"\n", b"\r\n") for e in events)


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
@pytest.mark.parametrize("ending", ["crlf", "cr"])
async def test_an_event_stream_framed_with_cr_line_ends_is_relayed_whole(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str, ending: str,
) -> None:
    # The SSE spec allows CRLF and CR line ends (some proxies on Windows hosts send them).
    events = _upstream_events(path, model)
    data = _crlf(events) if ending == "crlf" else b"".join(e.replace(b"\n", b"\r")
                                                           for e in events)
    faulty.then(answer(200, data, {"Content-Type": "text/event-stream"}))
    reply = await post(fgw.root + path, body_for(path, _model(path, model), stream=True))
    assert reply.status == 200, reply.raw[:300]
    assert_clean_stream_end(path, reply.raw.replace(b"\r\n", b"\n").replace(b"\r", b"\n"))
    text = reply.raw.decode()
    assert "hello" in text and "there" in text, text[-600:]
    assert b"event: error" not in reply.raw and b"response.failed" not in reply.raw


MALFORMED = {
    "not_json": b"data: {not json at all\n\n",
    "data_is_a_list": b"data: [1, 2, 3]\n\n",
    "data_is_a_string": b'data: "just text"\n\n',
    "event_without_data": b"event: content_block_delta\n\n",
    "huge_field_name": b"x" * 5000 + b": y\n\n",
}


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
@pytest.mark.parametrize("case", sorted(MALFORMED))
async def test_a_malformed_event_mid_stream_ends_in_the_wire_shape(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str, case: str,
) -> None:
    events = _upstream_events(path, model)
    faulty.then(answer(200, b"".join([*events[:2], MALFORMED[case], *events[2:]]),
                       {"Content-Type": "text/event-stream"}))
    reply = await post(fgw.root + path, body_for(path, _model(path, model), stream=True))
    assert reply.status != 500, reply.raw[:300]
    if reply.status == 200:
        assert_clean_stream_end(path, reply.raw)
    else:
        assert 500 < reply.status < 600
        assert_error_shape(path, reply.status, reply.json)
    assert b"Traceback" not in reply.raw


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
@pytest.mark.parametrize("case", ["corrupt_gzip", "gzip_cut_short", "corrupt_deflate"])
async def test_an_undecodable_upstream_body_is_a_clean_502(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str, case: str,
) -> None:
    whole = json.dumps(_upstream_whole(path, model)).encode()
    if case == "corrupt_gzip":
        data, coding = b"\x1f\x8b\x08\x00" + b"not gzip" * 20, "gzip"
    elif case == "gzip_cut_short":
        data, coding = gzip.compress(whole)[: len(gzip.compress(whole)) // 2], "gzip"
    else:
        data, coding = b"\x78\x9c" + b"not deflate" * 20, "deflate"
    faulty.then(answer(200, data, {"Content-Type": "application/json",
                                   "Content-Encoding": coding}))
    reply = await post(fgw.root + path, body_for(path, _model(path, model)))
    assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
    assert_error_shape(path, reply.status, reply.json)


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_chunked_upstream_stream_cut_inside_a_chunk_ends_in_the_wire_shape(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str,
) -> None:
    events = _upstream_events(path, model)
    first = b"".join(events[:2])

    async def cut(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        w.write(b"%x\r\n" % len(first) + first + b"\r\n")
        w.write(b"%x\r\n" % 4096 + events[2][:10])  # promises 4 KB, sends 10 bytes, closes
        await w.drain()

    faulty.then(cut)
    reply = await post(fgw.root + path, body_for(path, _model(path, model), stream=True))
    assert_ended_in_error(RESPONSES if path == CHAT else path, reply) if path != CHAT else (
        _assert_chat_stream_failed(reply))


def _assert_chat_stream_failed(reply: Any) -> None:
    assert reply.status != 500
    if reply.status == 200:  # the error event, then [DONE]
        last_two = reply.raw.rstrip(b"\n").rsplit(b"\n\n", 2)[-2:]
        assert last_two[-1] == b"data: [DONE]" and b'"error"' in last_two[0], reply.raw[-400:]
    else:
        assert 500 < reply.status < 600
        assert_error_shape(CHAT, reply.status, reply.json)


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_an_enormous_whole_answer_is_refused_within_bounds(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
) -> None:
    gw = await gateway_factory({
        "model_list": wire_models(faulty.base_url),
        "recovery": {"max_transient_retries": 0, "deadline": 10.0},
        "gateway": {"upstream_limits": {"max_body_bytes": 1024 * 1024}},
    })
    done = asyncio.Event()
    prefix = head(200, {"Content-Type": "application/json"}, length=512 * 1024 * 1024)
    faulty.then(flood(prefix + b'{"id":"x","content":"', b"a" * 1024, done))
    try:
        reply = await post(gw.root + path, body_for(path, _model(path, model)), timeout=30)
    finally:
        done.set()
    assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
    assert_error_shape(path, reply.status, reply.json)
    assert len(reply.raw) < 4096


async def test_an_html_502_reaches_the_sdks_as_their_own_status_error(
    fgw: RunningGateway, faulty: FaultyUpstream,
) -> None:
    html = b"<html><body><h1>502 Bad Gateway</h1><hr>cloudflare</body></html>"
    for _ in range(3):
        faulty.then(answer(502, html, {"Content-Type": "text/html"}))
    async with openai.AsyncOpenAI(base_url=fgw.base_url, api_key="k", max_retries=0) as gpt:
        with pytest.raises(openai.APIStatusError) as chat_err:
            await gpt.chat.completions.create(model="chat",
                                              messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.APIStatusError) as resp_err:
            await gpt.responses.create(model="resp", input="hi")
    async with anthropic.AsyncAnthropic(base_url=fgw.root, api_key="k", max_retries=0) as c:
        with pytest.raises(anthropic.APIStatusError) as msg_err:
            await c.messages.create(model="claude", max_tokens=16,
                                    messages=[{"role": "user", "content": "hi"}])
    for caught in (chat_err.value, resp_err.value, msg_err.value):
        assert caught.status_code >= 500 and caught.status_code != 500, caught
        assert isinstance(caught.body, dict), caught.body
        assert "<html" not in json.dumps(caught.body)
    assert msg_err.value.body["type"] == "error"  # type: ignore[index]


@pytest.mark.parametrize("model", ["native", "chat"])
async def test_a_whole_answer_to_a_streamed_request_reaches_the_sdks_as_a_stream(
    fgw: RunningGateway, faulty: FaultyUpstream, model: str,
) -> None:
    # An upstream that ignores "stream": true and answers one JSON object (a proxy, an
    # older local server): each SDK's stream still yields the answer, tool call included.
    tool = {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a"}}
    whole_anthropic = {**anthropic_whole("up"), "stop_reason": "tool_use"}
    whole_anthropic["content"] = [*whole_anthropic["content"], tool]
    call = {"id": "call_1", "type": "function",
            "function": {"name": "read_file", "arguments": '{"path": "a"}'}}
    whole_chat = chat_whole("up")
    whole_chat["choices"][0]["message"]["tool_calls"] = [call]
    chat_answer = answer(200, json.dumps(whole_chat).encode(),
                         {"Content-Type": "application/json"})
    native = model == "native"
    faulty.then(chat_answer,
                answer(200, json.dumps(whole_anthropic).encode(),
                       {"Content-Type": "application/json"}) if native else chat_answer,
                answer(200, json.dumps(responses_whole("up")).encode(),
                       {"Content-Type": "application/json"}) if native else chat_answer)
    async with openai.AsyncOpenAI(base_url=fgw.base_url, api_key="k", max_retries=0) as gpt:
        stream = await gpt.chat.completions.create(
            model="chat", stream=True, messages=[{"role": "user", "content": "hi"}])
        chunks = [c async for c in stream]
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        calls = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or ()]
        assert text == "hello there", chunks
        assert calls and calls[0].function and calls[0].function.name == "read_file"
        async with anthropic.AsyncAnthropic(base_url=fgw.root, api_key="k",
                                            max_retries=0) as claude, claude.messages.stream(
                model="claude" if native else "chat", max_tokens=16,
                messages=[{"role": "user", "content": "hi"}]) as s:
            message = await s.get_final_message()
        assert [b.type for b in message.content] == ["text", "tool_use"], message
        assert message.content[0].text == "hello there"  # type: ignore[union-attr]
        assert message.content[1].input == {"path": "a"}  # type: ignore[union-attr]
        async with gpt.responses.stream(model="resp" if native else "chat", input="hi") as rs:
            final = await rs.get_final_response()
        assert "hello" in final.output_text


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_an_event_stream_opening_with_a_byte_order_mark_is_relayed(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str,
) -> None:
    # The SSE format strips one leading UTF-8 BOM (servers on some stacks send it).
    data = b"\xef\xbb\xbf" + b"".join(_upstream_events(path, model))
    faulty.then(answer(200, data, {"Content-Type": "text/event-stream"}))
    reply = await post(fgw.root + path, body_for(path, _model(path, model), stream=True))
    assert reply.status == 200, reply.raw[:300]
    assert_clean_stream_end(path, reply.raw)
    assert b"hello" in reply.raw and b"\xef\xbb\xbf" not in reply.raw


@pytest.mark.parametrize("ending", [b"\r", b"\r\n", b"\n"], ids=["cr", "crlf", "lf"])
def test_line_ends_read_the_same_wherever_the_network_cuts_the_stream(ending: bytes) -> None:
    events = b"".join(anthropic_events("up")).replace(b"\n", ending)
    whole = LineEnds()
    stream_ = whole.feed(BOM_BYTES + events) + whole.flush()
    expected = events.replace(b"\r\n", b"\n\0").replace(b"\r", b"\n").replace(b"\0", b"")
    if ending == b"\r\n":
        expected = events  # CRLF is left as it came
    assert stream_ == expected
    for cut in range(len(events) + 3):
        data = BOM_BYTES + events
        reader = LineEnds()
        got = reader.feed(data[:cut]) + reader.feed(data[cut:]) + reader.flush()
        assert got == expected, cut


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_client_that_stops_reading_a_stream_is_hung_up_on(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The client keeps its connection open but reads nothing (a suspended process, a
    # stuck proxy) while the upstream streams on: the gateway stops waiting for it after
    # gateway.timeouts.read and lets the upstream go, instead of holding both forever.
    caplog.set_level(logging.INFO)
    events = _upstream_events(path, model)
    upstream_done, stop = asyncio.Event(), asyncio.Event()
    endless = flood(head(200, {"Content-Type": "text/event-stream"}) + b"".join(events[:2]),
                    events[1] * 8, stop)

    async def streams_until_hung_up(got: Received, w: Writer) -> None:
        try:
            await endless(got, w)
        finally:
            upstream_done.set()

    faulty.then(streams_until_hung_up)
    body = json.dumps(body_for(path, _model(path, model), stream=True)).encode()
    url = URL(fgw.root)
    _, writer = await asyncio.open_connection(url.host, url.port, limit=1024)
    writer.transport.pause_reading()  # type: ignore[attr-defined]  # and never reads
    writer.write(_raw(path, b"Content-Type: application/json\r\n"
                      + f"Content-Length: {len(body)}\r\n".encode(), body, close=False))
    await writer.drain()
    try:
        await asyncio.wait_for(upstream_done.wait(), 60)  # (bound: the test never hangs)
    finally:
        stop.set()
        writer.close()
    assert "read nothing" in caplog.text
    no_crash_logged(caplog)


BIG = "123456789012345678901234567890"  # past 64 bits: a hash or an id sent as a number


# orjson reads an integer past 64 bits as the nearest float; a body the gateway writes back
# out (a model name mapped, a tool declared) gets the client's digits back in that float's
# place (providers/splice.py exact_integers), never 1.2345678901234568e+29.
@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_number_past_64_bits_deep_in_a_valid_body_reaches_the_upstream_exactly(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str,
) -> None:
    name = "chat" if model == "chat" or path == CHAT else ("claude" if path == MESSAGES
                                                            else "resp")
    raw = {
        MESSAGES: '{"model":"%s","max_tokens":16,"messages":[{"role":"user","content":"hi"},'
                  '{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f",'
                  '"input":{"n":' + BIG + '}}]},{"role":"user","content":[{"type":'
                  '"tool_result","tool_use_id":"t1","content":"ok"}]}]}',
        CHAT: '{"model":"%s","messages":[{"role":"user","content":"hi"}],"response_format":'
              '{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"integer",'
              '"maximum":' + BIG + '}}}}',
        RESPONSES: '{"model":"%s","input":"hi","text":{"format":{"type":"json_schema",'
                   '"name":"x","schema":{"type":"integer","maximum":' + BIG + '}}}}',
    }[path] % name
    faulty.then(answer(200, json.dumps(_upstream_whole(path, model)).encode(),
                       {"Content-Type": "application/json"}))
    reply = await post(fgw.root + path, data=raw.encode())
    assert reply.status == 200, reply.raw[:300]
    assert BIG.encode() in faulty.received[0].body  # the digits as sent, not a float


# --- 4. keys in odd places ---------------------------------------------------------------

def keyed(base_url: str) -> list[dict[str, Any]]:
    models = wire_models(base_url)
    for m in models:
        m["litellm_params"]["api_key"] = UPSTREAM_KEY
    return models


async def everything_visible(gw: RunningGateway, caplog: pytest.LogCaptureFixture,
                             replies: list[Any]) -> str:
    """Every channel a key could leak through, as one text: replies (bodies, headers),
    logs, spans, /metrics, /v1/models and the inspector's pages and API."""
    seen = [r.raw.decode("utf-8", "replace") + json.dumps(list(r.headers.items()))
            for r in replies]
    auth = {"Authorization": f"Bearer {MASTER_KEY}"}
    async with aiohttp.ClientSession() as s:
        for where in ("/metrics", "/v1/models", "/ui", "/ui/api/requests"):
            async with s.get(gw.root + where, headers=auth) as r:
                seen.append(await r.text())
        async with s.get(gw.root + "/ui/api/requests", headers=auth) as r:
            listed = await r.json() if r.status == 200 else {}
        for entry in (listed.get("requests") or [])[:20]:
            async with s.get(gw.root + f"/ui/api/requests/{entry['request_id']}",
                             headers=auth) as r:
                seen.append(await r.text())
    spans = gw.spans.get_finished_spans()
    seen.append(json.dumps([{"name": s.name, "attrs": dict(s.attributes or {}),
                             "events": [dict(e.attributes or {}) for e in s.events]}
                            for s in spans], default=str))
    seen.append(caplog.text)
    return "\n".join(seen)


async def keyed_gateway(gateway_factory: GatewayFactory, base_url: str) -> RunningGateway:
    return await gateway_factory({
        "model_list": keyed(base_url),
        "general_settings": {"master_key": MASTER_KEY},
        "gateway": {"api_keys": [CLIENT_KEY], "ui": True, "capture_bodies": True},
        "recovery": {"max_transient_retries": 0, "backoff_base": 0.001},
    })


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT, COUNT_TOKENS])
async def test_a_key_in_the_query_string_never_comes_out(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await keyed_gateway(gateway_factory, wires.base_url)
    replies = []
    for query in (f"?key={CLIENT_KEY}", f"?api_key={MASTER_KEY}&x=1",
                  f"?key={CLIENT_KEY}&%zz"):
        for headers in ({"Authorization": f"Bearer {CLIENT_KEY}"}, {}):
            replies.append(await post(gw.root + path + query, body_for(path), headers=headers))
    assert {r.status for r in replies} <= {200, 401}, [r.raw[:200] for r in replies]
    assert 200 in {r.status for r in replies}
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


ODD_HEADERS = [
    {"api-key": CLIENT_KEY},
    {"x-api-key": CLIENT_KEY},
    {"x-goog-api-key": CLIENT_KEY},
    {"Proxy-Authorization": f"Bearer {CLIENT_KEY}"},
    {"Cookie": f"session={CLIENT_KEY}; token={MASTER_KEY}"},
    {"Authorization": f"Basic {CLIENT_KEY}"},
    {"Authorization": f"bearer   {MASTER_KEY}  "},
]


@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
async def test_a_key_in_an_odd_header_never_goes_upstream_or_comes_out(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    replies = []
    for headers in ODD_HEADERS:
        faulty.then(answer(200, json.dumps(_upstream_whole(path, "native")).encode(),
                           {"Content-Type": "application/json"}))
        reply = await post(gw.root + path, body_for(path), headers=headers)
        assert reply.status in (200, 401), (headers, reply.status, reply.raw[:300])
        if reply.status == 401:
            assert_error_shape(path, 401, reply.json)
        replies.append(reply)
    sent = "".join(json.dumps(r.headers) + r.body.decode() for r in faulty.received)
    assert CLIENT_KEY not in sent and MASTER_KEY not in sent
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == []


@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
async def test_a_key_pasted_into_a_body_field_is_never_echoed(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A client puts a key where a value belongs: the refusals that quote the field, the
    # inspector that shows the request, the logs and traces must not repeat it.
    caplog.set_level(logging.DEBUG)
    gw = await keyed_gateway(gateway_factory, wires.base_url)
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    budget = "max_tokens" if path in (MESSAGES, CHAT) else "max_output_tokens"
    bodies = [
        body_for(path, MASTER_KEY),  # the key as the model name (404, "model ... not found")
        {**body_for(path), budget: MASTER_KEY},  # quoted by a type error
        {**body_for(path), "metadata": {"user_id": [MASTER_KEY]}},
        {**body_for(path), "temperature": {"api_key": MASTER_KEY}},
    ]
    replies = []
    for body in bodies:
        reply = await post(gw.root + path, body, headers=auth)
        assert reply.status == 200 or 400 <= reply.status < 500, reply.raw[:300]
        if reply.status != 200:
            assert_error_shape(path, reply.status, reply.json)
        replies.append(reply)
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == [], [s for s in shown.splitlines() if leaked(s)][:5]


@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
async def test_an_upstream_stream_error_quoting_every_key_is_masked(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)

    async def echo(got: Received, w: Writer) -> None:
        # A proxy's error event repeating what it was sent: headers, body, its own key.
        text = f"denied: headers={json.dumps(got.headers)} key={UPSTREAM_KEY}"
        opening = _upstream_events(path, "chat")[0]
        error = json.dumps({"error": {"message": text, "type": "invalid_request_error",
                                      "code": "invalid_api_key", "param": None}}).encode()
        w.write(head(200, {"Content-Type": "text/event-stream"}) + opening
                + b"data: " + error + b"\n\n")
        await w.drain()

    for _ in range(4):
        faulty.then(echo)
    gw = await keyed_gateway(gateway_factory, faulty.base_url)
    replies = [await post(gw.root + path, body_for(path, "chat", stream=True),
                          headers={"Authorization": f"Bearer {MASTER_KEY}",
                                   "x-api-key": CLIENT_KEY})]
    assert replies[0].status != 500
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]


@pytest.mark.parametrize("path", [CHAT, MESSAGES, RESPONSES])
async def test_a_key_sent_as_a_session_or_cache_key_stays_out_of_traces_and_logs(
    gateway_factory: GatewayFactory, wires: ThreeWires, path: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The gateway reads a session from headers and body fields (x-session-id, the
    # Responses prompt_cache_key, Anthropic's metadata.user_id): a client that puts a key
    # there must not see it copied into the request's span, the logs or the inspector.
    caplog.set_level(logging.DEBUG)
    gw = await keyed_gateway(gateway_factory, wires.base_url)
    auth = {"Authorization": f"Bearer {CLIENT_KEY}"}
    replies = [
        await post(gw.root + path, body_for(path), headers={**auth, "x-session-id": CLIENT_KEY}),
        await post(gw.root + path, body_for(path), headers={**auth, "x-session-id": MASTER_KEY}),
    ]
    extra = ({"prompt_cache_key": MASTER_KEY} if path == RESPONSES
             else {"metadata": {"user_id": MASTER_KEY}} if path == MESSAGES
             else {"user": MASTER_KEY})
    replies.append(await post(gw.root + path, {**body_for(path), **extra}, headers=auth))
    assert [r.status for r in replies] == [200, 200, 200], [r.raw[:200] for r in replies]
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == [], [s[:300] for s in shown.splitlines() if leaked(s)][:5]
