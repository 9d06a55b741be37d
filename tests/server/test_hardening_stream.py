"""A client that hangs up mid-stream is an everyday event: one quiet info line, no error."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import aiohttp
import pytest

from tests.conftest import GatewayFactory, model_entry
from tests.factories import user
from tests.fakes.faulty_upstream import FaultyUpstream, Received, Writer, chunk_event, head


@pytest.fixture
async def up() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


async def test_client_disconnect_mid_stream_logs_one_info_line(
    gateway_factory: GatewayFactory, up: FaultyUpstream, caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    client_gone = asyncio.Event()

    async def stream_after_the_client_left(_: Received, w: Writer) -> None:
        w.write(head(200, {"Content-Type": "text/event-stream"}) + chunk_event("first "))
        await w.drain()
        await client_gone.wait()
        for i in range(200):  # the gateway keeps relaying into a closed connection
            w.write(chunk_event(f"more {i} " + "x" * 2000))
            await w.drain()
            await asyncio.sleep(0)
        w.write(b"data: [DONE]\n\n")

    up.then(stream_after_the_client_left)
    gw = await gateway_factory({"model_list": [model_entry("m", up.base_url)]})
    caplog.set_level(logging.INFO)
    logged = asyncio.Event()

    class Watch(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if "disconnected mid-stream" in record.getMessage():
                logged.set()

    watch = Watch()
    logging.getLogger("gateway").addHandler(watch)
    request.addfinalizer(lambda: logging.getLogger("gateway").removeHandler(watch))
    async with aiohttp.ClientSession() as s:
        resp = await s.post(gw.base_url + "/chat/completions",
                            json={"model": "m", "messages": [user("hi")], "stream": True})
        assert b"first" in await resp.content.readany()
        resp.close()  # hang up mid-stream
    client_gone.set()
    await asyncio.wait_for(up.disconnected.wait(), 10)  # the upstream call was cancelled
    await asyncio.wait_for(logged.wait(), 10)
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert errors == [], [r.getMessage() for r in errors]
    assert "Traceback" not in caplog.text
    infos = [r for r in caplog.records if "disconnected mid-stream" in r.getMessage()]
    assert len(infos) == 1 and infos[0].levelno == logging.INFO
