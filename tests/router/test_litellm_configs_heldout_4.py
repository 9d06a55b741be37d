"""A fourth outsider's round of LiteLLM proxy configs, each grounded in a config a team posted
(LiteLLM's docs and issues: weighted and priced deployments, content-policy fallbacks,
reasoning models on vLLM, ``base_model`` on Azure, included model files, environment
defaults, Redis and alerting settings). Each config is written to a file and loaded the way
``gateway serve --config`` loads it, then served against stand-ins of OpenAI-compatible
servers, Azure OpenAI and Anthropic on 127.0.0.1 with the real ``openai`` and ``anthropic``
SDKs (their own retries off).

What a migrating team would notice is asserted: where each request lands, which fallback
answers, which setting is named at start-up as not honoured (or stops start-up), and that no
secret read through ``os.environ/`` shows up in a log line, an error or the model lists.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import anthropic
import openai
import pytest

from gateway.config import ConfigError, load_config, load_document
from tests.conftest import GatewayFactory, RunningGateway, free_port
from tests.fakes.anthropic_server import FakeAnthropic, anthropic_error
from tests.fakes.native_base import Canned
from tests.fakes.openai_fleet import context_length_error
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS
from tests.router.test_litellm_configs_heldout_2 import StandIn

pytestmark = IGNORE_SCHEMA_WARNINGS

MASTER = "sk-h4-master-71c3e9"
EAST_KEY = "sk-h4-east-2b8f44"
WEST_KEY = "sk-h4-west-c09d1a"
AZURE_KEY = "azure-h4-key-5e6f"
ANTHROPIC_KEY = "sk-ant-h4-90aa31"
REDIS_PASSWORD = "h4-redis-pw-7d7d"
DB_PASSWORD = "h4-db-pw-1f1f"
SLACK_HOOK = "https://hooks.slack.com/services/T00H4/B00H4/h4slacksecret"
LANGFUSE_SECRET = "sk-lf-h4-secret-4242"
OPENAI_DEFAULT_KEY = "sk-h4-openai-default-0e0e"
SECRETS = (MASTER, EAST_KEY, WEST_KEY, AZURE_KEY, ANTHROPIC_KEY, REDIS_PASSWORD, DB_PASSWORD,
           SLACK_HOOK, "h4slacksecret", LANGFUSE_SECRET, OPENAI_DEFAULT_KEY)

# Azure's answer to a prompt its content filter blocks (HTTP 400, code content_filter).
AZURE_FILTERED = {"error": {
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


def unsupported(param: str) -> dict[str, Any]:
    """OpenAI's 400 for a parameter a model does not take (o-series, gpt-5)."""
    return {"error": {"message": f"Unsupported parameter: '{param}' is not supported with "
                                 "this model.", "type": "invalid_request_error",
                      "param": param, "code": "unsupported_parameter"}}


@dataclass
class Fleet:
    """Two OpenAI-compatible servers (``east`` also serves Azure's paths) and an Anthropic
    stand-in, with the variables the configs read set to them."""

    east: StandIn
    west: StandIn
    claude: FakeAnthropic
    tmp_path: Path
    factory: GatewayFactory
    caplog: pytest.LogCaptureFixture
    clients: list[Any] = field(default_factory=list)

    def write(self, text: str, name: str = "config.yaml") -> Path:
        """The team's config file (folders made as needed)."""
        path = self.tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    async def serve(self, text: str, name: str = "config.yaml") -> RunningGateway:
        """Start a gateway from the config file as ``gateway serve --config`` reads it."""
        path = self.write(text, name)
        with self.caplog.at_level(logging.DEBUG, logger="gateway"):
            raw = load_document(path)
            assert isinstance(raw, dict)
            return await self.factory(raw)

    def client(self, gw: RunningGateway, key: str = MASTER) -> openai.AsyncOpenAI:
        """An openai SDK client on ``gw`` (no SDK retries)."""
        made = openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
        self.clients.append(made)
        return made

    def claude_client(self, gw: RunningGateway) -> anthropic.AsyncAnthropic:
        """An anthropic SDK client on ``gw`` (no SDK retries)."""
        made = anthropic.AsyncAnthropic(base_url=gw.root, api_key=MASTER, max_retries=0)
        self.clients.append(made)
        return made

    def warnings(self) -> str:
        """Every warning the gateway logged."""
        return "\n".join(r.getMessage() for r in self.caplog.records
                         if r.levelno >= logging.WARNING)

    def assert_no_secret_logged(self) -> None:
        """No secret in any record the gateway logged, at any level."""
        text = "\n".join(r.getMessage() for r in self.caplog.records)
        for secret in SECRETS:
            assert secret not in text


@pytest.fixture
async def fleet(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Fleet]:
    async with StandIn("east") as east, StandIn("west") as west, \
            FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        values = {
            "EAST_API_BASE": east.v1, "EAST_API_KEY": EAST_KEY,
            "WEST_API_BASE": west.v1, "WEST_API_KEY": WEST_KEY,
            "AZURE_EAST_BASE": east.base_url, "AZURE_EAST_KEY": AZURE_KEY,
            "AZURE_API_VERSION": "2024-08-01-preview",
            "ANTHROPIC_API_BASE": claude.base_url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "LITELLM_MASTER_KEY": MASTER, "LANGFUSE_SECRET_KEY": LANGFUSE_SECRET,
            "DATABASE_URL": f"postgresql://llmproxy:{DB_PASSWORD}@db.internal:5432/litellm",
        }
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        for name in ("AZURE_API_KEY", "AZURE_OPENAI_API_KEY", "OPENAI_API_KEY",
                     "OPENAI_BASE_URL", "OPENAI_API_BASE", "PROXY_MASTER_KEY", "REDIS_URL"):
            monkeypatch.delenv(name, raising=False)
        made = Fleet(east, west, claude, tmp_path, gateway_factory, caplog)
        yield made
        for client in made.clients:
            await client.close()


async def chat(client: openai.AsyncOpenAI, model: str, text: str = "hi", **extra: Any) -> Any:
    """One chat call; the parsed completion."""
    return await client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": text}], **extra)


async def answer(client: openai.AsyncOpenAI, model: str, text: str = "hi",
                 **extra: Any) -> str:
    """The text of one chat call's answer."""
    return str((await chat(client, model, text, **extra)).choices[0].message.content)


async def get_json(gw: RunningGateway, path: str, key: str = MASTER) -> Any:
    """``GET`` a gateway path with a client key; the JSON body (status must be 200)."""
    async with aiohttp.ClientSession() as http, http.get(
            f"{gw.root}{path}", headers={"Authorization": f"Bearer {key}"}) as resp:
        assert resp.status == 200
        return await resp.json()


async def listed(gw: RunningGateway) -> set[str]:
    """The model ids ``GET /v1/models`` lists (no secret in the listing)."""
    body = await get_json(gw, "/v1/models")
    for secret in SECRETS:
        assert secret not in str(body)
    return {m["id"] for m in body["data"]}


EAST = """\
  - model_name: {name}
    litellm_params:
      model: openai/{model}
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
"""
WEST = EAST.replace("EAST_", "WEST_")
CLAUDE = """\
  - model_name: {name}
    litellm_params:
      model: anthropic/{model}
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
"""
MASTER_KEY = "general_settings:\n  master_key: os.environ/LITELLM_MASTER_KEY\n"


# --- 1. weight: a replica drained with weight 0 --------------------------------------------

WEIGHTED = f"""\
# LiteLLM docs (load balancing, "weight"): pick deployments in proportion to their weight.
# The west replica is being drained: weight 0, kept listed for a quick roll-back.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      weight: 1
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/WEST_API_BASE
      api_key: os.environ/WEST_API_KEY
      weight: 0
router_settings:
  routing_strategy: simple-shuffle
{MASTER_KEY}"""


async def test_weight_zero_drains_a_replica(fleet: Fleet) -> None:
    gw = await fleet.serve(WEIGHTED)
    client = fleet.client(gw)
    for _ in range(8):
        assert await answer(client, "gpt-4o") == "from east: gpt-4o"
    assert fleet.west.hits == 0
    assert "weight" not in fleet.warnings()
    # Once east is down, the drained replica still serves (it is in the group).
    fleet.east.mode = "dead"
    assert await answer(client, "gpt-4o") == "from west: gpt-4o"


# --- 2. rpm from the environment, then the next order ----------------------------------------

RPM_ORDER = f"""\
# Provisioned throughput first (order 1, its rpm from the environment), pay-as-you-go after.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o-ptu
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      rpm: os.environ/PTU_RPM
      order: 1
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/WEST_API_BASE
      api_key: os.environ/WEST_API_KEY
      tpm: 2000000
      order: 2
router_settings:
  routing_strategy: simple-shuffle
  enable_pre_call_checks: true
{MASTER_KEY}"""


async def test_rpm_from_the_environment_spills_to_the_next_order(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PTU_RPM", "2")
    gw = await fleet.serve(RPM_ORDER)
    client = fleet.client(gw)
    texts = [await answer(client, "gpt-4o") for _ in range(3)]
    assert texts == ["from east: gpt-4o-ptu"] * 2 + ["from west: gpt-4o"]
    warned = fleet.warnings()
    assert "rpm" not in warned and "order" not in warned


# --- 3-4. content-policy fallbacks --------------------------------------------------------

CONTENT_POLICY = f"""\
# LiteLLM PR #4207: a prompt Azure's content filter blocks goes to another provider.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: azure/gpt-4o-eu
      api_base: os.environ/AZURE_EAST_BASE
      api_key: os.environ/AZURE_EAST_KEY
      api_version: os.environ/AZURE_API_VERSION
{CLAUDE.format(name="claude-sonnet", model="claude-sonnet-4-5")}
router_settings:
  content_policy_fallbacks: [{{"gpt-4o": ["claude-sonnet"]}}]
  num_retries: 0
{MASTER_KEY}"""


async def test_content_policy_fallbacks_send_a_filtered_prompt_to_claude(fleet: Fleet) -> None:
    gw = await fleet.serve(CONTENT_POLICY)
    client = fleet.client(gw)
    fleet.east.script(Canned(400, AZURE_FILTERED))
    assert await answer(client, "gpt-4o", "tell me") == "you said: tell me"
    filtered = fleet.east.requests[0]
    assert filtered.path == "/openai/deployments/gpt-4o-eu/chat/completions"
    assert filtered.query["api-version"] == "2024-08-01-preview"
    assert fleet.claude.requests[-1].body["model"] == "claude-sonnet-4-5"
    # An outage is no content-policy refusal: that chain is not used for it (LiteLLM).
    fleet.east.mode = "dead"
    with pytest.raises(openai.InternalServerError):
        await chat(client, "gpt-4o")
    assert len(fleet.claude.requests) == 1
    fleet.assert_no_secret_logged()


GENERAL_ONLY = f"""\
# Only generic fallbacks (LiteLLM issue #40406): a content-filter refusal takes them too.
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}{WEST.format(name="gpt-4o-backup", model="gpt-4o")}
router_settings:
  fallbacks: [{{"gpt-4o": ["gpt-4o-backup"]}}]
  num_retries: 0
{MASTER_KEY}"""


async def test_generic_fallbacks_also_take_a_content_filter_refusal(fleet: Fleet) -> None:
    gw = await fleet.serve(GENERAL_ONLY)
    fleet.east.script(Canned(400, AZURE_FILTERED))
    assert await answer(fleet.client(gw), "gpt-4o") == "from west: gpt-4o"
    # A plain bad request is the request's own fault: no fallback.
    fleet.east.script(Canned(400, {"error": {
        "message": "Invalid value for 'temperature': must be <= 2.", "type":
        "invalid_request_error", "param": "temperature", "code": "invalid_value"}}))
    with pytest.raises(openai.BadRequestError, match="temperature"):
        await chat(fleet.client(gw), "gpt-4o", temperature=3)
    assert fleet.west.hits == 1


# --- 5. cost-based routing with prices on the deployments ---------------------------------

COST_BASED = f"""\
# LiteLLM docs (routing, cost-based-routing): the cheapest healthy deployment is picked;
# prices of a fine-tune the model map cannot know are given per deployment.
model_list:
  - model_name: support-bot
    litellm_params:
      model: openai/ft:gpt-4o-mini:acme::support-v3
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      input_cost_per_token: 0.0000003
      output_cost_per_token: 0.0000012
  - model_name: support-bot
    litellm_params:
      model: openai/support-v3-distilled
      api_base: os.environ/WEST_API_BASE
      api_key: os.environ/WEST_API_KEY
    model_info:
      input_cost_per_token: 0.0000001
      output_cost_per_token: 0.0000004
router_settings:
  routing_strategy: cost-based-routing
{MASTER_KEY}"""


async def test_cost_based_routing_reads_prices_of_either_place(fleet: Fleet) -> None:
    gw = await fleet.serve(COST_BASED)
    client = fleet.client(gw)
    for _ in range(4):
        assert await answer(client, "support-bot") == "from west: support-v3-distilled"
    assert "cost_per_token" not in fleet.warnings()
    fleet.west.mode = "dead"
    assert await answer(client, "support-bot") == \
        "from east: ft:gpt-4o-mini:acme::support-v3"


# --- 6. a hidden alias as the fallback of a Claude group, on /v1/messages ------------------

HIDDEN_FALLBACK = f"""\
# Claude Code through the proxy; when Anthropic is overloaded, the OpenAI group answers under
# an alias clients never see in /v1/models.
model_list:
{CLAUDE.format(name="claude-sonnet-4-5", model="claude-sonnet-4-5-20250929")}\
{EAST.format(name="gpt-4.1", model="gpt-4.1")}
router_settings:
  model_group_alias:
    backup-for-claude: {{model: gpt-4.1, hidden: true}}
  fallbacks: [{{"claude-sonnet-4-5": ["backup-for-claude"]}}]
  num_retries: 0
{MASTER_KEY}"""


async def test_a_hidden_alias_serves_as_the_fallback_of_a_claude_group(fleet: Fleet) -> None:
    gw = await fleet.serve(HIDDEN_FALLBACK)
    assert "backup-for-claude" not in await listed(gw)
    client = fleet.claude_client(gw)
    message = await client.messages.create(
        model="claude-sonnet-4-5", max_tokens=64,
        messages=[{"role": "user", "content": "hello"}])
    assert message.content[0].type == "text"
    assert message.content[0].text == "you said: hello"
    fleet.claude.script(anthropic_error(529, "Overloaded", "overloaded_error"))
    message = await client.messages.create(
        model="claude-sonnet-4-5", max_tokens=64,
        messages=[{"role": "user", "content": "hello"}])
    assert message.content[0].type == "text"
    assert message.content[0].text == "from east: gpt-4.1"
    assert fleet.east.requests[-1].headers["authorization"] == f"Bearer {EAST_KEY}"
    fleet.assert_no_secret_logged()


# --- 7. base_model gives an Azure deployment its window ------------------------------------

AZURE_BASE_MODEL = f"""\
# LiteLLM docs (azure, "base_model"): a deployment name says nothing of the model behind it.
model_list:
  - model_name: chat-small
    litellm_params:
      model: azure/prod-chat-4k
      api_base: os.environ/AZURE_EAST_BASE
      api_key: os.environ/AZURE_EAST_KEY
      api_version: os.environ/AZURE_API_VERSION
    model_info:
      base_model: azure/gpt-35-turbo
      mode: chat
{WEST.format(name="chat-large", model="gpt-4.1")}
router_settings:
  context_window_fallbacks: [{{"chat-small": ["chat-large"]}}]
  enable_pre_call_checks: true
  num_retries: 0
{MASTER_KEY}"""


async def test_base_model_window_sends_a_long_prompt_to_the_larger_group(fleet: Fleet) -> None:
    gw = await fleet.serve(AZURE_BASE_MODEL)
    client = fleet.client(gw)
    assert await answer(client, "chat-small") == "from east: prod-chat-4k"
    assert fleet.east.requests[-1].query["api-version"] == "2024-08-01-preview"
    assert fleet.east.requests[-1].headers["api-key"] == AZURE_KEY
    long = "lorem ipsum dolor " * 3000  # ~9k tokens: over gpt-35-turbo's 4097
    assert await answer(client, "chat-small", long) == "from west: gpt-4.1"
    assert fleet.east.hits == 1
    info = await get_json(gw, "/model/info")
    small = next(row for row in info["data"] if row["model_name"] == "chat-small")
    assert small["model_info"]["max_input_tokens"] == 4097
    assert AZURE_KEY not in str(info)


# --- 8. reasoning models on vLLM: merge_reasoning_content_in_choices -----------------------

REASONING = f"""\
# LiteLLM issue #9578: QwQ on vLLM with --reasoning-parser, reasoning merged into content
# for chat UIs that cannot show reasoning_content.
model_list:
  - model_name: qwq
    litellm_params:
      model: hosted_vllm/Qwen/QwQ-32B
      api_base: os.environ/EAST_API_BASE
      merge_reasoning_content_in_choices: true
      use_in_pass_through: true
{MASTER_KEY}"""


async def test_merge_reasoning_and_pass_through_flags_are_named_and_reasoning_relayed(
        fleet: Fleet) -> None:
    gw = await fleet.serve(REASONING)
    warned = fleet.warnings()
    assert "model_list[0].litellm_params.merge_reasoning_content_in_choices" in warned
    assert "model_list[0].litellm_params.use_in_pass_through" in warned
    fleet.east.script(Canned(200, {
        "id": "chatcmpl-qwq", "object": "chat.completion", "created": 1,
        "model": "Qwen/QwQ-32B",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": "\n\nHello!",
            "reasoning_content": "The user said hi."}}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 9, "total_tokens": 14}}))
    done = await chat(fleet.client(gw), "qwq")
    assert fleet.east.requests[-1].body["model"] == "Qwen/QwQ-32B"
    message = done.choices[0].message
    assert message.content == "\n\nHello!"  # as the server sent it, reasoning kept apart
    assert message.to_dict()["reasoning_content"] == "The user said hi."
    assert "merge_reasoning_content_in_choices" not in fleet.east.requests[-1].body


# --- 9. a deployment's stream_timeout ------------------------------------------------------

STREAM_TIMEOUT = f"""\
# A self-hosted server that sometimes stalls before its first token: streams give up on it
# after a second and fall back.
model_list:
  - model_name: coder
    litellm_params:
      model: openai/qwen2.5-coder-32b
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      stream_timeout: 1
{WEST.format(name="coder-cloud", model="gpt-4.1-mini")}
router_settings:
  fallbacks: [{{"coder": ["coder-cloud"]}}]
  num_retries: 0
{MASTER_KEY}"""


async def test_a_deployments_stream_timeout_moves_a_silent_stream_to_the_fallback(
        fleet: Fleet) -> None:
    gw = await fleet.serve(STREAM_TIMEOUT)
    fleet.east.mode = "hang"
    stream = await fleet.client(gw).chat.completions.create(
        model="coder", messages=[{"role": "user", "content": "hi"}], stream=True)
    text = "".join([chunk.choices[0].delta.content or "" async for chunk in stream
                    if chunk.choices])
    assert text == "from west: gpt-4.1-mini"
    assert fleet.east.hits == 1


# --- 10. num_retries written as a string, max_retries on a deployment --------------------

RETRIES = f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      max_retries: 5
litellm_settings:
  num_retries: "2"
recovery:
  backoff_base: 0
{MASTER_KEY}"""


async def test_num_retries_as_a_string_counts_and_max_retries_is_named(fleet: Fleet) -> None:
    gw = await fleet.serve(RETRIES)
    assert "model_list[0].litellm_params.max_retries (retries follow num_retries)" in \
        fleet.warnings()
    fleet.east.mode = "dead"
    with pytest.raises(openai.InternalServerError):
        await chat(fleet.client(gw), "gpt-4o")
    assert fleet.east.hits == 3


# --- 11. include: model files kept per provider -----------------------------------------------

INCLUDED_OPENAI = """\
x-east: &east
  api_base: os.environ/EAST_API_BASE
  api_key: os.environ/EAST_API_KEY
model_list:
  - model_name: gpt-4o
    litellm_params: {<<: *east, model: openai/gpt-4o}
  - model_name: gpt-4o-mini
    litellm_params: {<<: *east, model: openai/gpt-4o-mini}
"""
INCLUDED_CLAUDE = """\
model_list:
  - model_name: claude-haiku
    litellm_params:
      model: anthropic/claude-3-5-haiku-20241022
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
"""
INCLUDING = f"""\
# LiteLLM docs (proxy config, "include"): one file per provider, settings in the main one.
include:
  - models/openai.yaml
  - models/claude.yaml
router_settings:
  fallbacks: [{{"claude-haiku": ["gpt-4o-mini"]}}]
  num_retries: 0
{MASTER_KEY}"""


async def test_included_model_files_serve_both_wires_and_their_fallbacks(fleet: Fleet) -> None:
    fleet.write(INCLUDED_OPENAI, "models/openai.yaml")
    fleet.write(INCLUDED_CLAUDE, "models/claude.yaml")
    gw = await fleet.serve(INCLUDING)
    assert {"gpt-4o", "gpt-4o-mini", "claude-haiku"} <= await listed(gw)
    assert "x-east" in fleet.warnings()  # the anchor block of the included file is named
    assert await answer(fleet.client(gw), "gpt-4o") == "from east: gpt-4o"
    client = fleet.claude_client(gw)
    message = await client.messages.create(
        model="claude-haiku", max_tokens=32, messages=[{"role": "user", "content": "yo"}])
    assert message.content[0].type == "text"
    assert message.content[0].text == "you said: yo"
    fleet.claude.script(anthropic_error(529, "Overloaded", "overloaded_error"))
    message = await client.messages.create(
        model="claude-haiku", max_tokens=32, messages=[{"role": "user", "content": "yo"}])
    assert message.content[0].type == "text"
    assert message.content[0].text == "from east: gpt-4o-mini"


# --- 12. merge keys overridden per deployment ---------------------------------------------

MERGE_OVERRIDE = f"""\
x-defaults:
  params: &params
    api_base: os.environ/EAST_API_BASE
    api_key: os.environ/EAST_API_KEY
    temperature: 0.2
  info: &info
    mode: chat
    max_input_tokens: 64000
    supports_function_calling: true
model_list:
  - model_name: writer
    litellm_params:
      <<: *params
      model: openai/gpt-4o
    model_info:
      <<: *info
  - model_name: writer-eu
    litellm_params:
      <<: *params
      model: openai/gpt-4o
      api_base: os.environ/WEST_API_BASE    # overrides the merged one
      api_key: os.environ/WEST_API_KEY
      temperature: 0.7
    model_info:
      <<: *info
      max_input_tokens: 32000
{MASTER_KEY}"""


async def test_merge_keys_overridden_per_deployment(fleet: Fleet) -> None:
    gw = await fleet.serve(MERGE_OVERRIDE)
    client = fleet.client(gw)
    assert await answer(client, "writer") == "from east: gpt-4o"
    assert fleet.east.requests[-1].body["temperature"] == 0.2
    assert await answer(client, "writer-eu") == "from west: gpt-4o"
    assert fleet.west.requests[-1].body["temperature"] == 0.7
    assert fleet.west.requests[-1].headers["authorization"] == f"Bearer {WEST_KEY}"
    info = {row["model_name"]: row["model_info"]
            for row in (await get_json(gw, "/v1/model/info"))["data"]}
    assert (info["writer"]["max_input_tokens"], info["writer-eu"]["max_input_tokens"]) == \
        (64000, 32000)


# --- 13. environment_variables give a bare OpenAI model its key and endpoint --------------

async def test_environment_variables_give_a_bare_model_its_key_and_endpoint(
        fleet: Fleet) -> None:
    gw = await fleet.serve(f"""\
# LiteLLM docs (proxy config, environment_variables): set before the config is read.
environment_variables:
  OPENAI_API_KEY: {OPENAI_DEFAULT_KEY}
  OPENAI_BASE_URL: {fleet.west.v1}
model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: gpt-4o-mini
{MASTER_KEY}""")
    assert await answer(fleet.client(gw), "gpt-4o-mini") == "from west: gpt-4o-mini"
    assert fleet.west.requests[-1].headers["authorization"] == f"Bearer {OPENAI_DEFAULT_KEY}"
    assert "gpt-4o-mini" in await listed(gw)
    info = await get_json(gw, "/model/info")
    assert OPENAI_DEFAULT_KEY not in str(info)
    fleet.assert_no_secret_logged()


# --- 14-15. the master key ----------------------------------------------------------------

def test_a_master_key_variable_not_set_stops_start_up_naming_it(
        fleet: Fleet) -> None:
    path = fleet.write(f"model_list:\n{EAST.format(name='gpt-4o', model='gpt-4o')}"
                       "general_settings:\n  master_key: os.environ/PROXY_MASTER_KEY\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    message = str(caught.value)
    assert "general_settings.master_key" in message and "PROXY_MASTER_KEY" in message
    for secret in SECRETS:
        assert secret not in message


async def test_a_wrong_client_key_gets_401_naming_no_secret(fleet: Fleet) -> None:
    gw = await fleet.serve(f"model_list:\n{EAST.format(name='gpt-4o', model='gpt-4o')}"
                           f"{MASTER_KEY}")
    with pytest.raises(openai.AuthenticationError) as caught:
        await chat(fleet.client(gw, key="sk-not-the-master"), "gpt-4o")
    for secret in SECRETS:
        assert secret not in str(caught.value.body) and secret not in caught.value.message
    assert fleet.east.hits == 0
    # The Anthropic SDK sends its key as x-api-key: the master key works there too.
    message = await fleet.claude_client(gw).messages.create(
        model="gpt-4o", max_tokens=16, messages=[{"role": "user", "content": "hi"}])
    assert message.content[0].type == "text"
    assert message.content[0].text == "from east: gpt-4o"


# --- 16. Redis for shared limits, unreachable ------------------------------------------------

REDIS = f"""\
# LiteLLM docs (load balancing across instances): rpm/tpm shared through Redis.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      rpm: 100
router_settings:
  redis_url: os.environ/REDIS_URL
{MASTER_KEY}"""


async def test_an_unreachable_redis_url_never_shows_its_password(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REDIS_URL", f"redis://:{REDIS_PASSWORD}@127.0.0.1:{free_port()}/0")
    gw = await fleet.serve(REDIS)
    assert await answer(fleet.client(gw), "gpt-4o") == "from east: gpt-4o"
    fleet.assert_no_secret_logged()


# --- 17-33. configs that start, route as written, and name what is not honoured ---------------

@dataclass(frozen=True)
class Case:
    """A config, the key paths its start-up warning must name, and requests with the
    stand-in that answers ((model asked for, answer text))."""

    text: str
    named: tuple[str, ...] = ()
    routes: tuple[tuple[str, str], ...] = (("gpt-4o", "from east: gpt-4o"),)
    listed: tuple[str, ...] = ("gpt-4o",)
    not_named: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()  # request fields the upstream must not get


ONE = f"model_list:\n{EAST.format(name='gpt-4o', model='gpt-4o')}"

CASES = {
    "alerting_to_slack": Case(f"""{ONE}\
environment_variables:
  SLACK_WEBHOOK_URL: {SLACK_HOOK}
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  alerting: ["slack"]
  alerting_threshold: 300
  alert_types: ["llm_too_slow", "llm_exceptions", "outage_alerts"]
  alert_to_webhook_url:
    llm_exceptions: {SLACK_HOOK}
""", named=("general_settings.alerting", "general_settings.alerting_threshold",
            "general_settings.alert_types", "general_settings.alert_to_webhook_url")),
    "background_health_checks": Case(f"""{ONE}\
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  background_health_checks: true
  health_check_interval: 300
  health_check_details: false
""", named=("general_settings.background_health_checks",
            "general_settings.health_check_interval", "general_settings.health_check_details")),
    "models_in_the_database": Case(f"""{ONE}\
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  database_url: os.environ/DATABASE_URL
  store_model_in_db: true
  proxy_batch_write_at: 60
  disable_spend_logs: true
  database_connection_pool_limit: 10
""", named=("general_settings.database_url", "general_settings.store_model_in_db",
            "general_settings.proxy_batch_write_at", "general_settings.disable_spend_logs",
            "general_settings.database_connection_pool_limit")),
    "verbose_and_json_logs": Case(f"""{ONE}\
litellm_settings:
  set_verbose: true
  json_logs: true
{MASTER_KEY}""", named=("litellm_settings.set_verbose",), not_named=("json_logs",)),
    "privacy_of_logs": Case(f"""{ONE}\
litellm_settings:
  turn_off_message_logging: true
  redact_user_api_key_info: true
  redact_messages_in_exceptions: true
{MASTER_KEY}""", named=("litellm_settings.turn_off_message_logging",
                        "litellm_settings.redact_user_api_key_info",
                        "litellm_settings.redact_messages_in_exceptions")),
    "logging_callbacks": Case(f"""{ONE}\
environment_variables:
  LANGFUSE_PUBLIC_KEY: pk-lf-h4-public
  LANGFUSE_HOST: https://cloud.langfuse.com
litellm_settings:
  callbacks: ["otel"]
  success_callback: ["langfuse"]
  failure_callback: ["sentry"]
  langfuse_default_tags: ["proxy_base_url", "user_api_key_alias"]
{MASTER_KEY}""", named=("litellm_settings.callbacks", "litellm_settings.success_callback",
                        "litellm_settings.failure_callback",
                        "litellm_settings.langfuse_default_tags")),
    "provider_budgets": Case(f"""{ONE}\
router_settings:
  provider_budget_config:
    openai: {{budget_limit: 100.0, time_period: 1d}}
    anthropic: {{budget_limit: 50, time_period: 7d}}
{MASTER_KEY}""", named=("router_settings.provider_budget_config",)),
    "usage_based_v2_with_redis_host": Case(f"""{ONE}\
router_settings:
  routing_strategy: usage-based-routing-v2
  redis_host: 127.0.0.1
  redis_port: {free_port()}
  redis_password: {REDIS_PASSWORD}
{MASTER_KEY}""", not_named=("routing_strategy", "redis_")),
    "unknown_routing_strategy": Case(f"""{ONE}\
router_settings:
  routing_strategy: priority-routing
{MASTER_KEY}""", named=("router_settings.routing_strategy=priority-routing",)),
    "mock_response_canary": Case(f"""{ONE}\
  - model_name: canary
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      mock_response: "pong"
{MASTER_KEY}""", named=("model_list[1].litellm_params.mock_response (the model is called)",),
        routes=(("canary", "from east: gpt-4o-mini"),), listed=("gpt-4o", "canary")),
    "tags_without_tag_filtering": Case(f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      tags: ["free", "eu"]
{MASTER_KEY}""", named=("model_list[0].litellm_params.tags",)),
    "modify_params_and_drop_params": Case(f"""{ONE}\
litellm_settings:
  drop_params: true
  modify_params: true
  additional_drop_params: ["user"]
{MASTER_KEY}""", named=("litellm_settings.modify_params",
                        "litellm_settings.additional_drop_params"),
        not_named=("litellm_settings.drop_params",)),
    "response_cache": Case(f"""{ONE}\
litellm_settings:
  cache: true
  cache_params:
    type: redis
    host: 127.0.0.1
    port: 6379
    password: os.environ/REDIS_CACHE_PASSWORD
    ttl: 600
{MASTER_KEY}""", named=("litellm_settings.cache", "litellm_settings.cache_params")),
    "cloud_deployments_beside_a_local_one": Case(f"""{ONE}\
  - model_name: gemini-flash
    litellm_params:
      model: vertex_ai/gemini-2.0-flash
      vertex_project: os.environ/VERTEX_PROJECT
      vertex_location: us-central1
  - model_name: nova-pro
    litellm_params:
      model: bedrock/us.amazon.nova-pro-v1:0
      aws_region_name: us-east-1
  - model_name: gpt-4o-azure
    litellm_params:
      model: azure/gpt-4o
      api_base: https://acme-h4.openai.azure.com/
      api_key: os.environ/AZURE_EAST_KEY
      api_version: "2025-01-01-preview"
{MASTER_KEY}""", listed=("gpt-4o", "gemini-flash", "nova-pro", "gpt-4o-azure")),
    "aliases_listed_and_hidden": Case(f"""{ONE}\
router_settings:
  model_group_alias:
    gpt-4-turbo: gpt-4o
    gpt-4: {{model: gpt-4o, hidden: true}}
{MASTER_KEY}""", routes=(("gpt-4-turbo", "from east: gpt-4o"), ("gpt-4", "from east: gpt-4o")),
        listed=("gpt-4o", "gpt-4-turbo")),
    "supports_flags_in_litellm_params": Case(f"""\
# LiteLLM issue #9297: supports_vision written under litellm_params, where it means nothing.
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      supports_vision: true
    model_info:
      supports_function_calling: true
{MASTER_KEY}""", named=("model_list[0].litellm_params.supports_vision",)),
    "deployment_drop_params_and_timeouts": Case(f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      drop_params: true
      additional_drop_params: ["logit_bias"]
      timeout: 300
      stream_timeout: 60
litellm_settings:
  request_timeout: 600
{MASTER_KEY}""", not_named=("drop_params", "timeout"), dropped=("logit_bias",)),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_configs_start_route_and_name_what_is_not_honoured(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    monkeypatch.setenv("VERTEX_PROJECT", "acme-h4-prod")
    monkeypatch.setenv("REDIS_CACHE_PASSWORD", REDIS_PASSWORD)
    case = CASES[name]
    gw = await fleet.serve(case.text)
    warned = fleet.warnings()
    for key in case.named:
        assert key in warned
    for key in case.not_named:
        assert key not in warned
    assert set(case.listed) <= await listed(gw)
    client = fleet.client(gw)
    for model, text in case.routes:
        assert await answer(client, model, logit_bias={"50256": -100}, user="u-1") == text
        sent = fleet.east.requests[-1]
        assert sent.headers["authorization"] == f"Bearer {EAST_KEY}"
        for key in case.dropped:
            assert key not in sent.body
    fleet.assert_no_secret_logged()



# --- 34. a key read from a secret file, with its newline -------------------------------------

async def test_an_upstream_key_ending_in_a_newline_is_sent_without_it(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    # Kubernetes secretKeyRef of a file written with `echo`: the variable ends in "\n". Every
    # request failed with a 500 (no header can carry a line break).
    monkeypatch.setenv("EAST_API_KEY", EAST_KEY + "\n")
    monkeypatch.setenv("EAST_API_BASE", fleet.east.v1 + "\n")
    gw = await fleet.serve(f"model_list:\n{EAST.format(name='gpt-4o', model='gpt-4o')}"
                           f"{MASTER_KEY}")
    assert await answer(fleet.client(gw), "gpt-4o") == "from east: gpt-4o"
    assert fleet.east.requests[-1].headers["authorization"] == f"Bearer {EAST_KEY}"
    # A line break inside a key is no file's trailing newline: start-up names where it is.
    monkeypatch.setenv("EAST_API_KEY", "sk-h4-first\nsk-h4-second")
    with pytest.raises(ConfigError) as caught:
        load_config(fleet.write(f"model_list:\n{EAST.format(name='gpt-4o', model='gpt-4o')}",
                                "broken.yaml"))
    assert "model_list[0].litellm_params.api_key" in str(caught.value)
    assert "sk-h4-first" not in str(caught.value)



# --- 35. a header value read from a file ---------------------------------------------------

async def test_a_header_value_ending_in_a_newline_is_sent_without_it(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TENANT", "tenant-a\n")
    monkeypatch.setenv("REGION", "eu-west-1\n")
    monkeypatch.setenv("ACME_ORG_ID", "org-h4acme\n")
    gw = await fleet.serve(f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      organization: os.environ/ACME_ORG_ID
      extra_headers:
        X-Tenant: os.environ/TENANT
      headers:
        X-Region: os.environ/REGION
{MASTER_KEY}""")
    assert await answer(fleet.client(gw), "gpt-4o") == "from east: gpt-4o"
    sent = fleet.east.requests[-1].headers
    assert (sent["x-tenant"], sent["x-region"]) == ("tenant-a", "eu-west-1")
    assert sent["openai-organization"] == "org-h4acme"
    # A line break inside a value: start-up names the key, not the value.
    monkeypatch.setenv("REGION", "eu-west-1\nX-Injected: yes")
    with pytest.raises(ConfigError, match=r"model_list\[0\]\.litellm_params\.headers") as caught:
        load_config(fleet.tmp_path / "config.yaml")
    assert "Injected" not in str(caught.value)


# --- 36. a whole entry reused with a list-level anchor --------------------------------------

LIST_ANCHOR = f"""\
# One entry written out, the next made from it with a merge key (a second region).
model_list:
  - &gpt4o
    model_name: gpt-4o
    litellm_params: &gpt4o_params
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
    model_info:
      max_input_tokens: os.environ/GPT4O_WINDOW
  - <<: *gpt4o
    model_name: gpt-4o-west
    litellm_params:
      <<: *gpt4o_params
      api_base: os.environ/WEST_API_BASE
      api_key: os.environ/WEST_API_KEY
      extra_headers:
        X-Tenant-Key: os.environ/TENANT_KEY
{MASTER_KEY}"""


async def test_a_list_level_anchor_makes_a_second_region(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPT4O_WINDOW", "64000")
    monkeypatch.setenv("TENANT_KEY", EAST_KEY)
    gw = await fleet.serve(LIST_ANCHOR)
    client = fleet.client(gw)
    assert await answer(client, "gpt-4o") == "from east: gpt-4o"
    assert await answer(client, "gpt-4o-west") == "from west: gpt-4o"
    assert fleet.west.requests[-1].headers["x-tenant-key"] == EAST_KEY
    assert fleet.west.requests[-1].headers["authorization"] == f"Bearer {WEST_KEY}"
    info = await get_json(gw, "/model/info")
    assert EAST_KEY not in str(info) and WEST_KEY not in str(info)
    rows = {row["model_name"]: row["model_info"] for row in info["data"]}
    assert rows["gpt-4o"]["max_input_tokens"] == rows["gpt-4o-west"]["max_input_tokens"] \
        == 64000


# --- 37. a context overflow the server reports, without max_input_tokens -----------------

CTX_BY_ERROR = f"""\
# A local model whose window nobody wrote down: its own overflow error moves the request.
model_list:
{EAST.format(name="local", model="llama-3.1-8b")}{WEST.format(name="big", model="gpt-4.1")}
litellm_settings:
  context_window_fallbacks: [{{"local": ["big"]}}]
router_settings:
  num_retries: 0
recovery:
  compact_on_overflow: false
{MASTER_KEY}"""


async def test_an_overflow_the_server_reports_takes_the_context_window_fallback(
        fleet: Fleet) -> None:
    gw = await fleet.serve(CTX_BY_ERROR)
    fleet.east.script(Canned(400, context_length_error(8192, 9000)))
    assert await answer(fleet.client(gw), "local") == "from west: gpt-4.1"
    assert fleet.east.hits == 1


# --- 38. a Messages stream falls back across providers -----------------------------------

async def test_a_messages_stream_falls_back_to_the_hidden_alias(fleet: Fleet) -> None:
    gw = await fleet.serve(HIDDEN_FALLBACK)
    fleet.claude.script(anthropic_error(529, "Overloaded", "overloaded_error"))
    async with fleet.claude_client(gw).messages.stream(
            model="claude-sonnet-4-5", max_tokens=64,
            messages=[{"role": "user", "content": "hello"}]) as stream:
        text = "".join([piece async for piece in stream.text_stream])
        final = await stream.get_final_message()
    assert text == "from east: gpt-4.1"
    assert final.stop_reason == "end_turn"


# --- 39. the key in LiteLLM's custom header ---------------------------------------------------

async def test_the_master_key_in_litellm_key_header_name(fleet: Fleet) -> None:
    # LiteLLM docs (virtual keys, "custom header"): the client's own Authorization header
    # carries its OpenAI key for another hop; the proxy's key comes in X-Litellm-Key.
    gw = await fleet.serve(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  litellm_key_header_name: X-Litellm-Key
""")
    for value in (f"Bearer {MASTER}", MASTER):
        async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="sk-org-own-openai-key",
                                      max_retries=0,
                                      default_headers={"X-Litellm-Key": value}) as client:
            assert await answer(client, "gpt-4o") == "from east: gpt-4o"
    sent = fleet.east.requests[-1].headers
    assert sent["authorization"] == f"Bearer {EAST_KEY}" and "x-litellm-key" not in sent
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="sk-org-own-openai-key",
                                  max_retries=0,
                                  default_headers={"X-Litellm-Key": "sk-wrong"}) as client:
        with pytest.raises(openai.AuthenticationError):
            await chat(client, "gpt-4o")


# --- 40. the master key set in environment_variables -----------------------------------------

async def test_a_master_key_in_environment_variables_guards_the_gateway(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LITELLM_MASTER_KEY")
    gw = await fleet.serve(f"""\
environment_variables:
  LITELLM_MASTER_KEY: {MASTER}
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}""")
    assert await answer(fleet.client(gw), "gpt-4o") == "from east: gpt-4o"
    with pytest.raises(openai.AuthenticationError):
        await chat(fleet.client(gw, key="sk-anyone"), "gpt-4o")
    fleet.assert_no_secret_logged()


# --- 41. Azure through litellm with bookkeeping keys ------------------------------------------

AZURE_BOOKKEEPING = f"""\
# An Azure deployment as LiteLLM's UI exports it: prices, tags, limits and flags beside the
# connection settings (none of them is an Azure request field).
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: azure/gpt-4o-prod
      api_base: os.environ/AZURE_EAST_BASE
      api_key: os.environ/AZURE_EAST_KEY
      api_version: os.environ/AZURE_API_VERSION
      tags: ["paid", "eu"]
      input_cost_per_token: 0.0000025
      output_cost_per_token: 0.00001
      use_in_pass_through: true
      rpm: 600
      tpm: 100000
      max_retries: 2
      timeout: 120
      stream_timeout: 30
      temperature: 0.1
    model_info:
      base_model: azure/gpt-4o
{MASTER_KEY}"""


async def test_an_azure_deployment_sends_no_bookkeeping_key_upstream(fleet: Fleet) -> None:
    gw = await fleet.serve(AZURE_BOOKKEEPING)
    assert await answer(fleet.client(gw), "gpt-4o") == "from east: gpt-4o-prod"
    sent = fleet.east.requests[-1]
    assert sent.query["api-version"] == "2024-08-01-preview"
    assert sent.headers["api-key"] == AZURE_KEY
    assert sent.body["temperature"] == 0.1  # a request default, sent
    for key in ("tags", "input_cost_per_token", "use_in_pass_through", "rpm", "tpm",
                "max_retries", "timeout", "stream_timeout"):
        assert key not in sent.body
    assert "model_list[0].litellm_params.max_retries" in fleet.warnings()
    fleet.assert_no_secret_logged()


# --- 42. self-hosted vLLM: a provider wildcard and custom_llm_provider ------------------------

VLLM = f"""\
model_list:
  - model_name: "vllm/*"
    litellm_params:
      model: "hosted_vllm/*"
      api_base: os.environ/EAST_API_BASE
  - model_name: qwen
    litellm_params:
      model: Qwen/Qwen2.5-7B-Instruct
      custom_llm_provider: hosted_vllm
      api_base: os.environ/WEST_API_BASE
{MASTER_KEY}"""


async def test_vllm_wildcard_and_custom_provider_keep_the_model_path(fleet: Fleet) -> None:
    gw = await fleet.serve(VLLM)
    client = fleet.client(gw)
    assert await answer(client, "vllm/Qwen/Qwen2.5-7B") == "from east: Qwen/Qwen2.5-7B"
    assert await answer(client, "qwen") == "from west: Qwen/Qwen2.5-7B-Instruct"
    assert "authorization" not in fleet.east.requests[-1].headers  # no key configured


# --- 43. a window nobody wrote down, and a fallback to a wildcard-served name -----------------

UNKNOWN_WINDOW = f"""\
model_list:
  - model_name: local
    litellm_params:
      model: openai/llama-local
      api_base: os.environ/EAST_API_BASE
    model_info:
      max_input_tokens: 4096
{WEST.format(name="big", model="my-custom-long-model")}\
  - model_name: "anthropic/*"
    litellm_params:
      model: "anthropic/*"
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
router_settings:
  context_window_fallbacks: [{{"local": ["big"]}}]
  fallbacks: [{{"big": ["anthropic/claude-3-5-haiku-20241022"]}}]
  num_retries: 0
{MASTER_KEY}"""


async def test_fallbacks_to_an_unknown_window_and_to_a_wildcard_name(fleet: Fleet) -> None:
    gw = await fleet.serve(UNKNOWN_WINDOW)
    client = fleet.client(gw)
    # LiteLLM tries a context-window fallback whatever its window: so does the gateway when
    # the fallback's window is unknown.
    assert await answer(client, "local", "lorem ipsum dolor " * 3000) == \
        "from west: my-custom-long-model"
    assert fleet.east.hits == 0
    fleet.west.mode = "dead"
    assert await answer(client, "big") == "you said: hi"
    assert fleet.claude.requests[-1].body["model"] == "claude-3-5-haiku-20241022"


# --- 44. drop_params on one deployment only --------------------------------------------------

DEPLOYMENT_DROP = f"""\
model_list:
  - model_name: o3-mini
    litellm_params:
      model: openai/o3-mini
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      drop_params: true
{WEST.format(name="gpt-4o", model="gpt-4o")}
{MASTER_KEY}"""


async def test_drop_params_on_one_deployment_applies_to_it_alone(fleet: Fleet) -> None:
    gw = await fleet.serve(DEPLOYMENT_DROP)
    client = fleet.client(gw)
    fleet.east.script(Canned(400, unsupported("top_p")))
    assert await answer(client, "o3-mini", top_p=0.5) == "from east: o3-mini"
    assert [r.body.get("top_p") for r in fleet.east.requests] == [0.5, None]
    fleet.west.script(Canned(400, unsupported("top_p")))
    with pytest.raises(openai.BadRequestError, match="top_p"):
        await chat(client, "gpt-4o", top_p=0.5)


# --- 45. rpm spent: the group's fallback, on plain and streamed requests ---------------------

RPM_SPENT = f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      rpm: 1
{WEST.format(name="gpt-4o-mini", model="gpt-4o-mini")}
router_settings:
  fallbacks: [{{"gpt-4o": ["gpt-4o-mini"]}}]
  max_fallbacks: 1
{MASTER_KEY}"""


async def test_a_spent_rpm_takes_the_fallback_as_litellm_does(fleet: Fleet) -> None:
    gw = await fleet.serve(RPM_SPENT)
    client = fleet.client(gw)
    assert await answer(client, "gpt-4o") == "from east: gpt-4o"
    assert await answer(client, "gpt-4o") == "from west: gpt-4o-mini"
    stream = await client.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "x"}], stream=True)
    assert "".join([c.choices[0].delta.content or "" async for c in stream if c.choices]) == \
        "from west: gpt-4o-mini"
    assert fleet.east.hits == 1


# --- 46. Claude Code's background model aliased to a local one -----------------------------

CLAUDE_CODE = f"""\
# Claude Code through the proxy: its small background model (haiku) is answered by a local
# coder, its main model by Anthropic.
model_list:
{CLAUDE.format(name="claude-sonnet-4-5", model="claude-sonnet-4-5-20250929")}\
{EAST.format(name="local-coder", model="qwen3-coder")}
router_settings:
  model_group_alias:
    claude-3-5-haiku-20241022: {{model: local-coder, hidden: true}}
    claude-haiku-4-5-20251001: local-coder
{MASTER_KEY}"""


async def test_claude_codes_haiku_is_answered_by_the_aliased_local_model(
        fleet: Fleet) -> None:
    gw = await fleet.serve(CLAUDE_CODE)
    models = await listed(gw)
    assert "claude-haiku-4-5-20251001" in models and "claude-3-5-haiku-20241022" not in models
    headers = {"x-api-key": MASTER, "anthropic-version": "2023-06-01",
               "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14"}
    texts = {}
    async with aiohttp.ClientSession() as http:
        for model in ("claude-3-5-haiku-20241022", "claude-haiku-4-5-20251001",
                      "claude-sonnet-4-5"):
            async with http.post(f"{gw.root}/v1/messages?beta=true", headers=headers, json={
                    "model": model, "max_tokens": 50,
                    "messages": [{"role": "user", "content": "hi"}]}) as resp:
                assert resp.status == 200
                texts[model] = (await resp.json())["content"][0]["text"]
    assert texts == {"claude-3-5-haiku-20241022": "from east: qwen3-coder",
                     "claude-haiku-4-5-20251001": "from east: qwen3-coder",
                     "claude-sonnet-4-5": "you said: hi"}
    sent = fleet.claude.requests[-1].headers
    assert sent["anthropic-beta"] == headers["anthropic-beta"]
    assert sent["x-api-key"] == ANTHROPIC_KEY
    assert fleet.east.requests[-1].headers["authorization"] == f"Bearer {EAST_KEY}"


# --- 47. Codex on a chat-only server written as openai/ --------------------------------------

CODEX_LOCAL = f"""\
# LiteLLM issues #13352 / #13130: an openai/ model on a server without /responses. The
# gateway sends /v1/responses natively to openai/ models (as LiteLLM does: a 404 there);
# model_info.responses_api: false has them translated to Chat Completions instead.
model_list:
  - model_name: local-coder
    litellm_params:
      model: openai/qwen3-coder
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
    model_info:
      responses_api: false
router_settings:
  model_group_alias:
    gpt-5-codex: {{model: local-coder, hidden: true}}
{MASTER_KEY}"""


async def test_codex_on_a_chat_only_openai_server_with_responses_api_false(
        fleet: Fleet) -> None:
    gw = await fleet.serve(CODEX_LOCAL)
    client = fleet.client(gw)
    done = await client.responses.create(model="gpt-5-codex", input="hello",
                                         instructions="be brief")
    assert done.output_text == "from east: qwen3-coder"
    sent = fleet.east.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["messages"][0] == {"role": "system", "content": "be brief"}
    stream = await client.responses.create(model="gpt-5-codex", input="hello", stream=True)
    text = "".join([event.delta async for event in stream
                    if event.type == "response.output_text.delta"])
    assert text == "from east: qwen3-coder"


# --- 48. a basic-auth proxy in front of a self-hosted server --------------------------------

BASIC_AUTH_BASE = f"""\
# An nginx with basic auth in front of vLLM and of an Azure-compatible relay: the
# credentials are in the URL. LiteLLM's HTTP client sends them as Basic auth, in place of a
# Bearer key. Every request to such a deployment was a 500 (aiohttp refuses credentials in a
# URL beside an Authorization header).
model_list:
  - model_name: coder
    litellm_params:
      model: openai/qwen3-coder
      api_base: os.environ/CODER_BASE
      api_key: os.environ/EAST_API_KEY
  - model_name: gpt-4o
    litellm_params:
      model: azure/gpt-4o-relay
      api_base: os.environ/RELAY_BASE
      api_key: os.environ/AZURE_EAST_KEY
      api_version: "2024-10-21"
{MASTER_KEY}"""


async def test_credentials_in_an_api_base_are_sent_as_basic_auth(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    password = "h4-basic-pw-31"
    for name, server in (("CODER_BASE", fleet.east.v1), ("RELAY_BASE", fleet.west.base_url)):
        monkeypatch.setenv(name, server.replace("http://", f"http://svc%40acme:{password}@"))
    gw = await fleet.serve(BASIC_AUTH_BASE)
    assert "not sending model_list[0].litellm_params.api_key" in fleet.warnings()
    assert "model_list[1].litellm_params.api_key" not in fleet.warnings()
    client = fleet.client(gw)
    basic = aiohttp.encode_basic_auth("svc@acme", password)
    assert await answer(client, "coder") == "from east: qwen3-coder"
    assert fleet.east.requests[-1].headers["authorization"] == basic
    assert await answer(client, "gpt-4o") == "from west: gpt-4o-relay"
    sent = fleet.west.requests[-1]
    assert (sent.headers["authorization"], sent.headers["api-key"]) == (basic, AZURE_KEY)
    assert sent.path == "/openai/deployments/gpt-4o-relay/chat/completions"
    info = await get_json(gw, "/model/info")
    assert password not in str(info) and basic.split()[1] not in str(info)
    assert password not in "\n".join(r.getMessage() for r in fleet.caplog.records)


# --- 49. a provider's error that echoes the key -----------------------------------------------

ECHOING = f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}\
{CLAUDE.format(name="claude", model="claude-sonnet-4-5")}\
  - model_name: gpt-4o-azure
    litellm_params:
      model: azure/gpt-4o
      api_base: os.environ/AZURE_EAST_BASE
      api_key: os.environ/AZURE_EAST_KEY
      api_version: "2024-10-21"
router_settings:
  num_retries: 0
{MASTER_KEY}"""


async def test_a_provider_error_echoing_the_key_reaches_the_client_masked(
        fleet: Fleet) -> None:
    gw = await fleet.serve(ECHOING)
    fleet.east.script(Canned(401, {"error": {
        "message": f"Incorrect API key provided: {EAST_KEY}. You can find your API key at "
                   "https://platform.openai.com/account/api-keys.",
        "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}))
    with pytest.raises(openai.AuthenticationError) as caught:
        await chat(fleet.client(gw), "gpt-4o")
    assert "Incorrect API key provided: ***" in caught.value.message
    fleet.east.script(Canned(401, {"error": {
        "code": "401", "message": f"Access denied due to invalid subscription key {AZURE_KEY}."}}))
    with pytest.raises(openai.AuthenticationError) as caught:
        await chat(fleet.client(gw), "gpt-4o-azure")
    assert AZURE_KEY not in caught.value.message and AZURE_KEY not in str(caught.value.body)
    fleet.claude.script(anthropic_error(401, f"invalid x-api-key {ANTHROPIC_KEY}",
                                        "authentication_error"))
    with pytest.raises(anthropic.AuthenticationError) as refused:
        await fleet.claude_client(gw).messages.create(
            model="claude", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert ANTHROPIC_KEY not in str(refused.value) and "invalid x-api-key ***" in str(
        refused.value)
    fleet.assert_no_secret_logged()
