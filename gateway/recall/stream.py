"""Reading a model's answer for the recall tool, as a response the client can still get:
a stream is held back only until its first events show what it is (``inspect``); a text
stream that turns into a recall call later is spliced with the next answer
(``SplicedStream``). The decisions are the pure ``recall_wire``; this is the I/O."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson

from gateway.providers.base import UpstreamError, UpstreamResponse
from gateway.providers.openai_compat import BufferedResponse
from gateway.providers.sse import SseReader
from gateway.recall.wire import (
    ModelAnswer,
    SseEvents,
    StreamAssembler,
    answer_from_completion,
    signal,
)

MAX_TOOL_ANSWER: Final = 4 * 1024 * 1024  # bytes of a streamed tool-call answer held back


@dataclass(slots=True)
class HeldStream:
    """A stream whose first bytes were held back while the gateway looked at them."""

    inner: UpstreamResponse
    head: bytes
    rest: AsyncIterator[bytes] | None
    status: int
    content_type: str
    relay_headers: tuple[tuple[str, str], ...]

    async def chunks(self) -> AsyncIterator[bytes]:
        """The held bytes, then the rest as it arrives."""
        if self.head:
            yield self.head
        if self.rest is not None:
            async for chunk in self.rest:
                yield chunk

    async def aclose(self) -> None:
        """Close the reader and the upstream response."""
        rest = self.rest
        if rest is not None and hasattr(rest, "aclose"):
            await rest.aclose()
        await self.inner.aclose()


async def inspect(response: UpstreamResponse, stream: bool
                  ) -> tuple[ModelAnswer | None, UpstreamResponse | None]:
    """Read as much of ``response`` as it takes to know whether it calls tools.

    Returns the answer when it is a tool-call answer (None for text), and the response to
    relay when the answer is not consumed by the caller (None after a complete tool-call
    stream was read: the caller decides). A text stream is held back only until its first
    text (or end); a tool-call stream is read to its end.
    """
    if not stream or not response.content_type.startswith("text/event-stream"):
        try:
            raw = b"".join([chunk async for chunk in response.chunks()])
        finally:
            await response.aclose()
        held = BufferedResponse(raw, response.status, response.content_type,
                                response.relay_headers)
        return answer_from_completion(raw), held
    source = response.chunks()
    events = SseEvents()
    assembler = StreamAssembler()
    buffered: list[bytes] = []
    size = 0
    tools = False
    try:
        async for chunk in source:
            buffered.append(chunk)
            size += len(chunk)
            for event in events.feed(chunk):
                assembler.add(event)
                if not tools:
                    seen = signal(event)
                    if seen == "text":
                        return None, _held(response, buffered, source)
                    tools = seen == "tools"
            if tools and size > MAX_TOOL_ANSWER:
                return None, _held(response, buffered, source)
            if events.done and not tools:
                break
    except BaseException:  # cancelled (client gone, deadline): release the upstream
        await source.aclose()  # type: ignore[attr-defined]
        await response.aclose()
        raise
    if not tools:
        return None, _held(response, buffered, source)
    answer = assembler.answer()
    return answer, _held(response, buffered, None)


def _held(response: UpstreamResponse, buffered: list[bytes],
          rest: AsyncIterator[bytes] | None) -> HeldStream:
    return HeldStream(response, b"".join(buffered), rest, response.status,
                      response.content_type, response.relay_headers)


class RawEvents:
    """Splits SSE bytes into whole events: ``(bytes to relay, the data object or None)``."""

    def __init__(self) -> None:
        self._reader = SseReader()

    def feed(self, chunk: bytes) -> list[tuple[bytes, dict[str, Any] | None]]:
        """The complete events in ``chunk`` (with what was pending before it)."""
        out: list[tuple[bytes, dict[str, Any] | None]] = []
        for event in self._reader.feed(chunk):
            value = event.json()
            out.append((event.raw, value if isinstance(value, dict) else None))
        return out

    def rest(self) -> bytes:
        """Bytes after the last complete event."""
        return self._reader.rest()


def _calls_tool(chunk: dict[str, Any], name: str) -> bool:
    choices = chunk.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return False
    delta = choices[0].get("delta")
    calls = delta.get("tool_calls") if isinstance(delta, dict) else None
    return isinstance(calls, list) and any(
        isinstance(c, dict) and isinstance(c.get("function"), dict)
        and c["function"].get("name") == name for c in calls)


class SplicedStream:
    """A text stream relayed event by event; when it turns into a recall call, the call
    and the rest of that answer are held back, answered, and the next answer (from
    ``resume``) continues the same stream, so the client sees one answer and no recall."""

    def __init__(self, held: HeldStream, name: str,
                 resume: Callable[[ModelAnswer], Awaitable[UpstreamResponse]]) -> None:
        self.held = held
        self.name = name
        self.resume = resume
        self.status = held.status
        self.content_type = held.content_type
        self.relay_headers = held.relay_headers
        self._next: UpstreamResponse | None = None

    async def chunks(self) -> AsyncIterator[bytes]:
        """The events as they come; after a recall call, the next answer's."""
        events = RawEvents()
        assembler = StreamAssembler()
        captured = False
        async for chunk in self.held.chunks():
            for raw, parsed in events.feed(chunk):
                if parsed is not None:
                    assembler.add(parsed)
                    captured = captured or _calls_tool(parsed, self.name)
                if not captured:
                    yield raw
        if not captured:
            if events.rest():
                yield events.rest()
            return
        await self.held.aclose()
        try:
            self._next = await self.resume(assembler.answer())
        except UpstreamError as err:
            error = {"error": {"message": err.failure.message, "type": "api_error",
                               "param": None, "code": err.failure.code or str(err.failure.status)}}
            yield b"data: " + orjson.dumps(error) + b"\n\n"
            return
        async for chunk in self._next.chunks():
            yield chunk

    async def aclose(self) -> None:
        """Close the held stream and the next answer's."""
        await self.held.aclose()
        if self._next is not None:
            await self._next.aclose()
