"""One upstream speaking the three wires with the same answer: Chat Completions
(``/v1/chat/completions``), Anthropic Messages (``/v1/messages``) and Responses
(``/v1/responses``), whole or streamed in each wire's real event shapes.

Every answer says ``hello there`` and reports the same usage (7 input, 3 output tokens),
so what the gateway records can be compared across wires. With :attr:`hold` set up, a
stream stops after its first text and a whole answer before it is sent, and waits (until
the event is set or the gateway hangs up): for disconnects and shutdowns. Each request
that waits is reported in :attr:`held` (its path).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiohttp import web

from tests.conftest import serve_app

INPUT_TOKENS, OUTPUT_TOKENS = 7, 3
TEXT = ("hello", " there")


def _sse(data: dict[str, Any], event: str | None = None) -> bytes:
    head = f"event: {event}\n".encode() if event else b""
    return head + b"data: " + orjson.dumps(data) + b"\n\n"


def chat_whole(model: str) -> dict[str, Any]:
    """A ``chat.completion``."""
    return {"id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": "".join(TEXT)}}],
            "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS,
                      "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS}}


def chat_events(model: str) -> list[bytes]:
    """A chat stream: role, text deltas, finish, usage, ``[DONE]``."""
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0, "model": model}
    out = [_sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant"},
                                      "finish_reason": None}]})]
    out += [_sse({**base, "choices": [{"index": 0, "delta": {"content": t},
                                       "finish_reason": None}]}) for t in TEXT]
    out.append(_sse({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
    out.append(_sse({**base, "choices": [], "usage": chat_whole(model)["usage"]}))
    out.append(b"data: [DONE]\n\n")
    return out


def anthropic_whole(model: str) -> dict[str, Any]:
    """An Anthropic ``message``."""
    return {"id": "msg_1", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "".join(TEXT)}], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS}}


def anthropic_events(model: str) -> list[bytes]:
    """An Anthropic stream, ``message_start`` to ``message_stop``."""
    start = {**anthropic_whole(model), "content": [], "stop_reason": None,
             "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": 1}}
    out = [_sse({"type": "message_start", "message": start}, "message_start"),
           _sse({"type": "content_block_start", "index": 0,
                 "content_block": {"type": "text", "text": ""}}, "content_block_start")]
    out += [_sse({"type": "content_block_delta", "index": 0,
                  "delta": {"type": "text_delta", "text": t}}, "content_block_delta")
            for t in TEXT]
    out += [_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn",
                                                      "stop_sequence": None},
                  "usage": {"output_tokens": OUTPUT_TOKENS}}, "message_delta"),
            _sse({"type": "message_stop"}, "message_stop")]
    return out


def responses_whole(model: str, status: str = "completed") -> dict[str, Any]:
    """A Responses ``response`` object."""
    done = status == "completed"
    return {"id": "resp_1", "object": "response", "created_at": 0, "status": status,
            "model": model, "error": None, "incomplete_details": None,
            "parallel_tool_calls": True, "tool_choice": "auto", "tools": [],
            "output": [{"id": "msg_1", "type": "message", "status": "completed",
                        "role": "assistant",
                        "content": [{"type": "output_text", "text": "".join(TEXT),
                                     "annotations": []}]}] if done else [],
            "usage": {"input_tokens": INPUT_TOKENS, "output_tokens": OUTPUT_TOKENS,
                      "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}} if done else None}


def responses_events(model: str) -> list[bytes]:
    """A Responses stream, ``response.created`` to ``response.completed``."""
    seq = iter(range(100))
    out = [_sse({"type": "response.created", "sequence_number": next(seq),
                 "response": responses_whole(model, "in_progress")}, "response.created")]
    out += [_sse({"type": "response.output_text.delta", "sequence_number": next(seq),
                  "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": t,
                  "logprobs": []}, "response.output_text.delta") for t in TEXT]
    out.append(_sse({"type": "response.completed", "sequence_number": next(seq),
                     "response": responses_whole(model)}, "response.completed"))
    return out


class ThreeWires:
    """The running upstream (``async with``): :attr:`base_url` ends in ``/v1``."""

    def __init__(self) -> None:
        self.base_url = ""
        self.hold: asyncio.Event | None = None  # set up: streams stop after their first text
        self.holding = asyncio.Event()  # a held stream is waiting
        self.hung_up = asyncio.Event()  # the gateway closed a held stream
        self.held: asyncio.Queue[str] = asyncio.Queue()  # the path of each request held
        self.hits = 0  # requests answered (or held)
        self._runner: web.AppRunner | None = None

    async def _answer(self, request: web.Request, whole: dict[str, Any],
                      events: list[bytes]) -> web.StreamResponse:
        self.hits += 1
        body = await request.json()
        if body.get("stream") is not True:
            if self.hold is not None:
                await self._wait(request.path)
            return web.json_response(whole)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for n, event in enumerate(events):
            await response.write(event)
            if self.hold is not None and TEXT[0].encode() in event and n < len(events) - 1:
                await self._wait(request.path)
        await response.write_eof()
        return response

    async def _wait(self, path: str) -> None:
        assert self.hold is not None
        self.holding.set()
        self.held.put_nowait(path)
        try:
            await self.hold.wait()
        except asyncio.CancelledError:
            self.hung_up.set()
            raise

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, chat_whole("up-model"), chat_events("up-model"))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, anthropic_whole("up-model"),
                                  anthropic_events("up-model"))

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, responses_whole("up-model"),
                                  responses_events("up-model"))

    async def __aenter__(self) -> ThreeWires:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/responses", self._responses)
        self._runner, root = await serve_app(app)
        self.base_url = f"{root}/v1"
        return self

    async def __aexit__(self, *_: object) -> None:
        if self.hold is not None:
            self.hold.set()
        assert self._runner is not None
        await self._runner.cleanup()


def wire_models(base_url: str) -> list[dict[str, Any]]:
    """``model_list`` entries: ``chat`` (a chat-only upstream: Responses and Messages are
    translated), ``claude`` (native Anthropic Messages) and ``resp`` (native Responses)."""
    return [
        {"model_name": "chat", "litellm_params": {"model": "openai/up-model",
                                                  "api_base": base_url, "api_key": "k"},
         "model_info": {"responses_api": False}},
        {"model_name": "claude", "litellm_params": {"model": "anthropic/up-model",
                                                    "api_base": base_url, "api_key": "k"}},
        {"model_name": "resp", "litellm_params": {"model": "openai/up-model",
                                                  "api_base": base_url, "api_key": "k"},
         "model_info": {"responses_api": True}},
    ]
