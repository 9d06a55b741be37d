"""A deployment's circuit, as /metrics and /health show it: closed, open, half-open, closed.

Open while it cools down after failures, half-open once the cooldown is over (back in
rotation, on trial), closed again at its first answer. The fleet's clock is the test's.
"""

from __future__ import annotations

from typing import Any

import aiohttp
import openai

from gateway.router.selection import DeploymentTable
from tests.conftest import GatewayFactory, gateway_state
from tests.fakes.openai_fleet import FleetUpstream

CLOSED, HALF_OPEN, OPEN = 0, 1, 2


def test_the_table_walks_the_circuit() -> None:
    table = DeploymentTable(allowed_fails=0, cooldown_time=10.0)
    assert table.circuit("a", 0.0) == "closed"
    assert table.failed("a", 500, 1.0, alone=False) == 10.0
    assert table.circuit("a", 5.0) == "open"
    assert table.circuit("a", 11.0) == "half_open"
    assert table.succeeded("a", 0.1) is True  # this answer closed it
    assert table.circuit("a", 12.0) == "closed"
    assert table.succeeded("a", 0.1) is False
    table.failed("a", 429, 20.0, alone=False)
    assert table.circuit("a", 31.0) == "half_open"
    table.failed("a", 429, 31.0, alone=False)  # failing on trial: open again
    assert table.circuit("a", 32.0) == "open"


async def test_metrics_and_health_follow_the_circuit(gateway_factory: GatewayFactory) -> None:
    now = [1000.0]
    async with FleetUpstream("east") as east, FleetUpstream("west") as west:
        gw = await gateway_factory({
            "model_list": [
                {"model_name": "m", "litellm_params": {"model": "openai/east", "api_base": east.v1,
                                                       "api_key": "k1"}},
                {"model_name": "m", "litellm_params": {"model": "openai/west", "api_base": west.v1,
                                                       "api_key": "k2"}},
            ],
            "router_settings": {"allowed_fails": 0, "cooldown_time": 30,
                                "routing_strategy": "simple-shuffle"},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
        })
        state = gateway_state(gw)
        state.fleet.clock = lambda: now[0]
        metrics = state.driver.metrics

        def circuit() -> float:
            return metrics.value("gateway_deployment_circuit_state", model="m",
                                 deployment="openai/east")

        async def health() -> str:
            async with aiohttp.ClientSession() as http, http.get(f"{gw.root}/health") as resp:
                body: dict[str, Any] = await resp.json()
            rows = body["healthy_endpoints"] + body["unhealthy_endpoints"]
            return str(next(r["circuit"] for r in rows if r["deployment"] == "m#1"))

        client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="none", max_retries=0)
        try:
            assert circuit() == CLOSED and await health() == "closed"
            east.mode = "dead"
            while east.hits == 0:  # the shuffle reaches east sooner or later
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
            assert circuit() == OPEN and await health() == "open"

            now[0] += 31  # the cooldown is over: back in rotation, on trial
            state.driver.cooldown_over(state.fleet.groups["m"][0])  # what its timer does
            assert circuit() == HALF_OPEN and await health() == "half_open"

            east.mode = "ok"
            hits = east.hits
            while east.hits == hits:
                await client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "hi"}])
            assert circuit() == CLOSED and await health() == "closed"
        finally:
            await client.close()
