"""A real aiohttp server speaking the Anthropic Messages API (POST /v1/messages).

It validates requests the way the real API does and answers with the real error texts
(tests/data/provider-errors.jsonl), so a broken history is REFUSED here exactly as upstream.
Consecutive same-role turns are merged first, as the current API documents ("consecutive
user or assistant turns in your request will be combined into a single turn").

Replies are deterministic: ``you said: <last user text>``, ``tool results: ...`` after
tool results, ``[images: N]`` when the last turn carried images; a ``tool_use`` of the first
tool (or the ``tool_choice`` tool) when tools are given and the last user text contains
"TOOL". Cache accounting: the prefix up to the last ``cache_control`` is reported as
``cache_creation_input_tokens`` the first time and ``cache_read_input_tokens`` afterwards.

    async with FakeAnthropic() as f:
        f.base_url, f.requests, f.script(anthropic_error(529, "Overloaded", "overloaded_error"))
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from itertools import count
from typing import Any

import orjson
from aiohttp import web

from tests.fakes.anthropic_rules import Turn, as_blocks, validate_messages_request
from tests.fakes.native_base import Canned, FakeServer, MidStreamError, RequestRefused, rough_tokens


def anthropic_error(
    status: int,
    message: str,
    error_type: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> Canned:
    """A native Anthropic error answer (``{"type":"error","error":{...}}``)."""
    body = {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_fake_scripted",
    }
    return Canned(status, body, headers or {})


_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def _refusal(exc: RequestRefused) -> web.Response:
    kind = exc.kind or _ERROR_TYPES.get(exc.status, "api_error")
    return anthropic_error(exc.status, exc.message, kind).response()


def _text_of(blocks: list[Any]) -> str:
    return " ".join(
        str(b.get("text", "")) for b in blocks if isinstance(b, dict) and b.get("type") == "text"
    )


def _count_images(blocks: list[Any]) -> int:
    total = 0
    for b in blocks:
        if isinstance(b, dict) and b.get("type") == "image":
            total += 1
        elif isinstance(b, dict) and b.get("type") == "tool_result":
            total += _count_images(as_blocks(b.get("content", [])))
    return total


def _cache_prefix(body: dict[str, Any]) -> list[Any] | None:
    """Tools, system blocks and message blocks up to the last cache_control, if any."""
    units: list[Any] = list(body.get("tools") or [])
    system = body.get("system")
    units += as_blocks(system) if system is not None else []
    for message in body["messages"]:
        units += as_blocks(message.get("content"))
    marked = [n for n, u in enumerate(units) if isinstance(u, dict) and "cache_control" in u]
    return units[: marked[-1] + 1] if marked else None


class FakeAnthropic(FakeServer):
    """The fake Anthropic API. ``api_key`` (optional) is the only key accepted;
    ``context_window`` is the token limit (estimated as 4 bytes of JSON per token);
    ``refuse_prefill``: a model that will not continue a trailing assistant turn;
    ``model_bound``: a thinking signature is taken by the model that made it only."""

    def __init__(self, *, api_key: str | None = None, context_window: int = 200_000,
                 refuse_prefill: bool = False, model_bound: bool = False) -> None:
        super().__init__()
        self.model_bound = model_bound
        self.api_key = api_key
        self.refuse_prefill = refuse_prefill
        self.context_window = context_window
        self._ids = count(1)
        self._cached_prefixes: set[bytes] = set()

    def _routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_route("*", "/{tail:.*}", self._not_found)

    async def _not_found(self, request: web.Request) -> web.Response:
        await self.record(request)
        return _refusal(RequestRefused(404, f"Not found: {request.path}", "not_found_error"))

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        recorded = await self.record(request)
        scripted = self.next_scripted()
        if isinstance(scripted, Canned):
            return scripted.response()
        body = recorded.body
        try:
            self._check_headers(recorded.headers)
            turns = validate_messages_request(
                body, refuse_prefill=self.refuse_prefill,
                interleaved="interleaved-thinking" in recorded.headers.get("anthropic-beta", ""),
                model_bound=self.model_bound)
            usage = self._usage(body)
        except RequestRefused as exc:
            return _refusal(exc)
        blocks, stop_reason = self._reply(body, turns)
        message_id = f"msg_fake_{next(self._ids):04d}"
        if body.get("stream"):
            failure = scripted if isinstance(scripted, MidStreamError) else None
            return await self._stream(
                request, body, message_id, blocks, stop_reason, usage, failure
            )
        usage["output_tokens"] = self._output_tokens(blocks)
        answer = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": blocks,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": usage,
        }
        return web.json_response(
            answer,
            dumps=lambda v: orjson.dumps(v).decode(),
            headers={"request-id": f"req_{message_id}"},
        )

    async def _count_tokens(self, request: web.Request) -> web.Response:
        recorded = await self.record(request)
        body = recorded.body
        try:
            self._check_headers(recorded.headers)
            if not isinstance(body, dict):
                raise RequestRefused(400, "Input should be a valid dictionary")
            validate_messages_request({**body, "max_tokens": 1})
        except RequestRefused as exc:
            return _refusal(exc)
        total = rough_tokens([body.get("tools"), body.get("system"), body["messages"]])
        return web.json_response({"input_tokens": total})

    def _check_headers(self, headers: dict[str, str]) -> None:
        key = headers.get("x-api-key")
        if key is None:
            raise RequestRefused(401, "x-api-key header is required", "authentication_error")
        if self.api_key is not None and key != self.api_key:
            raise RequestRefused(401, "invalid x-api-key", "authentication_error")
        if "anthropic-version" not in headers:
            raise RequestRefused(400, "anthropic-version: header is required")

    def _usage(self, body: dict[str, Any]) -> dict[str, Any]:
        total = rough_tokens([body.get("tools"), body.get("system"), body["messages"]])
        if total > self.context_window:
            raise RequestRefused(
                400, f"prompt is too long: {total} tokens > {self.context_window} maximum"
            )
        usage = {
            "input_tokens": total,
            "output_tokens": 0,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        prefix = _cache_prefix(body)
        if prefix is not None:
            cached = min(rough_tokens(prefix), total)
            key = orjson.dumps(prefix, option=orjson.OPT_SORT_KEYS)
            field = (
                "cache_read_input_tokens"
                if key in self._cached_prefixes
                else ("cache_creation_input_tokens")
            )
            self._cached_prefixes.add(key)
            usage[field] = cached
            usage["input_tokens"] = total - cached
        return usage

    def _reply(self, body: dict[str, Any], turns: list[Turn]) -> tuple[list[Any], str]:
        last = [p.block for p in turns[-1].blocks] if turns[-1].role == "user" else []
        text = _text_of(last)
        tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
        choice = body.get("tool_choice") or {}
        if tools and "TOOL" in text and choice.get("type") != "none":
            name = choice.get("name") if choice.get("type") == "tool" else tools[0].get("name")
            tool_id = f"toolu_fake_{next(self._ids):04d}"
            return [
                {"type": "tool_use", "id": tool_id, "name": name, "input": {"query": text}}
            ], "tool_use"
        parts = []
        results = [b for b in last if b.get("type") == "tool_result"]
        if results:
            parts.append(
                "tool results: "
                + "; ".join(_text_of(as_blocks(r.get("content", ""))) for r in results)
            )
        if text:
            parts.append(f"you said: {text}")
        images = _count_images(last)
        if images:
            parts.append(f"[images: {images}]")
        words = " | ".join(parts or ["ok"]).split(" ")
        limit = int(body["max_tokens"])
        stop = "end_turn" if len(words) <= limit else "max_tokens"
        return [{"type": "text", "text": " ".join(words[:limit])}], stop

    @staticmethod
    def _output_tokens(blocks: list[Any]) -> int:
        return sum(len(str(b.get("text", "")).split()) or rough_tokens(b) for b in blocks)

    async def _stream(
        self,
        request: web.Request,
        body: dict[str, Any],
        message_id: str,
        blocks: list[Any],
        stop_reason: str,
        usage: dict[str, Any],
        failure: MidStreamError | None,
    ) -> web.StreamResponse:
        response = web.StreamResponse(
            headers={"content-type": "text/event-stream", "request-id": f"req_{message_id}"}
        )
        await response.prepare(request)
        async for event, data in self._events(
            body, message_id, blocks, stop_reason, usage, failure
        ):
            await response.write(f"event: {event}\ndata: ".encode() + orjson.dumps(data) + b"\n\n")
        await response.write_eof()
        return response

    async def _events(
        self,
        body: dict[str, Any],
        message_id: str,
        blocks: list[Any],
        stop_reason: str,
        usage: dict[str, Any],
        failure: MidStreamError | None,
    ) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        start = {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        yield "message_start", {"type": "message_start", "message": start}
        for index, block in enumerate(blocks):
            if block["type"] == "tool_use":
                opened = {**block, "input": {}}
                serialized = orjson.dumps(block["input"]).decode()
                pieces = ["", serialized[:10], serialized[10:]]
                deltas = [{"type": "input_json_delta", "partial_json": p} for p in pieces]
            else:
                opened = {"type": "text", "text": ""}
                words = block["text"].split(" ")
                pieces = [
                    " ".join(words[k : k + 3]) + (" " if k + 3 < len(words) else "")
                    for k in range(0, len(words), 3)
                ]
                deltas = [{"type": "text_delta", "text": p} for p in pieces]
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opened},
            )
            if index == 0:
                yield "ping", {"type": "ping"}
            for n, delta in enumerate(deltas):
                yield (
                    "content_block_delta",
                    {"type": "content_block_delta", "index": index, "delta": delta},
                )
                if failure is not None and n == 0:
                    error = {"type": failure.error_type, "message": failure.message}
                    yield "error", {"type": "error", "error": error}
                    return
            yield "content_block_stop", {"type": "content_block_stop", "index": index}
        yield (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                "usage": {"output_tokens": self._output_tokens(blocks)},
            },
        )
        yield "message_stop", {"type": "message_stop"}
