"""Every private aiohttp member the gateway relies on, fenced in this one module.

aiohttp has no public hook for what :mod:`gateway.server.http` does (a timeout on reading a
request's *headers*, closing at once instead of lingering over a stalled body, serving an app
through a protocol subclass), so it reads and writes a few private members of aiohttp's
``RequestHandler``, ``Server`` and ``AppRunner``. Nothing else in the gateway may touch an
aiohttp member whose name starts with ``_``; here each one is named once
(:data:`PROTOCOL_MEMBERS`, :data:`SERVER_MEMBERS`, :data:`RUNNER_HOOKS`) and used through a
small function. ``requirements.lock`` pins the aiohttp these were read from
(:data:`TESTED_WITH`); ``tests/server/test_aiohttp_private.py`` fails on an aiohttp that drops
or retypes any of them, before the header-timeout defence silently stops working.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

__all__ = [
    "PROTOCOL_MEMBERS",
    "RUNNER_HOOKS",
    "SERVER_MEMBERS",
    "TESTED_WITH",
    "ServerSwappingRunner",
    "awaiting_request",
    "missing_members",
    "new_protocol",
    "protocol_loop",
    "requests_started",
    "stop_lingering",
]

TESTED_WITH = "3.14"  # the aiohttp minor version these members were read from

# RequestHandler slots: the count of request heads parsed, the parser's queue of messages not
# yet handled, the future the handler task waits on for the next one, the seconds aiohttp
# keeps reading a body the handler left unread, the close flag; the event loop (BaseProtocol).
PROTOCOL_MEMBERS = ("_request_count", "_messages", "_waiter", "_lingering_time",
                    "_force_close", "_loop")
# Server attributes: its loop and the keyword arguments it passes to every protocol.
SERVER_MEMBERS = ("_loop", "_kwargs")
# AppRunner: the coroutine that runs the app's startup and builds the low-level Server.
RUNNER_HOOKS = ("_make_server",)


def requests_started(protocol: RequestHandler) -> int:
    """How many request heads ``protocol`` has parsed on its connection so far."""
    count: int = protocol._request_count
    return count


def awaiting_request(protocol: RequestHandler) -> bool:
    """Whether ``protocol`` is idle, waiting for the next request's head to arrive (also
    before its first: uvloop delivers a new connection's first bytes before ``start()``
    set up its waiter)."""
    waiter = protocol._waiter
    if protocol._messages or protocol._force_close:
        return False
    if waiter is None:
        return bool(protocol._request_count == 0)
    return not waiter.done()


def stop_lingering(protocol: RequestHandler) -> None:
    """Close right after the response instead of reading the rest of an unread body."""
    protocol._lingering_time = 0.0


def protocol_loop(protocol: RequestHandler) -> asyncio.AbstractEventLoop:
    """The event loop ``protocol`` runs on."""
    loop: asyncio.AbstractEventLoop = protocol._loop
    return loop


def new_protocol(server: web.Server, factory: Callable[..., RequestHandler],
                 **extra: Any) -> RequestHandler:
    """A protocol for a new connection of ``server``, built as aiohttp's own would be."""
    return factory(server, loop=server._loop, **extra, **server._kwargs)


class ServerSwappingRunner(web.AppRunner):
    """An AppRunner that lets a subclass replace the low-level Server it builds.

    ``AppRunner._make_server`` runs the app's startup and returns aiohttp's ``Server``;
    :meth:`swap_server` gets that server and returns the one to serve with.
    """

    def swap_server(self, server: web.Server) -> web.Server:
        """The server to serve with instead of ``server`` (itself by default)."""
        return server

    async def _make_server(self) -> web.Server:
        return self.swap_server(await super()._make_server())

    @staticmethod
    def rebuild(server: web.Server, cls: Callable[..., web.Server], **extra: Any) -> web.Server:
        """A ``cls`` server with ``server``'s handler, factory, loop and protocol arguments."""
        return cls(server.request_handler, request_factory=server.request_factory,
                   handler_cancellation=server.handler_cancellation, loop=server._loop,
                   **extra, **server._kwargs)


def missing_members() -> list[str]:
    """The private members above that this aiohttp no longer has (empty when all are there)."""
    slots: set[str] = set()
    for klass in RequestHandler.__mro__:
        slots.update(getattr(klass, "__slots__", ()))
    missing = [f"RequestHandler.{name}" for name in PROTOCOL_MEMBERS
               if name not in slots and not hasattr(RequestHandler, name)]
    probe = web.Server.__new__(web.Server)
    try:
        web.Server.__init__(probe, _unused_handler, loop=asyncio.new_event_loop())
        missing += [f"Server.{name}" for name in SERVER_MEMBERS if not hasattr(probe, name)]
    finally:
        loop = getattr(probe, "_loop", None)
        if isinstance(loop, asyncio.AbstractEventLoop):
            loop.close()
    missing += [f"AppRunner.{name}" for name in RUNNER_HOOKS
                if not asyncio.iscoroutinefunction(getattr(web.AppRunner, name, None))]
    return missing


async def _unused_handler(request: web.BaseRequest) -> web.StreamResponse:
    raise NotImplementedError
