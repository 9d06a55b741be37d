"""Routing strategies that depend on live state, through a real gateway and the openai SDK."""

from __future__ import annotations

import asyncio
from typing import Any

import openai

from tests.conftest import GatewayFactory, gateway_state
from tests.fakes.openai_fleet import FleetUpstream


def two_deployments(a: FleetUpstream, b: FleetUpstream, strategy: str) -> dict[str, Any]:
    return {
        "model_list": [
            {"model_name": "m", "litellm_params": {"model": "openai/m", "api_base": up.v1,
                                                    "api_key": "upstream-key-1"},
             "model_info": {"id": up.name}}
            for up in (a, b)],
        "router_settings": {"routing_strategy": strategy},
    }


async def test_least_busy_sends_the_next_request_to_the_idle_deployment(
    gateway_factory: GatewayFactory,
) -> None:
    async with FleetUpstream("a") as a, FleetUpstream("b") as b:
        gw = await gateway_factory(two_deployments(a, b, "least-busy"))
        a.hold, b.hold = asyncio.Event(), asyncio.Event()
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="x",
                                      max_retries=0) as client:
            # A long answer is still streaming from one deployment...
            busy = await client.chat.completions.with_raw_response.create(
                model="m", messages=[{"role": "user", "content": "long"}], stream=True)
            first = busy.headers["x-gateway-deployment"]
            # ...so every new request goes to the other one while it lasts.
            for _ in range(5):
                raw = await client.chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": "short"}])
                assert raw.headers["x-gateway-deployment"] != first
            a.hold.set()
            b.hold.set()
            text = "".join([c.choices[0].delta.content or "" async for c in busy.parse()
                            if c.choices])
            assert text == f"from {first}: m"
        assert {a.hits, b.hits} == {1, 5}


async def test_latency_routing_prefers_the_faster_deployment(
    gateway_factory: GatewayFactory,
) -> None:
    async with FleetUpstream("a") as a, FleetUpstream("b") as b:
        gw = await gateway_factory(two_deployments(a, b, "latency-based-routing"))
        table = gateway_state(gw).fleet.table
        table.succeeded("a", 2.5)  # a slow answer from "a" was seen earlier
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="x",
                                      max_retries=0) as client:
            for _ in range(5):
                raw = await client.chat.completions.with_raw_response.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
                assert raw.headers["x-gateway-deployment"] == "b"
        assert (a.hits, b.hits) == (0, 5)
