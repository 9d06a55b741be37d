"""LiteLLM proxy configs as platform teams run them (tests/data/litellm_configs/heldout/),
served unchanged: only their ``api_base`` values point at local stand-ins of each provider
(through the environment variables the configs read, or in the loaded document where a
config writes its endpoint literally).

The chain: the real ``openai`` SDK (and the ``anthropic`` SDK on ``/v1/messages``), retries
off -> a real gateway on 127.0.0.1 -> OpenAI / Azure / vLLM stand-ins (FleetUpstream), the
fake Anthropic API and a fake Bedrock Converse endpoint (both reached through litellm).
What is asserted is what a user of the proxy would notice: which deployment answers a name,
alias or wildcard, which fallback answers which refusal, how timeouts and retries end, that
the master key guards every route and never shows, that what the gateway does not do is
named at start-up, and that a broken config stops start-up with a message, not a traceback.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
import redis.asyncio as aioredis
from aiohttp import web

from gateway.config import ConfigError, load_config, load_document, parse_config
from tests.conftest import GatewayFactory, RunningGateway, gateway_state
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.bedrock_server import FakeBedrock
from tests.fakes.openai_fleet import FleetUpstream
from tests.http import wait_until_serving
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS
from tests.sessions.conftest import run_redis_server

pytestmark = IGNORE_SCHEMA_WARNINGS

HELDOUT = Path(__file__).resolve().parents[1] / "data" / "litellm_configs" / "heldout"
MASTER = "sk-heldout-master-6b1f0e"
OPENAI_KEY = "sk-openai-heldout-90a1"
AZURE_KEY = "azure-heldout-key-77c3"
ANTHROPIC_KEY = "sk-ant-heldout-41de"
AWS_KEY_ID = "AKIAHELDOUT00000001"
AWS_SECRET = "aws-secret-heldout-0b7e9d"
SECRETS = (MASTER, OPENAI_KEY, AZURE_KEY, ANTHROPIC_KEY, AWS_SECRET)


# --- stand-ins ---------------------------------------------------------------------------

AZURE_CONTENT_FILTER = {"error": {
    "message": "The response was filtered due to the prompt triggering Azure OpenAI's content "
               "management policy. Please modify your prompt and retry. To learn more about "
               "our content filtering policies please read our documentation: "
               "https://go.microsoft.com/fwlink/?linkid=2198766",
    "type": None, "param": "prompt", "code": "content_filter", "status": 400,
    "innererror": {"code": "ResponsibleAIPolicyViolation", "content_filter_result": {
        "hate": {"filtered": True, "severity": "high"},
        "self_harm": {"filtered": False, "severity": "safe"},
        "sexual": {"filtered": False, "severity": "safe"},
        "violence": {"filtered": False, "severity": "safe"}}}}}
BAD_REQUEST = {"error": {
    "message": "Invalid value for 'temperature': must be between 0 and 2.",
    "type": "invalid_request_error", "param": "temperature", "code": "invalid_value"}}


class Upstream(FleetUpstream):
    """A FleetUpstream with the failures these configs meet besides ``dead`` and
    ``rate_limited``: ``content_filter`` (Azure's content-policy refusal), ``bad_request``
    (a plain 400) and ``hang`` (accepts the request and never answers until closed)."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.released = asyncio.Event()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        if self.mode == "content_filter":
            await self.record(request)
            return web.json_response(AZURE_CONTENT_FILTER, status=400)
        if self.mode == "bad_request":
            await self.record(request)
            return web.json_response(BAD_REQUEST, status=400)
        if self.mode == "hang":
            await self.record(request)
            await self.released.wait()
            return web.json_response(BAD_REQUEST, status=400)
        return await super()._chat(request)

    async def __aexit__(self, *exc_info: object) -> None:
        self.released.set()
        await super().__aexit__(*exc_info)


def heldout(name: str) -> dict[str, Any]:
    """A heldout config as its file says (its include: files merged in, as LiteLLM does)."""
    raw = load_document(HELDOUT / name)
    assert isinstance(raw, dict)
    return raw


def set_env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """The variables a config reads (``os.environ/NAME``)."""
    for name, value in values.items():
        monkeypatch.setenv(name, value)


class Clients:
    """SDK clients on one gateway that never retry on their own (closed at the end)."""

    def __init__(self, gw: RunningGateway) -> None:
        self.gw = gw
        self._open: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []

    def openai(self, key: str = MASTER) -> openai.AsyncOpenAI:
        client = openai.AsyncOpenAI(base_url=self.gw.base_url, api_key=key, max_retries=0,
                                    timeout=60.0)
        self._open.append(client)
        return client

    def anthropic(self, key: str = MASTER) -> anthropic.AsyncAnthropic:
        client = anthropic.AsyncAnthropic(base_url=self.gw.root, api_key=key, max_retries=0,
                                          timeout=60.0)
        self._open.append(client)
        return client

    async def close(self) -> None:
        for client in self._open:
            await client.close()


@pytest.fixture
async def clients_for() -> AsyncIterator[Any]:
    made: list[Clients] = []

    def make(gw: RunningGateway) -> Clients:
        made.append(Clients(gw))
        return made[-1]

    yield make
    for clients in made:
        await clients.close()


async def chat(client: openai.AsyncOpenAI, model: str, text: str = "hi", **extra: Any) -> Any:
    """One chat call through the raw response (headers and parsed body)."""
    return await client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **extra)


def no_secret_in(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS:
            assert secret not in text


# --- Azure regions with OpenAI as the fallback group ------------------------------------

@pytest.fixture
async def azure_regions(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                        ) -> AsyncIterator[tuple[RunningGateway, Upstream, Upstream, Upstream]]:
    async with Upstream("eastus2") as east, Upstream("sweden") as sweden, \
            Upstream("openai") as oai:
        set_env(monkeypatch, AZURE_EASTUS2_API_BASE=east.base_url,
                AZURE_EASTUS2_API_KEY=AZURE_KEY + "-east",
                AZURE_SWEDEN_API_BASE=sweden.base_url, AZURE_SWEDEN_API_KEY=AZURE_KEY + "-swe",
                OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY, OPENAI_ORG_ID="org-platform-1",
                LITELLM_MASTER_KEY=MASTER)
        monkeypatch.delenv("DATABASE_URL", raising=False)  # an ignored key needs no variable
        gw = await gateway_factory(heldout("azure_regions_openai_backup.yaml"))
        yield gw, east, sweden, oai


async def test_azure_regions_serve_the_group_on_their_own_paths_and_keys(
        azure_regions: tuple[RunningGateway, Upstream, Upstream, Upstream],
        clients_for: Any) -> None:
    gw, east, sweden, oai = azure_regions
    client = clients_for(gw).openai()
    used = set()
    for _ in range(8):
        raw = await chat(client, "gpt-4o")
        used.add(raw.headers["x-gateway-deployment"])
        assert raw.headers["x-gateway-model-used"] == "gpt-4o"
    assert used <= {"azure-eastus2", "azure-sweden"}
    assert east.hits + sweden.hits == 8 and oai.hits == 0
    for upstream, deployment, key in ((east, "gpt-4o-prod-eastus2", AZURE_KEY + "-east"),
                                      (sweden, "gpt-4o-prod-swedencentral", AZURE_KEY + "-swe")):
        for call in upstream.requests:
            assert call.path == f"/openai/deployments/{deployment}/chat/completions"
            assert call.query["api-version"] == "2024-08-01-preview"
            assert call.headers["api-key"] == key
            assert MASTER not in str(call.headers)


async def test_both_azure_regions_down_fall_back_to_openai_with_its_organization(
        azure_regions: tuple[RunningGateway, Upstream, Upstream, Upstream],
        clients_for: Any) -> None:
    gw, east, sweden, oai = azure_regions
    east.mode = sweden.mode = "dead"
    raw = await chat(clients_for(gw).openai(), "gpt-4o", "still there?")
    assert raw.headers["x-gateway-model-used"] == "gpt-4o-openai"
    assert raw.headers["x-gateway-deployment"] == "openai-direct"
    assert raw.parse().choices[0].message.content == "from openai: gpt-4o"
    assert east.hits + sweden.hits == 2  # num_retries: 1 -> two attempts in the group
    call = oai.requests[0]
    assert call.headers["openai-organization"] == "org-platform-1"
    assert call.headers["authorization"] == f"Bearer {OPENAI_KEY}"


async def test_a_clients_bad_requests_never_take_a_region_out_of_rotation(
        azure_regions: tuple[RunningGateway, Upstream, Upstream, Upstream],
        clients_for: Any) -> None:
    """As LiteLLM, a 400 is the request's fault, not the deployment's: however many a client
    sends, no region cools down (allowed_fails: 2 would otherwise take both out)."""
    gw, east, sweden, oai = azure_regions
    east.mode = sweden.mode = "bad_request"
    client = clients_for(gw).openai()
    for _ in range(8):
        with pytest.raises(openai.BadRequestError):
            await chat(client, "gpt-4o")
    assert east.hits + sweden.hits == 8 and oai.hits == 0  # no retry, no fallback
    east.mode = sweden.mode = "ok"
    async with aiohttp.ClientSession() as http, http.get(
            f"{gw.root}/health", headers={"Authorization": f"Bearer {MASTER}"}) as resp:
        health = await resp.json()
    assert health["unhealthy_endpoints"] == []
    assert (await chat(client, "gpt-4o")).headers["x-gateway-model-used"] == "gpt-4o"


def test_drop_params_is_honoured_for_the_deployments_the_gateway_sends_to_itself(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """litellm_settings.drop_params reaches the Azure deployments (served through litellm);
    the OpenAI deployment leaves out a field its upstream refuses as unsupported
    (tests/router/test_drop_params.py), so start-up names nothing as ignored."""
    from gateway.routing import entry_notes

    for key, value in HELDOUT_ENV.items():
        monkeypatch.setenv(key, value)
    for key in ENDPOINT_VARIABLES:
        monkeypatch.setenv(key, "http://127.0.0.1:9/v1")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    ignored, _endpoints = entry_notes(load_config(HELDOUT / "azure_regions_openai_backup.yaml"))
    assert ignored == []


async def test_the_master_key_guards_every_route_and_never_shows(
        azure_regions: tuple[RunningGateway, Upstream, Upstream, Upstream],
        clients_for: Any, caplog: pytest.LogCaptureFixture) -> None:
    gw, east, sweden, oai = azure_regions
    clients = clients_for(gw)
    with caplog.at_level(logging.DEBUG):
        for key in ("sk-not-the-master", MASTER[:-1], OPENAI_KEY):
            with pytest.raises(openai.AuthenticationError) as info:
                await chat(clients.openai(key), "gpt-4o")
            no_secret_in(str(info.value.body), str(info.value.response.headers))
            with pytest.raises(openai.AuthenticationError):
                await clients.openai(key).models.list()
        raw = await chat(clients.openai(), "gpt-4o")
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{gw.root}/health") as unauthenticated:
                assert unauthenticated.status == 401
            async with http.post(f"{gw.base_url}/chat/completions", json={
                    "model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]},
                    headers={"api-key": MASTER}) as azure_style:
                assert azure_style.status == 200  # the header Azure clients send
    assert east.hits + sweden.hits == 2 and oai.hits == 0
    no_secret_in(caplog.text, str(dict(raw.headers)))


# --- Anthropic first, Bedrock while it is unavailable -----------------------------------

@pytest.fixture
async def claude_fleet(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                       ) -> AsyncIterator[tuple[RunningGateway, FakeAnthropic, FakeBedrock]]:
    async with FakeAnthropic(api_key=ANTHROPIC_KEY) as claude, FakeBedrock() as bedrock:
        set_env(monkeypatch, ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
                BEDROCK_RUNTIME_ENDPOINT=bedrock.base_url, AWS_ACCESS_KEY_ID=AWS_KEY_ID,
                AWS_SECRET_ACCESS_KEY=AWS_SECRET, LITELLM_MASTER_KEY=MASTER)
        gw = await gateway_factory(heldout("anthropic_bedrock_failover.yaml"))
        yield gw, claude, bedrock


async def test_anthropic_sdk_on_messages_reaches_claude_through_the_alias(
        claude_fleet: tuple[RunningGateway, FakeAnthropic, FakeBedrock],
        clients_for: Any) -> None:
    gw, claude, bedrock = claude_fleet
    message = await clients_for(gw).anthropic().messages.create(
        model="claude-code", max_tokens=64,
        messages=[{"role": "user", "content": "refactor this"}])
    assert message.content[0].type == "text"
    assert message.content[0].text == "you said: refactor this"
    (call,) = claude.requests
    assert call.headers["x-api-key"] == ANTHROPIC_KEY
    assert call.body["model"] == "claude-sonnet-4-5-20250929"
    assert bedrock.hits == 0
    with pytest.raises(anthropic.AuthenticationError):
        await clients_for(gw).anthropic("sk-wrong-key").messages.create(
            model="claude-code", max_tokens=8, messages=[{"role": "user", "content": "x"}])
    assert len(claude.requests) == 1
    async with clients_for(gw).anthropic().messages.stream(
            model="claude-sonnet-4-5", max_tokens=64,
            messages=[{"role": "user", "content": "stream it"}]) as stream:
        text = "".join([piece async for piece in stream.text_stream])
    assert text == "you said: stream it"
    assert claude.requests[-1].body["stream"] is True and bedrock.hits == 0


async def test_a_prompt_too_long_for_haiku_goes_to_its_context_window_fallback(
        claude_fleet: tuple[RunningGateway, FakeAnthropic, FakeBedrock],
        clients_for: Any) -> None:
    gw, claude, bedrock = claude_fleet
    claude.script(anthropic_error(400, "prompt is too long: 212000 tokens > 200000 maximum"))
    raw = await chat(clients_for(gw).openai(), "claude-haiku", "the whole repository")
    assert raw.headers["x-gateway-model-used"] == "claude-sonnet-4-5"
    assert "x-gateway-compaction" not in raw.headers
    haiku, sonnet = claude.requests
    assert haiku.body["model"] == "claude-3-5-haiku-20241022"
    assert sonnet.body["model"] == "claude-sonnet-4-5-20250929"
    assert sonnet.body["messages"] == haiku.body["messages"]  # the same request, not a summary
    assert bedrock.hits == 0


async def test_anthropic_overloaded_moves_claude_to_bedrock_signed_with_the_aws_keys(
        claude_fleet: tuple[RunningGateway, FakeAnthropic, FakeBedrock],
        clients_for: Any, caplog: pytest.LogCaptureFixture) -> None:
    gw, claude, bedrock = claude_fleet
    claude.script(*[anthropic_error(529, "Overloaded", "overloaded_error")] * 3)
    client = clients_for(gw).openai()
    with caplog.at_level(logging.DEBUG):
        first = await chat(client, "claude-sonnet-4-5", "plan the migration")
        second = await chat(client, "claude-code", "and then?")
    # allowed_fails: 0 -> Anthropic's first refusal takes it out of rotation for 30 s; the
    # retry (num_retries: 1) and the next request go to the order-2 deployment.
    assert first.headers["x-gateway-deployment"] == "sonnet-bedrock"
    assert second.headers["x-gateway-deployment"] == "sonnet-bedrock"
    assert first.parse().choices[0].message.content == (
        "from bedrock us.anthropic.claude-sonnet-4-5-20250929-v1:0: plan the migration")
    assert len(claude.requests) == 1 and bedrock.hits == 2
    auth = bedrock.requests[0].headers["authorization"]
    assert auth.startswith(f"AWS4-HMAC-SHA256 Credential={AWS_KEY_ID}/")
    assert "/us-west-2/bedrock/aws4_request" in auth
    no_secret_in(caplog.text, str(dict(first.headers)), str(dict(second.headers)))


async def test_a_hidden_alias_is_served_not_listed_and_deployment_defaults_reach_claude(
        claude_fleet: tuple[RunningGateway, FakeAnthropic, FakeBedrock],
        clients_for: Any) -> None:
    gw, claude, _bedrock = claude_fleet
    client = clients_for(gw).openai()
    raw = await chat(client, "cheap", "summarize")
    assert raw.headers["x-gateway-model-used"] == "claude-haiku"
    assert claude.requests[0].body["model"] == "claude-3-5-haiku-20241022"
    assert claude.requests[0].body["max_tokens"] == 1024  # litellm_params.max_tokens
    listed = {m.id for m in (await client.models.list()).data}
    assert {"claude-sonnet-4-5", "claude-haiku", "claude-code"} <= listed
    assert "cheap" not in listed


# --- self-hosted vLLM and Ollama --------------------------------------------------------

async def test_self_hosted_models_and_the_context_window_fallback(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        clients_for: Any) -> None:
    async with Upstream("vllm-small", window=4096) as small, \
            Upstream("vllm-large") as large, Upstream("ollama") as ollama:
        monkeypatch.setenv("VLLM_API_KEY", "vllm-heldout-key")
        raw = heldout("selfhosted_vllm_ollama.yaml")
        # The config writes its cluster addresses literally: point them at the stand-ins.
        for entry, upstream in zip(raw["model_list"], (small, large, ollama), strict=True):
            entry["litellm_params"]["api_base"] = upstream.v1
        gw = await gateway_factory(raw)
        client = clients_for(gw).openai("unused")
        short = await chat(client, "qwen-coder", "write a test")
        assert short.parse().choices[0].message.content == (
            "from vllm-small: Qwen/Qwen2.5-Coder-7B-Instruct")
        assert "unused" not in str(small.requests[0].headers)  # the client's key stays here
        await chat(client, "llama3.1", "hello")
        sent = ollama.requests[0]
        assert sent.body["model"] == "llama3.1:8b" and sent.body["temperature"] == 0.1
        assert sent.headers["authorization"] == "Bearer ollama"
        # ~6,000 tokens: past qwen-coder's 4,096, so the 32k model takes it before anything
        # is summarized and the small server never sees it.
        history = "a line of the repository map " * 850
        long = await chat(client, "qwen-coder", history)
        assert long.headers["x-gateway-model-used"] == "qwen-coder-32k"
        assert "x-gateway-compaction" not in long.headers
        assert small.hits == 1 and large.hits == 1
        assert large.requests[0].body["messages"][0]["content"] == history


# --- wildcards next to pinned groups ----------------------------------------------------

async def test_pinned_groups_aliases_and_wildcards_each_reach_their_deployment(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        clients_for: Any) -> None:
    async with Upstream("pinned") as pinned, Upstream("catchall") as catchall, \
            FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        set_env(monkeypatch, PINNED_API_BASE=pinned.v1, OPENAI_API_BASE=catchall.v1,
                OPENAI_API_KEY=OPENAI_KEY, ANTHROPIC_API_BASE=claude.base_url,
                ANTHROPIC_API_KEY=ANTHROPIC_KEY, LITELLM_MASTER_KEY=MASTER)
        gw = await gateway_factory(heldout("wildcards_catchall.yaml"))
        client = clients_for(gw).openai()
        for name in ("gpt-4.1", "gpt-4-turbo", "legacy-gpt"):
            raw = await chat(client, name)
            assert raw.parse().choices[0].message.content == "from pinned: gpt-4.1-2025-04-14"
        for name in ("gpt-5-mini", "o3-mini", "ft:gpt-4o-mini:acme::abc123"):
            raw = await chat(client, name)
            assert raw.parse().choices[0].message.content == f"from catchall: {name}"
        raw = await chat(client, "anthropic/claude-3-5-haiku-20241022", "hello claude")
        assert raw.parse().choices[0].message.content == "you said: hello claude"
        assert claude.requests[0].body["model"] == "claude-3-5-haiku-20241022"
        raw = await chat(client, "latest")
        assert raw.parse().choices[0].message.content == "from catchall: gpt-5-2025-08-07"
        assert pinned.hits == 3 and catchall.hits == 4
        listed = {m.id for m in (await client.models.list()).data}
        assert {"gpt-4.1", "gpt-4-turbo"} <= listed and "legacy-gpt" not in listed
        # The fallback written for the alias is the group's, whatever name the client used.
        pinned.mode = "dead"
        for name in ("gpt-4.1", "gpt-4-turbo"):
            raw = await chat(client, name, "pinned is down")
            assert raw.headers["x-gateway-model-used"] == "anthropic/claude-sonnet-4-5"
            assert raw.parse().choices[0].message.content == "you said: pinned is down"
        assert claude.requests[-1].body["model"] == "claude-sonnet-4-5"


# --- content-policy and default fallbacks -----------------------------------------------

@pytest.fixture
async def support(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                  ) -> AsyncIterator[tuple[RunningGateway, Upstream, FakeAnthropic, Upstream,
                                           Upstream]]:
    async with Upstream("azure") as azure, FakeAnthropic(api_key=ANTHROPIC_KEY) as claude, \
            Upstream("summarizer") as summarizer, Upstream("default") as default:
        set_env(monkeypatch, AZURE_API_BASE=azure.base_url, AZURE_API_KEY=AZURE_KEY,
                ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
                SUMMARIZER_API_BASE=summarizer.v1, DEFAULT_API_BASE=default.v1,
                OPENAI_API_KEY=OPENAI_KEY, LITELLM_MASTER_KEY=MASTER)
        gw = await gateway_factory(heldout("content_policy_and_default_fallbacks.yaml"))
        yield gw, azure, claude, summarizer, default


async def test_an_azure_content_filter_refusal_goes_to_the_content_policy_fallback(
        support: tuple[RunningGateway, Upstream, FakeAnthropic, Upstream, Upstream],
        clients_for: Any) -> None:
    gw, azure, claude, _summarizer, default = support
    azure.mode = "content_filter"
    raw = await chat(clients_for(gw).openai(), "support-bot", "my order never came")
    assert raw.headers["x-gateway-model-used"] == "claude-support"
    assert raw.parse().choices[0].message.content == "you said: my order never came"
    assert azure.hits == 1 and len(claude.requests) == 1 and default.hits == 0


async def test_a_dead_group_without_its_own_fallback_goes_to_the_default_fallback(
        support: tuple[RunningGateway, Upstream, FakeAnthropic, Upstream, Upstream],
        clients_for: Any) -> None:
    gw, _azure, claude, summarizer, default = support
    summarizer.mode = "dead"
    raw = await chat(clients_for(gw).openai(), "summarizer", "summarize the ticket")
    assert raw.headers["x-gateway-model-used"] == "safe-default"
    assert raw.parse().choices[0].message.content == "from default: gpt-4o-mini"
    assert summarizer.hits == 1 and default.hits == 1 and not claude.requests


async def test_a_plain_bad_request_never_falls_back(
        support: tuple[RunningGateway, Upstream, FakeAnthropic, Upstream, Upstream],
        clients_for: Any) -> None:
    gw, azure, claude, _summarizer, default = support
    azure.mode = "bad_request"
    with pytest.raises(openai.BadRequestError) as info:
        await chat(clients_for(gw).openai(), "support-bot", "hello")
    assert "temperature" in str(info.value)
    assert not claude.requests and default.hits == 0


# --- timeouts and retries ---------------------------------------------------------------

@pytest.fixture
async def latency(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                  caplog: pytest.LogCaptureFixture,
                  ) -> AsyncIterator[SimpleNamespace]:
    async with Upstream("slow", mode="hang") as slow, Upstream("good") as good, \
            Upstream("batch", mode="dead") as batch, Upstream("stream") as stream:
        set_env(monkeypatch, SLOW_API_BASE=slow.v1, FAST_API_BASE=good.v1,
                BATCH_API_BASE=batch.v1, STREAM_API_BASE=stream.v1, OPENAI_API_KEY=OPENAI_KEY)
        with caplog.at_level(logging.WARNING, logger="gateway.config"):
            gw = await gateway_factory(heldout("timeouts_retries.yaml"))
        yield SimpleNamespace(gw=gw, slow=slow, good=good, batch=batch, stream=stream)


async def test_a_hanging_deployment_times_out_and_the_retry_lands_on_the_other(
        latency: SimpleNamespace, clients_for: Any) -> None:
    gw, slow, good = latency.gw, latency.slow, latency.good
    client = clients_for(gw).openai("unused")
    raw = await chat(client, "fast-chat", "quick")
    assert raw.headers["x-gateway-deployment"] == "fast-chat-good-region"
    assert raw.headers["x-gateway-attempts"] == "2"
    stream = await client.chat.completions.with_raw_response.create(
        model="fast-chat", messages=[{"role": "user", "content": "stream"}], stream=True)
    assert stream.headers["x-gateway-deployment"] == "fast-chat-good-region"
    text = "".join([c.choices[0].delta.content or "" async for c in stream.parse()
                    if c.choices])
    assert text == "from good: gpt-4o-mini"
    assert slow.hits == 2 and good.hits == 2


async def test_a_stream_silent_past_its_stream_timeout_ends_with_an_error_event(
        latency: SimpleNamespace, clients_for: Any) -> None:
    gw, stream_upstream = latency.gw, latency.stream
    stream_upstream.hold = asyncio.Event()  # the first chunk, then silence
    stream = await clients_for(gw).openai("unused").chat.completions.create(
        model="stream-chat", messages=[{"role": "user", "content": "long answer"}],
        stream=True)
    pieces = []
    with pytest.raises(openai.APIError) as info:
        async for chunk in stream:
            pieces.extend(c.delta.content or "" for c in chunk.choices)
    assert "".join(pieces) == "from stream:"  # what came before the silence reached the client
    assert "timed out" in str(info.value).lower() or "timeout" in str(info.value).lower()
    stream_upstream.hold.set()


async def test_retries_follow_num_retries_then_a_clean_5xx(
        latency: SimpleNamespace, clients_for: Any, caplog: pytest.LogCaptureFixture) -> None:
    gw, batch = latency.gw, latency.batch
    with pytest.raises(openai.InternalServerError) as info:
        await chat(clients_for(gw).openai("unused"), "batch-chat", "nightly job")
    # model_group_retry_policy: InternalServerErrorRetries: 2 for batch-chat, over
    # router_settings.num_retries: 1.
    assert batch.hits == 3
    mocked = await chat(clients_for(gw).openai("unused"), "load-test")
    assert mocked.parse().choices[0].message.content == "from good: gpt-4o-mini"  # not a mock
    assert info.value.status_code >= 500 and isinstance(info.value.body, dict)
    (warning,) = [r.getMessage() for r in caplog.get_records("setup")
                  if r.name == "gateway.config" and r.levelno == logging.WARNING]
    for named in ("model_list[2].litellm_params.max_retries",
                  "model_list[3].litellm_params.mock_response (the model is called)",
                  "router_settings.enable_pre_call_checks"):
        assert named in warning
    for honoured in ("router_settings.num_retries", "router_settings.timeout", "retry_after",
                     "router_settings.retry_policy", "model_group_retry_policy",
                     "allowed_fails_policy"):
        assert honoured not in warning
    assert gateway_state(gw).fleet.table.allowed_fails_by_kind == {"timeout": 3}
    # BadRequestErrorRetries: 0 is what the gateway does anyway (a 400 is never retried).
    assert "BadRequestErrorRetries" not in warning


# --- include: ---------------------------------------------------------------------------

async def test_included_model_list_is_served_with_the_parents_fallbacks(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        clients_for: Any) -> None:
    async with Upstream("gpt", mode="dead") as gpt, Upstream("llama") as llama:
        set_env(monkeypatch, OPENAI_API_BASE=gpt.v1, OPENAI_API_KEY=OPENAI_KEY,
                VLLM_API_BASE=llama.v1, LITELLM_MASTER_KEY=MASTER)
        config = load_config(HELDOUT / "include_parent.yaml")
        assert [e.model_name for e in config.model_list] == ["team-gpt", "team-llama"]
        gw = await gateway_factory(heldout("include_parent.yaml"))
        raw = await chat(clients_for(gw).openai(), "team-gpt", "hi")
        assert raw.headers["x-gateway-model-used"] == "team-llama"
        assert raw.parse().choices[0].message.content == (
            "from llama: meta-llama/Llama-3.3-70B-Instruct")
        assert gpt.hits == 1 and llama.hits == 1
        env = {**os.environ}
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config",
                           str(HELDOUT / "include_parent.yaml")], capture_output=True,
                          text=True, timeout=120, env=env, check=False)
    assert done.returncode == 0, done.stderr
    assert "team-llama" in done.stdout and "litellm_settings.callbacks" in done.stderr
    assert "*** (from os.environ/OPENAI_API_KEY)" in done.stdout  # the included file's
    no_secret_in(done.stdout, done.stderr)


async def test_gateway_serve_runs_the_file_as_is_and_says_what_it_ignores(
        tmp_path: Path) -> None:
    """The operator's view: ``gateway serve --config include_parent.yaml`` in its own
    process, the file untouched (its include: resolved next to it), the ignored settings in
    the start-up output, the master key required, no key in the output."""
    from tests.conftest import free_port

    async with Upstream("gpt") as gpt, Upstream("llama") as llama:
        port = free_port()
        env = {**os.environ, "OPENAI_API_BASE": gpt.v1, "OPENAI_API_KEY": OPENAI_KEY,
               "VLLM_API_BASE": llama.v1, "LITELLM_MASTER_KEY": MASTER,
               "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        log = tmp_path / "serve.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--config",
                 str(HELDOUT / "include_parent.yaml"), "--port", str(port)],
                env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=tmp_path)
        try:
            root = f"http://127.0.0.1:{port}"
            await wait_until_serving(root, lambda: None if proc.poll() is None
                                     else log.read_text()[-3000:])
            client = openai.AsyncOpenAI(base_url=f"{root}/v1", api_key=MASTER, max_retries=0)
            try:
                raw = await chat(client, "team-gpt", "from a real process")
                assert raw.parse().choices[0].message.content == "from gpt: gpt-4o"
                with pytest.raises(openai.AuthenticationError):
                    await chat(client.with_options(api_key="sk-nope"), "team-gpt")
            finally:
                await client.close()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    output = log.read_text()
    assert "ignoring LiteLLM settings the gateway does not use: litellm_settings.callbacks" \
        in output
    assert "Traceback" not in output
    no_secret_in(output)


def test_include_merges_lists_and_names_a_replaced_section(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "models.yaml").write_text(
        "model_list:\n  - model_name: b\n    litellm_params: {model: openai/b, "
        "api_base: 'http://127.0.0.1:9/v1'}\nrouter_settings: {num_retries: 4}\n")
    (tmp_path / "main.yaml").write_text(
        "include: models.yaml\nmodel_list:\n  - model_name: a\n    litellm_params: "
        "{model: openai/a, api_base: 'http://127.0.0.1:9/v1'}\n"
        "router_settings: {num_retries: 1}\n")
    with caplog.at_level(logging.WARNING, logger="gateway.config"):
        config = load_config(tmp_path / "main.yaml")
    assert [e.model_name for e in config.model_list] == ["a", "b"]
    assert config.router.num_retries == 4  # as LiteLLM: the included file sets it
    assert "include: models.yaml replaces the config's own router_settings" in caplog.text
    (tmp_path / "loop.yaml").write_text("include: [main2.yaml]\n")
    (tmp_path / "main2.yaml").write_text("include: [loop.yaml]\n")
    with pytest.raises(ConfigError, match=r"include\[0\]: main2.yaml includes itself"):
        load_config(tmp_path / "main2.yaml")
    with pytest.raises(ConfigError, match="include: files are included when a config file"):
        parse_config({"include": ["models.yaml"]})


# --- rpm limits shared through Redis, spilling over to another group --------------------

@pytest.fixture
def redis_with_password(tmp_path: Path) -> Iterator[tuple[str, str]]:
    with run_redis_server(tmp_path) as url:
        port = url.rsplit(":", 1)[1].split("/", 1)[0]

        async def protect() -> None:
            client = aioredis.from_url(url)
            try:
                await client.config_set("requirepass", "redis-heldout-pass-3c9a")
            finally:
                await client.aclose()

        asyncio.run(protect())
        yield port, "redis-heldout-pass-3c9a"


async def test_rpm_limits_in_redis_then_the_overflow_group(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        redis_with_password: tuple[str, str], clients_for: Any) -> None:
    port, password = redis_with_password
    async with Upstream("primary") as primary, Upstream("secondary") as secondary, \
            Upstream("overflow") as overflow:
        set_env(monkeypatch, PRIMARY_API_BASE=primary.v1, SECONDARY_API_BASE=secondary.v1,
                OVERFLOW_API_BASE=overflow.v1, OPENAI_API_KEY=OPENAI_KEY,
                OPENAI_API_KEY_SECONDARY=OPENAI_KEY + "-2", REDIS_PORT=port,
                REDIS_PASSWORD=password)
        monkeypatch.delenv("REDIS_HOST", raising=False)  # from environment_variables
        gw = await gateway_factory(heldout("usage_limits_redis.yaml"))
        shared = gateway_state(gw).fleet.shared
        assert shared is not None
        shared.wall = lambda: 1_800_000_000.0  # one minute for the whole test
        client = clients_for(gw).openai("unused")
        used = [(await chat(client, "gpt-4o-mini")).headers["x-gateway-deployment"]
                for _ in range(5)]
    # rpm: 2 on the primary, rpm: 1 (on the entry) on the secondary: three requests in the
    # minute, then the fallback group answers.
    assert sorted(used[:3]) == ["mini-primary", "mini-primary", "mini-secondary"]
    assert used[3:] == ["gpt-4o-mini-overflow#1"] * 2
    assert (primary.hits, secondary.hits, overflow.hits) == (2, 1, 2)
    assert secondary.requests[0].headers["authorization"] == f"Bearer {OPENAI_KEY}-2"


def test_router_names_a_typo_would_silence_stop_start_up() -> None:
    """A fallback written for a name nothing serves, a default fallback naming nothing and
    two deployments sharing an id would each be silently ineffective: start-up stops; an
    alias or a name a wildcard serves is a valid source, target or alias target."""
    def entry(name: str, dep_id: str | None = None) -> dict[str, Any]:
        info = {"model_info": {"id": dep_id}} if dep_id else {}
        return {"model_name": name, "litellm_params": {
            "model": f"openai/{name}" if "*" not in name else "openai/*",
            "api_base": "http://127.0.0.1:9/v1"}, **info}

    models = [entry("gpt-4o", "east"), entry("claude"), entry("anthropic/*")]
    cases = [
        ({"fallbacks": [{"gpt4o": ["claude"]}]},
         "router_settings.fallbacks: the fallbacks of 'gpt4o' would never be used"),
        ({"context_window_fallbacks": [{"gpt-4o-mini": ["claude"]}]},
         "router_settings.context_window_fallbacks: the fallbacks of 'gpt-4o-mini'"),
        ({"default_fallbacks": ["claude-3"]},
         "router_settings.default_fallbacks: no model_list entry is named 'claude-3'"),
        ({"fallbacks": [{"gpt-4o": ["openai/gpt-4o"]}]},
         "router_settings.fallbacks.gpt-4o: no model_list entry is named 'openai/gpt-4o'"),
    ]
    for settings, message in cases:
        with pytest.raises(ConfigError) as info:
            parse_config({"model_list": models, "router_settings": settings})
        assert message in str(info.value)
    with pytest.raises(ConfigError, match=r"model_list\[1\]\.model_info\.id: 'east' is "
                                          r"already the id of model_list\[0\]"):
        parse_config({"model_list": [entry("gpt-4o", "east"), entry("claude", "east")]})
    config = parse_config({"model_list": models, "router_settings": {
        "model_group_alias": {"4o": "gpt-4o", "haiku": "anthropic/claude-3-5-haiku"},
        "fallbacks": [{"4o": ["anthropic/claude-sonnet-4-5"]}, {"east": ["haiku"]},
                      {"anthropic/claude-sonnet-4-5": ["claude"]}],
        "default_fallbacks": ["claude"]}})
    from gateway.providers.openai_compat import HttpPool
    from gateway.router.fleet import Fleet

    chains = Fleet(config, HttpPool()).chains
    assert chains.chain("gpt-4o", "general") == ("anthropic/claude-sonnet-4-5", "claude")


def test_retry_policies_reach_the_ladder_and_what_they_cannot_mean_is_named(
        caplog: pytest.LogCaptureFixture) -> None:
    from gateway.providers.openai_compat import HttpPool
    from gateway.recovery.settings import recovery_policy_for
    from gateway.router.fleet import Fleet

    models = [{"model_name": name, "litellm_params": {
        "model": f"openai/{name}", "api_base": "http://127.0.0.1:9/v1"}}
        for name in ("chat", "batch")]
    router = {"num_retries": 1,
              "retry_policy": {"RateLimitErrorRetries": 4, "AuthenticationErrorRetries": 2,
                               "ContentPolicyViolationErrorRetries": 0, "NotARealRetries": 1},
              "model_group_retry_policy": {"batch": {"InternalServerErrorRetries": 6}}}
    with caplog.at_level(logging.WARNING, logger="gateway.config"):
        config = parse_config({"model_list": models, "router_settings": router})
    fleet = Fleet(config, HttpPool())
    chat_policy = recovery_policy_for(config, fleet.groups["chat"][0])
    batch_policy = recovery_policy_for(config, fleet.groups["batch"][0])
    assert dict(fleet.table.allowed_fails_by_kind) == {}
    assert chat_policy.max_transient_retries == 1 and chat_policy.min_retry_delay == 0.0
    waiting = parse_config({"model_list": models, "router_settings": {"retry_after": 5}})
    assert recovery_policy_for(waiting, Fleet(waiting, HttpPool()).groups["chat"][0]) \
        .min_retry_delay == 5.0
    assert chat_policy.retries_by_kind == (("rate_limit", 4),)
    assert batch_policy.retries_by_kind == (("server_error", 6),)  # the group's own policy
    assert ("router_settings.retry_policy.AuthenticationErrorRetries (never retried"
            in caplog.text)
    assert "router_settings.retry_policy.NotARealRetries" in caplog.text
    assert "ContentPolicyViolationErrorRetries" not in caplog.text  # 0: as the gateway does
    own = parse_config({"model_list": models, "router_settings": router,
                        "recovery": {"max_transient_retries": 2}})
    assert recovery_policy_for(own, Fleet(own, HttpPool()).groups["chat"][0]) \
        .retries_by_kind == ()  # the gateway's own setting wins
    with pytest.raises(ConfigError, match=r"model_group_retry_policy\.bacth: no model_list"):
        parse_config({"model_list": models, "router_settings": {
            "model_group_retry_policy": {"bacth": {"TimeoutErrorRetries": 1}}}})


def test_a_litellm_timeout_longer_than_the_default_deadline_is_waited_for() -> None:
    """LiteLLM waits ``timeout`` seconds for a deployment (a slow reasoning model answering
    without streaming takes minutes): the request deadline (60 s by default) is raised to
    it, unless the config sets ``recovery.deadline`` itself."""
    from gateway.providers.openai_compat import HttpPool
    from gateway.recovery.settings import recovery_policy_for
    from gateway.router.fleet import Fleet

    def entry(name: str, **params: Any) -> dict[str, Any]:
        return {"model_name": name, "litellm_params": {
            "model": f"openai/{name}", "api_base": "http://127.0.0.1:9/v1", **params}}

    def deadlines(raw: dict[str, Any]) -> dict[str, float]:
        config = parse_config(raw)
        fleet = Fleet(config, HttpPool())
        out = {}
        for name, routes in fleet.groups.items():
            policy = recovery_policy_for(config, routes[0]).deadline
            assert routes[0].provider._first_byte == policy  # type: ignore[attr-defined]
            out[name] = policy
        return out

    models = [entry("o1", timeout=300), entry("fast", timeout=10), entry("plain")]
    assert deadlines({"model_list": models}) == {"o1": 300, "fast": 60, "plain": 60}
    assert deadlines({"model_list": models, "litellm_settings": {"request_timeout": 600}}) \
        == {"o1": 300, "fast": 60, "plain": 600}
    assert deadlines({"model_list": models, "router_settings": {"timeout": 120},
                      "recovery": {"deadline": 45}}) == {"o1": 45, "fast": 45, "plain": 45}
    slow = {**entry("slow", timeout=300), "model_info": {"recovery": {"deadline": 90}}}
    assert deadlines({"model_list": [slow]}) == {"slow": 90}


@pytest.mark.parametrize(("params", "router", "message"), [
    ({"api_base": "vllm.internal:8000/v1"}, {},
     "model_list[0].litellm_params.api_base: Value error, must be an http:// or https:// URL"),
    ({"model": ""}, {}, "model_list[0].litellm_params.model: String should have at least 1"),
    ({"timeout": -30}, {}, "model_list[0].litellm_params.timeout: Input should be greater"),
    ({"stream_timeout": 0}, {}, "model_list[0].litellm_params.stream_timeout: Input should be"),
    ({"extra_body": ["top_k", 20]}, {},
     "model_list[0].litellm_params.extra_body: must be a mapping of request fields"),
    ({"additional_drop_params": "temperature"}, {},
     "model_list[0].litellm_params.additional_drop_params: must be a list of field names"),
    ({}, {"redis_host": "redis", "redis_port": "six-three-seven-nine"},
     "router_settings.redis_port: must be a port number"),
])
def test_values_that_would_fail_only_at_the_first_request_stop_start_up(
        params: dict[str, Any], router: dict[str, Any], message: str) -> None:
    """Each of these started and failed (or was silently not applied) at request time."""
    entry = {"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_base": "http://vllm.internal:8000/v1",
        "api_key": "sk-never-echoed-7731", **params}}
    with pytest.raises(ConfigError) as info:
        parse_config({"model_list": [entry], "router_settings": router})
    assert message in str(info.value)
    assert "sk-never-echoed-7731" not in str(info.value)
    assert "vllm.internal:8000" not in str(info.value)  # an endpoint may carry credentials


def test_a_limit_from_the_environment_is_a_number_and_a_word_stops_start_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from gateway.providers.openai_compat import HttpPool
    from gateway.router.fleet import Fleet

    def entry(**params: Any) -> dict[str, Any]:
        return {"model_name": "m", "litellm_params": {
            "model": "openai/m", "api_base": "http://127.0.0.1:9/v1", **params}}

    monkeypatch.setenv("AZURE_RPM", "600")
    config = parse_config({"model_list": [entry(rpm="os.environ/AZURE_RPM", tpm="90000")]})
    deployment = Fleet(config, HttpPool()).deployments["m#1"]
    assert (deployment.rpm, deployment.tpm) == (600, 90000)
    with pytest.raises(ConfigError, match=r"model_list\[0\]\.litellm_params\.rpm: must be a "
                                          "number"):
        parse_config({"model_list": [entry(rpm="six hundred")]})
    with pytest.raises(ConfigError, match=r"model_list\[0\]\.tpm: must be >= 0"):
        parse_config({"model_list": [{**entry(), "tpm": -5}]})
    # LiteLLM's usage strategies read a limit written under model_info too.
    in_info = parse_config({"model_list": [{**entry(), "model_info": {"rpm": "30", "tpm": 4000}}]})
    deployment = Fleet(in_info, HttpPool()).deployments["m#1"]
    assert (deployment.rpm, deployment.tpm) == (30, 4000)
    with pytest.raises(ConfigError, match=r"model_list\[0\]\.model_info\.rpm: must be a"):
        parse_config({"model_list": [{**entry(), "model_info": {"rpm": "lots"}}]})


# --- per-deployment headers, organizations, Azure api_version ---------------------------

async def test_each_deployment_sends_its_own_key_organization_and_headers(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        clients_for: Any) -> None:
    async with Upstream("openai") as oai, Upstream("partner") as partner, \
            Upstream("azure") as azure:
        set_env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_RESEARCH_KEY=OPENAI_KEY + "-r",
                OPENAI_PRODUCT_KEY=OPENAI_KEY + "-p", PARTNER_API_BASE=partner.v1,
                PARTNER_API_KEY="partner-heldout-key-55", AZURE_API_BASE=azure.base_url,
                AZURE_API_KEY=AZURE_KEY, AZURE_API_VERSION="2025-01-01-preview",
                LITELLM_MASTER_KEY=MASTER)
        gw = await gateway_factory(heldout("headers_org_azure_version.yaml"))
        client = clients_for(gw).openai()
        for model in ("research-gpt", "product-gpt", "partner-llm", "azure-gpt-4o"):
            await chat(client, model, extra_headers={"X-Partner-Tenant": "client-tries"})
    research, product = oai.requests
    assert research.headers["openai-organization"] == "org-research-42"
    assert research.headers["authorization"] == f"Bearer {OPENAI_KEY}-r"
    assert product.headers["openai-organization"] == "org-product-7"
    assert product.headers["authorization"] == f"Bearer {OPENAI_KEY}-p"
    (call,) = partner.requests
    assert call.headers["x-partner-tenant"] == "acme-platform"
    assert call.headers["x-routing-zone"] == "eu"
    assert call.headers["x-partner-trace"] == "on"  # litellm_params.headers too
    assert call.body["model"] == "partner-model-v3"
    (azure_call,) = azure.requests
    assert azure_call.query["api-version"] == "2025-01-01-preview"
    assert azure_call.path == "/openai/deployments/gpt-4o-2024-08-06/chat/completions"
    for recorded in (research, product, call, azure_call):
        assert MASTER not in str(recorded.headers)


# --- cheapest deployment first ---------------------------------------------------------

async def test_cost_based_routing_sends_traffic_to_the_cheapest_available_deployment(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        clients_for: Any) -> None:
    async with Upstream("vllm") as vllm, Upstream("azure") as azure, \
            Upstream("mini") as mini:
        set_env(monkeypatch, VLLM_API_BASE=vllm.v1, AZURE_API_BASE=azure.base_url,
                AZURE_API_KEY=AZURE_KEY, OPENAI_API_BASE=mini.v1, OPENAI_API_KEY=OPENAI_KEY)
        gw = await gateway_factory(heldout("cost_routing.yaml"))
        from gateway.routing import entry_notes

        assert entry_notes(gw.config)[0] == []  # the prices are used, not ignored
        client = clients_for(gw).openai("unused")
        used = [(await chat(client, "assistant")).headers["x-gateway-deployment"]
                for _ in range(4)]
        assert used == ["assistant-vllm"] * 4  # priced at zero
        vllm.mode = "dead"
        used = [(await chat(client, "assistant")).headers["x-gateway-deployment"]
                for _ in range(3)]
        # The cluster's failure cools it down (allowed_fails: 0); the retry and what follows
        # go to gpt-4o-mini ($0.15 + $0.60 per million), never to gpt-4o ($2.50 + $10).
        assert used == ["assistant-mini"] * 3
        assert vllm.hits == 5 and mini.hits == 3 and azure.hits == 0


# --- credentials defined once -----------------------------------------------------------

async def test_deployments_take_their_named_credentials(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, clients_for: Any) -> None:
    async with Upstream("eu") as eu, Upstream("us") as us, Upstream("openai") as oai:
        set_env(monkeypatch, AZURE_EU_API_BASE=eu.base_url, AZURE_EU_API_KEY=AZURE_KEY + "-eu",
                AZURE_US_API_BASE=us.base_url, AZURE_US_API_KEY=AZURE_KEY + "-us",
                OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY, LITELLM_MASTER_KEY=MASTER)
        with caplog.at_level(logging.WARNING, logger="gateway.config"):
            gw = await gateway_factory(heldout("credentials_shared.yaml"))
        assert "credential_list" not in caplog.text  # used, not ignored
        client = clients_for(gw).openai()
        for model in ("gpt-4o", "gpt-4o-us", "gpt-4.1-mini"):
            await chat(client, model)
    (eu_call,), (us_call,), (oai_call,) = eu.requests, us.requests, oai.requests
    assert eu_call.path == "/openai/deployments/gpt-4o-weu/chat/completions"
    assert eu_call.headers["api-key"] == AZURE_KEY + "-eu"
    assert eu_call.query["api-version"] == "2024-10-21"
    assert us_call.headers["api-key"] == AZURE_KEY + "-us"
    assert us_call.query["api-version"] == "2025-01-01-preview"  # the deployment's own wins
    assert oai_call.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert oai_call.headers["openai-organization"] == "org-platform-9"


# --- keys and endpoints from the process environment ------------------------------------

async def test_keys_and_endpoints_come_from_the_environment_as_litellm_reads_them(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        clients_for: Any) -> None:
    async with Upstream("openai") as oai, Upstream("vllm") as vllm, Upstream("groq") as groq, \
            FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        set_env(monkeypatch, OPENAI_API_KEY=OPENAI_KEY, OPENAI_BASE_URL=oai.v1,
                HOSTED_VLLM_API_BASE=vllm.v1, GROQ_API_KEY="gsk-heldout-groq-key-19",
                GROQ_API_BASE=groq.v1, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
                ANTHROPIC_API_BASE=claude.base_url)
        for unset in ("OPENAI_API_BASE", "HOSTED_VLLM_API_KEY"):
            monkeypatch.delenv(unset, raising=False)
        gw = await gateway_factory(heldout("env_only_credentials.yaml"))
        client = clients_for(gw).openai("unused")
        for model in ("gpt-3.5-turbo", "local-llama", "groq/llama-3.3-70b-versatile"):
            await chat(client, model)
        raw = await chat(client, "claude", "through litellm")
        assert raw.parse().choices[0].message.content == "you said: through litellm"
    (oai_call,), (vllm_call,), (groq_call,) = oai.requests, vllm.requests, groq.requests
    assert oai_call.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert oai_call.body["model"] == "gpt-3.5-turbo"
    assert vllm_call.body["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "unused" not in str(vllm_call.headers)
    assert groq_call.headers["authorization"] == "Bearer gsk-heldout-groq-key-19"
    assert groq_call.body["model"] == "llama-3.3-70b-versatile"
    assert claude.requests[0].headers["x-api-key"] == ANTHROPIC_KEY


# --- everything else LiteLLM did ----------------------------------------------------------

OBSERVABILITY_IGNORED = (
    "litellm_settings.cache", "litellm_settings.cache_params", "litellm_settings.callbacks",
    "litellm_settings.success_callback", "litellm_settings.failure_callback",
    "litellm_settings.service_callback", "litellm_settings.turn_off_message_logging",
    "litellm_settings.redact_user_api_key_info",
    "litellm_settings.max_budget", "litellm_settings.budget_duration",
    "litellm_settings.default_team_settings", "general_settings.database_url",
    "general_settings.store_model_in_db", "general_settings.disable_spend_logs",
    "general_settings.proxy_batch_write_at", "general_settings.alerting",
    "general_settings.alert_types", "general_settings.ui_access_mode",
    "general_settings.pass_through_endpoints",
    "model_list[1].model_info.mode=embedding (text-embedding-3-large: listed, not served",
)


async def test_what_the_gateway_does_not_do_is_named_once_and_the_rest_serves(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, clients_for: Any) -> None:
    async with Upstream("openai") as oai:
        set_env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
                LITELLM_MASTER_KEY=MASTER)
        for unset in ("CACHE_REDIS_HOST", "CACHE_REDIS_PASSWORD", "DATABASE_URL",
                      "COHERE_API_KEY", "LANGFUSE_DS_PUBLIC_KEY", "LANGFUSE_DS_SECRET"):
            monkeypatch.delenv(unset, raising=False)  # ignored keys need no variable
        with caplog.at_level(logging.WARNING, logger="gateway.config"):
            gw = await gateway_factory(heldout("observability_heavy.yaml"))
        (warning,) = [r.getMessage() for r in caplog.records if r.name == "gateway.config"]
        for named in OBSERVABILITY_IGNORED:
            assert named in warning
        assert "master_key" not in warning
        # Honoured under the gateway's own names: JSON log lines, the request size limit.
        assert "json_logs" not in warning and "max_request_size_mb" not in warning
        assert gw.config.gateway.log_format == "json"
        assert gw.config.gateway.max_body_bytes == 4 * 1024 * 1024
        client = clients_for(gw).openai()
        raw = await chat(client, "gpt-4o")
        assert raw.parse().choices[0].message.content == "from openai: gpt-4o"
        with pytest.raises(openai.BadRequestError) as info:
            await chat(client, "text-embedding-3-large")
        assert info.value.code == "model_not_supported"
        async with aiohttp.ClientSession() as http, http.post(
                f"{gw.base_url}/rerank", json={"query": "q", "documents": ["d"]},
                headers={"Authorization": f"Bearer {MASTER}"}) as rerank:
            assert rerank.status == 404  # the pass-through endpoint is not served
            assert "error" in await rerank.json()
        with pytest.raises(openai.APIStatusError) as too_big:
            await chat(client, "gpt-4o", "x" * (5 * 1024 * 1024))
        assert too_big.value.status_code == 413  # general_settings.max_request_size_mb: 4
        assert oai.hits == 1


# --- the whole company on one proxy: fallback chains over providers ----------------------

@pytest.fixture
async def company(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                  ) -> AsyncIterator[dict[str, Any]]:
    async with Upstream("openai") as oai, Upstream("azure") as azure, \
            FakeAnthropic(api_key=ANTHROPIC_KEY) as claude, FakeBedrock() as bedrock, \
            Upstream("llama", window=8192) as llama, Upstream("llama-long") as long:
        set_env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
                AZURE_API_BASE=azure.base_url, AZURE_API_KEY=AZURE_KEY,
                ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
                AWS_ACCESS_KEY_ID=AWS_KEY_ID, AWS_SECRET_ACCESS_KEY=AWS_SECRET,
                AWS_REGION_NAME="eu-central-1", VLLM_API_BASE=llama.v1,
                VLLM_LONG_API_BASE=long.v1, VLLM_API_KEY="vllm-heldout-key",
                LITELLM_MASTER_KEY=MASTER)
        monkeypatch.delenv("DATABASE_URL", raising=False)
        raw = heldout("multi_provider_chain.yaml")
        bedrock_entry = raw["model_list"][3]
        assert bedrock_entry["model_name"] == "claude-sonnet-bedrock"
        bedrock_entry["litellm_params"]["api_base"] = bedrock.base_url  # never real AWS
        gw = await gateway_factory(raw)
        gateway_state(gw).fleet.rng.seed(7)
        yield {"gw": gw, "openai": oai, "azure": azure, "claude": claude,
               "bedrock": bedrock, "llama": llama, "long": long}


async def test_a_fallback_group_uses_its_own_fallbacks_as_litellm_does(
        company: dict[str, Any], clients_for: Any) -> None:
    company["openai"].mode = company["azure"].mode = "dead"
    company["claude"].script(*[anthropic_error(500, "Internal server error", "api_error")] * 4)
    raw = await chat(clients_for(company["gw"]).openai(), "gpt-4", "who answers?")
    # gpt-4o (via the alias) is spent, then its first fallback claude-sonnet, whose own
    # fallback (Bedrock) answers before the second one of gpt-4o's list is tried.
    assert raw.headers["x-gateway-model-used"] == "claude-sonnet-bedrock"
    assert raw.parse().choices[0].message.content == (
        "from bedrock anthropic.claude-3-5-sonnet-20240620-v1:0: who answers?")
    assert company["llama"].hits == 0


async def test_the_chain_walks_on_to_the_next_provider_when_a_fallback_is_down(
        company: dict[str, Any], clients_for: Any) -> None:
    company["openai"].mode = company["azure"].mode = "dead"
    company["bedrock"].mode = "dead"
    company["claude"].script(*[anthropic_error(500, "Internal server error", "api_error")] * 4)
    raw = await chat(clients_for(company["gw"]).openai(), "gpt-4o", "anyone?")
    assert raw.headers["x-gateway-model-used"] == "llama-70b"
    assert raw.parse().choices[0].message.content == (
        "from llama: meta-llama/Llama-3.3-70B-Instruct")


async def test_anthropic_sdk_reaches_the_bedrock_group_translated(
        company: dict[str, Any], clients_for: Any) -> None:
    message = await clients_for(company["gw"]).anthropic().messages.create(
        model="claude-sonnet-bedrock", max_tokens=64,
        messages=[{"role": "user", "content": "from the anthropic sdk"}])
    assert message.content[0].type == "text"
    assert message.content[0].text == (
        "from bedrock anthropic.claude-3-5-sonnet-20240620-v1:0: from the anthropic sdk")
    auth = company["bedrock"].requests[0].headers["authorization"]
    assert "/eu-central-1/bedrock/aws4_request" in auth  # AWS_REGION_NAME from the env


async def test_litellm_model_info_lists_every_deployment_without_its_keys(
        company: dict[str, Any]) -> None:
    """``/v1/model/info`` as LiteLLM answers it (what Roo Code's and Cline's LiteLLM
    providers read for names and context windows), behind the master key."""
    root = company["gw"].root
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{root}/v1/model/info") as anonymous:
            assert anonymous.status == 401
        async with http.get(f"{root}/v1/model/info",
                            headers={"Authorization": f"Bearer {MASTER}"}) as resp:
            text = await resp.text()
            rows = (await resp.json())["data"]
        async with http.get(f"{root}/model/info?litellm_model_id=gpt-4o-azure",
                            headers={"Authorization": f"Bearer {MASTER}"}) as one:
            (azure,) = (await one.json())["data"]
    names = [row["model_name"] for row in rows]
    assert names == ["gpt-4o", "gpt-4o", "claude-sonnet", "claude-sonnet-bedrock",
                     "llama-70b", "llama-long"]
    llama = rows[4]
    assert llama["litellm_params"] == {"model": "hosted_vllm/meta-llama/Llama-3.3-70B-Instruct"}
    assert llama["model_info"]["max_input_tokens"] == 8192
    assert llama["model_info"]["mode"] == "chat"
    assert azure["model_info"]["id"] == "gpt-4o-azure"
    assert azure["litellm_params"]["model"] == "azure/gpt-4o-westeurope"
    no_secret_in(text)
    assert "api_base" not in text and AWS_KEY_ID not in text


async def test_aliases_reach_the_group_and_a_long_history_the_long_model(
        company: dict[str, Any], clients_for: Any) -> None:
    client = clients_for(company["gw"]).openai()
    for alias in ("gpt-4", "gpt-4-turbo"):
        raw = await chat(client, alias)
        assert raw.headers["x-gateway-model-used"] == "gpt-4o"
    raw = await chat(client, "sonnet", "hey")
    assert raw.parse().choices[0].message.content == "you said: hey"
    history = "a long transcript line " * 2000  # ~11,000 tokens: past llama-70b's 8,192
    raw = await chat(client, "llama-70b", history)
    assert raw.headers["x-gateway-model-used"] == "llama-long"
    assert company["llama"].hits == 0 and company["long"].hits == 1
    assert company["openai"].hits + company["azure"].hits == 2


# --- numeric ids, the master key from environment_variables -----------------------------

async def test_numeric_deployment_ids_and_a_master_key_set_in_the_config(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, clients_for: Any) -> None:
    async with Upstream("main") as main, Upstream("backup") as backup:
        set_env(monkeypatch, OPENAI_API_BASE=main.v1, OPENAI_BACKUP_API_BASE=backup.v1,
                OPENAI_API_KEY=OPENAI_KEY)
        monkeypatch.delenv("PROXY_MASTER_KEY", raising=False)
        with caplog.at_level(logging.DEBUG):
            gw = await gateway_factory(heldout("int_ids_and_env_block.yaml"))
            clients = clients_for(gw)
            with pytest.raises(openai.AuthenticationError):
                await chat(clients.openai("sk-guess"), "gpt-4")
            main.mode = "dead"
            raw = await chat(clients.openai("sk-env-block-master-5521"), "gpt-4", "hi")
        assert raw.headers["x-gateway-deployment"] == "2"  # the fallback names deployment 2
        assert raw.parse().choices[0].message.content == "from backup: gpt-3.5-turbo"
        assert main.hits == 1 and backup.hits == 1
        assert "sk-env-block-master-5521" not in caplog.text


# --- every heldout config starts; broken ones stop with a message ------------------------

HELDOUT_ENV = {
    "AZURE_EASTUS2_API_BASE": "https://east.example.openai.azure.com",
    "AZURE_SWEDEN_API_BASE": "https://sweden.example.openai.azure.com",
    "AZURE_API_BASE": "https://example.openai.azure.com", "AZURE_API_VERSION": "2024-10-21",
    "AZURE_EASTUS2_API_KEY": AZURE_KEY, "AZURE_SWEDEN_API_KEY": AZURE_KEY + "-2",
    "AZURE_API_KEY": AZURE_KEY, "OPENAI_API_KEY": OPENAI_KEY,
    "OPENAI_API_KEY_SECONDARY": OPENAI_KEY + "-2", "OPENAI_ORG_ID": "org-1",
    "OPENAI_RESEARCH_KEY": OPENAI_KEY + "-r", "OPENAI_PRODUCT_KEY": OPENAI_KEY + "-p",
    "ANTHROPIC_API_KEY": ANTHROPIC_KEY, "AWS_ACCESS_KEY_ID": AWS_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": AWS_SECRET, "AWS_REGION_NAME": "us-east-1",
    "LITELLM_MASTER_KEY": MASTER, "VLLM_API_KEY": "vllm-heldout-key",
    "PARTNER_API_KEY": "partner-heldout-key-55", "REDIS_PORT": "6379",
    "AZURE_EU_API_KEY": AZURE_KEY + "-eu", "AZURE_US_API_KEY": AZURE_KEY + "-us",
    "HOSTED_VLLM_API_BASE": "http://127.0.0.1:9/v1",
    "REDIS_PASSWORD": "redis-heldout-pass-3c9a",
}


# Every endpoint variable the heldout configs read (their included files too).
ENDPOINT_VARIABLES = sorted({
    name for path in HELDOUT.glob("*.yaml")
    for name in re.findall(r"os\.environ/([A-Z0-9_]*(?:API_BASE|ENDPOINT))", path.read_text())})


@pytest.mark.parametrize("name", sorted(p.name for p in HELDOUT.glob("*.yaml")))
def test_every_heldout_config_loads_with_at_most_one_warning_and_no_secret(
        name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for key in ("DATABASE_URL", "REDIS_HOST", "PROXY_MASTER_KEY"):
        monkeypatch.delenv(key, raising=False)
    for key, value in HELDOUT_ENV.items():
        monkeypatch.setenv(key, value)
    for key in ENDPOINT_VARIABLES:
        monkeypatch.setenv(key, "http://127.0.0.1:9/v1")
    with caplog.at_level(logging.WARNING, logger="gateway.config"):
        config = load_config(HELDOUT / name)
    assert config.model_list
    ignored = [r for r in caplog.records if r.name == "gateway.config"
               and r.getMessage().startswith("ignoring LiteLLM settings")]
    assert len(ignored) <= 1
    no_secret_in(caplog.text)


INVALID = [
    ("fallback_typo.yaml", "router_settings.fallbacks.gpt-4o: no model_list entry is named "
                           "'gpt-4o-mnii'"),
    ("num_retries_word.yaml", "litellm_settings.num_retries: must be an integer"),
    ("no_litellm_params.yaml", "model_list[1].litellm_params: Field required"),
    ("model_list_mapping.yaml", "model_list: Input should be a valid list"),
    ("bad_yaml.yaml", "not valid YAML at line 5"),
    ("include_missing.yaml", "include[0]: included file shared/models.yaml not found"),
    ("unset_variable.yaml", "model_list[0].litellm_params.api_key: environment variable "
                            "HELDOUT_NEVER_SET_KEY is not set"),
    ("alias_to_nothing.yaml", "router_settings.model_group_alias.gpt4: no model_list entry "
                              "is named 'gpt-4-0613'"),
    ("negative_timeout.yaml", "router_settings.timeout: must be > 0"),
    ("deployment_timeout_word.yaml", "model_list[0].litellm_params.timeout: Input should be "
                                     "a valid number"),
    ("rpm_word.yaml", "model_list[0].litellm_params.rpm: must be a number"),
    ("jwt_auth.yaml", "general_settings.enable_jwt_auth"),
    ("master_key_unset.yaml", "general_settings.master_key: environment variable "
                              "HELDOUT_UNSET_MASTER_KEY is not set"),
    ("vllm_base_empty.yaml", "model_list[0].litellm_params.api_base: provider 'hosted_vllm' "
                             "has no public endpoint"),
    ("credential_unknown.yaml", "model_list[0].litellm_params.litellm_credential_name: no "
                                "credential_list entry is named 'azure-west'"),
]


@pytest.mark.parametrize(("name", "message"), INVALID)
def test_a_broken_config_stops_start_up_with_the_key_path(name: str, message: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "HELDOUT_NEVER_SET_KEY"}
    env["OPENAI_API_KEY"] = OPENAI_KEY
    env["HELDOUT_EMPTY_VLLM_BASE"] = ""
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config",
                           str(HELDOUT / "invalid" / name), "--port", "0"],
                          capture_output=True, text=True, timeout=120, env=env, check=False)
    assert done.returncode == 2, done.stderr
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    no_secret_in(done.stderr, done.stdout)
