"""A fault-injecting OpenAI-compatible upstream, on a raw asyncio socket server.

Real providers (and the proxies in front of them) misbehave at the HTTP level: truncated
bodies, HTML error pages with a 200, statuses outside the HTTP range, redirects, event
streams that stop mid-event, bytes that trickle in one at a time. aiohttp's server will not
produce most of these, so this server speaks HTTP/1.1 by hand: it reads each request (head
and ``Content-Length`` body), records it, and answers with the next scripted fault (or a
well-formed completion when the script is empty). Each answer closes the connection.
"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

Writer = asyncio.StreamWriter
Fault = Callable[["Received", Writer], Awaitable[None]]

COMPLETION = {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
              "choices": [{"index": 0, "finish_reason": "stop",
                           "message": {"role": "assistant", "content": "fine"}}],
              "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}}


def chunk_event(content: str) -> bytes:
    """One ``chat.completion.chunk`` SSE event."""
    data = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
            "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": None}]}
    return b"data: " + json.dumps(data).encode() + b"\n\n"


@dataclass
class Received:
    """One request as the upstream saw it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The request body as JSON."""
        return json.loads(self.body)


def head(status: int | str, headers: dict[str, str] | None = None, *,
         length: int | None = None) -> bytes:
    """A response head; ``length`` adds Content-Length."""
    reasons = {200: "OK", 204: "No Content", 301: "Moved Permanently", 302: "Found",
               304: "Not Modified", 307: "Temporary Redirect"}
    reason = reasons.get(status, "Whatever") if isinstance(status, int) else "Whatever"
    lines = [f"HTTP/1.1 {status} {reason}"]
    for name, value in (headers or {}).items():
        lines.append(f"{name}: {value}")
    if length is not None:
        lines.append(f"Content-Length: {length}")
    lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def answer(status: int | str, body: bytes = b"", headers: dict[str, str] | None = None,
           *, length: int | None = None) -> Fault:
    """A complete answer; ``length`` may lie about the body (a truncated body)."""
    async def run(_: Received, w: Writer) -> None:
        w.write(head(status, headers, length=len(body) if length is None else length) + body)
        await w.drain()
    return run


def ok_json() -> Fault:
    """A well-formed completion."""
    body = json.dumps(COMPLETION).encode()
    return answer(200, body, {"Content-Type": "application/json"})


def ok_stream(*contents: str) -> Fault:
    """A well-formed event stream ending with ``[DONE]``."""
    body = b"".join(chunk_event(c) for c in contents) + b"data: [DONE]\n\n"
    return answer(200, body, {"Content-Type": "text/event-stream"})


def stream(*parts: bytes, hold: asyncio.Event | None = None) -> Fault:
    """An event stream whose body is ``parts`` as given (then closed, or held open until
    ``hold`` is set)."""
    async def run(_: Received, w: Writer) -> None:
        w.write(head(200, {"Content-Type": "text/event-stream"}))
        for part in parts:
            w.write(part)
            await w.drain()
        if hold is not None:
            await hold.wait()
    return run


def trickle(prefix: bytes, drip: bytes, until: asyncio.Event, *, interval: float = 0.05,
            ) -> Fault:
    """Send ``prefix`` then ``drip`` every ``interval`` seconds until ``until`` is set (or the
    gateway hangs up): a body, header or event that never ends."""
    async def run(_: Received, w: Writer) -> None:
        w.write(prefix)
        await w.drain()
        while not until.is_set() and not w.is_closing():
            w.write(drip)
            await w.drain()
            await asyncio.sleep(interval)
    return run


def flood(prefix: bytes, line: bytes, until: asyncio.Event, *, per_write: int = 64) -> Fault:
    """Send ``prefix`` then ``line`` repeated as fast as the socket takes it."""
    async def run(_: Received, w: Writer) -> None:
        w.write(prefix)
        block = line * per_write
        while not until.is_set() and not w.is_closing():
            w.write(block)
            await w.drain()
            await asyncio.sleep(0)
    return run


def gzip_bomb(expanded: int, *, content_type: str = "application/json") -> Fault:
    """A 200 whose gzip body expands to ``expanded`` bytes."""
    body = gzip.compress(b"{" + b" " * (expanded - 1), compresslevel=9)
    return answer(200, body, {"Content-Type": content_type, "Content-Encoding": "gzip"})


@dataclass
class FaultyUpstream:
    """The running fault server: script answers with :meth:`then`, read :attr:`received`."""

    script: list[Fault] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    connections: int = 0
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    server: asyncio.Server | None = None
    port: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    writers: set[Writer] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        """The ``api_base`` to configure."""
        return f"http://127.0.0.1:{self.port}/v1"

    def then(self, *faults: Fault) -> FaultyUpstream:
        """Queue answers for the next requests, in order."""
        self.script.extend(faults)
        return self

    async def _serve(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        self.connections += 1
        self.writers.add(writer)
        try:
            raw_head = await reader.readuntil(b"\r\n\r\n")
            lines = raw_head.decode("latin-1").split("\r\n")
            method, path, _ = lines[0].split(" ", 2)
            headers = {}
            for line in lines[1:]:
                if line:
                    name, _, value = line.partition(":")
                    headers[name.strip().lower()] = value.strip()
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            got = Received(method, path, headers, body)
            self.received.append(got)
            fault = self.script.pop(0) if self.script else ok_json()
            await fault(got, writer)
        except (ConnectionError, asyncio.IncompleteReadError):
            self.disconnected.set()
        finally:
            self.writers.discard(writer)
            writer.close()

    async def __aenter__(self) -> FaultyUpstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *_: object) -> None:
        self.stop.set()
        assert self.server is not None
        self.server.close()
        for writer in list(self.writers):
            writer.close()
        await self.server.wait_closed()
