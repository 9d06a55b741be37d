"""Recovery step 3 (degraded media): fetching remote images over real loopback HTTP."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import socket
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from PIL import Image

import gateway.recovery.media_step as media_step
from gateway.projection.media import MediaLimits
from gateway.recovery.media_step import degrade_request_media

LIMITS = MediaLimits()
NOTE_NOT_FETCHED = {"type": "text", "text": "[image removed: could not be fetched]"}


def encode(img: Image.Image, fmt: str) -> bytes:
    buf = io.BytesIO()
    img.save(buf, fmt)
    return buf.getvalue()


SMALL_PNG = encode(Image.new("RGB", (64, 48), (10, 200, 30)), "PNG")
WIDE_PNG = encode(Image.linear_gradient("L").resize((3136, 200)).convert("RGB"), "PNG")
BIG_BODY = 64 * 1024 * 1024


@dataclass
class Server:
    base: str
    hits: dict[str, int] = field(default_factory=dict)
    streamed: int = 0
    stream_done: asyncio.Event = field(default_factory=asyncio.Event)
    release: asyncio.Event = field(default_factory=asyncio.Event)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    state = Server(base="")

    def counted(handler: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
        async def wrapper(request: web.Request) -> web.StreamResponse:
            state.hits[request.path] = state.hits.get(request.path, 0) + 1
            return await handler(request)  # type: ignore[no-any-return]
        return wrapper

    async def small(_: web.Request) -> web.Response:
        return web.Response(body=SMALL_PNG, content_type="image/png")

    async def wide(_: web.Request) -> web.Response:
        return web.Response(body=WIDE_PNG, content_type="image/png")

    async def endless(request: web.Request) -> web.StreamResponse:
        # Chunked, no Content-Length: the client only learns the size by reading.
        resp = web.StreamResponse()
        await resp.prepare(request)
        chunk = bytes(64 * 1024)
        try:
            while state.streamed < BIG_BODY:
                await resp.write(chunk)
                state.streamed += len(chunk)
        except ConnectionError:
            pass  # the client hung up: what this test wants
        finally:
            state.stream_done.set()
        return resp

    async def declared_huge(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Length": str(BIG_BODY)})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):
            await resp.write(bytes(1024))
        return resp

    async def hang(_: web.Request) -> web.Response:
        await state.release.wait()
        return web.Response(body=SMALL_PNG)

    async def redirect(_: web.Request) -> web.Response:
        raise web.HTTPFound("/small.png")

    async def loop(_: web.Request) -> web.Response:
        raise web.HTTPFound("/loop")

    app = web.Application()
    for path, handler in [("/small.png", small), ("/wide.png", wide), ("/endless", endless),
                          ("/declared-huge", declared_huge), ("/hang", hang),
                          ("/redirect", redirect), ("/loop", loop)]:
        app.router.add_get(path, counted(handler))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    state.base = f"http://127.0.0.1:{port}"
    try:
        yield state
    finally:
        state.release.set()
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def request_with(*urls: str) -> list[dict[str, Any]]:
    parts = [{"type": "image_url", "image_url": {"url": u, "detail": "auto"}} for u in urls]
    return [{"role": "user", "content": [{"type": "text", "text": "what is this?"}, *parts]}]


def decoded(part: dict[str, Any]) -> tuple[str, bytes]:
    header, _, payload = part["image_url"]["url"].partition(",")
    return header, base64.b64decode(payload)


async def degrade(messages: list[dict[str, Any]], session: aiohttp.ClientSession | None,
                  **kw: Any) -> Any:
    kw.setdefault("allow_private_addresses", True)  # the test server lives on loopback
    return await degrade_request_media(messages, kw.pop("limits", LIMITS),
                                       kw.pop("policy", "degraded"), session, **kw)


async def test_remote_image_is_fetched_and_inlined(server: Server,
                                                  session: aiohttp.ClientSession) -> None:
    result = await degrade(request_with(server.url("/small.png")), session)

    part = result.messages[0]["content"][1]
    assert decoded(part) == ("data:image/png;base64", SMALL_PNG)
    assert part["image_url"]["detail"] == "auto"
    assert [c.action for c in result.changes] == ["inlined"]


async def test_oversized_remote_image_is_downscaled(server: Server,
                                                   session: aiohttp.ClientSession) -> None:
    result = await degrade(request_with(server.url("/wide.png")), session)
    _, raw = decoded(result.messages[0]["content"][1])
    assert Image.open(io.BytesIO(raw)).size == (1568, 100)
    assert result.changes[0].action == "downscaled"


async def test_same_url_twice_is_fetched_once(server: Server,
                                             session: aiohttp.ClientSession) -> None:
    url = server.url("/small.png")
    result = await degrade(request_with(url) + request_with(url), session)
    assert server.hits == {"/small.png": 1}
    assert all(m["content"][1]["image_url"]["url"].startswith("data:") for m in result.messages)


async def test_404_is_replaced_by_a_note(server: Server, session: aiohttp.ClientSession) -> None:
    result = await degrade(request_with(server.url("/missing.png")), session)
    assert result.messages[0]["content"][1] == NOTE_NOT_FETCHED
    assert result.changes[0].reason == "could not be fetched: HTTP 404"


async def test_unreachable_host_is_replaced_by_a_note(session: aiohttp.ClientSession) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = await degrade(request_with(f"http://127.0.0.1:{port}/x.png"), session)
    assert result.messages[0]["content"][1] == NOTE_NOT_FETCHED
    assert result.changes[0].action == "removed"


async def test_oversized_streamed_body_is_refused_without_reading_it_all(
        server: Server, session: aiohttp.ClientSession) -> None:
    limits = MediaLimits(max_input_bytes=256 * 1024)
    result = await degrade(request_with(server.url("/endless")), session, limits=limits)

    assert result.messages[0]["content"][1] == NOTE_NOT_FETCHED
    assert "exceeds 262144 bytes" in result.changes[0].reason
    await asyncio.wait_for(server.stream_done.wait(), timeout=30)
    # the server got to write only the limit plus what the socket buffers swallowed
    assert server.streamed < BIG_BODY // 4, server.streamed


async def test_declared_oversized_body_is_refused_from_its_header(
        server: Server, session: aiohttp.ClientSession) -> None:
    result = await degrade(request_with(server.url("/declared-huge")), session)
    assert result.messages[0]["content"][1] == NOTE_NOT_FETCHED
    assert result.changes[0].reason == (
        f"could not be fetched: body of {BIG_BODY} bytes exceeds {LIMITS.max_input_bytes}")


async def test_slow_server_times_out_into_a_note(server: Server,
                                                session: aiohttp.ClientSession) -> None:
    result = await degrade(request_with(server.url("/hang")), session, fetch_timeout=0.2)
    assert result.messages[0]["content"][1] == NOTE_NOT_FETCHED
    assert "timed out" in result.changes[0].reason


async def test_redirects_are_followed_but_bounded(server: Server,
                                                 session: aiohttp.ClientSession) -> None:
    result = await degrade(request_with(server.url("/redirect"), server.url("/loop")), session)
    content = result.messages[0]["content"]
    assert decoded(content[1]) == ("data:image/png;base64", SMALL_PNG)
    assert content[2] == NOTE_NOT_FETCHED
    assert server.hits["/loop"] == 4  # first request + 3 redirects, then it gives up


async def test_loopback_is_not_fetched_by_default(server: Server,
                                                 session: aiohttp.ClientSession) -> None:
    messages = request_with(server.url("/small.png"), "http://localhost:1/x.png")
    result = await degrade_request_media(messages, LIMITS, "degraded", session)
    assert result.messages[0]["content"][1:] == [NOTE_NOT_FETCHED, NOTE_NOT_FETCHED]
    assert "is not public" in result.changes[0].reason
    assert server.hits == {}


async def test_total_fetch_budget_leaves_the_rest_remote(server: Server,
                                                        session: aiohttp.ClientSession) -> None:
    first, second = server.url("/wide.png"), server.url("/small.png")
    result = await degrade(request_with(first, second), session, max_concurrency=1,
                           max_total_fetch_bytes=len(WIDE_PNG) + len(SMALL_PNG) // 2)
    content = result.messages[0]["content"]
    assert content[1]["image_url"]["url"].startswith("data:image/")
    assert content[2]["image_url"]["url"] == second  # not fetched, left as it was


async def test_strip_fetches_nothing(server: Server, session: aiohttp.ClientSession) -> None:
    result = await degrade(request_with(server.url("/small.png")), session, policy="strip")
    assert result.messages[0]["content"][1]["text"].startswith("[image removed: images are not")
    assert server.hits == {}


async def test_without_session_remote_images_stay(server: Server) -> None:
    messages = request_with(server.url("/small.png"))
    result = await degrade(messages, None)
    assert result.messages[0] is messages[0]
    assert not result.changes


async def test_pillow_work_runs_off_the_event_loop(server: Server, session: aiohttp.ClientSession,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    threads: list[int] = []
    original = media_step.degrade_messages

    def spy(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return original(*args)

    monkeypatch.setattr(media_step, "degrade_messages", spy)
    result = await degrade(request_with(server.url("/wide.png")), session)
    assert result.changes[0].action == "downscaled"
    assert threads and threads[0] != threading.get_ident()
