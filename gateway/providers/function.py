"""An in-process upstream: a function answers every call (no sockets, no HTTP).

In the spirit of httpx's ``MockTransport`` and pydantic-ai's ``FunctionModel``: the driver,
its recovery ladder, compaction and the recall tool can run against a handler that sees
each :class:`~gateway.providers.base.UpstreamCall` and returns what the upstream would::

    def upstream(call: UpstreamCall) -> Answer:
        if len(call.body["messages"]) > 40:
            return refusal(400, "This model's maximum context length is 8192 tokens. ...",
                           code="context_length_exceeded")
        return completion("hi")

    route = replace(route, provider=FunctionProvider(upstream))

A handler returns (or, when it is a coroutine function, awaits to) a Chat Completions body
(a ``dict``: sent as JSON, or as one SSE chunk and ``[DONE]`` for a stream), an
:class:`~gateway.providers.failure.UpstreamFailure` (raised as the provider's refusal), or
any :class:`~gateway.providers.base.UpstreamResponse`. Like every provider it answers within
the call's deadline: a handler still busy then is cancelled and the call fails with a
``504`` naming the model. Every call is kept in :attr:`FunctionProvider.calls`.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

from gateway.providers.base import UpstreamCall, UpstreamError, UpstreamResponse
from gateway.providers.failure import UpstreamFailure
from gateway.providers.openai_compat import BufferedResponse

__all__ = ["Answer", "FunctionProvider", "Handler", "completion", "refusal"]

Answer = dict[str, Any] | UpstreamFailure | UpstreamResponse
Handler = Callable[[UpstreamCall], Answer | Awaitable[Answer]]


class FunctionProvider:
    """A :class:`~gateway.providers.base.Provider` whose upstream is ``handler``."""

    def __init__(self, handler: Handler, *, name: str = "function") -> None:
        self.name = name
        self.handler = handler
        self.calls: list[UpstreamCall] = []

    async def send(self, call: UpstreamCall) -> UpstreamResponse:
        """Ask the handler; its failure is raised as ``UpstreamError``."""
        self.calls.append(call)
        left = None if call.deadline is None else max(0.0, call.deadline - time.monotonic())
        try:
            async with asyncio.timeout(left):
                answer = self.handler(call)
                if inspect.isawaitable(answer):
                    answer = await answer
        except TimeoutError:
            raise UpstreamError(UpstreamFailure(
                status=504, provider=self.name, type="timeout_error",
                message=f"the upstream of model {self.name!r} timed out: no answer within "
                        f"{left or 0:g}s")) from None
        if isinstance(answer, UpstreamFailure):
            raise UpstreamError(answer)
        if isinstance(answer, dict):
            return _respond(answer, stream=call.stream)
        return answer


def _respond(body: dict[str, Any], *, stream: bool) -> UpstreamResponse:
    if not stream:
        return BufferedResponse(orjson.dumps(body), parsed=body)
    chunk = {"id": body.get("id", "chatcmpl-function"), "object": "chat.completion.chunk",
             "created": body.get("created", 0), "model": body.get("model", "function"),
             "choices": [{"index": c.get("index", 0), "delta": c.get("message", {}),
                          "finish_reason": c.get("finish_reason")}
                         for c in body.get("choices", [])]}
    events = b"data: " + orjson.dumps(chunk) + b"\n\ndata: [DONE]\n\n"
    return BufferedResponse(events, content_type="text/event-stream")


def completion(text: str | None = "", *, model: str = "function",
               tool_calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Chat Completions answer saying ``text`` (and calling ``tool_calls``)."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {"id": "chatcmpl-function", "object": "chat.completion", "created": 0,
            "model": model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool_calls else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


def refusal(status: int, message: str, *, type: str | None = "invalid_request_error",
            code: str | None = None, param: str | None = None,
            retry_after: float | None = None, provider: str = "function") -> UpstreamFailure:
    """An upstream refusal as an OpenAI-style provider sends it (envelope body included)."""
    error = {"message": message, "type": type, "param": param, "code": code}
    return UpstreamFailure(status=status, provider=provider, message=message, type=type,
                           code=code, param=param, retry_after=retry_after,
                           body=orjson.dumps({"error": error}))
