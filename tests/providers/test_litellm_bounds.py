"""The litellm path (a chat or Responses client asking a model whose upstream speaks another
API, here Anthropic's) is bounded like the direct one: an upstream that never answers is a
504 within the request's deadline, a stream that stalls ends with an error event after the
read gap, and an answer the gateway cannot use (an HTML page, bytes that are not UTF-8, no
body, a lone surrogate) is a 502 naming the model or a relayed answer: never a hang or a 500.
The upstream is a raw socket server speaking the Messages API's framing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.faulty_upstream import Fault, FaultyUpstream, Received, Writer, answer, stream

MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
           "content": [{"type": "text", "text": "fine"}], "stop_reason": "end_turn",
           "stop_sequence": None, "usage": {"input_tokens": 3, "output_tokens": 1}}
EVENTS = [
    ("message_start", {"type": "message_start", "message": {**MESSAGE, "content": [],
                                                            "stop_reason": None}}),
    ("content_block_start", {"type": "content_block_start", "index": 0,
                             "content_block": {"type": "text", "text": ""}}),
    ("content_block_delta", {"type": "content_block_delta", "index": 0,
                             "delta": {"type": "text_delta", "text": "fi"}}),
]


def sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def silent(until: asyncio.Event) -> Fault:
    """Reads the request, then says nothing at all."""
    async def run(_: Received, w: Writer) -> None:
        await until.wait()
    return run


@pytest.fixture
async def upstream() -> AsyncIterator[FaultyUpstream]:
    async with FaultyUpstream() as server:
        yield server


async def _gateway(factory: GatewayFactory, upstream: FaultyUpstream) -> RunningGateway:
    return await factory({
        "model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_key": "sk-ant-upstream-0123",
            "api_base": upstream.base_url.removesuffix("/v1")}}],
        "gateway": {"timeouts": {"read": 1.5}},
        "recovery": {"deadline": 2.5, "max_transient_retries": 0}})


def _client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0, timeout=30)


@pytest.mark.parametrize("streamed", [False, True])
async def test_an_upstream_that_never_answers_is_a_504_within_the_deadline(
        gateway_factory: GatewayFactory, upstream: FaultyUpstream, streamed: bool) -> None:
    gw = await _gateway(gateway_factory, upstream)
    release = asyncio.Event()
    upstream.then(silent(release))
    try:
        async with _client(gw) as client:
            with pytest.raises(openai.APIStatusError) as failed:
                await asyncio.wait_for(client.chat.completions.create(
                    model="claude", messages=[{"role": "user", "content": "hi"}],
                    stream=streamed), 10)
    finally:
        release.set()
    assert failed.value.status_code == 504
    assert "the upstream of model 'claude' timed out" in failed.value.message


async def test_a_stream_that_stalls_ends_with_an_error_event(
        gateway_factory: GatewayFactory, upstream: FaultyUpstream) -> None:
    gw = await _gateway(gateway_factory, upstream)
    release = asyncio.Event()
    upstream.then(stream(*(sse(n, d) for n, d in EVENTS), hold=release))
    texts: list[str] = []
    try:
        async with _client(gw) as client:
            answer_stream = await client.chat.completions.create(
                model="claude", messages=[{"role": "user", "content": "hi"}], stream=True)
            with pytest.raises(openai.APIError) as ended:
                async with asyncio.timeout(10):
                    async for chunk in answer_stream:
                        if chunk.choices and chunk.choices[0].delta.content:
                            texts.append(chunk.choices[0].delta.content)
    finally:
        release.set()
    assert texts == ["fi"]
    assert "stalled: nothing for 1.5s" in str(ended.value)


@pytest.mark.parametrize(("body", "content_type"), [
    pytest.param(b"<html>oops</html>", "text/html", id="an HTML page"),
    pytest.param(json.dumps(MESSAGE).encode().replace(b"fine", b"\xff\xfe"),
                 "application/json", id="bytes that are not UTF-8"),
])
async def test_an_answer_that_is_not_json_is_a_502_naming_the_model(
        gateway_factory: GatewayFactory, upstream: FaultyUpstream, body: bytes,
        content_type: str) -> None:
    gw = await _gateway(gateway_factory, upstream)
    upstream.then(answer(200, body, {"Content-Type": content_type}))
    async with _client(gw) as client:
        with pytest.raises(openai.APIStatusError) as failed:
            await client.chat.completions.create(
                model="claude", messages=[{"role": "user", "content": "hi"}])
    assert failed.value.status_code == 502
    assert "the upstream of model 'claude' sent an answer the gateway cannot use" in \
        failed.value.message
    assert "oops" not in failed.value.message


async def test_a_lone_surrogate_in_the_answer_is_relayed_replaced(
        gateway_factory: GatewayFactory, upstream: FaultyUpstream) -> None:
    gw = await _gateway(gateway_factory, upstream)
    body = json.dumps(MESSAGE).replace("fine", "fi\\ud800ne").encode()
    upstream.then(answer(200, body, {"Content-Type": "application/json"}))
    async with _client(gw) as client:
        made = await client.chat.completions.create(
            model="claude", messages=[{"role": "user", "content": "hi"}])
    assert made.choices[0].message.content == "fi\ufffdne"


