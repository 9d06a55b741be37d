"""A second outsider's round of LiteLLM proxy configs, written as a platform team moving off
the proxy writes them (YAML files in the test's own folder, loaded as ``gateway serve
--config`` loads them), served against stand-ins of OpenAI, Azure OpenAI and Anthropic on
127.0.0.1 with the real ``openai`` and ``anthropic`` SDKs (retries off unless a case is
about them).

Each case is one thing such a team would notice: YAML anchors shared between deployments,
provider wildcards, where an ``api_base`` without ``/v1`` or with a trailing slash is
posted, ``custom_llm_provider`` with a bare model name, bookkeeping keys of a deployment
(``tags``, costs, budgets) never reaching a provider, ``enable_pre_call_checks`` skipping
a deployment too small for the prompt, ``request_timeout``, ``num_retries`` and a
provider's ``Retry-After``, rpm limits, headers for Anthropic deployments, ``drop_params``
on a provider that lacks a parameter, a fallback across providers on a stream, what a
client calling an endpoint the gateway does not serve gets, and Chat Completions clients of
a model OpenAI serves at ``/v1/responses`` alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from aiohttp import web

from gateway.config import ConfigError, load_config, load_document
from tests.conftest import GatewayFactory, RunningGateway, free_port
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned
from tests.fakes.openai_fleet import SERVER_ERROR, FleetUpstream, rate_limit_error
from tests.fakes.responses_server import FakeResponses
from tests.http import wait_until_serving
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS

pytestmark = IGNORE_SCHEMA_WARNINGS

MASTER = "sk-heldout2-master-0c4e7a"
OPENAI_KEY = "sk-openai-heldout2-5d21"
AZURE_KEY = "azure-heldout2-key-a913"
ANTHROPIC_KEY = "sk-ant-heldout2-77b0"
SECRETS = (MASTER, OPENAI_KEY, AZURE_KEY, ANTHROPIC_KEY)


class StandIn(FleetUpstream):
    """An OpenAI-compatible deployment that also answers on ``/chat/completions`` (a server
    whose ``api_base`` is written without ``/v1``), serves scripted answers first, can hang
    until the test ends and tells when a hanging request was given up by its caller."""

    def __init__(self, name: str, **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.released = asyncio.Event()
        self.abandoned = asyncio.Event()

    def _routes(self, app: web.Application) -> None:
        super()._routes(app)
        app.router.add_post("/chat/completions", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        scripted = self.next_scripted()
        if isinstance(scripted, Canned):
            await self.record(request)
            return scripted.response()
        if self.mode == "hang":
            await self.record(request)
            try:
                await self.released.wait()
            except asyncio.CancelledError:
                self.abandoned.set()  # the gateway closed the connection
                raise
            return web.json_response(SERVER_ERROR, status=500)
        return await super()._chat(request)

    async def __aexit__(self, *exc_info: object) -> None:
        self.released.set()
        await super().__aexit__(*exc_info)


def write_config(tmp_path: Path, text: str, name: str = "config.yaml") -> Path:
    """The team's config file, as they keep it."""
    path = tmp_path / name
    path.write_text(text)
    return path


async def serve_file(gateway_factory: GatewayFactory, path: Path) -> RunningGateway:
    """A gateway from a config file as ``gateway serve --config`` reads it."""
    raw = load_document(path)
    assert isinstance(raw, dict)
    return await gateway_factory(raw)


@pytest.fixture
async def sdk() -> AsyncIterator[Any]:
    """Make SDK clients on a gateway (master key, no SDK retries); all closed at the end."""
    made: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []

    def make(gw: RunningGateway, kind: str = "openai", **options: Any) -> Any:
        options.setdefault("max_retries", 0)
        options.setdefault("api_key", MASTER)
        client: openai.AsyncOpenAI | anthropic.AsyncAnthropic
        if kind == "openai":
            client = openai.AsyncOpenAI(base_url=gw.base_url, **options)
        else:
            client = anthropic.AsyncAnthropic(base_url=gw.root, **options)
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


async def chat(client: openai.AsyncOpenAI, model: str, text: str = "hi", **extra: Any) -> Any:
    """One chat call through the raw response (headers and parsed body)."""
    return await client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **extra)


def env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    """The variables the config reads."""
    for name, value in values.items():
        monkeypatch.setenv(name, value)


# --- 1. YAML anchors -------------------------------------------------------------------

ANCHORS = """\
# One block of credentials, merged into every deployment (YAML anchors, as teams write
# them to keep a long model_list short).
x-openai-defaults: &openai_defaults
  api_base: os.environ/OPENAI_API_BASE
  api_key: os.environ/OPENAI_API_KEY
  timeout: 120

model_list:
  - model_name: gpt-4o
    litellm_params:
      <<: *openai_defaults
      model: openai/gpt-4o
  - model_name: gpt-4o-mini
    litellm_params:
      <<: *openai_defaults
      model: openai/gpt-4o-mini
      temperature: 0.2

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_yaml_anchors_merge_credentials_into_each_deployment(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any, caplog: pytest.LogCaptureFixture) -> None:
    async with StandIn("oai") as oai:
        env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            LITELLM_MASTER_KEY=MASTER)
        with caplog.at_level(logging.WARNING, logger="gateway.config"):
            gw = await serve_file(gateway_factory, write_config(tmp_path, ANCHORS))
        client = sdk(gw)
        big = await chat(client, "gpt-4o")
        small = await chat(client, "gpt-4o-mini")
    assert big.parse().choices[0].message.content == "from oai: gpt-4o"
    assert small.parse().choices[0].message.content == "from oai: gpt-4o-mini"
    assert [r.headers["authorization"] for r in oai.requests] == [f"Bearer {OPENAI_KEY}"] * 2
    assert oai.requests[1].body["temperature"] == 0.2 and "temperature" not in \
        oai.requests[0].body
    # The anchors' holder is no section of LiteLLM's: named, never a reason to refuse.
    assert "x-openai-defaults" in caplog.text


def test_a_misspelt_section_or_another_block_stops_start_up_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown top-level key close to a section's name is a typo whose settings would
    silently not apply; any other one not named ``x-...`` is refused with the key and how
    to keep an anchors block."""
    path = write_config(tmp_path, "model_list: []\nrouter_setings:\n  num_retries: 3\n")
    with pytest.raises(ConfigError, match=r"router_setings: unknown key \(did you mean "
                                          r"router_settings\?\)"):
        load_config(path)
    env(monkeypatch, OPENAI_API_BASE="http://127.0.0.1:9/v1", OPENAI_API_KEY=OPENAI_KEY,
        LITELLM_MASTER_KEY=MASTER)
    path = write_config(tmp_path, ANCHORS.replace("x-openai-defaults:", "defaults:"))
    with pytest.raises(ConfigError, match=r"defaults: unknown key \(.*x-"):
        load_config(path)


# --- 2. provider wildcards ---------------------------------------------------------------

WILDCARDS = """\
# "Any OpenAI model as openai/<name>, any Claude as anthropic/<name>" (LiteLLM's
# provider wildcards), and one pinned group.
model_list:
  - model_name: "openai/*"
    litellm_params:
      model: "openai/*"
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
  - model_name: "anthropic/*"
    litellm_params:
      model: "anthropic/*"
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
  - model_name: "claude/*"          # the team's own prefix for Anthropic's models
    litellm_params:
      model: "anthropic/*"
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
  - model_name: team-default
    litellm_params:
      model: openai/gpt-4.1-mini
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY

router_settings:
  num_retries: 0

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_provider_wildcards_send_the_name_after_the_prefix(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    async with StandIn("oai") as oai, FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, WILDCARDS))
        client = sdk(gw)
        mini = await chat(client, "openai/gpt-4o-mini")
        haiku = await chat(client, "anthropic/claude-3-5-haiku-20241022", "hello claude")
        native = await sdk(gw, "anthropic").messages.create(
            model="anthropic/claude-sonnet-4-5", max_tokens=50,
            messages=[{"role": "user", "content": "native hello"}])
        own_prefix = await chat(client, "claude/claude-opus-4-1", "own prefix")
        with pytest.raises(openai.NotFoundError) as missing:
            await chat(client, "mistral/mistral-large-latest")
    assert mini.parse().choices[0].message.content == "from oai: gpt-4o-mini"
    assert oai.requests[0].body["model"] == "gpt-4o-mini"
    assert haiku.parse().choices[0].message.content == "you said: hello claude"
    assert own_prefix.parse().choices[0].message.content == "you said: own prefix"
    assert [r.body["model"] for r in claude.requests] == [
        "claude-3-5-haiku-20241022", "claude-sonnet-4-5", "claude-opus-4-1"]
    assert native.content[0].text == "you said: native hello"
    assert "mistral/mistral-large-latest" in missing.value.message
    assert len(oai.requests) == 1  # nothing was sent for the unknown name


# --- 3. where an api_base is posted -------------------------------------------------------

BASES = """\
# Self-hosted servers written as their operators give them: without /v1, with a trailing
# slash; an Azure resource with a trailing slash and no api_version; a fine-tune named
# without a provider prefix (custom_llm_provider says which).
model_list:
  - model_name: vllm-root
    litellm_params:
      model: hosted_vllm/Qwen/Qwen2.5-7B-Instruct
      api_base: os.environ/VLLM_ROOT
  - model_name: vllm-slash
    litellm_params:
      model: openai/llama-3.1-8b
      api_base: os.environ/VLLM_SLASH
      api_key: none
  - model_name: azure-4o
    litellm_params:
      model: azure/gpt-4o-deploy
      api_base: os.environ/AZURE_API_BASE
      api_key: os.environ/AZURE_API_KEY
  - model_name: my-finetune
    litellm_params:
      model: ft:gpt-4o-mini:acme::abc123
      custom_llm_provider: openai
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
  - model_name: claude-bare
    litellm_params:
      model: claude-sonnet-4-5
      custom_llm_provider: anthropic
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_each_api_base_is_posted_where_litellm_posts_it(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    async with StandIn("vllm") as vllm, StandIn("slash") as slash, StandIn("az") as az, \
            StandIn("oai") as oai, FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        env(monkeypatch, VLLM_ROOT=vllm.base_url, VLLM_SLASH=f"{slash.v1}/",
            AZURE_API_BASE=f"{az.base_url}/", AZURE_API_KEY=AZURE_KEY,
            OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            LITELLM_MASTER_KEY=MASTER)
        monkeypatch.delenv("AZURE_API_VERSION", raising=False)
        gw = await serve_file(gateway_factory, write_config(tmp_path, BASES))
        client = sdk(gw)
        for name in ("vllm-root", "vllm-slash", "azure-4o", "my-finetune", "claude-bare"):
            raw = await chat(client, name, f"to {name}")
            assert raw.parse().choices[0].message.content
    assert [r.path for r in vllm.requests] == ["/chat/completions"]
    assert vllm.requests[0].body["model"] == "Qwen/Qwen2.5-7B-Instruct"
    assert [r.path for r in slash.requests] == ["/v1/chat/completions"]
    assert [r.path for r in az.requests] == ["/openai/deployments/gpt-4o-deploy/chat/completions"]
    assert az.requests[0].query.get("api-version")  # litellm's default version
    assert az.requests[0].headers["api-key"] == AZURE_KEY
    assert oai.requests[0].body["model"] == "ft:gpt-4o-mini:acme::abc123"
    assert claude.requests[0].body["model"] == "claude-sonnet-4-5"


# --- 4. a deployment's bookkeeping never reaches the provider ----------------------------

BOOKKEEPING = """\
# Deployments carrying what the proxy kept for itself: tags for tag routing (not turned
# on), prices, budgets, a region, LiteLLM's model_info, and a header Anthropic needs.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
      tags: ["paid", "eu"]
      input_cost_per_token: 0.0000025
      output_cost_per_token: 0.00001
      max_budget: 100
      budget_duration: 30d
      region_name: eu
    model_info:
      id: gpt-4o-eu
      mode: chat
      base_model: gpt-4o
      max_input_tokens: 128000
      supports_function_calling: true
  - model_name: claude
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
      tags: ["paid"]
      input_cost_per_token: 0.000003
      max_budget: 50
      budget_duration: 1d
      extra_headers:
        anthropic-beta: context-1m-2025-08-07
    model_info:
      id: claude-main
      mode: chat

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""

_BOOKKEEPING_KEYS = ("tags", "input_cost_per_token", "output_cost_per_token", "max_budget",
                     "budget_duration", "region_name", "model_info", "metadata")


async def test_a_deployments_bookkeeping_never_reaches_the_provider(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    async with StandIn("oai") as oai, FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, BOOKKEEPING))
        client = sdk(gw)
        # A client of the proxy sends LiteLLM's tags too.
        gpt = await chat(client, "gpt-4o", extra_body={"tags": ["team-a"]})
        claude_chat = await chat(client, "claude", "to claude", extra_body={"tags": ["x"]})
        native = await sdk(gw, "anthropic").messages.create(
            model="claude", max_tokens=50, messages=[{"role": "user", "content": "native"}])
    assert gpt.headers["x-litellm-model-id"] == "gpt-4o-eu"
    assert claude_chat.parse().choices[0].message.content == "you said: to claude"
    assert native.content[0].text == "you said: native"
    for body in [oai.requests[0].body, *(r.body for r in claude.requests)]:
        assert not set(_BOOKKEEPING_KEYS) & set(body), body
    assert [r.headers.get("anthropic-beta") for r in claude.requests] == [
        "context-1m-2025-08-07"] * 2


# --- 5. enable_pre_call_checks -------------------------------------------------------------

PRE_CALL = """\
# Two deployments of one group with different windows: LiteLLM's pre-call checks skip the
# one a prompt does not fit (order still puts the small, cheap one first).
model_list:
  - model_name: chat
    litellm_params:
      model: openai/small-8k
      api_base: os.environ/SMALL_API_BASE
      api_key: os.environ/OPENAI_API_KEY
      order: 1
    model_info:
      id: chat-small
      max_input_tokens: 300
  - model_name: chat
    litellm_params:
      model: openai/large-128k
      api_base: os.environ/LARGE_API_BASE
      api_key: os.environ/OPENAI_API_KEY
      order: 2
    model_info:
      id: chat-large
      max_input_tokens: 131072

router_settings:
  enable_pre_call_checks: true
  num_retries: 0

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_pre_call_checks_skip_a_deployment_too_small_for_the_prompt(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any, caplog: pytest.LogCaptureFixture) -> None:
    async with StandIn("small", window=300) as small, StandIn("large") as large:
        env(monkeypatch, SMALL_API_BASE=small.v1, LARGE_API_BASE=large.v1,
            OPENAI_API_KEY=OPENAI_KEY, LITELLM_MASTER_KEY=MASTER)
        with caplog.at_level(logging.WARNING, logger="gateway.config"):
            gw = await serve_file(gateway_factory, write_config(tmp_path, PRE_CALL))
        client = sdk(gw)
        short = await chat(client, "chat", "a short question")
        long = await chat(client, "chat", "word " * 3000)
    assert short.headers["x-litellm-model-id"] == "chat-small"
    assert long.headers["x-litellm-model-id"] == "chat-large"
    assert small.hits == 1 and large.hits == 1  # the long prompt never went to the small one
    assert "enable_pre_call_checks (always on" in caplog.text


# --- 6. request_timeout, num_retries, Retry-After -------------------------------------------

TIMEOUTS = """\
# Timeouts and retries written where older configs keep them (litellm_settings).
model_list:
  - model_name: slow
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: os.environ/SLOW_API_BASE
      api_key: os.environ/OPENAI_API_KEY
  - model_name: flaky
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: os.environ/FLAKY_API_BASE
      api_key: os.environ/OPENAI_API_KEY
  - model_name: limited
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: os.environ/LIMITED_API_BASE
      api_key: os.environ/OPENAI_API_KEY

litellm_settings:
  request_timeout: 1
  num_retries: 2

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


@pytest.fixture
async def timeouts(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                   tmp_path: Path) -> AsyncIterator[tuple[RunningGateway, StandIn, StandIn,
                                                          StandIn]]:
    async with StandIn("slow", mode="hang") as slow, StandIn("flaky") as flaky, \
            StandIn("limited") as limited:
        env(monkeypatch, SLOW_API_BASE=slow.v1, FLAKY_API_BASE=flaky.v1,
            LIMITED_API_BASE=limited.v1, OPENAI_API_KEY=OPENAI_KEY, LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, TIMEOUTS))
        yield gw, slow, flaky, limited


async def test_request_timeout_bounds_a_hanging_deployment_and_retries_it(
        timeouts: tuple[RunningGateway, StandIn, StandIn, StandIn], sdk: Any) -> None:
    gw, slow, _, _ = timeouts
    with pytest.raises(openai.APIStatusError) as gave_up:
        await chat(sdk(gw), "slow")
    assert gave_up.value.status_code == 504
    body = gave_up.value.body
    assert isinstance(body, dict) and body["type"] == "timeout_error"
    assert "'slow' timed out" in body["message"]
    assert slow.hits == 3  # the first try and num_retries: 2, each given up after 1 s
    assert gave_up.value.response.headers["x-should-retry"] == "false"


async def test_num_retries_from_litellm_settings_rides_out_a_flaky_deployment(
        timeouts: tuple[RunningGateway, StandIn, StandIn, StandIn], sdk: Any) -> None:
    gw, _, flaky, _ = timeouts
    flaky.script(Canned(500, SERVER_ERROR), Canned(502, {"error": {
        "message": "Bad gateway", "type": "server_error", "param": None, "code": None}}))
    raw = await chat(sdk(gw), "flaky")
    assert raw.parse().choices[0].message.content == "from flaky: gpt-4o-mini"
    assert flaky.hits == 3
    assert raw.headers["x-litellm-attempted-retries"] == "2"


async def test_a_providers_short_retry_after_is_waited_and_the_retry_answers(
        timeouts: tuple[RunningGateway, StandIn, StandIn, StandIn], sdk: Any) -> None:
    gw, _, _, limited = timeouts
    limited.script(Canned(429, rate_limit_error("gpt-4o-mini"), {"retry-after-ms": "50"}))
    raw = await chat(sdk(gw), "limited")
    assert raw.parse().choices[0].message.content == "from limited: gpt-4o-mini"
    assert limited.hits == 2
    assert raw.headers["x-litellm-attempted-retries"] == "1"


# --- 7. rpm on a deployment ------------------------------------------------------------------

RPM = """\
model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
      rpm: 2
      tpm: 100000

router_settings:
  routing_strategy: usage-based-routing-v2
  num_retries: 0

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_a_deployments_rpm_is_enforced_with_a_rate_limit_the_sdk_understands(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    async with StandIn("oai") as oai:
        env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, RPM))
        client = sdk(gw)
        for _ in range(2):
            await chat(client, "gpt-4o-mini")
        with pytest.raises(openai.RateLimitError) as limited:
            await chat(client, "gpt-4o-mini")
    assert oai.hits == 2
    retry_after = limited.value.response.headers.get("retry-after")
    assert retry_after is not None and 0 < int(retry_after) <= 60
    body = limited.value.body
    assert isinstance(body, dict) and body["code"] == "no_deployments_available"
    assert body["type"] == "rate_limit_error"


# --- 8. drop_params on Anthropic ---------------------------------------------------------

DROP = """\
model_list:
  - model_name: claude
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY

litellm_settings:
  drop_params: true
  modify_params: true

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_drop_params_drops_what_anthropic_does_not_take(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    """A client written for OpenAI sends ``presence_penalty``, ``logit_bias``, ``seed`` and
    ``n``-style fields Anthropic has no use for: with ``drop_params`` LiteLLM leaves them
    out, and so does the gateway."""
    async with FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        env(monkeypatch, ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, DROP))
        raw = await chat(sdk(gw), "claude", "penalties", presence_penalty=0.5,
                         frequency_penalty=0.2, logit_bias={"50256": -100}, seed=7,
                         max_tokens=100)
    assert raw.parse().choices[0].message.content == "you said: penalties"
    sent = claude.requests[0].body
    assert not {"presence_penalty", "frequency_penalty", "logit_bias", "seed"} & set(sent)


# --- 9. a fallback across providers on a stream with usage -----------------------------------

CROSS = """\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
  - model_name: claude
    litellm_params:
      model: anthropic/claude-sonnet-4-5
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY

router_settings:
  num_retries: 0
  fallbacks: [{"gpt-4o": ["claude"]}]

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_a_streamed_fallback_to_claude_ends_with_the_usage_chunk(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    async with StandIn("oai", mode="dead") as oai, \
            FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            ANTHROPIC_API_BASE=claude.base_url, ANTHROPIC_API_KEY=ANTHROPIC_KEY,
            LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, CROSS))
        async with sdk(gw).chat.completions.with_streaming_response.create(
                model="gpt-4o", messages=[{"role": "user", "content": "stream me"}],
                stream=True, stream_options={"include_usage": True}) as response:
            headers = response.headers
            chunks = [chunk async for chunk in await response.parse()]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "you said: stream me"
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens > 0
    assert all(c.usage is None for c in chunks[:-1])
    assert headers["x-litellm-model-group"] == "claude"
    assert headers["x-litellm-attempted-fallbacks"] == "1"
    assert oai.hits == 1


# --- 10. what the gateway does not serve ----------------------------------------------------

EMBEDDINGS = """\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
  - model_name: text-embedding-3-small
    litellm_params:
      model: openai/text-embedding-3-small
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
    model_info:
      mode: embedding

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


async def test_an_embeddings_call_gets_a_clear_openai_error_not_a_page(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    async with StandIn("oai") as oai:
        env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, EMBEDDINGS))
        client = sdk(gw)
        listed = [m.id async for m in client.models.list()]
        with pytest.raises(openai.APIStatusError) as refused:
            await client.embeddings.create(model="text-embedding-3-small", input="hello")
        with pytest.raises(openai.AuthenticationError):
            await sdk(gw, api_key="sk-wrong").embeddings.create(
                model="text-embedding-3-small", input="hello")
    assert "text-embedding-3-small" in listed
    assert refused.value.status_code in (400, 404, 501)
    body = refused.value.body
    assert isinstance(body, dict) and isinstance(body.get("message"), str)
    assert "embedding" in body["message"]
    assert oai.hits == 0


# --- 11. what a LiteLLM deployment's settings asked for, named --------------------------------

SETTINGS = """\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY

router_settings:
  routing_strategy: simple-shuffle
  allowed_fails: 3
  cooldown_time: 30

litellm_settings:
  drop_params: true
  set_verbose: true
  cache: true
  cache_params:
    type: redis
    host: os.environ/CACHE_HOST
    password: os.environ/CACHE_PASSWORD
  callbacks: custom_callbacks.proxy_handler_instance
  success_callback: ["langfuse"]

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  store_model_in_db: true

environment_variables:
  LANGFUSE_PUBLIC_KEY: pk-lf-heldout2
  LANGFUSE_SECRET_KEY: sk-lf-heldout2-secret-0d1
"""


async def test_settings_for_missing_callbacks_and_a_cache_are_named_and_it_serves(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any, caplog: pytest.LogCaptureFixture) -> None:
    """``callbacks`` names a Python file the proxy loaded (not here), the cache reads
    variables that are not set here, the DB is gone: it starts, says so once, serves."""
    async with StandIn("oai") as oai:
        env(monkeypatch, OPENAI_API_BASE=oai.v1, OPENAI_API_KEY=OPENAI_KEY,
            LITELLM_MASTER_KEY=MASTER)
        monkeypatch.delenv("CACHE_HOST", raising=False)
        monkeypatch.delenv("CACHE_PASSWORD", raising=False)
        with caplog.at_level(logging.DEBUG):
            gw = await serve_file(gateway_factory, write_config(tmp_path, SETTINGS))
            raw = await chat(sdk(gw), "gpt-4o")
            with pytest.raises(openai.AuthenticationError):
                await chat(sdk(gw, api_key="sk-not-the-master"), "gpt-4o")
    assert raw.parse().choices[0].message.content == "from oai: gpt-4o"
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING
                and "ignoring LiteLLM settings" in r.getMessage()]
    assert len(warnings) == 1
    for key in ("litellm_settings.set_verbose", "litellm_settings.cache",
                "litellm_settings.cache_params", "litellm_settings.callbacks",
                "litellm_settings.success_callback", "general_settings.store_model_in_db"):
        assert key in warnings[0]
    for secret in (*SECRETS, "sk-lf-heldout2-secret-0d1"):
        assert secret not in caplog.text


# --- 12. gateway serve --config, the file as is ------------------------------------------------

async def test_gateway_serve_runs_an_anchored_config_with_its_environment_block(
        tmp_path: Path) -> None:
    """The operator's view: the anchored file, the master key and the endpoint given in
    ``environment_variables``, ``gateway serve --config`` in its own process."""
    async with StandIn("oai") as oai:
        text = ANCHORS + ("\nenvironment_variables:\n"
                          f"  OPENAI_API_BASE: {oai.v1}\n"
                          f"  LITELLM_MASTER_KEY: {MASTER}\n")
        path = write_config(tmp_path, text)
        port = free_port()
        run_env = {k: v for k, v in os.environ.items()
                   if k not in ("OPENAI_API_BASE", "LITELLM_MASTER_KEY")}
        run_env.update(OPENAI_API_KEY=OPENAI_KEY, LITELLM_LOCAL_MODEL_COST_MAP="True")
        log = tmp_path / "serve.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "gateway.cli", "serve", "--config", str(path),
                 "--port", str(port)], env=run_env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, cwd=tmp_path)
        try:
            root = f"http://127.0.0.1:{port}"
            await wait_until_serving(root, lambda: None if proc.poll() is None
                                     else log.read_text()[-3000:])
            async with openai.AsyncOpenAI(base_url=f"{root}/v1", api_key=MASTER,
                                          max_retries=0) as client:
                raw = await chat(client, "gpt-4o-mini")
                with pytest.raises(openai.AuthenticationError):
                    await chat(client.with_options(api_key="sk-nope"), "gpt-4o")
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert raw.parse().choices[0].message.content == "from oai: gpt-4o-mini"
    output = log.read_text()
    assert "Traceback" not in output
    for secret in SECRETS:
        assert secret not in output


# --- 13. refusals naming the key ------------------------------------------------------------

@pytest.mark.parametrize(("extra", "key"), [
    ("      max_parallel_requests: ten\n",
     "model_list[0].litellm_params.max_parallel_requests: must be an integer"),
    ("general_settings:\n  public_routes: [/v1/models]\n", "general_settings.public_routes"),
    ("general_settings:\n  enable_jwt_auth: true\n", "general_settings.enable_jwt_auth"),
    ("general_settings:\n  master_key: os.environ/NOT_SET_HELDOUT2\n",
     "NOT_SET_HELDOUT2"),
])
def test_a_setting_it_cannot_honour_stops_start_up_naming_the_key(
        tmp_path: Path, extra: str, key: str) -> None:
    base = ("model_list:\n  - model_name: a\n    litellm_params:\n      model: openai/a\n"
            "      api_base: http://127.0.0.1:9/v1\n")
    with pytest.raises(ConfigError) as refused:
        load_config(write_config(tmp_path, base + extra))
    assert key in str(refused.value)



# --- 14. models served at the Responses endpoint alone ---------------------------------------

RESPONSES_ONLY = """\
# OpenAI's codex and pro models answer only at /v1/responses: LiteLLM bridges the team's
# Chat Completions clients there (by its model map, or the openai/responses/ prefix).
model_list:
  - model_name: codex
    litellm_params:
      model: openai/gpt-5-codex
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY
  - model_name: o3-pro
    litellm_params:
      model: openai/responses/o3-pro
      api_base: os.environ/OPENAI_API_BASE
      api_key: os.environ/OPENAI_API_KEY

general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
"""


# litellm's Responses bridge reads a pydantic attribute pydantic 2.11 deprecated (a
# DeprecationWarning, hidden outside tests) once other tests have set its global state.
@pytest.mark.filterwarnings(
    "ignore:Accessing the '.*' attribute on the instance is deprecated:DeprecationWarning")
async def test_chat_clients_reach_models_served_at_the_responses_endpoint_alone(
        gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
        sdk: Any) -> None:
    async with FakeResponses(api_key=OPENAI_KEY) as oai:
        env(monkeypatch, OPENAI_API_BASE=f"{oai.base_url}/v1", OPENAI_API_KEY=OPENAI_KEY,
            LITELLM_MASTER_KEY=MASTER)
        gw = await serve_file(gateway_factory, write_config(tmp_path, RESPONSES_ONLY))
        client = sdk(gw)
        for model in ("codex", "o3-pro"):
            whole = await chat(client, model, f"chat to {model}")
            assert whole.parse().choices[0].message.content == f"you said: chat to {model}"
            stream = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "streamed"}], stream=True,
                stream_options={"include_usage": True})
            chunks = [chunk async for chunk in stream]
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert text == "you said: streamed"
            assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens > 0
            native = await client.responses.create(model=model, input="native")
            assert native.output_text == "you said: native"
    assert {r.path for r in oai.requests} == {"/v1/responses"}
    assert [r.body["model"] for r in oai.requests] == ["gpt-5-codex"] * 3 + ["o3-pro"] * 3
