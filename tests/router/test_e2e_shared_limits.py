"""rpm limits shared by two gateway replicas through a real redis-server."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.router.redis_usage import RedisUsage
from tests.conftest import GatewayFactory, gateway_state
from tests.fakes.openai_fleet import FleetUpstream
from tests.sessions.conftest import run_redis_server


async def test_two_replicas_share_one_rpm_budget(gateway_factory: GatewayFactory,
                                                 tmp_path: Path) -> None:
    with run_redis_server(tmp_path) as url:
        host_port = url.split("//", 1)[1].split("/", 1)[0]
        host, port = host_port.rsplit(":", 1)
        async with FleetUpstream("limited") as upstream:
            config: dict[str, Any] = {
                "model_list": [{"model_name": "small", "litellm_params": {
                    "model": "openai/small", "api_base": upstream.v1, "api_key": "k-123456",
                    "rpm": 3}}],
                "router_settings": {"redis_host": host, "redis_port": int(port)},
                "recovery": {"max_retry_after": 0.0},
            }
            replicas = [await gateway_factory(config), await gateway_factory(config)]
            for gw in replicas:
                shared = gateway_state(gw).fleet.shared
                assert shared is not None
                shared.wall = lambda: 1_800_000_000.0  # the same minute for both
            clients = [openai.AsyncOpenAI(base_url=gw.base_url, api_key="x", max_retries=0)
                       for gw in replicas]
            try:
                for client in (clients[0], clients[0], clients[1]):
                    await client.chat.completions.create(
                        model="small", messages=[{"role": "user", "content": "hi"}])
                with pytest.raises(openai.RateLimitError) as info:
                    await clients[1].chat.completions.create(
                        model="small", messages=[{"role": "user", "content": "hi"}])
            finally:
                for client in clients:
                    await client.close()
            assert upstream.hits == 3  # the fourth never reached the upstream
            assert info.value.code == "no_deployments_available"
            assert "rpm" in info.value.message


async def _one(client: openai.AsyncOpenAI) -> str:
    try:
        await client.chat.completions.create(
            model="small", messages=[{"role": "user", "content": "hi"}])
    except openai.RateLimitError as err:
        assert err.code == "no_deployments_available"
        return "refused"
    return "passed"


async def test_concurrent_requests_over_two_replicas_pass_exactly_the_rpm(
        gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """30 requests at once, spread over two replicas, ``rpm: 10``: exactly 10 pass, in every
    minute (the count is reserved atomically in Redis, never read and then added to)."""
    with run_redis_server(tmp_path) as url:
        async with FleetUpstream("limited") as upstream:
            config: dict[str, Any] = {
                "model_list": [
                    {"model_name": "small", "litellm_params": {
                        "model": "openai/small", "api_base": upstream.v1,
                        "api_key": "k-123456", "rpm": 6}},
                    {"model_name": "small", "litellm_params": {
                        "model": "openai/small", "api_base": upstream.v1,
                        "api_key": "k-123456", "rpm": 4}}],
                "router_settings": {"redis_url": url},
                "recovery": {"max_retry_after": 0.0},
            }
            replicas = [await gateway_factory(config), await gateway_factory(config)]
            clients = [openai.AsyncOpenAI(base_url=gw.base_url, api_key="x", max_retries=0)
                       for gw in replicas]
            try:
                for minute in range(3):  # three minutes, each with a fresh budget
                    for gw in replicas:
                        shared = gateway_state(gw).fleet.shared
                        assert shared is not None
                        shared.wall = lambda m=minute: 1_800_000_000.0 + 60.0 * m
                    before = upstream.hits
                    outcomes = await asyncio.gather(
                        *(_one(clients[i % 2]) for i in range(30)))
                    assert outcomes.count("passed") == 10
                    assert outcomes.count("refused") == 20
                    assert upstream.hits - before == 10
            finally:
                for client in clients:
                    await client.close()


async def test_the_reservation_is_atomic_for_rpm_and_tpm(tmp_path: Path) -> None:
    """Two replicas' counters racing on one deployment: the limits hold exactly; a
    refused request is not counted."""
    with run_redis_server(tmp_path) as url:
        counters = [RedisUsage(url), RedisUsage(url)]
        for usage in counters:
            usage.wall = lambda: 1_800_000_000.0
        try:
            got = await asyncio.gather(*(counters[i % 2].reserve("d", 10, None, 5)
                                         for i in range(40)))
            assert got.count(True) == 10
            tpm = await asyncio.gather(*(counters[i % 2].reserve("t", None, 100, 30)
                                         for i in range(20)))
            assert tpm.count(True) == 3  # 90 tokens fit in 100, a fourth 30 does not
            # The first request of a minute passes whatever its size (as LiteLLM).
            assert await counters[0].reserve("big", None, 100, 500) is True
            assert await counters[1].reserve("big", None, 100, 1) is False
            rows = await counters[0].read(["d", "t", "big"], 0.0)
            assert rows is not None
            assert (rows["d"].requests, rows["d"].tokens) == (10, 50)
            assert (rows["t"].requests, rows["t"].tokens) == (3, 90)
            assert (rows["big"].requests, rows["big"].tokens) == (1, 500)
        finally:
            for usage in counters:
                await usage.close()


async def test_a_cooldown_one_replica_starts_holds_on_the_other(
        gateway_factory: GatewayFactory, tmp_path: Path) -> None:
    """A deployment that refused with 429 on one replica is out of rotation on the other
    too, for the rest of its cooldown (the other never sends it a request meanwhile)."""
    with run_redis_server(tmp_path) as url:
        async with FleetUpstream("east", mode="rate_limited") as east, \
                FleetUpstream("west") as west:
            config: dict[str, Any] = {
                "model_list": [
                    {"model_name": "m", "litellm_params": {
                        "model": "openai/m", "api_base": east.v1, "api_key": "k-123456"}},
                    {"model_name": "m", "litellm_params": {
                        "model": "openai/m", "api_base": west.v1, "api_key": "k-123456"}}],
                "router_settings": {"redis_url": url, "cooldown_time": 60},
                "recovery": {"max_retry_after": 0.0, "backoff_base": 0.01,
                             "backoff_cap": 0.02},
            }
            first, second = await gateway_factory(config), await gateway_factory(config)
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            async with openai.AsyncOpenAI(base_url=first.base_url, api_key="x",
                                          max_retries=0) as c1:
                # Until east refuses once (simple-shuffle may pick west first): then it
                # cools down on this replica, and the cooldown is published.
                for _ in range(40):
                    # (east's own 429 is relayed: its Retry-After is past the budget)
                    with contextlib.suppress(openai.RateLimitError):
                        await c1.chat.completions.create(**body)
                    if east.hits:
                        break
            assert east.hits == 1
            fleet = gateway_state(first).fleet
            assert fleet.cooldowns is not None
            for task in list(fleet.cooldowns._tasks):  # the background write
                await task
            async with openai.AsyncOpenAI(base_url=second.base_url, api_key="x",
                                          max_retries=0) as c2:
                answers = [await c2.chat.completions.create(**body) for _ in range(12)]
            assert east.hits == 1  # the second replica never tried it
            assert all("west" in a.choices[0].message.content for a in answers)  # type: ignore[operator]
            assert gateway_state(second).fleet.circuit(
                gateway_state(second).fleet.groups["m"][0]) == "open"
