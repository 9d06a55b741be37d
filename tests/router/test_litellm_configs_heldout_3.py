"""A third outsider's round of LiteLLM proxy configs: 42 configs as platform teams write
them, each loaded the way ``gateway serve --config`` loads it and served against stand-ins of
OpenAI-compatible servers, Azure OpenAI and Anthropic on 127.0.0.1 with the real ``openai``
SDK (its own retries off).

The first two rounds covered the common shapes; this one looks where a config written for
LiteLLM could behave differently without anyone noticing: a setting written in both
``litellm_settings`` and ``router_settings`` (LiteLLM's Router uses its own; the other is
named), an alias named like a model group (LiteLLM resolves the alias first), booleans
written as words or read from the environment (``drop_params: os.environ/...`` set to
``False``), ``cooldown_time: 0`` and a deployment's own cooldown settings, fallbacks and
retry policies written for a bare or an aliased name, several keys behind one provider
wildcard with their rpm, concurrency caps and guardrails in the other sections (refused, as
their ``general_settings`` / top-level forms are), retry policies per exception,
per-deployment ``num_retries``, Azure with an Entra ID token, and the ignored settings of
logging, caching, budgets and database-backed features, each named at start-up.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import openai
import pytest

from gateway.config import ConfigError, load_config, load_document
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.native_base import Canned
from tests.fakes.openai_fleet import SERVER_ERROR, rate_limit_error
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS
from tests.router.test_litellm_configs_heldout_2 import StandIn

pytestmark = IGNORE_SCHEMA_WARNINGS

MASTER = "sk-h3-master-4e0d2b"
EAST_KEY = "sk-h3-east-5f0a11"
WEST_KEY = "sk-h3-west-91c2aa"
AZURE_KEY = "azure-h3-key-38e1"
AD_TOKEN = "eyJh3.azure-ad-token.c0ffee"
ANTHROPIC_KEY = "sk-ant-h3-77b0c4"
AWS_SECRET = "aws-h3-secret-0b7e9d"
ENTRA_SECRET = "entra-h3-client-secret-5a5a"
VERTEX_CREDENTIALS = '{"type": "service_account", "private_key": "h3-vertex-private-key"}'
CACHE_PASSWORD = "redis-h3-cache-pw-ab12"
LANGFUSE_SECRET = "sk-lf-h3-secret-9d9d"
SECRETS = (MASTER, EAST_KEY, WEST_KEY, AZURE_KEY, AD_TOKEN, ANTHROPIC_KEY, AWS_SECRET,
           ENTRA_SECRET, "h3-vertex-private-key", CACHE_PASSWORD, LANGFUSE_SECRET)


def unsupported(param: str) -> dict[str, Any]:
    """OpenAI's 400 for a parameter a model does not take (o-series, gpt-5)."""
    return {"error": {"message": f"Unsupported parameter: '{param}' is not supported with "
                                 "this model.", "type": "invalid_request_error",
                      "param": param, "code": "unsupported_parameter"}}


@dataclass
class Fleet:
    """Two OpenAI-compatible servers (``east``, ``west``; east also serves Azure's paths) and
    an Anthropic stand-in, with the variables the configs read set to them."""

    east: StandIn
    west: StandIn
    claude: FakeAnthropic
    tmp_path: Path
    factory: GatewayFactory
    caplog: pytest.LogCaptureFixture
    clients: list[openai.AsyncOpenAI] = field(default_factory=list)

    async def serve(self, text: str, name: str = "config.yaml") -> RunningGateway:
        """Start a gateway from the config file as ``gateway serve --config`` reads it."""
        path = self.tmp_path / name
        path.write_text(text)
        with self.caplog.at_level(logging.WARNING, logger="gateway"):
            raw = load_document(path)
            assert isinstance(raw, dict)
            return await self.factory(raw)

    def client(self, gw: RunningGateway, key: str = MASTER) -> openai.AsyncOpenAI:
        """An openai SDK client on ``gw`` (no SDK retries)."""
        made = openai.AsyncOpenAI(base_url=gw.base_url, api_key=key, max_retries=0)
        self.clients.append(made)
        return made

    def warnings(self) -> str:
        """Every warning the gateway logged, secrets checked absent."""
        text = "\n".join(r.getMessage() for r in self.caplog.records
                         if r.levelno >= logging.WARNING)
        for secret in SECRETS:
            assert secret not in text
        return text


@pytest.fixture
async def fleet(gateway_factory: GatewayFactory, monkeypatch: pytest.MonkeyPatch,
                tmp_path: Path, caplog: pytest.LogCaptureFixture) -> AsyncIterator[Fleet]:
    async with StandIn("east") as east, StandIn("west") as west, \
            FakeAnthropic(api_key=ANTHROPIC_KEY) as claude:
        values = {
            "EAST_API_BASE": east.v1, "EAST_API_KEY": EAST_KEY,
            "WEST_API_BASE": west.v1, "WEST_API_KEY": WEST_KEY,
            "AZURE_EAST_BASE": east.base_url, "AZURE_EAST_KEY": AZURE_KEY,
            "AZURE_API_VERSION": "2024-10-21", "AZURE_AD_TOKEN": AD_TOKEN,
            "ANTHROPIC_API_BASE": claude.base_url, "ANTHROPIC_API_KEY": ANTHROPIC_KEY,
            "LITELLM_MASTER_KEY": MASTER, "AWS_SECRET_ACCESS_KEY": AWS_SECRET,
            "AWS_ACCESS_KEY_ID": "AKIAH3EXAMPLE0000001", "AZURE_CLIENT_SECRET": ENTRA_SECRET,
            "VERTEX_CREDENTIALS": VERTEX_CREDENTIALS, "REDIS_CACHE_PASSWORD": CACHE_PASSWORD,
        }
        for name, value in values.items():
            monkeypatch.setenv(name, value)
        for name in ("AZURE_API_KEY", "AZURE_OPENAI_API_KEY", "OPENAI_API_KEY",
                     "DATABASE_URL"):
            monkeypatch.delenv(name, raising=False)
        made = Fleet(east, west, claude, tmp_path, gateway_factory, caplog)
        yield made
        for client in made.clients:
            await client.close()


async def chat(client: openai.AsyncOpenAI, model: str, text: str = "hi", **extra: Any) -> Any:
    """One chat call through the raw response (headers and parsed body)."""
    return await client.chat.completions.with_raw_response.create(
        model=model, messages=[{"role": "user", "content": text}], **extra)


async def listed(gw: RunningGateway) -> set[str]:
    """The model ids ``GET /v1/models`` lists."""
    async with aiohttp.ClientSession() as http, http.get(
            f"{gw.base_url}/models", headers={"Authorization": f"Bearer {MASTER}"}) as resp:
        assert resp.status == 200
        return {m["id"] for m in (await resp.json())["data"]}


EAST = """\
  - model_name: {name}
    litellm_params:
      model: openai/{model}
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
"""
WEST = EAST.replace("EAST_", "WEST_")
MASTER_KEY = "general_settings:\n  master_key: os.environ/LITELLM_MASTER_KEY\n"


# --- 1. an alias named like a group redirects it, as LiteLLM's Router does ------------------

ALIAS_SHADOWS = f"""\
# gpt-4 is being retired: its traffic goes to gpt-4o, the old deployment stays listed for
# the teams that pin it by id.
model_list:
{EAST.format(name="gpt-4", model="gpt-4-0613")}{WEST.format(name="gpt-4o", model="gpt-4o")}
router_settings:
  model_group_alias:
    gpt-4: gpt-4o
{MASTER_KEY}"""


async def test_an_alias_named_like_a_group_redirects_it(fleet: Fleet) -> None:
    gw = await fleet.serve(ALIAS_SHADOWS)
    raw = await chat(fleet.client(gw), "gpt-4")
    assert raw.parse().choices[0].message.content == "from west: gpt-4o"
    assert fleet.east.hits == 0
    # The model list says where the name goes.
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=MASTER, max_retries=0) as api:
        cards = {card.id: card for card in (await api.models.list()).data}
    assert cards["gpt-4"].to_dict()["alias_of"] == "gpt-4o"


# --- 2. hidden written as a word ---------------------------------------------------------

ALIAS_WORDS = f"""\
model_list:
{EAST.format(name="gpt-4o-mini", model="gpt-4o-mini")}
router_settings:
  model_group_alias:
    fast: {{model: gpt-4o-mini, hidden: "false"}}
    internal-fast: {{model: gpt-4o-mini, hidden: "true"}}
{MASTER_KEY}"""


async def test_hidden_written_as_a_word_means_what_it_says(fleet: Fleet) -> None:
    gw = await fleet.serve(ALIAS_WORDS)
    models = await listed(gw)
    assert "fast" in models and "internal-fast" not in models
    for name in ("fast", "internal-fast"):
        raw = await chat(fleet.client(gw), name)
        assert raw.parse().choices[0].message.content == "from east: gpt-4o-mini"


# --- 3. cooldown_time: 0 ---------------------------------------------------------------------

NO_COOLDOWN = f"""\
# Two replicas of a self-hosted model; a failed one is tried again at once (cooldown_time: 0).
model_list:
  - model_name: llama
    litellm_params:
      model: hosted_vllm/meta-llama/Llama-3.1-8B-Instruct
      api_base: os.environ/EAST_API_BASE
      order: 1
  - model_name: llama
    litellm_params:
      model: hosted_vllm/meta-llama/Llama-3.1-8B-Instruct
      api_base: os.environ/WEST_API_BASE
      order: 2
router_settings:
  num_retries: 1
  allowed_fails: 0
  cooldown_time: 0
{MASTER_KEY}"""


async def test_cooldown_time_zero_keeps_a_failed_deployment_in_rotation(fleet: Fleet) -> None:
    gw = await fleet.serve(NO_COOLDOWN)
    fleet.east.mode = "dead"
    client = fleet.client(gw)
    for _ in range(2):
        raw = await chat(client, "llama")
        assert raw.parse().choices[0].message.content.startswith("from west")
    assert fleet.east.hits == 2  # tried first each time: never cooled down
    # The same config with a cooldown takes it out after its first failure.
    gw = await fleet.serve(NO_COOLDOWN.replace("cooldown_time: 0", "cooldown_time: 30"),
                           "cooled.yaml")
    for _ in range(2):
        await chat(fleet.client(gw), "llama")
    assert fleet.east.hits == 3


# --- 4. drop_params from the environment -------------------------------------------------------

DROP_FROM_ENV = f"""\
model_list:
{EAST.format(name="o3-mini", model="o3-mini")}
litellm_settings:
  drop_params: os.environ/LITELLM_DROP_PARAMS
{MASTER_KEY}"""


@pytest.mark.parametrize(("value", "dropped"), [("False", False), ("true", True)])
async def test_drop_params_read_from_the_environment_as_a_word(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch, value: str, dropped: bool) -> None:
    monkeypatch.setenv("LITELLM_DROP_PARAMS", value)
    gw = await fleet.serve(DROP_FROM_ENV)
    fleet.east.script(Canned(400, unsupported("top_p")))
    client = fleet.client(gw)
    if dropped:
        raw = await chat(client, "o3-mini", top_p=0.5)
        assert raw.parse().choices[0].message.content == "from east: o3-mini"
        assert "top_p" not in fleet.east.requests[1].body
    else:
        with pytest.raises(openai.BadRequestError, match="top_p"):
            await chat(client, "o3-mini", top_p=0.5)
        assert fleet.east.hits == 1


# --- 5. the same setting in litellm_settings and router_settings ----------------------------

BOTH_SECTIONS = f"""\
# Written over two years by two teams: litellm_settings from the first proxy, router_settings
# from the load-balancing rollout.
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}{WEST.format(name="gpt-4o-mini", model="gpt-4o-mini")}
litellm_settings:
  num_retries: 5
  request_timeout: 600
  fallbacks: [{{"gpt-4o": ["gpt-4o-mini"]}}]
router_settings:
  num_retries: 0
  timeout: 300
  fallbacks: [{{"gpt-4o-mini": ["gpt-4o"]}}]
{MASTER_KEY}"""


async def test_a_setting_in_both_sections_uses_the_routers_and_names_the_other(
        fleet: Fleet) -> None:
    gw = await fleet.serve(BOTH_SECTIONS)
    warned = fleet.warnings()
    for key in ("litellm_settings.num_retries", "litellm_settings.request_timeout",
                "litellm_settings.fallbacks"):
        assert f"{key} (router_settings." in warned
    client = fleet.client(gw)
    fleet.west.mode = "dead"
    raw = await chat(client, "gpt-4o-mini")  # router_settings' chain
    assert raw.parse().choices[0].message.content == "from east: gpt-4o"
    assert fleet.west.hits == 1  # num_retries: 0 (router_settings), not 5
    fleet.west.mode, fleet.east.mode = "ok", "dead"
    with pytest.raises(openai.InternalServerError):
        await chat(client, "gpt-4o")  # litellm_settings' chain is LiteLLM's unused one
    assert fleet.west.hits == 1


EMPTY_ROUTER_CHAIN = f"""\
# The load-balancing rollout left an empty list in router_settings: LiteLLM's Router keeps
# litellm_settings' chains then.
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}{WEST.format(name="gpt-4o-mini", model="gpt-4o-mini")}
litellm_settings:
  fallbacks: [{{"gpt-4o": ["gpt-4o-mini"]}}]
router_settings:
  fallbacks: []
  num_retries: 0
{MASTER_KEY}"""


async def test_an_empty_router_chain_leaves_litellm_settings_chain_in_force(
        fleet: Fleet) -> None:
    gw = await fleet.serve(EMPTY_ROUTER_CHAIN)
    assert "litellm_settings.fallbacks" not in fleet.warnings()
    fleet.east.mode = "dead"
    raw = await chat(fleet.client(gw), "gpt-4o")
    assert raw.parse().choices[0].message.content == "from west: gpt-4o-mini"


# --- 6. retry_policy per exception --------------------------------------------------------------

RETRY_POLICY = f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}
router_settings:
  num_retries: 4
  retry_policy:
    RateLimitErrorRetries: 2
    InternalServerErrorRetries: 0
    ContentPolicyViolationErrorRetries: 3
    AuthenticationErrorRetries: 0
recovery:
  backoff_base: 0
{MASTER_KEY}"""


async def test_retry_policy_counts_per_exception_type(fleet: Fleet) -> None:
    gw = await fleet.serve(RETRY_POLICY)
    assert "router_settings.retry_policy.ContentPolicyViolationErrorRetries" in \
        fleet.warnings()
    client = fleet.client(gw)
    limited = Canned(429, rate_limit_error("gpt-4o"), {"retry-after": "0"})
    fleet.east.script(limited, limited)
    raw = await chat(client, "gpt-4o")
    assert raw.parse().choices[0].message.content == "from east: gpt-4o"
    assert fleet.east.hits == 3  # two rate-limit retries
    fleet.east.script(Canned(500, SERVER_ERROR))
    with pytest.raises(openai.InternalServerError):
        await chat(client, "gpt-4o")
    assert fleet.east.hits == 4  # a server error is not retried (0), num_retries: 4 or not


# --- 7. num_retries on a deployment beats the router's ---------------------------------------

DEPLOYMENT_RETRIES = f"""\
model_list:
  - model_name: batch
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      num_retries: 0          # batch jobs retry themselves
{WEST.format(name="interactive", model="gpt-4o")}
router_settings:
  num_retries: 2
recovery:
  backoff_base: 0
{MASTER_KEY}"""


async def test_num_retries_on_a_deployment_beats_the_routers(fleet: Fleet) -> None:
    gw = await fleet.serve(DEPLOYMENT_RETRIES)
    fleet.east.mode = fleet.west.mode = "dead"
    client = fleet.client(gw)
    for model in ("batch", "interactive"):
        with pytest.raises(openai.InternalServerError):
            await chat(client, model)
    assert (fleet.east.hits, fleet.west.hits) == (1, 3)
    assert "model_list[0].litellm_params.num_retries" not in fleet.warnings()


# --- 8. context_window_fallbacks and fallbacks in different sections ------------------------

SPLIT_FALLBACKS = f"""\
model_list:
  - model_name: small
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
    model_info:
      max_input_tokens: 500
{WEST.format(name="large", model="gpt-4.1")}
litellm_settings:
  context_window_fallbacks: [{{"small": ["large"]}}]
router_settings:
  fallbacks: [{{"small": ["large"]}}]
  num_retries: 0
{MASTER_KEY}"""


async def test_fallbacks_of_both_sections_apply_when_they_are_different_keys(
        fleet: Fleet) -> None:
    gw = await fleet.serve(SPLIT_FALLBACKS)
    assert "litellm_settings.context_window_fallbacks" not in fleet.warnings()
    client = fleet.client(gw)
    raw = await chat(client, "small", "word " * 2000)
    assert raw.parse().choices[0].message.content == "from west: gpt-4.1"
    assert fleet.east.hits == 0  # seen too long before sending
    fleet.east.mode = "dead"
    raw = await chat(client, "small")
    assert raw.parse().choices[0].message.content == "from west: gpt-4.1"


# --- 9. Azure with an Entra ID token and the version from the environment -------------------

AZURE_AD = f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: azure/gpt-4o-prod
      api_base: os.environ/AZURE_EAST_BASE
      api_version: os.environ/AZURE_API_VERSION
      azure_ad_token: os.environ/AZURE_AD_TOKEN
    model_info:
      base_model: azure/gpt-4o
  - model_name: gpt-4o-keyed
    litellm_params:
      model: azure/gpt-4o-batch
      api_base: os.environ/AZURE_EAST_BASE
      api_version: "2024-08-01-preview"
      api_key: os.environ/AZURE_EAST_KEY
router_settings:
  num_retries: 0
{MASTER_KEY}"""


async def test_azure_takes_its_entra_token_and_version_from_the_environment(
        fleet: Fleet) -> None:
    gw = await fleet.serve(AZURE_AD)
    client = fleet.client(gw)
    await chat(client, "gpt-4o")
    await chat(client, "gpt-4o-keyed")
    token, keyed = fleet.east.requests
    assert token.path == "/openai/deployments/gpt-4o-prod/chat/completions"
    assert token.query["api-version"] == "2024-10-21"
    assert token.headers["authorization"] == f"Bearer {AD_TOKEN}"
    assert keyed.query["api-version"] == "2024-08-01-preview"
    assert keyed.headers["api-key"] == AZURE_KEY
    for call in (token, keyed):
        assert MASTER not in str(call.headers)
    fleet.warnings()


# --- 10. everything from an environment_variables block -----------------------------------

ENV_BLOCK = f"""\
environment_variables:
  TEAM_BASE: "{{base}}"
  TEAM_KEY: {WEST_KEY}
  LITELLM_MASTER_KEY: {MASTER}
  LITELLM_LOG: INFO
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/TEAM_BASE
      api_key: os.environ/TEAM_KEY
"""


async def test_an_environment_block_supplies_endpoint_keys_and_master_key(
        fleet: Fleet, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LITELLM_MASTER_KEY")
    gw = await fleet.serve(ENV_BLOCK.format(base=fleet.west.v1))
    raw = await chat(fleet.client(gw), "gpt-4o")
    assert raw.parse().choices[0].message.content == "from west: gpt-4o"
    assert fleet.west.requests[0].headers["authorization"] == f"Bearer {WEST_KEY}"
    with pytest.raises(openai.AuthenticationError):
        await chat(fleet.client(gw, key="sk-not-the-master"), "gpt-4o")
    fleet.warnings()


# --- 11. include + anchors on whole entries ------------------------------------------------

MODELS_FILE = """\
model_list:
  - &east_4o
    model_name: gpt-4o
    litellm_params: &east_params
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      rpm: 1
  - <<: *east_4o
    litellm_params:
      <<: *east_params
      api_base: os.environ/WEST_API_BASE
      api_key: os.environ/WEST_API_KEY
"""
ROOT_FILE = f"""\
include:
  - models/openai.yaml
router_settings:
  routing_strategy: usage-based-routing-v2
{MASTER_KEY}"""


async def test_included_entries_built_with_anchors_each_keep_their_own_key(
        fleet: Fleet) -> None:
    (fleet.tmp_path / "models").mkdir()
    (fleet.tmp_path / "models" / "openai.yaml").write_text(MODELS_FILE)
    gw = await fleet.serve(ROOT_FILE)
    client = fleet.client(gw)
    for _ in range(2):
        await chat(client, "gpt-4o")
    assert (fleet.east.hits, fleet.west.hits) == (1, 1)  # rpm: 1 each, merged in both
    assert fleet.east.requests[0].headers["authorization"] == f"Bearer {EAST_KEY}"
    assert fleet.west.requests[0].headers["authorization"] == f"Bearer {WEST_KEY}"
    with pytest.raises(openai.RateLimitError) as caught:
        await chat(client, "gpt-4o")
    assert caught.value.response.headers.get("retry-after")


# --- 12. callbacks, caching and database features: named, the gateway serves ------------------

OBSERVED = f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}
litellm_settings:
  success_callback: ["langfuse"]
  failure_callback: ["sentry"]
  callbacks: ["otel", "prometheus"]
  service_callbacks: ["datadog"]
  turn_off_message_logging: true
  cache: true
  cache_params:
    type: redis
    host: redis.internal
    password: os.environ/REDIS_CACHE_PASSWORD
    ttl: 600
  max_budget: 500
  budget_duration: 30d
environment_variables:
  LANGFUSE_PUBLIC_KEY: pk-lf-h3
  LANGFUSE_SECRET_KEY: {LANGFUSE_SECRET}
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  database_url: postgresql://llm:pw@db.internal/litellm
  store_model_in_db: true
  alerting: ["slack"]
  proxy_batch_write_at: 60
router_settings:
  provider_budget_config:
    openai: {{budget_limit: 100, time_period: 1d}}
"""


async def test_logging_caching_and_budgets_are_named_and_every_turn_reaches_the_model(
        fleet: Fleet) -> None:
    gw = await fleet.serve(OBSERVED)
    warned = fleet.warnings()
    for key in ("litellm_settings.success_callback", "litellm_settings.failure_callback",
                "litellm_settings.callbacks", "litellm_settings.service_callbacks",
                "litellm_settings.cache", "litellm_settings.cache_params",
                "litellm_settings.max_budget", "litellm_settings.budget_duration",
                "general_settings.database_url", "general_settings.store_model_in_db",
                "general_settings.alerting", "router_settings.provider_budget_config"):
        assert key in warned
    client = fleet.client(gw)
    for _ in range(2):  # the same request twice: no cache answers it
        await chat(client, "gpt-4o", "same question")
    assert fleet.east.hits == 2


# --- 13. request_timeout named when router_settings.timeout is set: the router's bounds -----

TIMEOUTS = f"""\
model_list:
{EAST.format(name="slow", model="gpt-4o")}
litellm_settings:
  request_timeout: 600
router_settings:
  timeout: 1
  num_retries: 0
{MASTER_KEY}"""


async def test_the_routers_timeout_bounds_a_hanging_deployment_not_request_timeout(
        fleet: Fleet) -> None:
    gw = await fleet.serve(TIMEOUTS)
    fleet.east.mode = "hang"
    with pytest.raises(openai.APIStatusError) as caught:
        await chat(fleet.client(gw), "slow")
    assert caught.value.status_code == 504
    assert "litellm_settings.request_timeout (router_settings.timeout" in fleet.warnings()


# --- 14. tags without tag filtering ------------------------------------------------------

TAGGED = f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      tags: ["eu", "prod"]
router_settings:
  enable_tag_filtering: false
{MASTER_KEY}"""


async def test_tags_without_tag_filtering_are_bookkeeping_and_never_sent(fleet: Fleet) -> None:
    gw = await fleet.serve(TAGGED)
    await chat(fleet.client(gw), "gpt-4o", extra_body={"tags": ["team-a"],
                                                     "metadata": {"tags": ["team-a"]}})
    body = fleet.east.requests[0].body
    assert "tags" not in body
    assert "tags" in fleet.warnings()  # the deployment's tags key is named


# --- 15. a deployment's own cooldown settings ---------------------------------------------

OWN_COOLDOWN = f"""\
# The on-prem replica is flaky but cheap: keep it in rotation (its own cooldown settings);
# the cloud one behind it follows the router's.
model_list:
  - model_name: llama
    litellm_params:
      model: hosted_vllm/meta-llama/Llama-3.1-70B-Instruct
      api_base: os.environ/EAST_API_BASE
      order: 1{{own}}
  - model_name: llama
    litellm_params:
      model: hosted_vllm/meta-llama/Llama-3.1-70B-Instruct
      api_base: os.environ/WEST_API_BASE
      order: 2
router_settings:
  num_retries: 1
  allowed_fails: 0
  cooldown_time: 60
{MASTER_KEY}"""


@pytest.mark.parametrize(("own", "east_hits"), [
    ("", 1),  # the router's: cooled down after its first failure
    ("\n      cooldown_time: 0", 4),
    ("\n    model_info:\n      cooldown_time: 0", 4),
    ("\n    model_info:\n      allowed_fails: 2", 3),
    ("\n    model_info:\n      allowed_fails_policy: {InternalServerErrorAllowedFails: 1}", 2),
], ids=["router", "params-cooldown-0", "info-cooldown-0", "info-allowed-fails",
        "info-allowed-fails-policy"])
async def test_a_deployments_own_cooldown_settings_replace_the_routers(
        fleet: Fleet, own: str, east_hits: int) -> None:
    gw = await fleet.serve(OWN_COOLDOWN.format(own=own))
    fleet.east.mode = "dead"
    client = fleet.client(gw)
    for _ in range(4):
        raw = await chat(client, "llama")
        assert raw.parse().choices[0].message.content.startswith("from west")
    assert fleet.east.hits == east_hits
    assert "cooldown_time" not in fleet.warnings()
    assert "cooldown_time" not in str(fleet.east.requests[0].body)


# --- 16. fallbacks written for the bare name of a wildcard-served model -------------------

WILDCARD_FALLBACKS = f"""\
# Any OpenAI model by its provider-prefixed name; when OpenAI fails, gpt-4o's traffic goes
# to the self-hosted backup (LiteLLM looks the chain up without the provider prefix).
model_list:
  - model_name: "openai/*"
    litellm_params:
      model: "openai/*"
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
{WEST.format(name="backup", model="llama-3.1-70b")}
router_settings:
  num_retries: 0
  fallbacks:
    - gpt-4o: ["backup"]
{MASTER_KEY}"""


async def test_a_fallback_written_for_the_bare_name_serves_the_prefixed_one(
        fleet: Fleet) -> None:
    gw = await fleet.serve(WILDCARD_FALLBACKS)
    fleet.east.mode = "dead"
    client = fleet.client(gw)
    raw = await chat(client, "openai/gpt-4o")
    assert raw.parse().choices[0].message.content == "from west: llama-3.1-70b"
    assert raw.headers["x-gateway-model-used"] == "backup"
    assert fleet.east.requests[0].body["model"] == "gpt-4o"
    with pytest.raises(openai.InternalServerError):  # no chain for another model
        await chat(client, "openai/gpt-4.1")


def test_a_bare_fallback_source_no_provider_has_still_stops_start_up(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Any provider wildcard could serve any name: a bare source is taken as the prefixed
    one only when that provider has such a model, so a typo still stops start-up."""
    for name in ("EAST_API_BASE", "EAST_API_KEY", "WEST_API_BASE", "WEST_API_KEY",
                 "LITELLM_MASTER_KEY"):
        monkeypatch.setenv(name, "http://127.0.0.1:9/v1")
    path = tmp_path / "config.yaml"
    path.write_text(WILDCARD_FALLBACKS.replace("- gpt-4o:", "- gpt4o:"))
    with pytest.raises(ConfigError, match="the fallbacks of 'gpt4o' would never be used"):
        load_config(path)


# --- 17. two keys behind one provider wildcard, each with its rpm --------------------------

WILDCARD_KEYS = f"""\
# Two OpenAI projects (two keys, two quotas) serve every OpenAI model clients name.
model_list:
  - model_name: "openai/*"
    litellm_params:
      model: "openai/*"
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      rpm: 1
  - model_name: "openai/*"
    litellm_params:
      model: "openai/*"
      api_base: os.environ/WEST_API_BASE
      api_key: os.environ/WEST_API_KEY
      rpm: 1
router_settings:
  routing_strategy: usage-based-routing-v2
  num_retries: 0
{MASTER_KEY}"""


async def test_wildcard_deployments_share_the_traffic_and_keep_their_rpm(
        fleet: Fleet) -> None:
    gw = await fleet.serve(WILDCARD_KEYS)
    client = fleet.client(gw)
    await chat(client, "openai/gpt-4o-mini")
    await chat(client, "openai/gpt-4.1")
    assert (fleet.east.hits, fleet.west.hits) == (1, 1)
    assert {fleet.east.requests[0].headers["authorization"],
            fleet.west.requests[0].headers["authorization"]} == {
        f"Bearer {EAST_KEY}", f"Bearer {WEST_KEY}"}
    for model in ("openai/gpt-4o-mini", "openai/o3-mini"):  # each deployment's minute is full
        with pytest.raises(openai.RateLimitError) as caught:
            await chat(client, model)
        assert caught.value.response.headers.get("retry-after")
    assert fleet.east.hits + fleet.west.hits == 2
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=MASTER, max_retries=0) as api:
        ids = [card.id for card in (await api.models.list()).data]
    assert ids.count("openai/*") == 1  # one pattern, two deployments of it


# --- 18. a retry policy written for an alias -----------------------------------------------

ALIAS_RETRY_POLICY = f"""\
model_list:
{EAST.format(name="gpt-4o-mini-2024-07-18", model="gpt-4o-mini")}
router_settings:
  num_retries: 3
  model_group_alias:
    fast: gpt-4o-mini-2024-07-18
  model_group_retry_policy:
    fast:
      InternalServerErrorRetries: 0
recovery:
  backoff_base: 0
{MASTER_KEY}"""


async def test_a_retry_policy_written_for_an_alias_applies_to_its_requests(
        fleet: Fleet) -> None:
    gw = await fleet.serve(ALIAS_RETRY_POLICY)
    fleet.east.mode = "dead"
    with pytest.raises(openai.InternalServerError):
        await chat(fleet.client(gw), "fast")
    assert fleet.east.hits == 1  # not retried: num_retries 3 is not this group's


# --- 19-33. configs that start and route as written ----------------------------------------


@dataclass(frozen=True)
class Case:
    """A config, the warnings it must give (key paths) and requests with where they land."""

    text: str
    named: tuple[str, ...] = ()
    # (model asked for, stand-in that answers, upstream model it is sent)
    routes: tuple[tuple[str, str, str], ...] = ()
    listed: tuple[str, ...] = ()
    # Headers (and body fields) the upstream must get from the deployment.
    sent: tuple[tuple[str, Any], ...] = ()


CASES = {
    "provider_wildcards_and_a_pinned_group": Case(f"""\
model_list:
  - model_name: "openai/*"
    litellm_params:
      model: "openai/*"
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
{WEST.format(name="gpt-4o", model="gpt-4o-2024-11-20")}
router_settings:
  model_group_alias: {{"latest": "openai/gpt-4.1"}}
{MASTER_KEY}""", routes=(("openai/gpt-4.1-mini", "east", "gpt-4.1-mini"),
                         ("gpt-4o", "west", "gpt-4o-2024-11-20"),
                         ("latest", "east", "gpt-4.1"))),
    "least_busy_two_servers": Case(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}{WEST.format(name="gpt-4o", model="gpt-4o")}
router_settings:
  routing_strategy: least-busy
{MASTER_KEY}""", routes=(("gpt-4o", "*", "gpt-4o"),)),
    "latency_routing_with_strategy_args": Case(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}{WEST.format(name="gpt-4o", model="gpt-4o")}
router_settings:
  routing_strategy: latency-based-routing
  routing_strategy_args: {{ttl: 3600, lowest_latency_buffer: 0.5}}
  enable_pre_call_checks: true
{MASTER_KEY}""", named=("router_settings.routing_strategy_args",
                        "router_settings.enable_pre_call_checks"),
        routes=(("gpt-4o", "*", "gpt-4o"),)),
    "model_info_and_an_embedding_entry": Case(f"""\
model_list:
  - model_name: chat
    litellm_params:
      model: openai/my-finetune
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
    model_info:
      id: chat-east
      mode: chat
      base_model: gpt-4o-mini
      max_input_tokens: 128000
  - model_name: embed
    litellm_params:
      model: openai/text-embedding-3-small
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
    model_info:
      mode: embedding
{MASTER_KEY}""", named=("model_list[1].model_info.mode=embedding",),
        routes=(("chat", "east", "my-finetune"),), listed=("chat", "embed")),
    "cloud_providers_start_without_calls": Case(f"""\
model_list:
  - model_name: claude-bedrock
    litellm_params:
      model: bedrock/anthropic.claude-3-5-sonnet-20241022-v2:0
      aws_region_name: eu-central-1
      aws_access_key_id: os.environ/AWS_ACCESS_KEY_ID
      aws_secret_access_key: os.environ/AWS_SECRET_ACCESS_KEY
  - model_name: gemini-pro
    litellm_params:
      model: vertex_ai/gemini-1.5-pro
      vertex_project: acme-llm-prod
      vertex_location: europe-west4
      vertex_credentials: os.environ/VERTEX_CREDENTIALS
  - model_name: gpt-4o-entra
    litellm_params:
      model: azure/gpt-4o
      api_base: https://acme-east.openai.azure.com/
      api_version: "2024-10-21"
      tenant_id: 00000000-0000-0000-0000-000000000001
      client_id: 00000000-0000-0000-0000-000000000002
      client_secret: os.environ/AZURE_CLIENT_SECRET
{MASTER_KEY}""", listed=("claude-bedrock", "gemini-pro", "gpt-4o-entra")),
    "alias_to_a_wildcard_served_claude": Case(f"""\
model_list:
  - model_name: "anthropic/*"
    litellm_params:
      model: "anthropic/*"
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
router_settings:
  model_group_alias:
    claude-latest: anthropic/claude-sonnet-4-5
  num_retries: 0
{MASTER_KEY}""", routes=(("claude-latest", "claude", "claude-sonnet-4-5"),)),
    "booleans_and_numbers_as_strings": Case(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}
router_settings:
  disable_cooldowns: "True"
  num_retries: "2"
  allowed_fails: "3"
  allowed_fails_policy:
    InternalServerErrorAllowedFails: 5
    BadRequestErrorAllowedFails: 1000
litellm_settings:
  drop_params: "yes"
  json_logs: "false"
{MASTER_KEY}""", routes=(("gpt-4o", "east", "gpt-4o"),)),
    "database_backed_features_named": Case(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  database_connection_pool_limit: 10
  disable_spend_logs: true
  background_health_checks: true
  health_check_interval: 300
  completion_model: gpt-4o
  forward_client_headers_to_llm_api: true
litellm_settings:
  set_verbose: false
  max_parallel_requests: 100   # shown in some guides; LiteLLM reads no such setting
  modify_params: true
  redact_user_api_key_info: true
  key_generation_settings: {{team_key_generation: {{allowed_team_member_roles: [admin]}}}}
""", named=("general_settings.database_connection_pool_limit",
            "general_settings.background_health_checks", "general_settings.completion_model",
            "general_settings.forward_client_headers_to_llm_api",
            "litellm_settings.modify_params", "litellm_settings.key_generation_settings",
            "litellm_settings.max_parallel_requests"),
        routes=(("gpt-4o", "east", "gpt-4o"),)),
    "default_fallbacks_with_max_fallbacks": Case(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}{WEST.format(name="backup", model="gpt-4o-mini")}
litellm_settings:
  default_fallbacks: ["backup"]
  max_fallbacks: 2
router_settings:
  context_window_fallbacks: [{{"gpt-4o": ["backup"]}}]
{MASTER_KEY}""", named=("litellm_settings.max_fallbacks",),
        routes=(("gpt-4o", "east", "gpt-4o"), ("backup", "west", "gpt-4o-mini"))),
    "self_hosted_with_headers_and_defaults": Case(f"""\
model_list:
  - model_name: qwen-coder
    litellm_params:
      model: hosted_vllm/Qwen/Qwen2.5-Coder-32B-Instruct
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      extra_headers: {{X-Team: platform}}
      temperature: 0.1
      max_tokens: 2048
      timeout: 300
      stream_timeout: 60
    model_info:
      max_input_tokens: 32768
{MASTER_KEY}""", routes=(("qwen-coder", "east", "Qwen/Qwen2.5-Coder-32B-Instruct"),),
        sent=(("x-team", "platform"), ("temperature", 0.1), ("max_tokens", 2048))),
    "rpm_tpm_on_entries_and_params": Case(f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      rpm: 600
      tpm: 200000
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/WEST_API_BASE
      api_key: os.environ/WEST_API_KEY
    rpm: 300
    tpm: 100000
router_settings:
  routing_strategy: usage-based-routing-v2
  enable_tag_filtering: "False"
{MASTER_KEY}""", routes=(("gpt-4o", "*", "gpt-4o"),)),
    "deployment_bookkeeping_named": Case(f"""\
model_list:
  - model_name: gpt-4o
    litellm_params:
      model: openai/gpt-4o
      api_base: os.environ/EAST_API_BASE
      api_key: os.environ/EAST_API_KEY
      max_budget: 50
      budget_duration: 1d
      max_retries: 2
      input_cost_per_token: 0.0000025
  - model_name: gpt-4o-azure
    litellm_params:
      model: azure/gpt-4o
      api_base: os.environ/AZURE_EAST_BASE
      api_key: os.environ/AZURE_EAST_KEY
      api_version: "2024-10-21"
      max_budget: 100
      budget_duration: 30d
{MASTER_KEY}""", named=("model_list[0].litellm_params.max_budget",
                        "model_list[0].litellm_params.budget_duration",
                        "model_list[0].litellm_params.max_retries",
                        "model_list[1].litellm_params.max_budget",
                        "model_list[1].litellm_params.budget_duration"),
        routes=(("gpt-4o", "east", "gpt-4o"),)),
    "mcp_and_pass_through_named": Case(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}
mcp_servers:
  github: {{url: "https://api.githubcopilot.com/mcp", transport: http}}
general_settings:
  master_key: os.environ/LITELLM_MASTER_KEY
  pass_through_endpoints:
    - path: /v1/rerank
      target: https://api.cohere.com/v1/rerank
litellm_settings:
  mcp_aliases: {{gh: github}}
""", named=("mcp_servers", "general_settings.pass_through_endpoints",
            "litellm_settings.mcp_aliases"), routes=(("gpt-4o", "east", "gpt-4o"),)),
    "guardrails_empty_and_tag_routing_off": Case(f"""\
model_list:
{EAST.format(name="gpt-4o", model="gpt-4o")}
guardrails: []
litellm_settings:
  callbacks: ["otel"]
  guardrails: []
router_settings:
  enable_tag_filtering: false
  tag_filtering_match_any: true
{MASTER_KEY}""", named=("litellm_settings.callbacks",),
        routes=(("gpt-4o", "east", "gpt-4o"),)),
    "anthropic_with_beta_header": Case(f"""\
model_list:
  - model_name: claude-sonnet
    litellm_params:
      model: anthropic/claude-sonnet-4-5-20250929
      api_base: os.environ/ANTHROPIC_API_BASE
      api_key: os.environ/ANTHROPIC_API_KEY
      extra_headers: {{anthropic-beta: "context-1m-2025-08-07"}}
      max_tokens: 1024
    model_info:
      max_input_tokens: 1000000
router_settings:
  num_retries: 0
{MASTER_KEY}""", routes=(("claude-sonnet", "claude", "claude-sonnet-4-5-20250929"),),
        sent=(("anthropic-beta", "context-1m-2025-08-07"), ("max_tokens", 1024))),
}


@pytest.mark.parametrize("name", sorted(CASES))
async def test_the_config_starts_names_what_it_ignores_and_routes(fleet: Fleet,
                                                                   name: str) -> None:
    case = CASES[name]
    gw = await fleet.serve(case.text)
    warned = fleet.warnings()
    for key in case.named:
        assert key in warned
    models = await listed(gw)
    assert set(case.listed) <= models
    client = fleet.client(gw)
    servers = {"east": fleet.east, "west": fleet.west}
    for model, where, upstream in case.routes:
        raw = await chat(client, model)
        text = raw.parse().choices[0].message.content
        if where == "claude":
            sent = fleet.claude.requests[-1]
            assert sent.body["model"] == upstream
            assert sent.headers["x-api-key"] == ANTHROPIC_KEY
        else:
            who = where if where != "*" else text.split(":")[0].removeprefix("from ")
            assert text == f"from {who}: {upstream}"
            sent = servers[who].requests[-1]
            assert sent.headers["authorization"] == \
                f"Bearer {EAST_KEY if who == 'east' else WEST_KEY}"
        assert MASTER not in str(sent.headers)
        for key, value in case.sent:
            assert sent.headers.get(key, sent.body.get(key)) == value


# --- what refuses to start, naming the key --------------------------------------------

REFUSED = {
    "router_settings.default_max_parallel_requests: must be >= 1": (
        "router_settings:\n  default_max_parallel_requests: -20\n"),
    "litellm_settings.guardrails": (
        "litellm_settings:\n  guardrails:\n    - prompt_injection:\n"
        "        callbacks: [lakera_prompt_injection]\n        default_on: true\n"),
    "litellm_settings.callbacks: presidio": (
        "litellm_settings:\n  callbacks: [\"otel\", \"presidio\"]\n"),
    "litellm_settings.callbacks: banned_keywords": (
        "litellm_settings:\n  callbacks: [banned_keywords]\n  banned_keywords_list: [secret]\n"),
    "litellm_settings.drop_params: must be true or false": (
        "litellm_settings:\n  drop_params: sometimes\n"),
}


@pytest.mark.parametrize("key", sorted(REFUSED))
def test_a_setting_it_cannot_honour_refuses_start_up_naming_it(
        key: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAST_API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("EAST_API_KEY", EAST_KEY)
    monkeypatch.setenv("LITELLM_MASTER_KEY", MASTER)
    path = tmp_path / "config.yaml"
    path.write_text(f"model_list:\n{EAST.format(name='gpt-4o', model='gpt-4o')}"
                    f"{REFUSED[key]}{MASTER_KEY}")
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert key in str(caught.value)
    assert EAST_KEY not in str(caught.value) and MASTER not in str(caught.value)


ENTRY_REFUSED = {
    "model_list[0].model_info.allowed_fails: must be an integer": "allowed_fails: lots",
    "model_list[0].litellm_params.cooldown_time: must be >= 0": None,
    "model_list[0].model_info.allowed_fails_policy: must be a mapping": (
        "allowed_fails_policy: [RateLimitErrorAllowedFails]"),
}


@pytest.mark.parametrize("message", sorted(ENTRY_REFUSED))
def test_a_deployments_cooldown_setting_that_is_no_count_refuses_start_up(
        message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EAST_API_BASE", "http://127.0.0.1:9/v1")
    monkeypatch.setenv("WEST_API_BASE", "http://127.0.0.1:9/v1")
    info = ENTRY_REFUSED[message]
    own = f"\n    model_info:\n      {info}" if info else "\n      cooldown_time: -5"
    path = tmp_path / "config.yaml"
    path.write_text(OWN_COOLDOWN.format(own=own).replace(MASTER_KEY, ""))
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(path)
