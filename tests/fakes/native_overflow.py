"""A native agent-wire upstream (Anthropic Messages at ``/v1/messages``, Responses at
``/v1/responses``) with a small context window that refuses an oversized prompt *after its
stream opened*: Anthropic sends ``message_start`` then an ``error`` event ("prompt is too
long: N tokens > M maximum"); Responses sends ``response.created`` then, depending on
:attr:`responses_failure`, a ``response.failed`` event or a bare ``error`` event carrying
``context_length_exceeded`` (both seen from OpenAI). A whole (non-stream) request over the
window gets the provider's 400. Everything within the window is answered with
:mod:`tests.fakes.three_wires`' ``hello there``, streamed or whole.

Tokens are estimated as a quarter of the compact JSON of the prompt fields.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import orjson
from aiohttp import web

from gateway.compaction.summary_request import DEFAULT_INSTRUCTIONS
from tests.conftest import serve_app
from tests.fakes.three_wires import (
    anthropic_events,
    anthropic_whole,
    chat_whole,
    responses_events,
    responses_whole,
)

RESPONSES_OVERFLOW = ("Your input exceeds the context window of this model. Please adjust "
                      "your input and try again.")


def estimate(body: dict[str, Any]) -> int:
    """The prompt size: a quarter of the compact JSON of what the model reads."""
    parts = [body.get(k) for k in ("system", "messages", "instructions", "input", "tools")]
    return math.ceil(len(orjson.dumps([p for p in parts if p])) / 4)


def is_summary(body: dict[str, Any]) -> bool:
    """True for the gateway's summary requests (its instructions, on any wire)."""
    messages = body.get("messages") or [{}]
    head = body.get("system") or body.get("instructions") or messages[0]
    return DEFAULT_INSTRUCTIONS[:60].encode() in orjson.dumps(head)


def _sse(data: dict[str, Any], event: str) -> bytes:
    return f"event: {event}\n".encode() + b"data: " + orjson.dumps(data) + b"\n\n"


@dataclass
class NativeOverflow:
    """The fake (``async with``); :attr:`base_url` ends in ``/v1``."""

    window: int = 1_500
    responses_failure: Literal["response.failed", "error"] = "response.failed"
    summary_hold: asyncio.Event | None = None  # summary requests wait for it (or a hang-up)
    received: list[tuple[str, dict[str, Any], int | str]] = field(default_factory=list)
    summaries: list[dict[str, Any]] = field(default_factory=list)  # as they arrive
    base_url: str = ""
    _runner: web.AppRunner | None = None

    def refused(self) -> list[dict[str, Any]]:
        """The bodies refused as too long."""
        return [b for _, b, verdict in self.received if verdict != 200]

    def answered(self) -> list[dict[str, Any]]:
        """The bodies answered."""
        return [b for _, b, verdict in self.received if verdict == 200]

    async def _hold(self, body: dict[str, Any]) -> None:
        if is_summary(body):
            self.summaries.append(body)
            if self.summary_hold is not None:
                await self.summary_hold.wait()

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        await self._hold(body)
        tokens = estimate(body)
        too_long = tokens > self.window
        error = {"type": "error", "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {tokens} tokens > {self.window} maximum"}}
        if not body.get("stream"):
            self.received.append((request.path, body, 400 if too_long else 200))
            if too_long:
                return web.json_response(error, status=400)
            return web.json_response(anthropic_whole("up-model"))
        self.received.append((request.path, body, "stream-error" if too_long else 200))
        events = anthropic_events("up-model")
        if too_long:
            events = [events[0], _sse(error, "error")]
        return await self._stream(request, events)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        await self._hold(body)
        too_long = estimate(body) > self.window
        error = {"message": RESPONSES_OVERFLOW, "type": "invalid_request_error",
                 "param": "input", "code": "context_length_exceeded"}
        if not body.get("stream"):
            self.received.append((request.path, body, 400 if too_long else 200))
            if too_long:
                return web.json_response({"error": error}, status=400)
            return web.json_response(responses_whole("up-model"))
        self.received.append((request.path, body, "stream-error" if too_long else 200))
        events = responses_events("up-model")
        if too_long:
            if self.responses_failure == "error":
                failure = _sse({"type": "error", "sequence_number": 1, "error": error}, "error")
            else:
                failed = {**responses_whole("up-model", "failed"), "error": {
                    "code": "context_length_exceeded", "message": RESPONSES_OVERFLOW}}
                failure = _sse({"type": "response.failed", "sequence_number": 1,
                                "response": failed}, "response.failed")
            events = [events[0], failure]
        return await self._stream(request, events)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        """Chat Completions (where the gateway asks a Responses model for its summary)."""
        body = orjson.loads(await request.read())
        await self._hold(body)
        tokens = estimate(body)
        too_long = tokens > self.window
        self.received.append((request.path, body, 400 if too_long else 200))
        if too_long:
            return web.json_response({"error": {
                "message": f"This model's maximum context length is {self.window} tokens. "
                           f"However, your messages resulted in {tokens} tokens.",
                "type": "invalid_request_error", "param": "messages",
                "code": "context_length_exceeded"}}, status=400)
        return web.json_response(chat_whole("up-model"))

    async def _stream(self, request: web.Request, events: list[bytes]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(event)
        await response.write_eof()
        return response

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner, root = await serve_app(app)
        self.base_url = f"{root}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
