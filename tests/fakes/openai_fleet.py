"""A real aiohttp server speaking OpenAI Chat Completions, as one deployment of a fleet.

It serves both the OpenAI path (``/v1/chat/completions``) and the Azure OpenAI path
(``/openai/deployments/{name}/chat/completions?api-version=...``), names itself in every
answer (``from <name>: ...``), sends its own ``x-request-id`` and ``x-ratelimit-*`` headers,
and can be switched to a failure mode with OpenAI's real error bodies:

- ``dead``: ``500`` ``server_error`` (what a broken deployment answers);
- ``rate_limited``: ``429`` ``rate_limit_exceeded`` with ``retry-after``;
- a ``window``: a request larger than it (4 bytes of JSON per token) gets OpenAI's
  ``400 context_length_exceeded``.

    async with FleetUpstream("east") as east:
        east.base_url, east.hits, east.requests, east.mode = "dead"
"""

from __future__ import annotations

import asyncio
from itertools import count
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.native_base import FakeServer, rough_tokens

SERVER_ERROR = {"error": {
    "message": "The server had an error while processing your request. Sorry about that!",
    "type": "server_error", "param": None, "code": None}}


def rate_limit_error(model: str) -> dict[str, Any]:
    """OpenAI's 429 body for a requests-per-minute limit."""
    return {"error": {
        "message": f"Rate limit reached for {model} in organization org-fleet on requests per "
                   "min (RPM): Limit 500, Used 500, Requested 1. Please try again in 20s. "
                   "Visit https://platform.openai.com/account/rate-limits to learn more.",
        "type": "requests", "param": None, "code": "rate_limit_exceeded"}}


def context_length_error(window: int, tokens: int) -> dict[str, Any]:
    """OpenAI's 400 body for a context overflow."""
    return {"error": {
        "message": f"This model's maximum context length is {window} tokens. However, your "
                   f"messages resulted in {tokens} tokens. Please reduce the length of the "
                   "messages.",
        "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}


class FleetUpstream(FakeServer):
    """One OpenAI-compatible deployment (see the module docstring)."""

    def __init__(self, name: str, *, window: int | None = None, mode: str = "ok") -> None:
        super().__init__()
        self.name = name
        self.window = window
        self.mode = mode
        self._ids = count(1)
        # When set, a stream stops after its first chunk until the event is set (a long
        # answer still being generated).
        self.hold: asyncio.Event | None = None

    @property
    def v1(self) -> str:
        """The OpenAI-style base URL (``.../v1``)."""
        return f"{self.base_url}/v1"

    @property
    def hits(self) -> int:
        """Chat requests received."""
        return len(self.requests)

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        recorded = await self.record(request)
        body = recorded.body if isinstance(recorded.body, dict) else {}
        n = next(self._ids)
        headers = {"x-request-id": f"{self.name}-req-{n}",
                   "x-ratelimit-limit-requests": "500",
                   "x-ratelimit-remaining-requests": str(max(0, 500 - n))}
        model = str(body.get("model") or request.match_info.get("deployment", ""))
        if self.mode == "dead":
            return web.json_response(SERVER_ERROR, status=500, headers=headers)
        if self.mode == "rate_limited":
            headers["x-ratelimit-remaining-requests"] = "0"
            headers["retry-after"] = "20"
            return web.json_response(rate_limit_error(model), status=429, headers=headers)
        tokens = rough_tokens(body.get("messages"))
        if self.window is not None and tokens > self.window:
            return web.json_response(context_length_error(self.window, tokens), status=400,
                                     headers=headers)
        text = f"from {self.name}: {model}"
        if body.get("stream"):
            return await self._stream(request, model, text, headers)
        return web.json_response({
            "id": f"chatcmpl-{self.name}-{n}", "object": "chat.completion", "created": 1,
            "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 5,
                      "total_tokens": tokens + 5},
        }, headers=headers)

    async def _stream(self, request: web.Request, model: str, text: str,
                      headers: dict[str, str]) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", **headers})
        await response.prepare(request)
        for i, piece in enumerate((text[: len(text) // 2], text[len(text) // 2 :])):
            if i == 1 and self.hold is not None:
                await self.hold.wait()
            chunk = {"id": f"chatcmpl-{self.name}", "object": "chat.completion.chunk",
                     "created": 1, "model": model,
                     "choices": [{"index": 0, "delta": {"content": piece},
                                  "finish_reason": None}]}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response
