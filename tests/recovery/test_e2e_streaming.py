"""Streams and the ladder end to end: recovery happens only before the first byte; once the
stream has begun, an upstream failure ends it with an SSE error event in the OpenAI shape."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import openai
import pytest
from aiohttp import web

from gateway.referee import Referee, bodies
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, user
from tests.recovery.e2e_support import attempt_spans, client, span_summary, start_gateway


async def read_stream(stream: Any) -> str:
    text = ""
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
    return text


# -- recovered before the first byte, against the referee -------------------------------------


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="strict", style="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url)


@pytest.mark.parametrize("refusal", [
    bodies.overloaded("openai", retry_after=0),
    bodies.rate_limited("openai", retry_after=0),
], ids=["503", "429"])
async def test_stream_refused_before_first_byte_is_retried(
    gw: RunningGateway, referee: Referee, refusal: bodies.Reply
) -> None:
    referee.script(refusal)
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("stream please")], stream=True)
        assert raw.headers["content-type"].startswith("text/event-stream")
        assert raw.headers["x-gateway-attempts"] == "2"
        assert raw.headers["x-gateway-recovery"] == "retry"
        text = await read_stream(raw.parse())
    assert text == "referee: accepted 1 messages"
    assert [r.status for r in referee.requests] == [refusal.status, 200]
    assert all(r.json()["stream"] is True for r in referee.requests)


async def test_stream_structural_refusal_is_recovered_by_strict(
    gw: RunningGateway, referee: Referee
) -> None:
    messages = [user("q"), assistant("first"), assistant("second"), user("next")]
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=messages, stream=True,
            stream_options={"include_usage": True})
        assert raw.headers["x-gateway-recovery"] == "strict"
        assert raw.headers["x-gateway-attempts"] == "2"
        usage = None
        text = ""
        async for chunk in raw.parse():
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
            usage = chunk.usage or usage
    assert text == "referee: accepted 3 messages"
    assert usage is not None and usage.total_tokens > 0
    spans = [span_summary(s) for s in attempt_spans(gw)]
    assert [(s["structure"], s["status"], s["verdict"]) for s in spans] == [
        ("default", 400, "structural"), ("strict", 200, None)]


async def test_stream_that_cannot_be_recovered_gets_a_json_error(
    gw: RunningGateway, referee: Referee
) -> None:
    referee.script(bodies.insufficient_quota())
    async with client(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="demo", messages=[user("hi")], stream=True)
    response = info.value.response
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["code"] == "insufficient_quota"
    assert len(referee.requests) == 1


# -- a hand-made upstream for what the referee does not do ------------------------------------


def chunk_event(text: str, finish: str | None = None) -> bytes:
    chunk = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1,
             "model": "m", "choices": [{"index": 0, "delta": {"content": text} if text else {},
                                        "finish_reason": finish}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


OVERLOADED_EVENT = b'data: {"error": {"message": "Overloaded", "type": "overloaded_error"}}\n\n'
MID_STREAM_ERROR = (b'data: {"error": {"message": "The server had an error while processing '
                    b'your request.", "type": "server_error", "param": null, "code": null}}\n\n')


@dataclass
class Upstream:
    """Per request, the next behaviour from ``plan`` (default ``complete``)."""

    base_url: str = ""
    plan: list[str] = field(default_factory=list)
    seen: list[str] = field(default_factory=list)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    state = Upstream()

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        how = state.plan.pop(0) if state.plan else "complete"
        state.seen.append(how)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        if how in ("empty", "drop_first"):
            await response.write(b": keep-alive\n\n")
            if how == "drop_first":
                assert request.transport is not None
                request.transport.abort()
            else:
                await response.write_eof()
            return response
        if how == "error_first":
            await response.write(b": keep-alive\n\n" + OVERLOADED_EVENT)
            await response.write_eof()
            return response
        await response.write(chunk_event("Hello"))
        await response.write(chunk_event(" world"))
        if how == "hang":
            try:
                await asyncio.Event().wait()  # until the gateway goes away
            except asyncio.CancelledError:
                state.cancelled.set()
                raise
        if how == "drop":
            assert request.transport is not None
            request.transport.abort()
            return response
        if how == "error_after":
            await response.write(MID_STREAM_ERROR)
            await response.write_eof()
            return response
        await response.write(chunk_event("", "stop") + b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0,
                           handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    state.base_url = f"http://{host}:{port}/v1"
    yield state
    await runner.cleanup()


@pytest.fixture
async def gw_custom(gateway_factory: GatewayFactory, upstream: Upstream) -> RunningGateway:
    return await start_gateway(gateway_factory, upstream.base_url)


async def test_error_as_first_event_is_a_refusal_and_is_retried(
    gw_custom: RunningGateway, upstream: Upstream
) -> None:
    upstream.plan = ["error_first"]
    async with client(gw_custom) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("hi")], stream=True)
        assert raw.headers["x-gateway-recovery"] == "retry"
        text = await read_stream(raw.parse())
    assert text == "Hello world"
    assert upstream.seen == ["error_first", "complete"]


@pytest.mark.parametrize("how", ["empty", "drop_first"])
async def test_stream_ended_before_first_event_is_retried(
    gw_custom: RunningGateway, upstream: Upstream, how: str
) -> None:
    """An upstream stream that ends (cleanly or not) before any event sent nothing to the
    client: it is a failure the ladder retries, not an empty answer."""
    upstream.plan = [how]
    async with client(gw_custom) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=[user("hi")], stream=True)
        assert raw.headers["x-gateway-recovery"] == "retry"
        text = await read_stream(raw.parse())
    assert text == "Hello world"
    assert upstream.seen == [how, "complete"]


@pytest.mark.parametrize("how", ["drop", "error_after"])
async def test_failure_after_first_byte_ends_stream_with_error_event(
    gw_custom: RunningGateway, upstream: Upstream, how: str
) -> None:
    upstream.plan = [how]
    received: list[str] = []
    async with client(gw_custom) as c:
        stream = await c.chat.completions.create(model="demo", messages=[user("hi")],
                                                 stream=True)
        with pytest.raises(openai.APIError) as info:
            async for chunk in stream:
                received.append(chunk.choices[0].delta.content or "")
        assert received == ["Hello", " world"]
        assert info.value.message
        assert isinstance(info.value.body, dict)
        assert {"message", "type"} <= set(info.value.body)
        # No recovery once bytes have gone out: exactly one upstream attempt.
        assert upstream.seen == [how]
        # The gateway is still up and serves the next request.
        again = await c.chat.completions.create(model="demo", messages=[user("again")],
                                                stream=True)
        assert await read_stream(again) == "Hello world"
    async with aiohttp.ClientSession() as s, s.get(gw_custom.root + "/healthz") as r:
        assert r.status == 200


async def test_dropped_stream_error_event_is_in_openai_shape(
    gw_custom: RunningGateway, upstream: Upstream
) -> None:
    """Raw SSE as the client sees it: the chunks, then one ``data: {"error": ...}`` event and
    the stream's own end, ``data: [DONE]``."""
    upstream.plan = ["drop"]
    body = {"model": "demo", "stream": True, "messages": [user("hi")]}
    async with aiohttp.ClientSession() as s, s.post(gw_custom.base_url + "/chat/completions",
                                                    json=body) as r:
        assert r.status == 200
        raw = await asyncio.wait_for(r.read(), 20)
    events = [e for e in raw.decode().split("\n\n") if e.strip()]
    assert len(events) == 4
    assert events[-1] == "data: [DONE]"
    assert events[-2].startswith("data: ")
    error = json.loads(events[-2][len("data: "):])["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["type"], str)
    assert "param" in error and "code" in error


async def test_client_leaving_mid_stream_cancels_the_upstream_request(
    gw_custom: RunningGateway, upstream: Upstream, caplog: pytest.LogCaptureFixture
) -> None:
    upstream.plan = ["hang"]
    body = {"model": "demo", "stream": True, "messages": [user("hi")]}
    async with aiohttp.ClientSession() as s:
        r = await s.post(gw_custom.base_url + "/chat/completions", json=body)
        assert r.status == 200
        first = await asyncio.wait_for(r.content.readuntil(b"\n\n"), 20)
        assert b"Hello" in first
        r.close()  # the client goes away mid-stream
    await asyncio.wait_for(upstream.cancelled.wait(), 20)
    async with client(gw_custom) as c:
        again = await c.chat.completions.create(model="demo", messages=[user("again")],
                                                stream=True)
        assert await read_stream(again) == "Hello world"
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "CRITICAL")]
