"""LiteLLM's per-deployment cap on requests sent at once (``litellm_params.
max_parallel_requests``, ``router_settings.default_max_parallel_requests``): a request past
it waits for a slot (as LiteLLM's Router semaphore), within its deadline; real gateway on
127.0.0.1, the real ``openai`` SDK, an upstream that holds its answers."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest

from gateway.config import ConfigError, parse_config
from tests.conftest import GatewayFactory, RunningGateway, gateway_state
from tests.fakes.three_wires import ThreeWires

KEY = "sk-parallel-master-0001"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def upstream() -> AsyncIterator[ThreeWires]:
    async with ThreeWires() as up:
        yield up


def entry(upstream: ThreeWires, **params: Any) -> dict[str, Any]:
    return {"model_name": "chat", "litellm_params": {
        "model": "openai/up-model", "api_base": upstream.base_url, "api_key": "k-1", **params}}


async def capped(factory: GatewayFactory, upstream: ThreeWires, **router: Any) -> RunningGateway:
    return await factory({"model_list": [entry(upstream, **({} if router else {
        "max_parallel_requests": 1}))], "router_settings": router,
        "general_settings": {"master_key": KEY}})


def client(gw: RunningGateway) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=gw.base_url, api_key=KEY, max_retries=0)


async def until(condition: Any, seconds: float = 10.0) -> None:
    """Poll ``condition`` (a state, not a time) until it holds."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("router", [{}, {"default_max_parallel_requests": 1}])
async def test_a_request_past_the_cap_waits_for_a_slot_then_goes(
        gateway_factory: GatewayFactory, upstream: ThreeWires, router: dict[str, Any]) -> None:
    gw = await capped(gateway_factory, upstream, **router)
    slot = gateway_state(gw).fleet.slots["chat#1"]
    upstream.hold = asyncio.Event()
    async with client(gw) as c:
        first = asyncio.create_task(c.chat.completions.create(
            model="chat", messages=HI))  # type: ignore[arg-type]
        await upstream.holding.wait()
        second = asyncio.create_task(c.chat.completions.create(
            model="chat", messages=HI))  # type: ignore[arg-type]
        await until(lambda: bool(getattr(slot, "_waiters", None)))  # queued at the gateway
        assert upstream.hits == 1  # not sent while the first holds the slot
        upstream.hold.set()
        answers = await asyncio.gather(first, second)
    assert [a.choices[0].message.content for a in answers] == ["hello there"] * 2
    assert upstream.hits == 2


async def test_the_wait_for_a_slot_ends_at_the_request_deadline(
        gateway_factory: GatewayFactory, upstream: ThreeWires) -> None:
    gw = await capped(gateway_factory, upstream)
    upstream.hold = asyncio.Event()
    async with client(gw) as c:
        first = asyncio.create_task(c.chat.completions.create(
            model="chat", messages=HI))  # type: ignore[arg-type]
        await upstream.holding.wait()
        with pytest.raises(openai.APIStatusError) as info:
            await c.chat.completions.create(model="chat", messages=HI,  # type: ignore[arg-type]
                                            extra_body={"timeout": 1})
        assert info.value.status_code == 504
        assert "max_parallel_requests" in info.value.message
        assert upstream.hits == 1
        upstream.hold.set()
        assert (await first).choices[0].message.content == "hello there"


def test_a_cap_that_is_no_number_stops_start_up_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"model_list\[0\]\.litellm_params\."
                                          r"max_parallel_requests: must be an integer"):
        parse_config({"model_list": [{"model_name": "m", "litellm_params": {
            "model": "openai/m", "api_base": "http://127.0.0.1:9/v1",
            "max_parallel_requests": "lots"}}]})
    with pytest.raises(ConfigError, match=r"router_settings\.default_max_parallel_requests"):
        parse_config({"model_list": [], "router_settings": {
            "default_max_parallel_requests": -2}})
