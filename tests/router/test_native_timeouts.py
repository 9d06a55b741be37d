"""Native Messages and Responses requests wait for their upstream as long as chat requests
do, at LiteLLM's levels: ``router_settings.timeout`` (or ``litellm_settings.request_timeout``)
for a whole answer, ``stream_timeout`` for the silence inside a stream only."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import openai
import pytest

from gateway.config import parse_config
from gateway.providers.openai_compat import HttpPool
from gateway.routing import build_route
from gateway.wires.native import anthropic_sender, responses_sender
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.three_wires import ThreeWires, wire_models

KEY = "sk-client-native-timeouts"


def test_native_senders_read_the_chat_routes_timeouts() -> None:
    config = parse_config({
        "model_list": [{"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_key": "k"}}],
        "litellm_settings": {"request_timeout": 40},
        "router_settings": {"stream_timeout": 9},
    })
    route = build_route(config.model_list[0], config, HttpPool())
    for sender in (anthropic_sender(config, route, HttpPool(), {}),
                   responses_sender(config, route, HttpPool())):
        assert sender._timeout.sock_read == 40  # type: ignore[attr-defined]
        assert sender._stream_timeout.sock_read == 9  # type: ignore[attr-defined]


@pytest.fixture
async def held() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        up.hold = asyncio.Event()  # a whole answer never comes; a stream stops after one text
        yield up


async def gateway(factory: GatewayFactory, up: ThreeWires,
                  router: dict[str, Any]) -> RunningGateway:
    return await factory({
        "model_list": wire_models(up.base_url),
        "router_settings": {"num_retries": 0, **router},
        "gateway": {"api_keys": [KEY]},
    })


async def test_a_whole_native_answer_times_out_at_router_timeout_not_stream_timeout(
        gateway_factory: GatewayFactory, held: ThreeWires) -> None:
    gw = await gateway(gateway_factory, held, {"timeout": 0.5, "stream_timeout": 3600})
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0,
                                        timeout=60) as claude:
        with pytest.raises(anthropic.APIStatusError) as info:
            await claude.messages.create(model="claude", max_tokens=64,
                                         messages=[{"role": "user", "content": "hi"}])
    assert info.value.status_code in (504, 503, 502)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0,
                                  timeout=60) as responses:
        with pytest.raises(openai.APIStatusError) as failed:
            await responses.responses.create(model="resp", input="hi")
    assert failed.value.status_code in (504, 503, 502)


async def test_a_silent_native_stream_ends_at_router_stream_timeout(
        gateway_factory: GatewayFactory, held: ThreeWires) -> None:
    gw = await gateway(gateway_factory, held, {"timeout": 3600, "stream_timeout": 0.5})
    texts: list[str] = []
    async with anthropic.AsyncAnthropic(base_url=gw.root, api_key=KEY, max_retries=0,
                                        timeout=60) as claude:
        with pytest.raises(anthropic.APIError):
            async with claude.messages.stream(
                    model="claude", max_tokens=64,
                    messages=[{"role": "user", "content": "hi"}]) as stream:
                async for text in stream.text_stream:
                    texts.append(text)
    assert texts  # what came before the silence reached the client
