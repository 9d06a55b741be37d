"""The private aiohttp members behind the header timeout are still what the gateway reads.

``gateway/server/aiohttp_private.py`` is the only module that touches them. An aiohttp that
renames, drops or changes the meaning of one fails here, naming it, instead of the header
timeout quietly never firing.
"""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from gateway.server import aiohttp_private as private
from gateway.server.http import GatewayProtocol, GatewayRunner
from tests.conftest import serve_app


def test_every_private_member_is_there() -> None:
    assert private.missing_members() == []


def test_a_missing_member_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(private, "PROTOCOL_MEMBERS", (*private.PROTOCOL_MEMBERS, "_gone"))
    monkeypatch.setattr(private, "SERVER_MEMBERS", (*private.SERVER_MEMBERS, "_also_gone"))
    assert private.missing_members() == ["RequestHandler._gone", "Server._also_gone"]


def test_no_other_module_touches_aiohttp_privates() -> None:
    from pathlib import Path

    package = Path(private.__file__).resolve().parents[1]
    names = (*private.PROTOCOL_MEMBERS, *private.SERVER_MEMBERS, *private.RUNNER_HOOKS)
    offenders = []
    for path in package.rglob("*.py"):
        if path.name == "aiohttp_private.py":
            continue
        text = path.read_text(encoding="utf-8")
        offenders += [f"{path.name}: {name}" for name in names
                      if f"._{name.lstrip('_')}" in text and name != "_loop"]
    assert offenders == []


async def _wait_for(condition: object, what: str) -> None:
    for _ in range(2000):  # event-loop turns, not wall time
        if callable(condition) and condition():
            return
        await asyncio.sleep(0)
    raise AssertionError(f"never true: {what}")


async def test_the_members_mean_what_the_header_timeout_needs() -> None:
    seen: dict[str, object] = {}

    async def handler(request: web.Request) -> web.Response:
        protocol = request.protocol
        assert isinstance(protocol, RequestHandler)
        seen["started"] = private.requests_started(protocol)
        seen["awaiting"] = private.awaiting_request(protocol)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", handler)
    runner, root = await serve_app(app, header_timeout=30)
    assert isinstance(runner, GatewayRunner)
    port = int(root.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        server = runner.server
        assert server is not None
        await _wait_for(lambda: len(server.connections) == 1, "a connection")
        protocol = server.connections[0]
        assert isinstance(protocol, GatewayProtocol)  # the runner swapped the server
        await _wait_for(lambda: private.awaiting_request(protocol), "idle, awaiting a head")
        assert private.requests_started(protocol) == 0
        assert private.protocol_loop(protocol) is asyncio.get_running_loop()

        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        head = await asyncio.wait_for(reader.readuntil(b"ok"), 10)
        assert head.startswith(b"HTTP/1.1 200")
        assert seen == {"started": 1, "awaiting": False}  # serving, not awaiting
        await _wait_for(lambda: private.awaiting_request(protocol), "idle again (keep-alive)")

        private.stop_lingering(protocol)
        assert protocol._lingering_time == 0.0
    finally:
        writer.close()
        await runner.cleanup()
