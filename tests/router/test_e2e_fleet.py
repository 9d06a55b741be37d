"""A LiteLLM fleet config (configs/litellm-fleet.yaml) served unchanged, end to end.

The chain: the real ``openai`` SDK (``OpenAI`` and ``AzureOpenAI``, retries off) -> a real
gateway on 127.0.0.1 started from the repository's fleet config -> local upstreams standing
in for each deployment: OpenAI-wire servers for OpenAI, Azure OpenAI (through litellm) and
vLLM, the fake Anthropic API (through litellm) for the fallback group. Endpoints and keys
come from the environment, exactly as the config reads them in production.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest
import yaml

from tests.conftest import GatewayFactory, RunningGateway, gateway_state
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_fleet import FleetUpstream
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS

pytestmark = IGNORE_SCHEMA_WARNINGS

FLEET_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "litellm-fleet.yaml"
MASTER_KEY = "sk-fleet-master-7c1e"
OPENAI_KEY = "sk-openai-upstream-31f0"
AZURE_KEY = "azure-upstream-key-9d2a"
ANTHROPIC_KEY = "sk-ant-upstream-44b7"


@dataclass
class Fleet:
    """The running gateway and its upstreams."""

    gw: RunningGateway
    openai: FleetUpstream
    azure: FleetUpstream
    vllm: FleetUpstream
    anthropic: FakeAnthropic
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)

    def client(self, key: str | None = MASTER_KEY) -> openai.AsyncOpenAI:
        """An SDK client that never retries on its own (closed after the test)."""
        client = openai.AsyncOpenAI(base_url=self.gw.base_url, api_key=key or "none",
                                    max_retries=0, timeout=60.0)
        self.clients.append(client)
        return client


def fleet_config() -> dict[str, Any]:
    """The repository's fleet config, with waits shortened for tests (backoff only: every
    LiteLLM setting is used as written)."""
    raw: dict[str, Any] = yaml.safe_load(FLEET_CONFIG.read_text())
    raw["recovery"] = {"backoff_base": 0.01, "backoff_cap": 0.02, "deadline": 30.0}
    return raw


@pytest.fixture
async def fleet(gateway_factory: GatewayFactory,
                monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Fleet]:
    async with (FleetUpstream("openai") as oai, FleetUpstream("azure") as azure,
                FleetUpstream("vllm", window=2000) as vllm,
                FakeAnthropic(api_key=ANTHROPIC_KEY) as anthropic):
        env = {"OPENAI_API_BASE": oai.v1, "OPENAI_API_KEY": OPENAI_KEY,
               "AZURE_API_BASE": azure.base_url, "AZURE_API_KEY": AZURE_KEY,
               "ANTHROPIC_API_BASE": anthropic.base_url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
               "VLLM_API_BASE": vllm.v1, "VLLM_API_KEY": "vllm-key",
               "LITELLM_MASTER_KEY": MASTER_KEY}
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("DATABASE_URL", raising=False)  # ignored keys need no variable
        gw = await gateway_factory(fleet_config())
        gateway_state(gw).fleet.rng.seed(20261130)
        running = Fleet(gw, oai, azure, vllm, anthropic)
        yield running
        for client in running.clients:
            await client.close()


async def ask(client: openai.AsyncOpenAI, model: str, text: str = "hi",
              **extra: Any) -> Any:
    """One chat call through the raw response (headers and parsed body)."""
    return await client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **extra)


async def test_traffic_spreads_over_deployments_by_weight(fleet: Fleet) -> None:
    client = fleet.client()
    used: dict[str, int] = {}
    for _ in range(80):
        raw = await ask(client, "gpt-4o")
        deployment = raw.headers["x-gateway-deployment"]
        used[deployment] = used.get(deployment, 0) + 1
        assert raw.headers["x-gateway-model-used"] == "gpt-4o"
        assert raw.parse().choices[0].message.content.startswith(
            "from openai" if deployment == "gpt-4o-openai" else "from azure")
    # weight 3 : 1 -> about 60 : 20 (seeded: the split is exact for this seed, the bounds
    # are what any fair weighted draw of 80 gives with overwhelming probability).
    assert used["gpt-4o-openai"] == fleet.openai.hits
    assert used["gpt-4o-azure"] == fleet.azure.hits
    assert 48 <= fleet.openai.hits <= 72, used
    assert fleet.openai.hits + fleet.azure.hits == 80
    # Azure was called on its own path, with its own key and api-version, never the client's.
    azure_call = fleet.azure.requests[0]
    assert azure_call.path == "/openai/deployments/gpt-4o-eastus/chat/completions"
    assert azure_call.query["api-version"] == "2024-10-21"
    assert azure_call.headers["api-key"] == AZURE_KEY
    assert all(MASTER_KEY not in str(r.headers) for r in fleet.openai.requests)
    assert fleet.openai.requests[0].headers["authorization"] == f"Bearer {OPENAI_KEY}"


async def test_dead_deployment_is_cooled_down_and_traffic_moves(fleet: Fleet) -> None:
    fleet.azure.mode = "dead"
    client = fleet.client()
    for _ in range(30):
        raw = await ask(client, "gpt-4o")  # every answer succeeds: retries move away
        assert raw.headers["x-gateway-deployment"] == "gpt-4o-openai"
    # allowed_fails: 1 -> the second failure within a minute cools it down for 30 s; after
    # that it is not tried at all.
    assert fleet.azure.hits == 2
    metrics = gateway_state(fleet.gw).driver.metrics
    assert metrics.value("gateway_deployment_cooldowns_total", model="gpt-4o",
                         deployment="azure/gpt-4o-eastus") == 1
    assert metrics.value("gateway_deployment_cooldown", model="gpt-4o",
                         deployment="azure/gpt-4o-eastus") == 1
    spans = [s for s in fleet.gw.spans.get_finished_spans()
             if s.name == "gateway.attempt" and (s.attributes or {}).get(
                 "gateway.deployment.cooldown")]
    assert len(spans) == 1
    assert (spans[0].attributes or {})["gateway.deployment"] == "gpt-4o-azure"
    async with aiohttp.ClientSession() as http, http.get(f"{fleet.gw.root}/health",
                        headers={"Authorization": f"Bearer {MASTER_KEY}"}) as resp:
        health = await resp.json()
    unhealthy = [row["deployment"] for row in health["unhealthy_endpoints"]]
    assert unhealthy == ["gpt-4o-azure"]


async def test_dead_model_group_falls_back_and_the_answer_names_it(fleet: Fleet) -> None:
    fleet.openai.mode = fleet.azure.mode = "dead"
    raw = await ask(fleet.client(), "gpt-4o", "are you there?")
    assert raw.status_code == 200
    assert raw.headers["x-gateway-model-used"] == "claude-sonnet"
    assert raw.headers["x-gateway-deployment"] == "claude-anthropic"  # order 1 before Bedrock
    assert "fallback" in raw.headers["x-gateway-recovery"].split(",")
    assert raw.parse().choices[0].message.content == "you said: are you there?"
    assert fleet.anthropic.requests[0].headers["x-api-key"] == ANTHROPIC_KEY
    # The group's recovery was spent first: num_retries: 2 -> three attempts on gpt-4o.
    assert fleet.openai.hits + fleet.azure.hits == 3
    assert raw.headers["x-gateway-attempts"] == "4"


async def test_streaming_falls_back_before_the_first_byte(fleet: Fleet) -> None:
    fleet.openai.mode = fleet.azure.mode = "rate_limited"
    stream = await fleet.client().chat.completions.with_raw_response.create(
        model="gpt-4", messages=[{"role": "user", "content": "stream please"}], stream=True)
    assert stream.headers["x-gateway-model-used"] == "claude-sonnet"
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream.parse()
                    if chunk.choices])
    assert text == "you said: stream please"


async def test_context_overflow_falls_back_to_the_larger_model_before_any_summary(
    fleet: Fleet,
) -> None:
    # ~4,000 tokens: below llama-small's configured 8,192 (so the gateway forwards it), above
    # what the vLLM server really holds (2,000): it answers context_length_exceeded.
    history = "earlier notes " * 1150
    raw = await ask(fleet.client(), "llama-small", history)
    assert raw.status_code == 200
    assert raw.headers["x-gateway-model-used"] == "gpt-4o"
    assert raw.headers["x-gateway-recovery"] == "fallback"
    assert "x-gateway-compaction" not in raw.headers
    assert fleet.vllm.hits == 1
    sent = (fleet.openai.requests or fleet.azure.requests)[0].body
    assert sent["messages"][0]["content"] == history  # the whole history, not a summary


async def test_a_request_too_big_for_the_small_window_goes_to_the_larger_one_first(
    fleet: Fleet,
) -> None:
    # ~11,000 tokens: past llama-small's 8,192 window. The larger fallback takes it before
    # the gateway would summarize anything; the small model is never called.
    history = "a long transcript line " * 2000
    raw = await ask(fleet.client(), "llama-small", history)
    assert raw.headers["x-gateway-model-used"] == "gpt-4o"
    assert raw.headers["x-gateway-recovery"] == "fallback"
    assert "x-gateway-compaction" not in raw.headers
    assert fleet.vllm.hits == 0


async def test_requests_without_the_master_key_get_401(fleet: Fleet) -> None:
    for key in (None, "sk-wrong"):
        with pytest.raises(openai.AuthenticationError) as info:
            await ask(fleet.client(key), "gpt-4o")
        assert info.value.status_code == 401
    assert fleet.openai.hits + fleet.azure.hits == 0
    raw = await ask(fleet.client(MASTER_KEY), "gpt-4o")
    assert raw.status_code == 200


async def test_azure_openai_client_and_litellm_health_probes(fleet: Fleet) -> None:
    def call_azure() -> Any:
        with openai.AzureOpenAI(azure_endpoint=fleet.gw.root, api_key=MASTER_KEY,
                                api_version="2024-10-21", max_retries=0,
                                timeout=60.0) as client:
            return client.chat.completions.with_raw_response.create(
                model="gpt-4", messages=[{"role": "user", "content": "hello azure"}])

    raw = await asyncio.to_thread(call_azure)
    assert raw.headers["x-gateway-model-used"] == "gpt-4o"  # the alias, by the Azure path
    assert raw.parse().choices[0].message.content.startswith("from ")
    async with aiohttp.ClientSession() as http:
        # LiteLLM's legacy engines path: the model named in the path, as on Azure's.
        async with http.post(f"{fleet.gw.root}/engines/gpt-4/chat/completions",
                             json={"messages": [{"role": "user", "content": "engines"}]},
                             headers={"Authorization": f"Bearer {MASTER_KEY}"}) as resp:
            assert resp.status == 200, await resp.text()
            assert resp.headers["x-gateway-model-used"] == "gpt-4o"
        async with http.get(f"{fleet.gw.root}/health/liveliness") as resp:
            assert resp.status == 200
            assert await resp.json() == "I'm alive!"
        async with http.get(f"{fleet.gw.root}/health/readiness") as resp:
            assert resp.status == 200
            assert (await resp.json())["status"] == "healthy"
        async with http.get(f"{fleet.gw.root}/health") as resp:
            assert resp.status == 401  # model health needs the key, as in LiteLLM


async def test_aliases_wildcards_and_the_model_list(fleet: Fleet) -> None:
    client = fleet.client()
    raw = await ask(client, "openai/gpt-4.1-mini")
    assert raw.headers["x-gateway-model-used"] == "openai/gpt-4.1-mini"
    assert fleet.openai.requests[-1].body["model"] == "gpt-4.1-mini"
    assert fleet.openai.requests[-1].headers["authorization"] == f"Bearer {OPENAI_KEY}"
    raw = await ask(client, "claude")
    assert raw.headers["x-gateway-model-used"] == "claude-sonnet"
    models = {m.id: m for m in (await client.models.list()).data}
    assert set(models) == {"gpt-4o", "claude-sonnet", "llama-small", "text-embedding-3-small",
                           "gpt-4", "claude", "openai/*"}
    wildcard = models["openai/*"].model_dump()
    assert wildcard["wildcard"] is True and "supports_tools" not in wildcard
    embedding = models["text-embedding-3-small"].model_dump()
    assert embedding["mode"] == "embedding" and "supports_tools" not in embedding
    assert models["gpt-4o"].model_dump()["deployments"] == 2
    assert models["gpt-4"].model_dump()["alias_of"] == "gpt-4o"
    one = await client.models.retrieve("openai/gpt-4.1-mini")
    assert one.id == "openai/gpt-4.1-mini"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("mistral-large")
    with pytest.raises(openai.BadRequestError) as info:
        await ask(client, "text-embedding-3-small")
    assert "embedding" in info.value.message


async def test_litellm_only_fields_are_consumed_never_forwarded(fleet: Fleet) -> None:
    fleet.azure.mode = "dead"  # keep every call on the OpenAI deployment's record
    extra = {"fallbacks": ["claude-sonnet"], "num_retries": 1, "caching": True,
             "mock_response": "not this", "tags": ["team-a"], "litellm_metadata": {"a": 1},
             "metadata": {"trace": "kept"}, "unknown_field": "kept"}
    for _ in range(3):
        raw = await ask(fleet.client(), "gpt-4o", extra_body=extra)
        assert raw.parse().choices[0].message.content.startswith("from openai")
    for request in fleet.openai.requests:
        body = request.body
        for name in ("fallbacks", "num_retries", "caching", "mock_response", "tags",
                      "litellm_metadata"):
            assert name not in body
        assert body["metadata"] == {"trace": "kept"} and body["unknown_field"] == "kept"
    with pytest.raises(openai.BadRequestError) as info:
        await ask(fleet.client(), "gpt-4o", extra_body={"fallbacks": ["gpt-5-typo"]})
    assert info.value.param == "fallbacks" and "gpt-5-typo" in info.value.message


async def test_rate_limit_headers_and_upstream_request_id_reach_the_client(
    fleet: Fleet,
) -> None:
    raw = await ask(fleet.client(), "llama-small")
    assert raw.headers["x-upstream-request-id"] == "vllm-req-1"
    assert raw.headers["x-request-id"].startswith("req_")
    fleet.vllm.mode = "rate_limited"
    with pytest.raises(openai.RateLimitError) as info:
        # The request's own fallbacks: none; its own retries: none.
        await ask(fleet.client(), "llama-small", extra_body={"fallbacks": [],
                                                              "num_retries": 0})
    headers = info.value.response.headers
    assert headers["x-ratelimit-remaining-requests"] == "0"
    assert headers["x-upstream-request-id"] == "vllm-req-2"
    assert headers["retry-after"] == "20"
    assert fleet.openai.hits + fleet.azure.hits == 0


async def test_cors_preflight_and_headers(fleet: Fleet) -> None:
    origin = "https://chat.example.com"
    async with aiohttp.ClientSession() as http:
        async with http.options(f"{fleet.gw.base_url}/chat/completions", headers={
                "Origin": origin, "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type"}) as resp:
            assert resp.status == 204
            assert resp.headers["Access-Control-Allow-Origin"] == origin
            assert "authorization" in resp.headers["Access-Control-Allow-Headers"]
        async with http.options(f"{fleet.gw.base_url}/chat/completions", headers={
                "Origin": "https://evil.example", "Access-Control-Request-Method": "POST"}
                ) as resp:
            assert resp.status == 403
            assert "Access-Control-Allow-Origin" not in resp.headers
        async with http.post(f"{fleet.gw.base_url}/chat/completions", headers={
                "Origin": origin, "Authorization": f"Bearer {MASTER_KEY}"},
                json={"model": "gpt-4o", "messages": [{"role": "user", "content": "hi"}]}
                ) as resp:
            assert resp.status == 200
            assert resp.headers["Access-Control-Allow-Origin"] == origin
            assert "x-gateway-model-used" in resp.headers["Access-Control-Expose-Headers"]
