"""``GET /metrics`` counts requests, repairs, attempts and recovery steps."""

from __future__ import annotations

import aiohttp
import openai

from gateway.referee import Referee
from tests.conftest import GatewayFactory, model_entry
from tests.factories import assistant, tool, user


async def test_metrics_count_what_the_gateway_did(gateway_factory: GatewayFactory) -> None:
    async with Referee(rules="strict") as ref:
        gw = await gateway_factory({"model_list": [model_entry("demo", ref.base_url)]})
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="k", max_retries=0) as c:
            await c.chat.completions.create(model="demo", messages=[user("a"), tool("ghost")])
            # A leading assistant message: refused by the strict referee, fixed by strict.
            await c.chat.completions.create(model="demo",
                                            messages=[assistant("hello"), user("b")])
        async with aiohttp.ClientSession() as s, s.get(gw.root + "/metrics") as r:
            assert r.status == 200
            text = await r.text()
    lines = set(text.splitlines())
    assert 'gateway_requests_total{model="demo",status="200"} 2' in lines
    assert 'gateway_repairs_total{kind="orphan_tool_result_dropped"} 1' in lines
    assert 'gateway_repairs_total{kind="leading_non_user_dropped"} 1' in lines
    assert 'gateway_recovery_steps_total{step="strict"} 1' in lines
    assert 'gateway_upstream_attempts_total{model="demo",outcome="structural"} 1' in lines
    assert 'gateway_upstream_attempts_total{model="demo",outcome="ok"} 2' in lines
