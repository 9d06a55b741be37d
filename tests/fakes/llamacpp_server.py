"""A local OpenAI-compatible model server with a small context window, like llama.cpp's
``llama-server`` started with its default ``-c 2048``.

It counts the prompt with its own tokenizer (tiktoken plus a tenth: a local model's
tokenizer is not OpenAI's), refuses a prompt that does not fit with llama.cpp's own
overflow body (``exceed_context_size_error`` with ``n_prompt_tokens`` / ``n_ctx``), also
when the prompt plus the requested ``max_tokens`` cannot fit, and answers everything else.
Summary requests (the gateway's summarizer instructions) get a short summary, or, with
``fail_summaries``, llama.cpp's ``500`` for a crashed generation, or, with
``slow_summaries``, no answer until the server stops (a small model on a CPU writing a long
summary: slower than any request deadline), or, with a ``summary_gate``, the summary once
the test opens the gate.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Self

import orjson
from aiohttp import web

from gateway.compaction.summary_request import DEFAULT_INSTRUCTIONS
from gateway.compaction.tokens import get_encoding
from tests.conftest import serve_app

SUMMARY_TEXT = (
    "## Task\nThe user asks a long series of numbered questions about a garden plan.\n\n"
    "## Current State\nEvery question so far was answered briefly.\n\n"
    "## Next Steps\nAnswer the next numbered question."
)


def prompt_tokens(messages: list[dict[str, Any]]) -> int:
    """The prompt size as this server counts it (chat template tokens included)."""
    encoding = get_encoding("o200k_base")  # the offline copy litellm ships
    total = 0
    for message in messages:
        content = message.get("content")
        text = content if isinstance(content, str) else orjson.dumps(content).decode()
        calls = message.get("tool_calls")
        if calls:
            text += orjson.dumps(calls).decode()
        total += len(encoding.encode(text or "")) + 6
    return int(total * 1.1) + 3


def overflow_body(tokens: int, n_ctx: int) -> dict[str, Any]:
    """llama.cpp server's answer to a prompt larger than its context."""
    return {"error": {
        "code": 400,
        "message": f"request ({tokens} tokens) exceeds the available context size "
                   f"({n_ctx} tokens), try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": tokens,
        "n_ctx": n_ctx,
    }}


@dataclass
class LlamaCppServer:
    """The fake server; ``requests`` records every chat body received."""

    n_ctx: int = 2048
    fail_summaries: bool = False
    slow_summaries: bool = False
    summary_gate: asyncio.Event | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    base_url: str = ""
    _runner: web.AppRunner | None = None
    _stopping: asyncio.Event = field(default_factory=asyncio.Event)

    @staticmethod
    def is_summary(body: dict[str, Any]) -> bool:
        """True for the gateway's summary requests."""
        messages = body.get("messages") or []
        return bool(messages) and messages[0].get("content") == DEFAULT_INSTRUCTIONS

    def summary_requests(self) -> list[dict[str, Any]]:
        """The summary requests received."""
        return [b for b in self.requests if self.is_summary(b)]

    def chat_requests(self) -> list[dict[str, Any]]:
        """The chat requests received (everything but summary requests)."""
        return [b for b in self.requests if not self.is_summary(b)]

    async def _chat(self, request: web.Request) -> web.Response:
        body = orjson.loads(await request.read())
        self.requests.append(body)
        tokens = prompt_tokens(body["messages"])
        wanted = body.get("max_tokens") or 0
        if tokens > self.n_ctx or (wanted and tokens + wanted > self.n_ctx):
            return web.json_response(overflow_body(tokens, self.n_ctx), status=400)
        if self.is_summary(body):
            if self.slow_summaries:  # still generating when the gateway gives up on it
                await self._stopping.wait()
                raise web.HTTPServiceUnavailable()
            if self.summary_gate is not None:
                await self.summary_gate.wait()
            if self.fail_summaries:
                return web.json_response({"error": {
                    "code": 500, "message": "Internal server error: failed to decode the "
                    "batch, KV cache is full", "type": "server_error"}}, status=500)
            text = SUMMARY_TEXT
        else:
            text = f"Answer {len(self.chat_requests())}."
        return web.json_response({
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion",
            "created": int(time.time()), "model": body.get("model", "local"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": tokens, "completion_tokens": 20,
                      "total_tokens": tokens + 20},
        })

    async def __aenter__(self) -> Self:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self._runner, root = await serve_app(app)
        self.base_url = f"{root}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._stopping.set()
        if self._runner is not None:
            await self._runner.cleanup()
