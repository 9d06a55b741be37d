"""The access log: one line per request, with the key's id and never the key; JSON when
configured; quiet when a client goes away mid-stream."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest
from aiohttp import web

from gateway.referee import Referee
from gateway.telemetry.access_log import JsonFormatter
from tests.conftest import GatewayFactory, model_entry, serve_app
from tests.factories import tool, user

KEY = "client-key-for-the-access-log"
KEY_ID = hashlib.sha256(KEY.encode()).hexdigest()[:8]


def access_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "gateway.access"]


async def test_one_line_per_request_with_what_happened(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gateway.access")
    async with Referee(rules="openai") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)],
                                    "gateway": {"api_keys": [KEY]},
                                    "recovery": {"max_transient_retries": 1,
                                                 "backoff_base": 0.01, "backoff_cap": 0.02}})
        ref.script(503, {"error": {"message": "overloaded", "type": "server_error"}}, times=2)
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0) as c:
            with pytest.raises(openai.InternalServerError):
                await c.chat.completions.create(model="demo", messages=[user("a")])
            await c.chat.completions.create(model="demo", messages=[user("a"), tool("ghost")])
            with pytest.raises(openai.NotFoundError):
                await c.chat.completions.create(model="nope", messages=[user("a")])
        async with aiohttp.ClientSession() as s:
            async with s.post(gw.base_url + "/chat/completions", data=b"{not json",
                              headers={"Authorization": f"Bearer {KEY}"}) as r:
                assert r.status == 400
            async with s.get(gw.root + "/healthz") as r:
                assert r.status == 200
    lines = [r.access for r in access_records(caplog)]  # type: ignore[attr-defined]
    assert [line["status"] for line in lines] == [503, 200, 404, 400]  # no line for /healthz
    failed, repaired, unknown, bad = lines
    assert failed["attempts"] == 2 and failed["recovery"] == "retry"
    assert repaired["repairs"] == {"orphan_tool_result_dropped": 1}
    assert repaired["model"] == "demo" and repaired["deployment"] == "openai/demo-upstream"
    assert repaired["wire"] == "chat" and repaired["input_tokens"] > 0
    assert repaired["added_ms"] <= repaired["ms"]
    assert bad["wire"] == "chat" and bad["attempts"] == 0
    assert unknown["model"] == ""  # an unknown name is not echoed into logs and labels
    assert all(line["client"] == KEY_ID for line in lines)
    assert all(line["request_id"].startswith("req_") for line in lines)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert KEY not in text and "upstream-secret-key" not in text


def test_json_format_puts_the_fields_at_the_top_level() -> None:
    record = logging.LogRecord("gateway.access", logging.INFO, __file__, 1, "%s", ("x",), None)
    record.access = {"request_id": "req_1", "status": 200, "repairs": {"a": 1}}
    line = json.loads(JsonFormatter().format(record))
    assert line["logger"] == "gateway.access" and line["msg"] == "access"
    assert line["status"] == 200 and line["repairs"] == {"a": 1}


@pytest.fixture
async def slow_stream() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """An upstream that sends one SSE event and then waits until the gateway hangs up."""
    gone = asyncio.Event()

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        event = {"id": "c1", "object": "chat.completion.chunk", "model": "slow",
                 "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]}
        await resp.write(b"data: " + json.dumps(event).encode() + b"\n\n")
        try:
            for _ in range(200):  # bounded: at most ~10 s
                await asyncio.sleep(0.05)
                await resp.write(b": keep-alive\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            gone.set()
            raise
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner, root = await serve_app(app)
    yield f"{root}/v1", gone
    await runner.cleanup()


async def test_client_disconnect_mid_stream_is_one_quiet_line(
    gateway_factory: GatewayFactory, caplog: pytest.LogCaptureFixture,
    slow_stream: tuple[str, asyncio.Event],
) -> None:
    caplog.set_level(logging.INFO)
    base, gone = slow_stream
    gw = await gateway_factory({"model_list": [model_entry("slow", base)]})
    body = {"model": "slow", "stream": True, "messages": [user("hi")]}
    async with aiohttp.ClientSession() as s:
        resp = await s.post(gw.base_url + "/chat/completions", json=body)
        assert resp.status == 200
        first = await resp.content.readline()
        assert first.startswith(b"data: ")
        resp.close()  # the client goes away mid-stream
    await asyncio.wait_for(gone.wait(), 10)  # the gateway cancelled the upstream request
    for _ in range(500):  # the line is written as the handler unwinds
        if access_records(caplog):
            break
        await asyncio.sleep(0.01)
    (line,) = [r.access for r in access_records(caplog)]  # type: ignore[attr-defined]
    assert line["client_disconnected"] is True and line["model"] == "slow"
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
