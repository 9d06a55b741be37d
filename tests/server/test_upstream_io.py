"""Upstream I/O: streaming chunk by chunk, cancellation on client disconnect, timeouts."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp
import openai
import pytest
from aiohttp import web

from tests.conftest import GatewayFactory, model_entry, serve_app
from tests.factories import user


@dataclass
class SlowUpstream:
    """An OpenAI-compatible upstream that holds its answers until told to go on."""

    base_url: str = ""
    release: asyncio.Event = field(default_factory=asyncio.Event)
    first_chunk_sent: asyncio.Event = field(default_factory=asyncio.Event)
    request_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)


def chunk(content: str) -> bytes:
    data = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


@pytest.fixture
async def slow() -> AsyncIterator[SlowUpstream]:
    up = SlowUpstream()

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        up.request_arrived.set()
        try:
            if body.get("stream"):
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
                await resp.prepare(request)
                await resp.write(chunk("first "))
                up.first_chunk_sent.set()
                await up.release.wait()
                await resp.write(chunk("second"))
                await resp.write(b"data: [DONE]\n\n")
                return resp
            await up.release.wait()
            return web.json_response({"id": "x", "object": "chat.completion", "created": 0,
                                      "model": "m", "choices": []})
        except asyncio.CancelledError:
            up.cancelled.set()
            raise

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner, root = await serve_app(app)
    up.base_url = f"{root}/v1"
    yield up
    up.release.set()
    await runner.cleanup()


async def test_stream_chunks_arrive_before_the_upstream_finishes(
    gateway_factory: GatewayFactory, slow: SlowUpstream
) -> None:
    gw = await gateway_factory({"model_list": [model_entry("m", slow.base_url)]})
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
        stream = await c.chat.completions.create(model="m", messages=[user("hi")],
                                                 stream=True)
        iterator = stream.__aiter__()
        first = await asyncio.wait_for(iterator.__anext__(), 10)
        # The upstream is still holding the rest: the first chunk was not buffered.
        assert not slow.release.is_set()
        assert first.choices[0].delta.content == "first "
        slow.release.set()
        rest = [ch.choices[0].delta.content async for ch in iterator]
    assert rest == ["second"]


@pytest.mark.parametrize("stream", [True, False])
async def test_client_disconnect_cancels_upstream_request(
    gateway_factory: GatewayFactory, slow: SlowUpstream, stream: bool
) -> None:
    gw = await gateway_factory({"model_list": [model_entry("m", slow.base_url)]})
    payload = {"model": "m", "messages": [user("hi")], "stream": stream}
    async with aiohttp.ClientSession() as s:
        task = asyncio.create_task(s.post(gw.base_url + "/chat/completions", json=payload))
        await asyncio.wait_for((slow.first_chunk_sent if stream else slow.request_arrived)
                               .wait(), 10)
        if stream:
            resp = await task
            await resp.content.readany()
            resp.close()
        else:
            task.cancel()
    # The upstream sees its request go away without ever being released.
    await asyncio.wait_for(slow.cancelled.wait(), 10)
    assert not slow.release.is_set()


async def test_upstream_timeout_is_504_envelope(
    gateway_factory: GatewayFactory, slow: SlowUpstream
) -> None:
    gw = await gateway_factory({
        "model_list": [model_entry("m", slow.base_url)],
        "gateway": {"timeouts": {"connect": 2, "read": 0.2}},
        "recovery": {"max_transient_retries": 0},
    })
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
        with pytest.raises(openai.APIStatusError) as info:
            await c.chat.completions.create(model="m", messages=[user("hi")])
    assert info.value.status_code == 504
    body = info.value.response.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert "timed out" in body["error"]["message"]


async def test_rate_limit_headers_are_relayed_and_nothing_else(
    gateway_factory: GatewayFactory,
) -> None:
    async def handle(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response(
            {"id": "x", "object": "chat.completion", "created": 0, "model": "m",
             "choices": [{"index": 0, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": "ok"}}]},
            headers={"x-ratelimit-remaining-requests": "41", "openai-processing-ms": "12",
                     "set-cookie": "session=secret", "x-internal-host": "10.1.2.3"})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handle)
    runner, root = await serve_app(app)
    try:
        gw = await gateway_factory({"model_list": [model_entry("m", f"{root}/v1")]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            raw = await c.chat.completions.with_raw_response.create(
                model="m", messages=[user("hi")])
    finally:
        await runner.cleanup()
    assert raw.headers["x-ratelimit-remaining-requests"] == "41"
    assert raw.headers["openai-processing-ms"] == "12"
    assert "set-cookie" not in raw.headers
    assert "x-internal-host" not in raw.headers
