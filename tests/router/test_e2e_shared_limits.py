"""rpm limits shared by two gateway replicas through a real redis-server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest

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
