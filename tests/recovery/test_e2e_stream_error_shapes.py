"""Errors a chat upstream writes as the first event of a 200 stream in shapes other than
``{"error": {...}}``: vLLM's ``ErrorResponse`` with its fields at the top
(``{"object": "error", "message": ..., "code": 400}``) and a bare ``{"error": "text"}``.
Nothing reached the client yet, so each takes its rung like the same refusal sent as an
HTTP error; a real gateway on loopback, the real ``openai`` SDK, the referee upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import assistant, user
from tests.recovery.e2e_support import client, start_gateway

SSE = {"content-type": "text/event-stream"}


def first_event(data: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(data) + b"\n\n"


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai") as ref:
        yield ref


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, referee: Referee) -> RunningGateway:
    return await start_gateway(gateway_factory, referee.base_url)


async def streamed_text(gw: RunningGateway, messages: list[Any]) -> tuple[str, str]:
    """The recovery header and the text of one streamed request."""
    async with client(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model="demo", messages=messages, stream=True)
        text = ""
        async for chunk in raw.parse():
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
    return raw.headers.get("x-gateway-recovery", ""), text


async def test_a_vllm_error_response_chunk_takes_the_strict_rung(
        gw: RunningGateway, referee: Referee) -> None:
    referee.script(200, first_event({
        "object": "error", "type": "BadRequestError", "param": None, "code": 400,
        "message": "Conversation roles must alternate user/assistant/user/assistant/..."}),
        SSE)
    recovery, text = await streamed_text(
        gw, [user("q"), assistant("first"), assistant("second"), user("next")])
    assert recovery == "strict"
    assert text == "referee: accepted 3 messages"
    assert [m["role"] for m in referee.requests[-1].json()["messages"]] == [
        "user", "assistant", "user"]


async def test_a_bare_error_string_chunk_is_retried(gw: RunningGateway,
                                                    referee: Referee) -> None:
    referee.script(200, first_event({
        "error": "upstream connect error or disconnect/reset before headers. reset reason: "
                 "connection termination"}), SSE)
    recovery, text = await streamed_text(gw, [user("stream please")])
    assert recovery == "retry"
    assert text == "referee: accepted 1 messages"
    assert len(referee.requests) == 2
