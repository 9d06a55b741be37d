"""Raw-socket HTTP for tests where HTTP itself is broken: send bytes, read the answer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import orjson
from yarl import URL


@dataclass(frozen=True)
class RawAnswer:
    """What came back on the socket: status, lowercased headers and the body."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON."""
        return orjson.loads(self.body)


def parse_answer(data: bytes) -> RawAnswer:
    """Split a raw HTTP/1.1 answer (Content-Length or connection-close framed)."""
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = headers.get("content-length")
    if length is not None:
        body = body[: int(length)]
    return RawAnswer(status, headers, body)


async def exchange(root: str, data: bytes, *, bound: float = 15.0) -> RawAnswer:
    """Send ``data`` to the server at ``root`` and read until it closes the connection.

    ``bound`` only keeps a broken server from hanging the test suite.
    """
    url = URL(root)
    reader, writer = await asyncio.open_connection(url.host, url.port)
    try:
        writer.write(data)
        await writer.drain()
        got = await asyncio.wait_for(reader.read(-1), bound)
    finally:
        writer.close()
    return parse_answer(got)
