"""Reading a Chat Completions answer as chunks, streamed or not (for the translations)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson

from gateway.providers.sse import SseReader


class ChunkReader:
    """The JSON values of a chat stream's events, its bytes cut anywhere
    (``gateway.providers.sse``); data that is not JSON is skipped, and so is everything
    after ``[DONE]`` (a server that sends more after it must not lengthen the answer)."""

    def __init__(self) -> None:
        self._reader = SseReader()
        self._done = False

    def feed(self, data: bytes) -> list[Any]:
        """The values of the events ``data`` completes."""
        values = []
        for event in [] if self._done else self._reader.feed(data):
            if event.done:
                self._done = True
                break
            if (value := event.json()) is not None:
                values.append(value)
        return values


async def chat_chunks(chunks: AsyncIterator[bytes], streamed: bool) -> AsyncIterator[Any]:
    """The chat chunks of an upstream answer: parsed SSE events, or one chunk made from a
    whole ``chat.completion`` body (an upstream may answer a stream request with JSON)."""
    if not streamed:
        try:
            body = orjson.loads(b"".join([c async for c in chunks]))
        except orjson.JSONDecodeError:
            body = None
        yield chunk_from_completion(body)
        return
    reader = ChunkReader()
    async for data in chunks:
        for chunk in reader.feed(data):
            yield chunk


def chunk_from_completion(body: Any) -> dict[str, Any]:
    """A single stream chunk carrying a whole ``chat.completion`` (same translation path)."""
    if not isinstance(body, dict):
        return {"error": {"message": "upstream answer is not a JSON object", "type": "api_error"}}
    if isinstance(body.get("error"), dict):
        return body
    choices = []
    for choice in body.get("choices") or ():
        message = choice.get("message") or {}
        delta: dict[str, Any] = {"role": "assistant"}
        if message.get("content"):
            delta["content"] = message["content"]
        for key in ("reasoning_content", "reasoning", "refusal"):
            if isinstance(message.get(key), str) and message[key]:
                delta[key] = message[key]
        calls = []
        for n, call in enumerate(message.get("tool_calls") or ()):
            calls.append({"index": n, "id": call.get("id"), "type": "function",
                          "function": call.get("function") or {}})
        if calls:
            delta["tool_calls"] = calls
        choices.append({"index": choice.get("index", 0), "delta": delta,
                        "finish_reason": choice.get("finish_reason")})
    return {"id": body.get("id"), "choices": choices, "usage": body.get("usage")}
