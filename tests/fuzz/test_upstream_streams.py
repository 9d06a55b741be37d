"""Odd native streams from the upstream, against a real gateway: opening events, keep-alives,
comments, failures of every kind right after the opening, garbage and streams cut short. The
gateway holds a native stream's opening events until output or a failure arrives; whatever
the upstream sends, the client gets an answer or a clean error in its wire's shape, never a
500, and every stream it gets ends with its wire's terminal event.

Bounded for ``make test`` like the request fuzzers (``FUZZ_EXAMPLES`` for ``make fuzz``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import RunningGateway
from tests.fakes.native_base import Canned
from tests.fuzz.conftest import Upstreams
from tests.fuzz.test_wire_fuzz import FUZZ, check


def _event(name: str, data: Any) -> bytes:
    return f"event: {name}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


_MESSAGE = {"id": "msg_fuzz", "type": "message", "role": "assistant", "model": "claude",
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 3, "output_tokens": 0}}
_RESPONSE = {"id": "resp_fuzz", "object": "response", "created_at": 1700000000,
             "status": "in_progress", "model": "gpt-5", "output": []}

ANTHROPIC_PIECES = {
    "start": _event("message_start", {"type": "message_start", "message": _MESSAGE}),
    "ping": _event("ping", {"type": "ping"}),
    "comment": b": keep-alive\n\n",
    "blank": b"\n\n",
    "error": st.sampled_from(["overloaded_error", "api_error", "invalid_request_error",
                              "rate_limit_error", "request_too_large", "weird_error"]),
    "text": _event("content_block_start", {"type": "content_block_start", "index": 0,
                                           "content_block": {"type": "text", "text": ""}}),
    "stop": _event("message_stop", {"type": "message_stop"}),
    "garbage": b"data: {not json\n\n",
}
RESPONSES_PIECES = {
    "start": _event("response.created", {"type": "response.created",
                                         "response": _RESPONSE}),
    "ping": _event("response.in_progress", {"type": "response.in_progress",
                                            "response": _RESPONSE}),
    "comment": b": keep-alive\n\n",
    "blank": b"\n\n",
    "error": st.sampled_from(["context_length_exceeded", "server_error", "rate_limit_exceeded",
                              "invalid_prompt", "something_new", None]),
    "text": _event("response.output_item.added", {
        "type": "response.output_item.added", "output_index": 0,
        "item": {"type": "message", "id": "msg_1", "status": "in_progress",
                 "role": "assistant", "content": []}}),
    "stop": _event("response.completed", {"type": "response.completed",
                                          "response": {**_RESPONSE, "status": "completed"}}),
    "garbage": b"data: [1, 2\n\n",
}


def _failure(wire: str, kind: str | None) -> bytes:
    if wire == "anthropic":
        return _event("error", {"type": "error", "error": {"type": kind, "message": "boom"}})
    error = {"code": kind, "message": "boom"} if kind else None
    return _event("response.failed", {"type": "response.failed", "response": {
        **_RESPONSE, "status": "failed", "error": error}})


@st.composite
def odd_streams(draw: st.DrawFn, wire: str) -> bytes:
    """A stream of the wire's events in any order, often opening and then failing."""
    pieces = ANTHROPIC_PIECES if wire == "anthropic" else RESPONSES_PIECES
    names = draw(st.lists(st.sampled_from(list(pieces)), max_size=6))
    if draw(st.booleans()):
        names = ["start", *names]
    out = []
    for name in names:
        piece = pieces[name]
        out.append(_failure(wire, draw(piece)) if name == "error" else piece)
    return b"".join(out)  # (cut short when it has no stop event)


async def search_streams(gw: RunningGateway, upstreams: Upstreams, wire: str) -> None:
    """Each example scripts the upstream's first answer, then sends a stream request."""
    loop = asyncio.get_running_loop()
    _, responses, messages = upstreams
    fake, path, model = ((messages, "/v1/messages", "claude") if wire == "anthropic"
                         else (responses, "/v1/responses", "gpt"))

    async def one_request(raw: bytes) -> None:
        fake.script(Canned(200, raw, {"content-type": "text/event-stream"}))
        body: dict[str, Any] = ({"model": model, "max_tokens": 16, "stream": True,
                                 "messages": [{"role": "user", "content": "hi"}]}
                                if wire == "anthropic" else
                                {"model": model, "stream": True, "input": "hi"})
        await check(gw, path, body, wire)
        fake.next_scripted()  # (a request refused at the edge leaves it unused)

    @FUZZ
    @given(raw=odd_streams(wire))
    def one(raw: bytes) -> None:
        asyncio.run_coroutine_threadsafe(one_request(raw), loop).result()

    await asyncio.to_thread(one)


async def test_odd_anthropic_streams_end_cleanly(gw: RunningGateway,
                                                 upstreams: Upstreams) -> None:
    await search_streams(gw, upstreams, "anthropic")


async def test_odd_responses_streams_end_cleanly(gw: RunningGateway,
                                                 upstreams: Upstreams) -> None:
    await search_streams(gw, upstreams, "responses")
