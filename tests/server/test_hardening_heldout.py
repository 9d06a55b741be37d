"""Held-out hardening of the agent wires (Responses ``/v1/responses``, Anthropic Messages
``/v1/messages``) and of the chat wire, from the outside: hostile bodies and headers get a
clear 4xx in the client's own wire format; broken upstream answers become a clean 5xx in
that same format, bounded by the deadline; no key of any kind comes out, or goes upstream.
"""

from __future__ import annotations

import asyncio
import functools
import gzip
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web
from yarl import URL

from gateway.config import ConfigError, parse_config
from tests.conftest import GatewayFactory, RunningGateway, free_port, serve_app
from tests.fakes.faulty_upstream import (
    FaultyUpstream,
    Received,
    Writer,
    answer,
    head,
    stream,
    trickle,
)
from tests.fakes.raw_http import RawAnswer, exchange, parse_answer
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

MESSAGES = "/v1/messages"
RESPONSES = "/v1/responses"
CHAT = "/v1/chat/completions"
COUNT_TOKENS = "/v1/messages/count_tokens"

CLIENT_KEY = "sk-client-HELDOUT-5e6f7a8b"
UPSTREAM_KEY = "sk-ant-upstream-HELDOUT-9c0d1e2f"
MASTER_KEY = "sk-master-HELDOUT-3a4b5c6d"
KEYS = (CLIENT_KEY, UPSTREAM_KEY, MASTER_KEY)
UNKNOWN_KEY = "sk-proj-UNKNOWN-HELDOUT-4f5e6d7c"  # configured nowhere


def messages_body(model: str = "claude", **extra: Any) -> dict[str, Any]:
    return {"model": model, "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}], **extra}


def responses_body(model: str = "resp", **extra: Any) -> dict[str, Any]:
    return {"model": model, "input": "hi", **extra}


def assert_wire_error(path: str, status: int, body: Any, *, contains: str = "") -> str:
    """The body is an error in the wire's own shape; its message."""
    assert isinstance(body, dict), body
    if path == MESSAGES:
        assert body.get("type") == "error", body
        err = body["error"]
        assert set(err) >= {"type", "message"}
        kinds = {400: "invalid_request_error", 413: "request_too_large"}
        if status < 500:
            assert err["type"] == kinds.get(status, err["type"]), err
        else:
            assert err["type"] in {"api_error", "overloaded_error", "timeout_error"}, err
    else:
        err = body["error"]
        assert set(err) == {"message", "type", "param", "code"}, err
    message = str(err["message"])
    assert "Traceback" not in message
    assert contains.lower() in message.lower(), message
    return message


def assert_ended_in_error(path: str, reply: Any) -> None:
    """A stream that failed after it opened ended with the wire's error event (or, before
    any byte, a 5xx in the wire's error shape): never a 500, never cut without its end."""
    assert reply.status != 500
    if reply.status == 200:
        last = reply.raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        assert last.startswith(b"event: error") or b"response.failed" in last, reply.raw[-400:]
    else:
        assert 500 < reply.status < 600
        assert_wire_error(path, reply.status, reply.json)


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


async def send(gw: RunningGateway, path: str, data: bytes,
               headers: dict[str, str] | None = None) -> tuple[int, Any]:
    reply = await post(gw.root + path, data=data,
                       headers=headers or {"Content-Type": "application/json"})
    assert reply.status != 500, reply.raw[:400]
    assert reply.headers.get("content-type", "").startswith("application/json"), reply.raw[:200]
    return reply.status, reply.json


# --- hostile bodies on the agent wires --------------------------------------------------

def _deep(n: int) -> str:
    return "[" * n + "]" * n


def _huge_number() -> str:
    return "1" + "0" * 5000


BAD_BODIES: dict[str, tuple[str, str]] = {
    # (raw body for Messages with {m} = model field, the same for Responses)
    "deep_nesting_in_content": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":[{"type":'
        '"text","text":"hi","x":' + _deep(400) + "}]}]}",
        '{"model":"resp","input":[{"role":"user","content":[{"type":"input_text","text":'
        '"hi","x":' + _deep(400) + "}]}]}"),
    "huge_integer_max_tokens": (
        '{"model":"claude","max_tokens":' + _huge_number() + ',"messages":[{"role":"user",'
        '"content":"hi"}]}',
        '{"model":"resp","max_output_tokens":' + _huge_number() + ',"input":"hi"}'),
    "float_overflow_temperature": (
        '{"model":"claude","max_tokens":16,"temperature":1e400,"messages":[{"role":"user",'
        '"content":"hi"}]}',
        '{"model":"resp","temperature":1e400,"input":"hi"}'),
    "nan_literal": (
        '{"model":"claude","max_tokens":16,"temperature":NaN,"messages":[{"role":"user",'
        '"content":"hi"}]}',
        '{"model":"resp","temperature":NaN,"input":"hi"}'),
    "infinity_literal": (
        '{"model":"claude","max_tokens":-Infinity,"messages":[{"role":"user","content":"hi"}]}',
        '{"model":"resp","top_p":Infinity,"input":"hi"}'),
    "trailing_garbage": (
        '{"model":"claude","max_tokens":16,"messages":[]} {"x":1}',
        '{"model":"resp","input":"hi"} trailing'),
    "body_is_array": ('[{"model":"claude"}]', '[{"model":"resp"}]'),
    "body_is_null": ("null", "null"),
    "model_is_object": ('{"model":{"id":"claude"},"max_tokens":16,"messages":[]}',
                        '{"model":["resp"],"input":"hi"}'),
    "messages_or_input_is_number": ('{"model":"claude","max_tokens":16,"messages":7}',
                                    '{"model":"resp","input":7}'),
    "turn_is_string": ('{"model":"claude","max_tokens":16,"messages":["hi"]}',
                       '{"model":"resp","input":["hi"]}'),
    "content_is_number": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":12}]}',
        '{"model":"resp","input":[{"role":"user","content":12}]}'),
    "part_is_string": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":["hi"]}]}',
        '{"model":"resp","input":[{"role":"user","content":["hi"]}]}'),
    "part_type_is_number": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":'
        '[{"type":5,"text":"hi"}]}]}',
        '{"model":"resp","input":[{"role":"user","content":[{"type":5,"text":"hi"}]}]}'),
    "role_is_list": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":["user"],"content":"hi"}]}',
        '{"model":"resp","input":[{"role":["user"],"content":"hi"}]}'),
    "tools_is_object": (
        '{"model":"claude","max_tokens":16,"tools":{"name":"f"},"messages":[{"role":"user",'
        '"content":"hi"}]}',
        '{"model":"resp","tools":{"type":"function"},"input":"hi"}'),
    "stream_is_string": (
        '{"model":"claude","max_tokens":16,"stream":"yes","messages":[{"role":"user",'
        '"content":"hi"}]}',
        '{"model":"resp","stream":"yes","input":"hi"}'),
    "system_or_instructions_is_number": (
        '{"model":"claude","max_tokens":16,"system":42,"messages":[{"role":"user",'
        '"content":"hi"}]}',
        '{"model":"resp","instructions":42,"input":"hi"}'),
    "byte_order_mark": (
        '\ufeff{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}',
        '\ufeff{"model":"resp","input":"hi"}'),
    "model_name_of_10k_chars": (
        '{"model":"' + "m" * 10_000 + '","max_tokens":16,"messages":[{"role":"user",'
        '"content":"hi"}]}',
        '{"model":"' + "r" * 10_000 + '","input":"hi"}'),
}


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, COUNT_TOKENS])
@pytest.mark.parametrize("case", sorted(BAD_BODIES))
async def test_hostile_body_is_a_4xx_in_the_wire_format(gw: RunningGateway, wires: ThreeWires,
                                                        path: str, case: str) -> None:
    raw = BAD_BODIES[case][1 if path == RESPONSES else 0]
    status, body = await send(gw, path, raw.encode())
    if path == COUNT_TOKENS and case == "huge_integer_max_tokens":
        assert status in (200, 400)  # (count_tokens takes no max_tokens: it may ignore it)
        return
    assert 400 <= status < 500, (status, body)
    assert_wire_error(MESSAGES if path == COUNT_TOKENS else path, status, body)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, COUNT_TOKENS])
@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH"])
async def test_another_method_on_an_agent_route_is_a_4xx_in_the_wire_format(
    gw: RunningGateway, path: str, method: str,
) -> None:
    async with aiohttp.ClientSession() as s, s.request(method, gw.root + path,
                                                       json=messages_body()) as r:
        assert 400 <= r.status < 500
        assert r.content_type == "application/json"
        body = await r.json()
    assert_wire_error(RESPONSES if path == RESPONSES else MESSAGES, r.status, body)


ODD_BUT_FORWARDABLE = {
    # (half an emoji is written as U+FFFD and sent: tests/server/test_lone_surrogates.py)
    "lone_surrogate_escape": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":"\\ud800"}]}',
        '{"model":"resp","input":"\\udfff"}'),
    "tool_result_content_is_object": (
        '{"model":"claude","max_tokens":16,"messages":[{"role":"user","content":[{"type":'
        '"tool_result","tool_use_id":"t1","content":{"x":1}}]}]}',
        '{"model":"resp","input":[{"type":"function_call_output","call_id":"c1","output":'
        '{"x":1}}]}'),
}


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("case", sorted(ODD_BUT_FORWARDABLE))
async def test_a_shape_a_native_upstream_judges_is_refused_or_forwarded(
    gw: RunningGateway, wires: ThreeWires, path: str, case: str,
) -> None:
    # Whether the gateway refuses it or leaves it to the native upstream, never a 500.
    raw = ODD_BUT_FORWARDABLE[case][0 if path == MESSAGES else 1]
    status, body = await send(gw, path, raw.encode())
    assert status == 200 or 400 <= status < 500, (status, body)
    if status != 200:
        assert_wire_error(path, status, body)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_non_utf8_bytes_in_a_string_are_a_400(gw: RunningGateway, path: str) -> None:
    raw = (json.dumps(messages_body() if path == MESSAGES else responses_body())
           .replace('"hi"', '"h\xffi"').encode("latin-1"))
    status, body = await send(gw, path, raw)
    assert status == 400
    assert_wire_error(path, status, body, contains="utf-8")


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_duplicate_keys_never_split_what_is_checked_from_what_is_sent(
    gw: RunningGateway, wires: ThreeWires, path: str,
) -> None:
    # One duplicate "model": the gateway must route by the same value the upstream reads
    # (the last one, as every JSON parser in the chain keeps it), or refuse the body.
    native = "claude" if path == MESSAGES else "resp"
    body = (messages_body if path == MESSAGES else responses_body)(native)
    raw = json.dumps(body)
    raw = raw.replace('"model": ', '"model": "no-such-model", "model": ', 1)
    reply = await post(gw.root + path, data=raw.encode())
    assert reply.status in (200, 400), reply.raw[:300]
    if reply.status == 400:
        assert_wire_error(path, reply.status, reply.json)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded",
                                          "multipart/form-data; boundary=x", None])
async def test_a_form_or_text_body_is_a_4xx(gw: RunningGateway, path: str,
                                            content_type: str | None) -> None:
    headers = {"Content-Type": content_type} if content_type else {}
    reply = await post(gw.root + path, data=b"model=claude&max_tokens=16&messages=hi",
                       headers=headers)
    assert 400 <= reply.status < 500
    assert_wire_error(path, reply.status, reply.json)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_empty_body_is_a_400(gw: RunningGateway, path: str) -> None:
    status, body = await send(gw, path, b"")
    assert status == 400
    assert_wire_error(path, status, body, contains="empty")


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_gzipped_agent_request_is_served(gw: RunningGateway, wires: ThreeWires,
                                                 path: str) -> None:
    body = messages_body() if path == MESSAGES else responses_body()
    reply = await post(gw.root + path, data=gzip.compress(json.dumps(body).encode()),
                       headers={"Content-Type": "application/json",
                                "Content-Encoding": "gzip"})
    assert reply.status == 200, reply.raw[:300]
    assert b"hello there" in reply.raw


async def _send_and_stall(gw: RunningGateway, data: bytes) -> RawAnswer:
    url = URL(gw.root)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(data)
        await writer.drain()
        got = await asyncio.wait_for(reader.read(-1), 15)  # the client never finishes
    finally:
        writer.close()
    return parse_answer(got)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_chunked_body_that_stops_is_timed_out_in_the_wire_format(
    gw: RunningGateway, path: str,
) -> None:
    chunk = b'{"model":"claude","messages":['
    data = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Transfer-Encoding: chunked\r\n\r\n").encode() + b"%x\r\n" % len(chunk) + chunk
    got = await _send_and_stall(gw, data + b"\r\n")
    assert got.status == 408
    assert_wire_error(path, got.status, got.json(), contains="body")


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("headers", [
    {"x-session-id": "a\tb"},
    {"x-session-id": ""},
    {"anthropic-beta": "x" * 4000},
    {"Authorization": "Bearer"},
    {"x-api-key": ""},
], ids=["tab_session", "empty_session", "long_beta", "bare_bearer",
        "empty_api_key"])
async def test_odd_headers_never_break_a_request(gw: RunningGateway, wires: ThreeWires,
                                                 path: str, headers: dict[str, str]) -> None:
    body = messages_body() if path == MESSAGES else responses_body()
    reply = await post(gw.root + path, body, headers=headers)
    assert reply.status in (200, 400), reply.raw[:300]
    if reply.status == 400:
        assert_wire_error(path, reply.status, reply.json)
    else:
        assert b"hello there" in reply.raw


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT])
@pytest.mark.parametrize("head", [
    b"Content-Length: 2\r\nContent-Length: 3\r\n",  # two lengths
    b"Bad Header\r\n",  # a line without a colon
    b"X-Long: " + b"a" * 70_000 + b"\r\n",  # a header past the size limit (431)
], ids=["two_lengths", "no_colon", "too_long"])
async def test_an_unparsable_request_is_answered_in_the_wire_of_its_path(
    gw: RunningGateway, path: str, head: bytes,
) -> None:
    data = (b"POST " + path.encode() + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\n" + head + b"\r\n{}")
    got = await exchange(gw.root, data)
    assert got.status in (400, 431), got.body[:300]
    if path == MESSAGES and got.status == 400:
        assert_wire_error(path, got.status, got.json())
    elif path == MESSAGES:
        assert got.json()["type"] == "error"
    else:
        assert set(got.json()["error"]) == {"message", "type", "param", "code"}


async def test_headers_too_slow_on_messages_get_an_anthropic_408(gw: RunningGateway) -> None:
    url = URL(gw.root)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    writer.write(b"POST /v1/messages HTTP/1.1\r\nHost: x\r\n")  # and then nothing
    await writer.drain()
    answer = parse_answer(await asyncio.wait_for(reader.read(), 15))
    writer.close()
    assert answer.status == 408
    assert answer.json()["type"] == "error" and answer.json()["error"]["message"].startswith(
        "request headers not received")


async def test_a_control_or_binary_version_header_is_refused_or_served(
    gw: RunningGateway, wires: ThreeWires,
) -> None:
    raw = json.dumps(messages_body()).encode()
    data = (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nanthropic-version: \x7f\xff\xfe2023\r\n"
            b"anthropic-beta: \xc3\x28,tools\r\n"
            b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
    got = await exchange(gw.root, data)
    assert got.status in (200, 400), got.body[:300]
    if got.status == 400:
        assert_wire_error(MESSAGES, 400, got.json())
    else:
        assert b"hello there" in got.body


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES, CHAT])
@pytest.mark.parametrize("line", [
    b"Authorization: Bearer " + b"sk-client-HELDOUT-5e6f7a8b" + b"\x01",
    b"x-api-key: sk-client-HELDOUT-5e6f7a8b\x7f",
    b"api-key: \x01sk-ant-upstream-HELDOUT-9c0d1e2f",
    b"Authorization: Bearer " + UNKNOWN_KEY.encode() + b"\x01",
], ids=["bearer", "x_api_key", "api_key_upstream", "unknown_key"])
async def test_a_malformed_credential_header_is_refused_without_quoting_the_key(
    gateway_factory: GatewayFactory, path: str, line: bytes, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    gw = await gateway_factory({
        "model_list": keyed_models(f"http://127.0.0.1:{free_port()}/v1"),
        "gateway": {"api_keys": [CLIENT_KEY]},
    })
    raw = json.dumps(messages_body()).encode()
    data = (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode()
            + b"Content-Type: application/json\r\n" + line + b"\r\n"
            + b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
    got = await exchange(gw.root, data)
    assert got.status == 400
    assert leaked(got.body) == [], got.body
    # A key the gateway does not know (someone's provider key sent by mistake) too.
    assert UNKNOWN_KEY.encode() not in got.body
    assert UNKNOWN_KEY not in caplog.text and leaked(caplog.text) == []
    assert leaked(json.dumps(got.headers)) == []
    assert "header" in json.dumps(got.json()).lower()


async def test_a_duplicated_session_header_is_refused_or_served_once(
    gw: RunningGateway, wires: ThreeWires,
) -> None:
    raw = json.dumps(messages_body()).encode()
    data = (b"POST /v1/messages HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nx-session-id: one\r\nx-session-id: two\r\n"
            b"Content-Length: " + str(len(raw)).encode() + b"\r\n\r\n" + raw)
    got = await exchange(gw.root, data)
    assert got.status in (200, 400)
    if got.status == 400:
        assert_wire_error(MESSAGES, 400, got.json(), contains="session")


# --- broken upstream answers on the native agent wires ----------------------------------

@pytest.fixture
async def faulty() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


def native_models(base_url: str) -> list[dict[str, Any]]:
    return [m for m in wire_models(base_url) if m["model_name"] in ("claude", "resp")]


@pytest.fixture
async def fgw(gateway_factory: GatewayFactory, faulty: FaultyUpstream) -> RunningGateway:
    return await gateway_factory({
        "model_list": wire_models(faulty.base_url),
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 0,
                     "deadline": 2.0},
        "gateway": {"timeouts": {"read": 0.5}},
    })


HTML = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"
WHOLE_FAULTS = {
    "truncated_json": lambda: answer(200, b'{"id":"msg_1","type":"mess',
                                     {"Content-Type": "application/json"}, length=400),
    "html_error_page": lambda: answer(502, HTML, {"Content-Type": "text/html"}),
    "html_with_200": lambda: answer(200, HTML, {"Content-Type": "text/html"}),
    "json_as_text_plain": lambda: answer(200, b"I am not JSON at all",
                                         {"Content-Type": "text/plain"}),
    "empty_200": lambda: answer(200, b"", {"Content-Type": "application/json"}),
    "error_body_with_200": lambda: answer(
        200, json.dumps({"type": "error", "error": {"type": "api_error",
                                                    "message": "Internal server error"}}).encode(),
        {"Content-Type": "application/json"}),
    "openai_error_body_with_200": lambda: answer(
        200, json.dumps({"error": {"message": "The server had an error while processing your "
                                              "request.", "type": "server_error", "param": None,
                                   "code": None}}).encode(),
        {"Content-Type": "application/json"}),
    "sse_for_a_whole_request": lambda: answer(
        200, b"event: ping\ndata: {}\n\n", {"Content-Type": "text/event-stream"}),
}


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("fault", sorted(WHOLE_FAULTS))
async def test_a_broken_whole_answer_is_a_clean_5xx_in_the_wire_format(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, fault: str, model: str,
) -> None:
    # (a native upstream of the wire, or a chat-only one the wire is translated to)
    faulty.then(WHOLE_FAULTS[fault]())
    name = model if model == "chat" else ("claude" if path == MESSAGES else "resp")
    body = messages_body(name) if path == MESSAGES else responses_body(name)
    reply = await post(fgw.root + path, body)
    assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
    assert reply.headers["content-type"].startswith("application/json")
    assert b"<html" not in reply.raw
    assert_wire_error(path, reply.status, reply.json)


def _events(path: str, model: str) -> list[bytes]:
    if model == "chat":  # a chat-only upstream: the wire is translated from its chunks
        return chat_events("up")
    return anthropic_events("up") if path == MESSAGES else responses_events("up")


def _stream_body(path: str, model: str) -> dict[str, Any]:
    name = model if model == "chat" else ("claude" if path == MESSAGES else "resp")
    return (messages_body(name, stream=True) if path == MESSAGES
            else responses_body(name, stream=True))


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_stream_that_closes_without_its_terminal_event_ends_in_the_wire_shape(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str,
) -> None:
    events = _events(path, model)
    # everything but message_stop / response.completed / [DONE] (and the chat usage chunk)
    faulty.then(stream(*events[:-2 if model == "chat" else -1]))
    body = _stream_body(path, model)
    reply = await post(fgw.root + path, body)
    assert reply.status != 500
    if reply.status == 200:
        last = reply.raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        assert last.startswith(b"event: error") or b"response.failed" in last, reply.raw[-400:]
        assert b"hello" in reply.raw  # what was relayed stays relayed
    else:
        assert_wire_error(path, reply.status, reply.json)


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_stream_that_stalls_forever_is_ended_by_the_deadline(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str,
) -> None:
    never = asyncio.Event()
    faulty.then(stream(*_events(path, model)[:2], hold=never))  # opened, some text, silence
    body = _stream_body(path, model)
    reply = await post(fgw.root + path, body, timeout=30)
    never.set()
    assert_ended_in_error(path, reply)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_whole_answer_that_never_comes_is_a_504_in_the_wire_format(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str,
) -> None:
    never = asyncio.Event()

    async def silent(_: Received, w: Writer) -> None:
        w.write(head(200, {"Content-Type": "application/json"}, length=500) + b'{"id":')
        await w.drain()
        await never.wait()

    faulty.then(silent)
    body = messages_body() if path == MESSAGES else responses_body()
    reply = await post(fgw.root + path, body, timeout=30)
    never.set()
    assert reply.status == 504, reply.raw[:300]
    assert_wire_error(path, reply.status, reply.json)


# --- keys ---------------------------------------------------------------------------------



def keyed_models(base_url: str) -> list[dict[str, Any]]:
    models = wire_models(base_url)
    for m in models:
        m["litellm_params"]["api_key"] = UPSTREAM_KEY
    return models


def leaked(data: str | bytes) -> list[str]:
    raw = data.encode() if isinstance(data, str) else data
    return [k for k in KEYS if k.encode() in raw]


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_the_client_key_never_goes_upstream_and_no_key_comes_back(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, model: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # The upstream refuses and echoes every header it got, the way some proxies do.
    async def echo_headers(got: Received, w: Writer) -> None:
        seen = json.dumps(got.headers)
        if got.path.endswith("/messages"):
            err = {"type": "error", "error": {"type": "authentication_error",
                                              "message": f"invalid x-api-key: {seen}"}}
        else:
            err = {"error": {"message": f"Incorrect API key provided: {seen}",
                             "type": "invalid_request_error", "param": None,
                             "code": "invalid_api_key"}}
        body = json.dumps(err).encode()
        w.write(head(401, {"Content-Type": "application/json"}, length=len(body)) + body)
        await w.drain()

    faulty.then(echo_headers)
    gw = await gateway_factory({
        "model_list": keyed_models(faulty.base_url),
        "gateway": {"api_keys": [CLIENT_KEY]},
        "general_settings": {"master_key": MASTER_KEY},
        "recovery": {"max_transient_retries": 0},
    })
    name = model if model == "chat" else ("claude" if path == MESSAGES else "resp")
    body = messages_body(name) if path == MESSAGES else responses_body(name)
    # The client authenticates both ways at once (Anthropic SDKs send x-api-key).
    reply = await post(gw.root + path, body, headers={
        "Authorization": f"Bearer {CLIENT_KEY}", "x-api-key": CLIENT_KEY,
        "anthropic-version": "2023-06-01"})
    assert len(faulty.received) == 1
    sent = json.dumps(faulty.received[0].headers) + faulty.received[0].body.decode()
    assert CLIENT_KEY not in sent, "the client's key went upstream"
    assert MASTER_KEY not in sent
    assert reply.status == 401 or 500 <= reply.status < 600 or reply.status == 502
    assert leaked(reply.raw) == [], reply.raw[:400]
    assert leaked(json.dumps(dict(reply.headers))) == []
    assert leaked(caplog.text) == []
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/metrics") as r:
        assert leaked(await r.read()) == []
    spans = json.dumps([dict(s.attributes or {}) for s in gw.spans.get_finished_spans()],
                       default=str)
    assert leaked(spans) == []


async def test_keys_stay_out_through_the_real_sdks_on_a_failing_native_stream(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream,
) -> None:
    # A stream that fails after its first event with a body naming the upstream key.
    start = anthropic_events("up")[0]
    error = {"type": "error", "error": {"type": "api_error",
                                        "message": f"upstream key {UPSTREAM_KEY} rejected"}}
    faulty.then(stream(start, b"event: error\ndata: " + json.dumps(error).encode() + b"\n\n"))
    resp_error = {"type": "error", "sequence_number": 1,
                  "error": {"type": "server_error", "code": "server_error",
                            "message": f"Bearer {UPSTREAM_KEY} is not valid", "param": None}}
    faulty.then(stream(responses_events("up")[0],
                       b"event: error\ndata: " + json.dumps(resp_error).encode() + b"\n\n"))
    gw = await gateway_factory({
        "model_list": keyed_models(faulty.base_url),
        "gateway": {"api_keys": [CLIENT_KEY]},
        "recovery": {"max_transient_retries": 0},
    })
    messages: list[str] = []
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=CLIENT_KEY,
                                        max_retries=0) as claude:
        with pytest.raises(anthropic.APIError) as caught:
            async with claude.messages.stream(model="claude", max_tokens=16,
                                              messages=[{"role": "user", "content": "hi"}]) as s:
                async for _ in s:
                    pass
        messages.append(str(caught.value) + json.dumps(getattr(caught.value, "body", None)))
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=CLIENT_KEY,
                                  max_retries=0) as gpt:
        got = []
        try:
            events = await gpt.responses.create(model="resp", input="hi", stream=True)
            async for event in events:
                got.append(event.model_dump_json())
        except openai.APIError as exc:
            got.append(str(exc) + json.dumps(getattr(exc, "body", None)))
        messages.extend(got)
        assert any("error" in g or "failed" in g for g in got), got
    assert leaked("\n".join(messages)) == [], messages
    sent = "".join(json.dumps(r.headers) for r in faulty.received)
    assert CLIENT_KEY not in sent


@pytest.mark.parametrize("keys", [
    ["os.environ/HELDOUT_UNSET_CLIENT_KEY"],
    ["os.environ/HELDOUT_EMPTY_CLIENT_KEY"],
    [""],
    [{"key": "os.environ/HELDOUT_UNSET_CLIENT_KEY", "owner": "team"}],
], ids=["unset_env", "empty_env", "empty", "unset_env_owned"])
def test_a_config_that_asks_for_auth_never_starts_open(
    monkeypatch: pytest.MonkeyPatch, keys: list[Any],
) -> None:
    monkeypatch.delenv("HELDOUT_UNSET_CLIENT_KEY", raising=False)
    monkeypatch.setenv("HELDOUT_EMPTY_CLIENT_KEY", "")
    raw = {"model_list": [{"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": f"http://127.0.0.1:{free_port()}/v1", "api_key": "k"}}],
        "gateway": {"api_keys": keys}}
    with pytest.raises(ConfigError) as refused:
        parse_config(raw)
    assert "api_keys" in str(refused.value)


URL_PASSWORD = "PASSWORD-in-url-HELDOUT-77"
URL_QUERY_KEY = "QUERYKEY-in-url-HELDOUT-88"


async def test_credentials_inside_an_api_base_url_never_come_out(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    # A proxy reached with basic auth in its URL and a key in its query (Azure-style
    # ``api-key``), down at the moment: its connection error must not quote the URL whole.
    base = (f"http://alice:{URL_PASSWORD}@127.0.0.1:{free_port()}/v1"
            f"?api-key={URL_QUERY_KEY}")
    models = wire_models(base)
    gw = await gateway_factory({"model_list": models,
                                "recovery": {"max_transient_retries": 0}})
    seen: list[bytes] = []
    for path, body in [(CHAT, {"model": "chat", "messages": [{"role": "user", "content": "x"}]}),
                       (MESSAGES, messages_body("claude")), (MESSAGES, messages_body("chat")),
                       (RESPONSES, responses_body("resp")), (RESPONSES, responses_body("chat")),
                       (RESPONSES, responses_body("resp", stream=True))]:
        reply = await post(gw.root + path, body)
        assert 500 <= reply.status < 600 or reply.status == 200, reply.raw[:300]
        seen += [reply.raw, json.dumps(dict(reply.headers)).encode()]
    async with aiohttp.ClientSession() as s:
        for path in ("/v1/models", "/metrics", "/readyz"):
            async with s.get(gw.root + path) as r:
                seen.append(await r.read())
    spans = json.dumps([dict(s.attributes or {}) for s in gw.spans.get_finished_spans()],
                       default=str)
    everything = b"\n".join(seen).decode("utf-8", "replace") + caplog.text + spans
    assert URL_PASSWORD not in everything
    assert URL_QUERY_KEY not in everything


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_upstream_response_headers_carrying_a_key_are_not_relayed(
    gateway_factory: GatewayFactory, faulty: FaultyUpstream, path: str, stream: bool,
) -> None:
    headers = {"Set-Cookie": f"sid={UPSTREAM_KEY}; HttpOnly", "x-echo-api-key": UPSTREAM_KEY,
               "Authorization": f"Bearer {UPSTREAM_KEY}",
               "anthropic-ratelimit-requests-remaining": "10"}
    if stream:
        events = b"".join(anthropic_events("up") if path == MESSAGES
                          else responses_events("up"))
        faulty.then(answer(200, events, {"Content-Type": "text/event-stream", **headers}))
    else:
        whole = anthropic_whole("up") if path == MESSAGES else responses_whole("up")
        faulty.then(answer(200, json.dumps(whole).encode(),
                           {"Content-Type": "application/json", **headers}))
    gw = await gateway_factory({"model_list": keyed_models(faulty.base_url)})
    body = messages_body(stream=stream) if path == MESSAGES else responses_body(stream=stream)
    reply = await post(gw.root + path, body)
    assert reply.status == 200 and b"hello" in reply.raw
    assert leaked(json.dumps(list(reply.headers.items()))) == []
    assert "set-cookie" not in {k.lower() for k in reply.headers}


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_stream_that_only_sends_keep_alives_is_ended_by_the_deadline(
    fgw: RunningGateway, faulty: FaultyUpstream, path: str, model: str,
) -> None:
    # Opened, then comments (or pings) forever: the read timeout never fires, the request
    # deadline must.
    until = asyncio.Event()
    opening = head(200, {"Content-Type": "text/event-stream"}) + _events(path, model)[0]
    ping = (b"event: ping\ndata: {\"type\": \"ping\"}\n\n" if path == MESSAGES
            and model == "native" else b": keep-alive\n\n")
    faulty.then(trickle(opening, ping, until))
    try:
        reply = await post(fgw.root + path, _stream_body(path, model), timeout=30)
    finally:
        until.set()
    assert_ended_in_error(path, reply)


# --- a wrong type at every level of a rich request, swept -----------------------------------

PNG_1PX = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJ"
           "RU5ErkJggg==")
RICH_MESSAGES: dict[str, Any] = {
    "model": "claude", "max_tokens": 32, "temperature": 0.5, "stream": False,
    "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
    "metadata": {"user_id": "u1"}, "stop_sequences": ["END"],
    "tools": [{"name": "read_file", "description": "read",
               "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}],
    "tool_choice": {"type": "auto"},
    "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                         "data": PNG_1PX}}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "reading"},
            {"type": "tool_use", "id": "toolu_01", "name": "read_file",
             "input": {"path": "a.py"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01",
             "content": [{"type": "text", "text": "x = 1"}], "is_error": False}]},
    ],
}
RICH_RESPONSES: dict[str, Any] = {
    "model": "resp", "instructions": "Be brief.", "max_output_tokens": 32, "temperature": 0.5,
    "stream": False, "store": False, "metadata": {"k": "v"}, "parallel_tool_calls": True,
    "tools": [{"type": "function", "name": "read_file", "description": "read",
               "parameters": {"type": "object",
                              "properties": {"path": {"type": "string"}}}}],
    "tool_choice": "auto", "reasoning": {"effort": "low"}, "text": {"format": {"type": "text"}},
    "input": [
        {"role": "user", "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": f"data:image/png;base64,{PNG_1PX}"}]},
        {"type": "function_call", "call_id": "call_1", "name": "read_file",
         "arguments": '{"path": "a.py"}'},
        {"type": "function_call_output", "call_id": "call_1", "output": "x = 1"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "done"}]},
        {"role": "user", "content": "and now?"},
    ],
}
WRONG: tuple[Any, ...] = (None, 0, -1, 2.5, 10**30, "", "x", True, [], {}, [None], {"": None})


def _paths(node: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at] if at else []
    if isinstance(node, dict):
        for key, value in node.items():
            found += _paths(value, (*at, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _paths(value, (*at, index))
    return found


def _with(body: Any, path: tuple[Any, ...], value: Any) -> Any:
    copy = json.loads(json.dumps(body))
    node = copy
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return copy


@pytest.mark.parametrize("model", ["native", "chat"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_wrong_type_at_every_level_is_never_a_500(
    gw: RunningGateway, wires: ThreeWires, path: str, model: str,
) -> None:
    base = dict(RICH_MESSAGES if path == MESSAGES else RICH_RESPONSES)
    if model == "chat":
        base["model"] = "chat"
    failures: list[str] = []
    statuses: list[int] = []
    async with aiohttp.ClientSession() as session:
        for where in _paths(base):
            if where == ("model",):
                continue  # (routing: covered above)
            for value in WRONG:
                body = _with(base, where, value)
                reply = await post(gw.root + path, data=json.dumps(body).encode(),
                                   session=session)
                statuses.append(reply.status)
                shown = f"{'.'.join(map(str, where))}={value!r}: {reply.status} {reply.raw[:160]!r}"
                if reply.status >= 500 or (reply.status >= 400 and not reply.raw.startswith(b"{")):
                    failures.append(shown)
                elif reply.status >= 400:
                    try:
                        assert_wire_error(path, reply.status, reply.json)
                    except AssertionError:
                        failures.append(shown)
    assert failures == [], "\n".join(failures[:40])
    assert len(statuses) > 300 and 200 in statuses and 400 in statuses


class SettableUpstream:
    """An upstream (chat, Messages and Responses paths) whose next answers are whatever the
    test sets (whole, or a stream of chunks / native events)."""

    def __init__(self) -> None:
        self.answer: Any = None
        self.stream_answer: list[Any] = []
        self.base_url = ""
        self.runner: Any = None

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("stream") is not True:
            return web.Response(body=json.dumps(self.answer).encode(),
                                content_type="application/json")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in self.stream_answer:
            if isinstance(chunk, bytes):  # a native event, as it is
                await response.write(chunk)
            else:
                await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if request.path.endswith("/chat/completions"):
            await response.write(b"data: [DONE]\n\n")
        return response

    async def __aenter__(self) -> SettableUpstream:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._chat)
        app.router.add_post("/v1/responses", self._chat)
        self.runner, root = await serve_app(app)
        self.base_url = f"{root}/v1"
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.runner.cleanup()


CHAT_ANSWER = chat_whole("up")
CHAT_CHUNK = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "up",
              "choices": [{"index": 0, "delta": {"role": "assistant", "content": "hi",
                                                 "tool_calls": [{"index": 0, "id": "call_1",
                                                                 "type": "function",
                                                                 "function": {"name": "f",
                                                                              "arguments": "{}"}}]},
                           "finish_reason": "tool_calls"}],
              "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_wrong_type_anywhere_in_a_chat_answer_is_never_a_500_on_the_agent_wires(
    gateway_factory: GatewayFactory, path: str, stream: bool,
) -> None:
    async with SettableUpstream() as up:
        gw = await gateway_factory({
            "model_list": [m for m in wire_models(up.base_url) if m["model_name"] == "chat"],
            "recovery": {"max_transient_retries": 0, "backoff_base": 0.001}})
        base = CHAT_CHUNK if stream else CHAT_ANSWER
        body = _stream_body(path, "chat") if stream else (
            messages_body("chat") if path == MESSAGES else responses_body("chat"))
        failures = await _wrong_type_failures(gw, up, path, base, body,
                                              (lambda answer: [answer]) if stream else None)
        assert failures == [], "\n".join(failures[:40])


async def _wrong_type_failures(gw: RunningGateway, up: SettableUpstream, path: str,
                               base: dict[str, Any], body: dict[str, Any],
                               events: Any = None) -> list[str]:
    """Each wrong type at each place of the upstream's answer ``base`` (streamed as
    ``events(answer)`` when given): the replies that were not a clean answer or error."""
    failures: list[str] = []
    async with aiohttp.ClientSession() as session:
        for where in _paths(base):
            for value in WRONG:
                answer_ = _with(base, where, value)
                if events is not None:
                    up.stream_answer = events(answer_)
                else:
                    up.answer = answer_
                reply = await post(gw.root + path, data=json.dumps(body).encode(),
                                   session=session)
                shown = f"{where}={value!r}: {reply.status} {reply.raw[:200]!r}"
                if reply.status == 500 or (reply.status >= 400
                                           and not reply.raw.startswith(b"{")):
                    failures.append(shown)
                elif reply.status >= 400:
                    try:
                        assert_wire_error(path, reply.status, reply.json)
                    except AssertionError:
                        failures.append(shown)
                elif events is not None:
                    last = reply.raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
                    if not last.startswith((b"event: message_stop", b"event: error",
                                            b"event: response.")):
                        failures.append(shown + " (no terminal event)")
    return failures


def _native_events(path: str, first: dict[str, Any]) -> list[bytes]:
    """A native stream whose opening event's object is ``first`` (the rest as usual)."""
    if path == MESSAGES:
        rest = anthropic_events("up")[1:]
        return [b"event: message_start\ndata: " + json.dumps(
            {"type": "message_start", "message": first}).encode() + b"\n\n", *rest]
    rest = responses_events("up")[1:-1]
    done = b"event: response.completed\ndata: " + json.dumps(
        {"type": "response.completed", "sequence_number": 9, "response": first}).encode()
    return [responses_events("up")[0], *rest, done + b"\n\n"]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_wrong_type_anywhere_in_a_native_answer_is_never_a_500(
    gateway_factory: GatewayFactory, path: str, stream: bool,
) -> None:
    async with SettableUpstream() as up:
        gw = await gateway_factory({
            "model_list": native_models(up.base_url),
            "recovery": {"max_transient_retries": 0, "backoff_base": 0.001}})
        base = anthropic_whole("up") if path == MESSAGES else responses_whole("up")
        body = (_stream_body(path, "native") if stream else
                messages_body() if path == MESSAGES else responses_body())
        failures = await _wrong_type_failures(
            gw, up, path, base, body,
            functools.partial(_native_events, path) if stream else None)
        assert failures == [], "\n".join(failures[:40])


@pytest.mark.parametrize(("section", "path"), [
    ({"metrics_auth": True}, "/metrics"),
    ({"ui": True}, "/ui"),
    ({"ui": True}, "/v1/gateway/sessions/s1/archive?from=1&to=2"),
])
async def test_a_protected_resource_asked_for_without_keys_stays_closed(
    gateway_factory: GatewayFactory, section: dict[str, Any], path: str,
) -> None:
    # Auth is asked for (metrics_auth, the inspector, archives) but no key is configured:
    # the resource is refused to everyone (whatever credential is sent), never served open.
    gw = await gateway_factory({"model_list": native_models(f"http://127.0.0.1:{free_port()}/v1"),
                                "gateway": section})
    for headers in ({}, {"Authorization": f"Bearer {CLIENT_KEY}"}, {"x-api-key": "anything"}):
        async with aiohttp.ClientSession() as s, s.get(gw.root + path, headers=headers,
                                                       allow_redirects=False) as r:
            assert r.status in (401, 403), (path, headers, r.status)
            assert b"gateway_" not in await r.read()  # no metrics text leaked


def _raw_post(path: str, head_lines: bytes, data: bytes) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n".encode() + head_lines
            + b"\r\n" + data)


_LATIN = json.dumps({"model": "claude", "max_tokens": 16, "input": "h\u00e9",
                     "messages": [{"role": "user", "content": "h\u00e9"}]},
                    ensure_ascii=False)


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("case", ["utf16_charset", "latin1_charset", "gzip_transfer_coding"])
async def test_a_body_in_another_encoding_is_a_clear_400_in_the_wire_format(
    gw: RunningGateway, path: str, case: str,
) -> None:
    if case == "utf16_charset":
        data = _LATIN.encode("utf-16")
        head_ = b"Content-Type: application/json; charset=utf-16\r\n"
    elif case == "latin1_charset":
        data = _LATIN.encode("latin-1")
        head_ = b"Content-Type: application/json; charset=latin-1\r\n"
    else:
        packed = gzip.compress(_LATIN.encode())
        data = b"%x\r\n" % len(packed) + packed + b"\r\n0\r\n\r\n"
        head_ = b"Content-Type: application/json\r\nTransfer-Encoding: gzip, chunked\r\n"
    if "Transfer-Encoding" not in head_.decode():
        head_ += f"Content-Length: {len(data)}\r\n".encode()
    got = await exchange(gw.root, _raw_post(path, head_, data))
    assert got.status == 400
    assert_wire_error(path, 400, got.json(), contains="utf-8")


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_expect_100_continue_is_served(gw: RunningGateway, wires: ThreeWires,
                                             path: str) -> None:
    data = json.dumps(messages_body() if path == MESSAGES else responses_body()).encode()
    got = await exchange(gw.root, _raw_post(
        path, b"Content-Type: application/json\r\nExpect: 100-continue\r\n"
        + f"Content-Length: {len(data)}\r\n".encode(), data))
    assert got.status == 100  # the interim answer, then the real one on the same socket
    assert b"HTTP/1.1 200 OK" in got.body and b"hello there" in got.body


@pytest.mark.parametrize("error", [
    {"error": {"message": "The server had an error while processing your request.",
               "type": "server_error", "param": None, "code": None}},
    {"error": {"message": "Provider returned error", "code": 502,
               "metadata": {"raw": "upstream connect error"}}},
    {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
], ids=["openai", "openrouter", "anthropic_shaped"])
@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
async def test_a_chat_stream_whose_first_event_is_an_error_ends_in_the_wire_shape(
    gateway_factory: GatewayFactory, path: str, error: dict[str, Any],
) -> None:
    async with SettableUpstream() as up:
        up.stream_answer = [error]
        gw = await gateway_factory({
            "model_list": [m for m in wire_models(up.base_url) if m["model_name"] == "chat"],
            "recovery": {"max_transient_retries": 1, "backoff_base": 0.001,
                         "backoff_cap": 0.002}})
        reply = await post(gw.root + path, _stream_body(path, "chat"))
    if reply.status == 200:
        last = reply.raw.rstrip(b"\n").rsplit(b"\n\n", 1)[-1]
        assert last.startswith(b"event: error") or b"response.failed" in last, reply.raw[-300:]
    else:
        # The provider's own failure (a 500 included: its words, what was tried), never
        # the gateway's "internal error".
        assert 500 <= reply.status < 600, reply.raw[:300]
        assert_wire_error(path, reply.status, reply.json)
        assert reply.json["gateway"]["gave_up"], reply.json
        assert b"internal gateway error" not in reply.raw


@pytest.mark.parametrize("path", [MESSAGES, RESPONSES])
@pytest.mark.parametrize("value", [b"s\xff\xfe\xc3", b"x" * 5000, b"\xe2\x80\x8bzero-width"],
                         ids=["non_utf8", "too_long", "zero_width"])
async def test_an_odd_session_id_is_refused_in_the_wire_format_or_served(
    gw: RunningGateway, wires: ThreeWires, path: str, value: bytes,
) -> None:
    data = json.dumps(messages_body() if path == MESSAGES else responses_body()).encode()
    got = await exchange(gw.root, _raw_post(
        path, b"Content-Type: application/json\r\nx-session-id: " + value + b"\r\n"
        + f"Content-Length: {len(data)}\r\n".encode(), data))
    assert got.status in (200, 400), got.body[:300]
    if got.status == 400:
        assert_wire_error(path, 400, got.json(), contains="session")
