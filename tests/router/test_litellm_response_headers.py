"""The response headers LiteLLM's proxy sends that clients read (``x-litellm-model-id``,
``x-litellm-model-group``, ``x-litellm-attempted-retries``,
``x-litellm-attempted-fallbacks``) come next to the gateway's own, on chat and on the
native wires, and a browser may read them (CORS)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from types import SimpleNamespace

import aiohttp
import anthropic
import openai
import pytest

from tests.conftest import GatewayFactory
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_fleet import FleetUpstream

KEY = "sk-client-litellm-response-headers"
ORIGIN = "https://chat.example.com"


@pytest.fixture
async def fleet(gateway_factory: GatewayFactory) -> AsyncIterator[SimpleNamespace]:
    async with FleetUpstream("east", mode="dead") as east, FleetUpstream("backup") as backup, \
            FakeAnthropic(api_key="k-claude") as claude:
        gw = await gateway_factory({
            "model_list": [
                {"model_name": "gpt", "litellm_params": {
                    "model": "openai/gpt-4o", "api_base": east.v1, "api_key": "k-east"},
                 "model_info": {"id": "gpt-east"}},
                {"model_name": "gpt-backup", "litellm_params": {
                    "model": "openai/gpt-4o-mini", "api_base": backup.v1, "api_key": "k-b"},
                 "model_info": {"id": "gpt-backup-1"}},
                {"model_name": "claude", "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
                    "api_key": "k-claude"}, "model_info": {"id": "claude-1"}},
            ],
            "router_settings": {"num_retries": 1, "fallbacks": [{"gpt": ["gpt-backup"]}]},
            "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
            "gateway": {"api_keys": [KEY], "cors_origins": [ORIGIN]},
        })
        yield SimpleNamespace(gw=gw, east=east, backup=backup)


async def test_a_fallback_after_retries_is_told_as_litellm_tells_it(
        fleet: SimpleNamespace) -> None:
    async with openai.AsyncOpenAI(base_url=fleet.gw.base_url, api_key=KEY,
                                  max_retries=0) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="gpt", messages=[{"role": "user", "content": "hi"}])
        assert raw.parse().choices[0].message.content == "from backup: gpt-4o-mini"
        assert fleet.east.hits == 2  # the first try and num_retries: 1
        assert raw.headers["x-litellm-model-group"] == "gpt-backup"
        assert raw.headers["x-litellm-model-id"] == "gpt-backup-1"
        assert raw.headers["x-litellm-attempted-retries"] == "1"
        assert raw.headers["x-litellm-attempted-fallbacks"] == "1"
        plain = await client.chat.completions.with_raw_response.create(
            model="gpt-backup", messages=[{"role": "user", "content": "hi"}])
    assert plain.headers["x-litellm-model-id"] == "gpt-backup-1"
    assert plain.headers["x-litellm-attempted-retries"] == "0"
    assert "x-litellm-attempted-fallbacks" not in plain.headers


async def test_a_native_answer_names_its_deployment(fleet: SimpleNamespace) -> None:
    async with anthropic.AsyncAnthropic(base_url=fleet.gw.root, api_key=KEY,
                                        max_retries=0) as client:
        raw = await client.messages.with_raw_response.create(
            model="claude", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert raw.headers["x-litellm-model-id"] == "claude-1"
    assert raw.headers["x-litellm-model-group"] == "claude"


async def test_a_browser_may_read_them(fleet: SimpleNamespace) -> None:
    async with aiohttp.ClientSession() as http, http.post(
            f"{fleet.gw.base_url}/chat/completions",
            headers={"Origin": ORIGIN, "Authorization": f"Bearer {KEY}"},
            json={"model": "gpt-backup", "messages": [{"role": "user", "content": "hi"}]}
    ) as resp:
        assert resp.status == 200
        exposed = resp.headers["Access-Control-Expose-Headers"]
    for name in ("x-litellm-model-id", "x-litellm-model-group",
                 "x-litellm-attempted-retries", "x-litellm-attempted-fallbacks"):
        assert name in exposed
