"""``/v1/messages/count_tokens`` (issue 23): bounded by the request deadline on a native
upstream that never answers, and a big body is read, repaired and counted off the event loop
(``/healthz`` answers while four 19 MB count requests are being worked on)."""

from __future__ import annotations

import asyncio
import io
import threading
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import anthropic
import pytest
from aiohttp import web

from gateway.server import wire_routes
from tests.conftest import GatewayFactory, model_entry, serve_app
from tests.fakes.anthropic_server import FakeAnthropic
from tests.server.test_big_chat import big_body, held_until


class SilentUpstream:
    """An Anthropic endpoint that takes requests and never answers (until the test ends)."""

    def __init__(self) -> None:
        self.arrived = asyncio.Event()
        self.done = asyncio.Event()
        self.app = web.Application()
        self.app.router.add_post("/v1/messages/count_tokens", self.hang)
        self.runner: web.AppRunner | None = None
        self.base_url = ""

    async def hang(self, request: web.Request) -> web.Response:
        await request.read()
        self.arrived.set()
        await self.done.wait()
        return web.json_response({"input_tokens": 1})

    async def __aenter__(self) -> SilentUpstream:
        self.runner, root = await serve_app(self.app)
        self.base_url = root
        return self

    async def __aexit__(self, *_: object) -> None:
        self.done.set()
        assert self.runner is not None
        await self.runner.cleanup()


@pytest.fixture
async def silent() -> AsyncIterator[SilentUpstream]:
    async with SilentUpstream() as server:
        yield server


def claude(api_base: str, **model_info: Any) -> dict[str, Any]:
    return model_entry("claude", api_base, model="anthropic/claude-x", **model_info)


async def test_a_native_count_that_never_answers_ends_at_the_deadline_with_504(
    gateway_factory: GatewayFactory, silent: SilentUpstream
) -> None:
    gw = await gateway_factory({"model_list": [claude(silent.base_url,
                                                      recovery={"deadline": 1.0})]})
    # The client waits at most 30 s: without a deadline the gateway would wait 600.
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key="k", max_retries=0,
                                        timeout=30) as c:
        with pytest.raises(anthropic.APIStatusError) as late:
            await c.messages.count_tokens(model="claude",
                                          messages=[{"role": "user", "content": "hi"}])
    assert silent.arrived.is_set()  # the upstream had it, and kept it
    assert late.value.status_code == 504
    body: Any = late.value.body
    assert body["type"] == "error" and body["error"]["type"] == "timeout_error"
    assert "deadline" in body["error"]["message"]
    assert late.value.response.headers["x-request-id"].startswith("req_")


async def test_healthz_answers_while_big_count_requests_are_worked_on(
    gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with FakeAnthropic() as fake:
        gw = await gateway_factory({"model_list": [
            claude(fake.base_url),
            model_entry("gpt", "http://127.0.0.1:9/v1", model="openai/gpt-4o")]})
        # Each request's repair step waits until /healthz was answered: only possible when
        # that step runs off the event loop.
        release, arrived = threading.Event(), threading.Semaphore(0)
        held, released = held_until(release, arrived, wire_routes.read_messages)
        monkeypatch.setattr(wire_routes, "read_messages", held)
        bodies = [big_body("claude"), big_body("gpt"), big_body("claude"), big_body("gpt")]
        headers = {"Content-Type": "application/json", "anthropic-version": "2023-06-01"}

        async def count(http: aiohttp.ClientSession, body: bytes) -> tuple[int, Any]:
            async with http.post(gw.root + "/v1/messages/count_tokens",
                                 data=io.BytesIO(body), headers=headers) as r:
                return r.status, await r.json()

        async with aiohttp.ClientSession() as http:
            counting = [asyncio.create_task(count(http, body)) for body in bodies]
            for _ in bodies:
                assert await asyncio.to_thread(arrived.acquire, True, 120)
            async with http.get(gw.root + "/healthz") as r:
                assert r.status == 200
            release.set()
            answers = await asyncio.gather(*counting)
    assert released == [True] * len(bodies)
    assert [status for status, _ in answers] == [200] * len(bodies)
    assert all(answer["input_tokens"] > 1_000_000 for _, answer in answers)
    assert [r.path for r in fake.requests] == ["/v1/messages/count_tokens"] * 2
