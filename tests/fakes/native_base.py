"""Shared plumbing for the native (non-OpenAI) fake upstreams: a real aiohttp server on
127.0.0.1 with a free port, a record of every request, and a queue of scripted answers."""

from __future__ import annotations

import base64
import binascii
import io
import warnings
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import orjson
from aiohttp import web
from PIL import Image


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the fake received it (header names lower-cased)."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    raw: bytes
    body: Any


@dataclass(frozen=True)
class Canned:
    """A scripted whole answer: status, JSON (or raw bytes) body and headers."""

    status: int
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    def response(self) -> web.Response:
        """This answer as an aiohttp response."""
        raw = self.body if isinstance(self.body, bytes) else orjson.dumps(self.body)
        headers = {"content-type": "application/json", **self.headers}
        return web.Response(status=self.status, body=raw, headers=headers)


@dataclass(frozen=True)
class MidStreamError:
    """For a streaming request: send the opening events and some text, then this error
    in the native stream error shape, then close the connection."""

    message: str
    error_type: str = "overloaded_error"
    code: int = 503


Scripted = Canned | MidStreamError


class RequestRefused(Exception):
    """Raised by native validation; carries the native status and message."""

    def __init__(self, status: int, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def decode_base64(data: Any) -> bytes | None:
    """Strict base64 decoding; None when the text is not valid base64."""
    if not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        return None


def sniff_image(data: bytes) -> str | None:
    """The media type the image bytes actually are, from their magic number."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data.startswith(b"RIFF") and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def image_size(data: bytes) -> tuple[int, int]:
    """(width, height) from the image header only (no pixel is decoded); (0, 0) if unreadable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(io.BytesIO(data)) as image:
                return image.size
    except (Image.DecompressionBombError, OSError, ValueError, SyntaxError):
        return (0, 0)


def rough_tokens(value: Any) -> int:
    """A deterministic token estimate (4 bytes of JSON per token) for usage and limits."""
    return max(1, len(orjson.dumps(value)) // 4)


class FakeServer:
    """Base class: subclasses add routes in ``_routes`` and answer requests."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._script: deque[Scripted] = deque()
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>`` (no path)."""
        return f"http://127.0.0.1:{self.port}"

    def script(self, *responses: Scripted) -> None:
        """Queue answers for the next requests, in order; afterwards normal service."""
        self._script.extend(responses)

    def next_scripted(self) -> Scripted | None:
        """Pop the next scripted answer, if any."""
        return self._script.popleft() if self._script else None

    def _routes(self, app: web.Application) -> None:
        raise NotImplementedError

    async def record(self, request: web.Request) -> RecordedRequest:
        """Read and remember the request; the body is parsed JSON or None."""
        raw = await request.read()
        try:
            body: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        recorded = RecordedRequest(
            method=request.method,
            path=request.path,
            query=dict(request.query),
            headers={k.lower(): v for k, v in request.headers.items()},
            raw=raw,
            body=body,
        )
        self.requests.append(recorded)
        return recorded

    async def __aenter__(self) -> Self:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        self._routes(app)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def png_bytes(size: int = 2) -> bytes:
    """A tiny valid PNG image."""
    import io

    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (size, size), (255, 0, 0)).save(buffer, format="PNG")
    return buffer.getvalue()


def png_data_url() -> str:
    """A tiny PNG as an OpenAI ``image_url`` data URL."""
    return "data:image/png;base64," + base64.b64encode(png_bytes()).decode()


async def read_sse(chunks: Any) -> list[Any]:
    """Collect an OpenAI-wire SSE byte stream into parsed events (``"[DONE]"`` kept as is)."""
    raw = b"".join([piece async for piece in chunks])
    events: list[Any] = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        assert block.startswith(b"data: "), block
        payload = block[len(b"data: ") :]
        events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return events
