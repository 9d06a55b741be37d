"""Hardening, third round: upstreams that misbehave on streams (and on the Responses
compaction route), against a keyed gateway whose log output is captured.

Each case checks what a user would see: the status class, the client's wire error shape
(OpenAI's ``{"error": {...}}``, Anthropic's ``{"type": "error", ...}``, a Responses stream's
``response.failed`` / ``error`` event), that the stream ends within the request deadline,
that the gateway still answers ``/healthz`` afterwards, and that no key (the master key, a
client key, the upstream key) appears in the answer, the logs, the spans or the inspector.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.providers.sse import ends_with, first_oversized, has_output
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.faulty_upstream import FaultyUpstream, Received, Writer, answer, head, trickle
from tests.fakes.three_wires import (
    anthropic_events,
    chat_events,
    chat_whole,
    responses_events,
    responses_whole,
)
from tests.http import Reply, post
from tests.server.test_hardening_heldout import assert_ended_in_error
from tests.server.test_hardening_heldout_2 import (
    CHAT,
    CLIENT_KEY,
    MESSAGES,
    RESPONSES,
    UPSTREAM_KEY,
    WIRE_MODELS,
    assert_clean_stream_end,
    assert_error_shape,
    body_for,
    everything_visible,
    keyed,
    leaked,
)

COMPACT = "/v1/responses/compact"
DEADLINE = 3.0  # recovery.deadline of the gateway under test
IDLE = 0.5  # gateway.timeouts.read: the longest gap between two data events
AUTH = {"Authorization": f"Bearer {CLIENT_KEY}"}
# What bounds a test's wait on a gateway that would hang (never reached when it does not).
HANG = 60.0


@pytest.fixture
async def faulty() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


@pytest.fixture
async def kgw(gateway_factory: GatewayFactory, faulty: FaultyUpstream,
              caplog: pytest.LogCaptureFixture) -> RunningGateway:
    caplog.set_level(logging.DEBUG)
    return await gateway_factory({
        "model_list": keyed(faulty.base_url),
        "general_settings": {"master_key": "sk-master-ROUND2-6f7a8b9c0d"},
        "gateway": {"api_keys": [CLIENT_KEY], "ui": True, "capture_bodies": True,
                    "timeouts": {"read": IDLE}},
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002, "max_transient_retries": 0,
                     "deadline": DEADLINE},
    })


def _model(path: str, model: str) -> str | None:
    return "chat" if model == "chat" or path == CHAT else None


def _events(path: str, model: str) -> list[bytes]:
    if model == "chat" or path == CHAT:
        return chat_events("up")
    return anthropic_events("up") if path == MESSAGES else responses_events("up")


async def ask(gw: RunningGateway, path: str, model: str, *, stream: bool = True) -> Reply:
    """One request of the wire with the client key; how long it took is bounded by the
    test, never asserted."""
    return await post(gw.root + path, body_for(path, _model(path, model), stream=stream),
                      headers=AUTH, timeout=HANG)


async def after(gw: RunningGateway, caplog: pytest.LogCaptureFixture,
                replies: list[Reply]) -> None:
    """The gateway still answers /healthz; no key anywhere a user or operator could see;
    no traceback in the answers."""
    async with aiohttp.ClientSession() as s, s.get(gw.root + "/healthz") as r:
        assert r.status == 200
    for reply in replies:
        assert b"Traceback" not in reply.raw
    shown = await everything_visible(gw, caplog, replies)
    assert leaked(shown) == [], [line[:300] for line in shown.splitlines() if leaked(line)][:5]


def assert_failed_in_wire(path: str, reply: Reply) -> None:
    """A stream that failed: a 5xx in the wire's error shape before any byte, or (once
    streaming) the wire's error event as its last event (chat: then ``[DONE]``)."""
    assert reply.status != 500, reply.raw[:300]
    if reply.status == 200:
        if path == CHAT:
            last_two = reply.raw.rstrip(b"\n").rsplit(b"\n\n", 2)[-2:]
            assert last_two[-1] == b"data: [DONE]" and b'"error"' in last_two[0], (
                reply.raw[-400:])
        else:
            assert_ended_in_error(path, reply)
    else:
        assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
        assert reply.headers["content-type"].startswith("application/json")
        assert_error_shape(path, reply.status, reply.json)


# --- 1. streams that stop, stall or send what is not an event ---------------------------

@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_stream_that_stalls_after_its_first_event_ends_by_the_deadline(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    never = asyncio.Event()

    async def first_then_silence(_: Received, w: Writer) -> None:
        w.write(head(200, {"Content-Type": "text/event-stream"}) + _events(path, model)[0])
        await w.drain()
        await never.wait()

    faulty.then(first_then_silence)
    try:
        reply = await ask(kgw, path, model)
    finally:
        never.set()
    assert_failed_in_wire(path, reply)
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_an_event_that_is_not_json_right_after_the_first_is_a_clean_failure(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    # A proxy's plain-text complaint in the middle of the stream, quoting the key it got.
    garbage = f"data: upstream proxy says: bad key {UPSTREAM_KEY}\n\n".encode()
    faulty.then(answer(200, _events(path, model)[0] + garbage,
                       {"Content-Type": "text/event-stream"}))
    reply = await ask(kgw, path, model)
    assert_failed_in_wire(path, reply)
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_data_line_over_a_megabyte_mid_stream_ends_in_the_wire_shape(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    events = _events(path, model)
    cut = next(n for n, e in enumerate(events) if b"hello" in e) + 1  # after some text
    huge = b'data: {"pad": "' + b"x" * (1024 * 1024 + 10) + b'"}\n\n'
    faulty.then(answer(200, b"".join([*events[:cut], huge, *events[cut:]]),
                       {"Content-Type": "text/event-stream"}))
    reply = await ask(kgw, path, model)
    assert_failed_in_wire(path, reply)
    if reply.status == 200:
        assert len(reply.raw) < 1024 * 1024  # the huge event is not relayed
        assert b"hello" in reply.raw  # what was relayed before it stays
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_first_event_of_a_megabyte_without_a_line_end_is_a_clean_502(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    until = asyncio.Event()
    faulty.then(trickle(head(200, {"Content-Type": "text/event-stream"}) + b"data: ",
                        b"y" * 65536, until, interval=0))
    try:
        reply = await ask(kgw, path, model)
    finally:
        until.set()
    assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
    assert_error_shape(path, reply.status, reply.json)
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_gzip_garbage_on_a_stream_is_a_clean_failure(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    faulty.then(answer(200, b"\x1f\x8b\x08\x00" + b"not gzip at all " * 64,
                       {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}))
    reply = await ask(kgw, path, model)
    assert_failed_in_wire(path, reply)
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_gzipped_stream_that_turns_to_garbage_ends_in_the_wire_shape(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    events = b"".join(_events(path, model))
    packed = gzip.compress(events)
    # the gzip stream's first half, then bytes that are no deflate data
    faulty.then(answer(200, packed[: len(packed) // 2] + b"\xff" * 200,
                       {"Content-Type": "text/event-stream", "Content-Encoding": "gzip"}))
    reply = await ask(kgw, path, model)
    assert_failed_in_wire(path, reply)
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_200_error_json_to_a_stream_request_is_a_clean_5xx(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    error = {"error": {"message": f"internal failure near key {UPSTREAM_KEY}",
                       "type": "server_error", "param": None, "code": None}}
    if path == MESSAGES and model == "native":
        error = {"type": "error", "error": {"type": "api_error",
                                            "message": f"boom {UPSTREAM_KEY}"}}
    faulty.then(answer(200, json.dumps(error).encode(), {"Content-Type": "application/json"}))
    reply = await ask(kgw, path, model)
    assert 500 <= reply.status < 600 and reply.status != 500, (reply.status, reply.raw[:300])
    assert_error_shape(path, reply.status, reply.json)
    await after(kgw, caplog, [reply])


# --- 2. native streams that never reach their end ---------------------------------------

def _anthropic_without_stop() -> bytes:
    return b"".join(anthropic_events("up")[:-1])  # up to message_delta


async def test_a_messages_stream_whose_message_stop_never_comes_ends_by_the_deadline(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    # Everything up to message_delta, then Anthropic's own pings forever: data events, so
    # the gap between data events never passes; only the request's deadline can end it.
    until = asyncio.Event()
    ping = b'event: ping\ndata: {"type": "ping"}\n\n'
    faulty.then(trickle(head(200, {"Content-Type": "text/event-stream"})
                        + _anthropic_without_stop(), ping, until))
    try:
        reply = await ask(kgw, MESSAGES, "native")
    finally:
        until.set()
    assert_failed_in_wire(MESSAGES, reply)
    assert b"hello" in reply.raw
    await after(kgw, caplog, [reply])


async def test_a_messages_stream_that_stalls_before_message_stop_ends_in_an_error_event(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    never = asyncio.Event()

    async def stall(_: Received, w: Writer) -> None:
        w.write(head(200, {"Content-Type": "text/event-stream"}) + _anthropic_without_stop())
        await w.drain()
        await never.wait()

    faulty.then(stall)
    try:
        reply = await ask(kgw, MESSAGES, "native")
    finally:
        never.set()
    assert_failed_in_wire(MESSAGES, reply)
    assert reply.status == 200 and b"message_delta" in reply.raw
    await after(kgw, caplog, [reply])


def _responses_opening() -> bytes:
    created = responses_events("up")[0]
    progress = created.replace(b"response.created", b"response.in_progress")
    return created + progress


async def test_a_responses_stream_that_ends_at_in_progress_is_a_clean_502(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    faulty.then(answer(200, _responses_opening(), {"Content-Type": "text/event-stream"}))
    reply = await ask(kgw, RESPONSES, "native")
    assert_failed_in_wire(RESPONSES, reply)
    await after(kgw, caplog, [reply])


async def test_a_responses_stream_repeating_in_progress_forever_ends_by_the_deadline(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    until = asyncio.Event()
    progress = _responses_opening().split(b"\n\n")[1] + b"\n\n"
    faulty.then(trickle(head(200, {"Content-Type": "text/event-stream"})
                        + _responses_opening(), progress, until))
    try:
        reply = await ask(kgw, RESPONSES, "native")
    finally:
        until.set()
    assert_failed_in_wire(RESPONSES, reply)
    await after(kgw, caplog, [reply])


async def test_a_responses_stream_whose_completed_never_comes_ends_by_the_deadline(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    # Output came, then in_progress events forever instead of response.completed.
    until = asyncio.Event()
    progress = _responses_opening().split(b"\n\n")[1] + b"\n\n"
    faulty.then(trickle(head(200, {"Content-Type": "text/event-stream"})
                        + b"".join(responses_events("up")[:-1]), progress, until))
    try:
        reply = await ask(kgw, RESPONSES, "native")
    finally:
        until.set()
    assert_failed_in_wire(RESPONSES, reply)
    assert b"hello" in reply.raw
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), [(CHAT, "chat"), (MESSAGES, "chat"),
                                             (RESPONSES, "chat")])
async def test_a_chat_stream_of_empty_deltas_forever_ends_by_the_deadline(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    # A chat upstream that opened and then sends empty deltas forever (a stuck generator
    # behind a proxy): data events that carry nothing.
    until = asyncio.Event()
    events = chat_events("up")
    empty = events[0].replace(b'{"role":"assistant"}', b"{}")
    faulty.then(trickle(head(200, {"Content-Type": "text/event-stream"}) + events[0]
                        + events[1], empty, until))
    try:
        reply = await ask(kgw, path, model)
    finally:
        until.set()
    assert_failed_in_wire(path, reply)
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_stream_that_stalls_mid_event_ends_in_the_wire_shape(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    never = asyncio.Event()
    events = _events(path, model)

    async def half_event(_: Received, w: Writer) -> None:
        w.write(head(200, {"Content-Type": "text/event-stream"}) + b"".join(events[:2])
                + events[2][: len(events[2]) // 2])
        await w.drain()
        await never.wait()

    faulty.then(half_event)
    try:
        reply = await ask(kgw, path, model)
    finally:
        never.set()
    assert_failed_in_wire(path, reply)
    await after(kgw, caplog, [reply])


@pytest.mark.parametrize(("path", "model"), [(MESSAGES, "native"), (RESPONSES, "native")])
async def test_a_native_failure_event_quoting_keys_mid_stream_is_masked(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    events = _events(path, model)
    text = f"upstream rejected key {UPSTREAM_KEY} (client sent {CLIENT_KEY})"
    if path == MESSAGES:
        failure = (b"event: error\ndata: " + json.dumps(
            {"type": "error", "error": {"type": "overloaded_error", "message": text}}).encode()
                   + b"\n\n")
    else:
        failure = (b"event: response.failed\ndata: " + json.dumps(
            {"type": "response.failed", "sequence_number": 9, "response": {
                **responses_whole("up", "failed"),
                "error": {"code": "server_error", "message": text}}}).encode() + b"\n\n")
    faulty.then(answer(200, b"".join(events[:2]) + failure,
                       {"Content-Type": "text/event-stream"}))
    reply = await ask(kgw, path, model)
    assert reply.status == 200, reply.raw[:300]
    assert_clean_stream_end(path, reply.raw)
    await after(kgw, caplog, [reply])


# --- 3. a client that leaves ------------------------------------------------------------

@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_client_gone_before_the_first_byte_cancels_the_upstream_quietly(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    arrived, never = asyncio.Event(), asyncio.Event()

    async def hold(_: Received, w: Writer) -> None:
        arrived.set()
        w.write(head(200, {"Content-Type": "text/event-stream"}))
        while not never.is_set():  # comments only: writing fails once the gateway hangs up
            w.write(b": wait\n\n")
            await w.drain()
            await asyncio.sleep(0.02)

    faulty.then(hold)

    async def client() -> None:
        await ask(kgw, path, model)

    task = asyncio.create_task(client())
    await asyncio.wait_for(arrived.wait(), HANG)
    task.cancel()  # the client hangs up while the gateway waits for the first event
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(faulty.disconnected.wait(), HANG)  # the gateway hung up too
    never.set()
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert bad == [], [r.getMessage()[:300] for r in bad]
    # the next request is served
    faulty.then(answer(200, b"".join(_events(path, model)),
                       {"Content-Type": "text/event-stream"}))
    reply = await ask(kgw, path, model)
    assert reply.status == 200 and b"hello" in reply.raw
    await after(kgw, caplog, [reply])


# --- 4. the Responses compaction route --------------------------------------------------

COMPACT_BODY = {"model": "resp", "input": [{"role": "user", "content": "hi"}]}
COMPACT_FAULTS = {
    "error_json_with_200": lambda: answer(200, json.dumps(
        {"error": {"message": f"oops {UPSTREAM_KEY}", "type": "server_error", "param": None,
                   "code": None}}).encode(), {"Content-Type": "application/json"}),
    "gzip_garbage": lambda: answer(200, b"\x1f\x8b\x08\x00garbage" * 30,
                                   {"Content-Type": "application/json",
                                    "Content-Encoding": "gzip"}),
    "html_with_200": lambda: answer(200, b"<html><body>Bad gateway</body></html>",
                                    {"Content-Type": "text/html"}),
    "truncated_json": lambda: answer(200, b'{"id": "resp_1", "output": [',
                                     {"Content-Type": "application/json"}, length=300),
    "event_stream": lambda: answer(200, b"".join(responses_events("up")),
                                   {"Content-Type": "text/event-stream"}),
    "html_502_quoting_key": lambda: answer(502, f"<html>{UPSTREAM_KEY}</html>".encode(),
                                           {"Content-Type": "text/html"}),
    "not_an_object": lambda: answer(200, b"[1, 2, 3]", {"Content-Type": "application/json"}),
}


@pytest.mark.parametrize("fault", sorted(COMPACT_FAULTS))
async def test_a_broken_compaction_answer_is_a_clean_5xx(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    fault: str,
) -> None:
    faulty.then(COMPACT_FAULTS[fault]())
    reply = await post(kgw.root + COMPACT, COMPACT_BODY, headers=AUTH, timeout=HANG)
    assert 500 < reply.status < 600, (reply.status, reply.raw[:300])
    assert reply.headers["content-type"].startswith("application/json")
    assert_error_shape(RESPONSES, reply.status, reply.json)
    await after(kgw, caplog, [reply])


async def test_a_compaction_that_never_answers_is_a_504_by_the_deadline(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    never = asyncio.Event()

    async def slow_body(_: Received, w: Writer) -> None:
        w.write(head(200, {"Content-Type": "application/json"}, length=400) + b'{"id":')
        await w.drain()
        await never.wait()

    faulty.then(slow_body)
    try:
        reply = await post(kgw.root + COMPACT, COMPACT_BODY, headers=AUTH, timeout=HANG)
    finally:
        never.set()
    assert reply.status == 504, reply.raw[:300]
    assert_error_shape(RESPONSES, 504, reply.json)
    await after(kgw, caplog, [reply])


async def test_a_count_that_never_answers_is_a_504_in_anthropic_shape(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    never = asyncio.Event()

    async def silent(_: Received, w: Writer) -> None:
        await never.wait()

    faulty.then(silent)
    try:
        reply = await post(kgw.root + "/v1/messages/count_tokens",
                           {"model": "claude", "messages": [{"role": "user", "content": "hi"}]},
                           headers=AUTH, timeout=HANG)
    finally:
        never.set()
    assert reply.status == 504, reply.raw[:300]
    assert_error_shape(MESSAGES, 504, reply.json)
    await after(kgw, caplog, [reply])


async def test_a_whole_chat_answer_the_compaction_route_refuses_is_not_relayed(
    kgw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
) -> None:
    # A Responses upstream that answers compaction with a chat completion (a proxy that
    # routed it to the wrong endpoint): not the compacted conversation, so a 502.
    faulty.then(answer(200, json.dumps(chat_whole("up")).encode(),
                       {"Content-Type": "application/json"}))
    reply = await post(kgw.root + COMPACT, COMPACT_BODY, headers=AUTH, timeout=HANG)
    assert reply.status == 502, (reply.status, reply.raw[:300])
    assert_error_shape(RESPONSES, 502, reply.json)
    await after(kgw, caplog, [reply])


# --- 5. an upstream that keeps the connection open after its final event ----------------

@pytest.fixture
async def slow_idle_gw(gateway_factory: GatewayFactory, faulty: FaultyUpstream,
                       caplog: pytest.LogCaptureFixture) -> RunningGateway:
    # The default gap allowed between two events (10 minutes): a stream that already ended
    # must not wait for it.
    caplog.set_level(logging.DEBUG)
    return await gateway_factory({
        "model_list": keyed(faulty.base_url),
        "gateway": {"api_keys": [CLIENT_KEY], "timeouts": {"read": 600}},
        "recovery": {"max_transient_retries": 0, "deadline": DEADLINE},
    })


@pytest.mark.parametrize(("path", "model"), WIRE_MODELS)
async def test_a_stream_whose_upstream_never_closes_after_its_end_is_finished_at_once(
    slow_idle_gw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    # The final event came ([DONE], message_stop, response.completed) but the upstream (a
    # proxy holding a chunked body open) never ends the body: the client's stream ends anyway.
    never = asyncio.Event()

    async def keep_open(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        for event in _events(path, model):
            w.write(b"%x\r\n" % len(event) + event + b"\r\n")
        await w.drain()
        await never.wait()

    faulty.then(keep_open)
    try:
        reply = await post(slow_idle_gw.root + path, body_for(path, _model(path, model),
                                                             stream=True),
                           headers=AUTH, timeout=HANG)
    finally:
        never.set()
    assert reply.status == 200, reply.raw[:300]
    assert_clean_stream_end(path, reply.raw)
    assert b"event: error" not in reply.raw and b"response.failed" not in reply.raw
    assert b"hello" in reply.raw
    await after(slow_idle_gw, caplog, [reply])


# --- 6. what the stream reader counts as progress and as the end -------------------------

def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    return (f"event: {event}\n".encode() if event else b"") + b"data: " + json.dumps(
        data).encode() + b"\n\n"


KEEP_ALIVES = {
    "anthropic_ping": _sse({"type": "ping"}, "ping"),
    "responses_in_progress": _sse({"type": "response.in_progress", "response": {}},
                                  "response.in_progress"),
    "chat_empty_delta": _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": None}]}),
    "chat_empty_content": _sse({"choices": [{"index": 0, "delta": {"content": ""},
                                             "finish_reason": None}]}),
    "comment": b": keep-alive\n\n",
}
OUTPUT = {
    "anthropic_text": _sse({"type": "content_block_delta", "index": 0,
                            "delta": {"type": "text_delta", "text": "ping"}},
                           "content_block_delta"),
    "chat_finish": _sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}),
    "chat_usage": _sse({"choices": [], "usage": {"prompt_tokens": 1}}),
    "chat_role": _sse({"choices": [{"index": 0, "delta": {"role": "assistant"},
                                    "finish_reason": None}]}),
    "responses_text": _sse({"type": "response.output_text.delta", "delta": "in_progress"},
                           "response.output_text.delta"),
}


@pytest.mark.parametrize("case", sorted(KEEP_ALIVES))
def test_a_keep_alive_event_is_no_progress(case: str) -> None:
    assert not has_output(KEEP_ALIVES[case] * 3)


@pytest.mark.parametrize("case", sorted(OUTPUT))
def test_an_output_event_among_keep_alives_is_progress(case: str) -> None:
    assert has_output(KEEP_ALIVES["anthropic_ping"] + OUTPUT[case] + KEEP_ALIVES["comment"])


def test_only_a_final_event_ends_a_stream_not_text_naming_one() -> None:
    mention = _sse({"type": "content_block_delta", "index": 0, "delta": {
        "type": "text_delta", "text": "then message_stop and [DONE] and response.completed"}},
        "content_block_delta")
    markers = (b"message_stop", b"[DONE]", b"response.completed")
    assert not ends_with(mention, markers)
    assert ends_with(mention + _sse({"type": "message_stop"}, "message_stop"), markers)
    assert ends_with(mention + b"data: [DONE]\n\n", markers)
    assert ends_with(_sse({"type": "response.completed", "response": {}}), markers)
    assert not ends_with(b"data: [DONE]\n\n", (b"message_stop",))


def test_an_event_past_the_cap_is_found_wherever_it_is() -> None:
    small, big = b"data: {}\n\n", b"data: " + b"x" * 100 + b"\n\n"
    assert first_oversized(small * 3, 50) is None
    assert first_oversized(small + big + small, 50) == len(small)
    assert first_oversized(small + b"data: " + b"y" * 80, 50) == len(small)  # unfinished


def _error_then_open(path: str, model: str) -> bytes:
    """What is sent before the upstream holds its body open: some output, then a final
    event of the client's wire that is not the upstream's own end."""
    events = _events(path, model)
    if path == MESSAGES:
        return b"".join(events[:3]) + _sse(
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "error")
    return b"".join(events[:2]) + _sse(
        {"type": "response.failed", "sequence_number": 5, "response": {
            **responses_whole("up", "failed"),
            "error": {"code": "server_error", "message": "boom"}}}, "response.failed")


# (A chat stream without [DONE], translated or not, ends in error after
# ``gateway.timeouts.read``: its own end never came, as in the stall tests above.)
@pytest.mark.parametrize(("path", "model"), [(MESSAGES, "native"), (RESPONSES, "native")])
async def test_a_stream_ended_for_the_client_is_not_held_open_by_its_upstream(
    slow_idle_gw: RunningGateway, faulty: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    path: str, model: str,
) -> None:
    never = asyncio.Event()

    async def keep_open(_: Received, w: Writer) -> None:
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
        sent = _error_then_open(path, model)
        w.write(b"%x\r\n" % len(sent) + sent + b"\r\n")
        await w.drain()
        await never.wait()

    faulty.then(keep_open)
    try:
        reply = await post(slow_idle_gw.root + path, body_for(path, _model(path, model),
                                                             stream=True),
                           headers=AUTH, timeout=HANG)
    finally:
        never.set()
    assert reply.status == 200, reply.raw[:300]
    assert b"hello" in reply.raw
    assert_clean_stream_end(path, reply.raw)
    await after(slow_idle_gw, caplog, [reply])
