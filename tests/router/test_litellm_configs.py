"""Configs shaped like LiteLLM's own (its reference proxy config, its documented examples):
they start, name what the gateway ignores, and what they set per deployment is honoured."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml

from gateway.config import ConfigError, load_config, parse_config
from tests.conftest import GatewayFactory, gateway_state
from tests.fakes.openai_fleet import FleetUpstream
from tests.providers.e2e_litellm import IGNORE_SCHEMA_WARNINGS

pytestmark = IGNORE_SCHEMA_WARNINGS

# The shape of LiteLLM's reference proxy_server_config.yaml: deployments of several
# providers (some through litellm), wildcards, an embedding and an image model, its
# litellm_settings (retries, context-window fallbacks, team settings), its fine-tuning and
# files sections, Redis from the environment, a model group alias and a master key.
REFERENCE = """
model_list:
  - model_name: gpt-3.5-turbo
    litellm_params:
      model: azure/chatgpt-v-2
      api_base: https://example-resource.openai.azure.com/
      api_version: "2023-05-15"
      api_key: os.environ/AZURE_API_KEY
    model_info:
      id: "1"
  - model_name: gpt-3.5-turbo-large
    litellm_params:
      model: "gpt-3.5-turbo-1106"
      api_key: os.environ/OPENAI_API_KEY
      rpm: 480
      timeout: 300
      stream_timeout: 60
  - model_name: fake-openai-endpoint
    litellm_params:
      model: openai/fake
      api_key: fake-key
      api_base: https://fake-endpoint.example/
      rpm: 1000
  - model_name: text-embedding-ada-002
    litellm_params:
      model: azure/azure-embedding-model
      api_key: os.environ/AZURE_API_KEY
      api_base: https://example-resource.openai.azure.com/
      api_version: "2023-05-15"
    model_info:
      mode: embedding
      base_model: text-embedding-ada-002
  - model_name: dall-e-3
    litellm_params:
      model: dall-e-3
  - model_name: "*"
    litellm_params:
      model: openai/*
      api_key: os.environ/OPENAI_API_KEY
  - model_name: "groq/*"
    litellm_params:
      model: "groq/*"
      api_key: os.environ/GROQ_API_KEY
litellm_settings:
  drop_params: True
  num_retries: 5
  request_timeout: 600
  telemetry: False
  context_window_fallbacks: [{"gpt-3.5-turbo": ["gpt-3.5-turbo-large"]}]
  default_team_settings:
    - team_id: team-1
      success_callback: ["langfuse"]
      langfuse_secret: os.environ/LANGFUSE_SECRET_THAT_IS_NOT_SET
finetune_settings:
  - custom_llm_provider: azure
    api_base: os.environ/AZURE_API_BASE
    api_key: os.environ/AZURE_API_KEY
    api_version: "2023-03-15-preview"
files_settings:
  - custom_llm_provider: openai
    api_key: os.environ/OPENAI_API_KEY
router_settings:
  routing_strategy: usage-based-routing-v2
  redis_host: os.environ/REDIS_HOST
  redis_password: os.environ/REDIS_PASSWORD
  redis_port: os.environ/REDIS_PORT
  enable_pre_call_checks: true
  model_group_alias: {"my-alias": "fake-openai-endpoint"}
general_settings:
  master_key: sk-1234
  store_model_in_db: True
  proxy_batch_write_at: 1
environment_variables:
  REDIS_HOST: 127.0.0.1
  REDIS_PORT: 6379
  REDIS_PASSWORD: "redis-pass-5e1f"
"""


@pytest.fixture
def litellm_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The variables the reference config reads (Redis comes from its own section)."""
    for name in ("AZURE_API_KEY", "AZURE_API_BASE", "OPENAI_API_KEY", "GROQ_API_KEY"):
        monkeypatch.setenv(name, f"{name.lower()}-value")
    for name in ("REDIS_HOST", "REDIS_PORT", "REDIS_PASSWORD", "LITELLM_MASTER_KEY"):
        monkeypatch.delenv(name, raising=False)


async def test_the_reference_proxy_config_starts_and_names_what_it_ignores(
        litellm_env: None, tmp_path: Path, gateway_factory: GatewayFactory,
        caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "proxy_server_config.yaml"
    path.write_text(REFERENCE)
    with caplog.at_level(logging.WARNING, logger="gateway.config"):
        config = load_config(path)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    for named in ("finetune_settings", "files_settings", "general_settings.store_model_in_db",
                  "litellm_settings.default_team_settings",
                  "router_settings.enable_pre_call_checks"):
        assert named in warning
    # An int in environment_variables is taken as LiteLLM takes it (a string), and the
    # os.environ/ references of the Redis settings see it.
    assert config.environment_variables["REDIS_PORT"] == "6379"
    assert config.router.redis_url == "redis://:redis-pass-5e1f@127.0.0.1:6379/0"
    assert config.router.context_window_fallbacks == (("gpt-3.5-turbo",
                                                       ("gpt-3.5-turbo-large",)),)
    gw = await gateway_factory(yaml.safe_load(REFERENCE))  # and it serves
    client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="sk-1234", max_retries=0)
    try:
        listed = {m.id for m in (await client.models.list()).data}
    finally:
        await client.close()
    assert {"gpt-3.5-turbo", "gpt-3.5-turbo-large", "fake-openai-endpoint"} <= listed


def test_environment_variables_take_any_scalar(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GW_TEST_PORT", raising=False)
    config = parse_config({
        "environment_variables": {"GW_TEST_PORT": 6329, "GW_TEST_FLAG": True,
                                  "GW_TEST_RATIO": 0.5, "GW_TEST_EMPTY": None},
        "router_settings": {"redis_host": "127.0.0.1", "redis_port": "os.environ/GW_TEST_PORT"},
    })
    assert config.environment_variables == {"GW_TEST_PORT": "6329", "GW_TEST_FLAG": "True",
                                            "GW_TEST_RATIO": "0.5"}
    assert config.router.redis_url == "redis://127.0.0.1:6329/0"
    with pytest.raises(ConfigError, match=r"environment_variables\.GW_TEST_NESTED"):
        parse_config({"environment_variables": {"GW_TEST_NESTED": {"a": 1}}})


def _entry(name: str, base: str, dep_id: str, **params: Any) -> dict[str, Any]:
    return {"model_name": name, "model_info": {"id": dep_id},
            "litellm_params": {"model": f"openai/{name}", "api_base": base,
                               "api_key": "k-upstream-1", **params}}


@pytest.mark.parametrize("section", ["litellm_settings", "router_settings"])
def test_a_fallback_may_name_a_deployment_id_and_errors_name_the_right_section(
        section: str) -> None:
    model_list = [_entry("primary", "http://127.0.0.1:9/v1", "primary-1"),
                  _entry("backup", "http://127.0.0.1:9/v1", "backup-eu")]
    config = parse_config({"model_list": model_list,
                           section: {"fallbacks": [{"primary": ["backup-eu"]}]}})
    assert config.router.fallbacks == (("primary", ("backup-eu",)),)
    with pytest.raises(ConfigError) as info:
        parse_config({"model_list": model_list,
                      section: {"fallbacks": [{"primary": ["backup-typo"]}]}})
    assert str(info.value).startswith(f"{section}.fallbacks.primary: ")
    assert "'backup-typo'" in str(info.value)


async def test_a_fallback_to_a_deployment_id_is_served_by_that_deployment(
        gateway_factory: GatewayFactory) -> None:
    async with (FleetUpstream("primary", mode="dead") as primary,
                FleetUpstream("eu") as eu, FleetUpstream("us") as us):
        gw = await gateway_factory({
            "model_list": [_entry("primary", primary.v1, "primary-1"),
                           _entry("backup", eu.v1, "backup-eu"),
                           _entry("backup", us.v1, "backup-us")],
            "litellm_settings": {"fallbacks": [{"primary": ["backup-eu"]}], "num_retries": 0},
            "recovery": {"backoff_base": 0.01, "backoff_cap": 0.02},
        })
        client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="x", max_retries=0)
        try:
            for _ in range(6):
                raw = await client.chat.completions.with_raw_response.create(
                    model="primary", messages=[{"role": "user", "content": "hi"}])
                assert raw.headers["x-gateway-deployment"] == "backup-eu"
                assert raw.parse().choices[0].message.content.startswith("from eu:")
        finally:
            await client.close()
        assert us.hits == 0 and eu.hits == 6


async def test_deployment_defaults_reach_an_openai_compatible_upstream(
        gateway_factory: GatewayFactory) -> None:
    """LiteLLM sends a deployment's ``temperature``, ``max_tokens``... (and ``extra_body``)
    with every request; the client's own value wins."""
    async with FleetUpstream("vllm") as upstream:
        gw = await gateway_factory({"model_list": [_entry(
            "tuned", upstream.v1, "tuned-1", temperature=0.2, max_tokens=64, seed=7,
            extra_body={"top_k": 20})]})
        client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="x", max_retries=0)
        try:
            await client.chat.completions.create(
                model="tuned", messages=[{"role": "user", "content": "hi"}])
            await client.chat.completions.create(
                model="tuned", messages=[{"role": "user", "content": "hi"}],
                temperature=0.9, max_tokens=8)
        finally:
            await client.close()
    first, second = (r.body for r in upstream.requests)
    assert (first["temperature"], first["max_tokens"], first["seed"],
            first["top_k"]) == (0.2, 64, 7, 20)
    assert (second["temperature"], second["max_tokens"], second["seed"],
            second["top_k"]) == (0.9, 8, 7, 20)
    assert "extra_body" not in first and "api_key" not in first


async def test_base_model_gives_the_window_and_its_context_window_fallback_fires(
        gateway_factory: GatewayFactory) -> None:
    """A deployment named otherwise (an Azure-style deployment name) with
    ``model_info.base_model: gpt-4`` has gpt-4's 8,192-token window, so a request past it
    goes to the larger context-window fallback before anything is summarized."""
    async with FleetUpstream("small") as small, FleetUpstream("big") as big:
        gw = await gateway_factory({
            "model_list": [
                {"model_name": "small", "litellm_params": {
                    "model": "openai/prod-gpt4-deployment", "api_base": small.v1,
                    "api_key": "k-upstream-1"}, "model_info": {"base_model": "azure/gpt-4"}},
                _entry("big", big.v1, "big-1")],
            "litellm_settings": {"context_window_fallbacks": [{"small": ["big"]}]},
        })
        route = gateway_state(gw).fleet.resolve("small")
        assert route.capabilities.context_window == 8192
        client = openai.AsyncOpenAI(base_url=gw.base_url, api_key="x", max_retries=0)
        try:
            raw = await client.chat.completions.with_raw_response.create(
                model="small", messages=[{"role": "user",
                                          "content": "a long transcript line " * 2500}])
        finally:
            await client.close()
        assert raw.headers["x-gateway-model-used"] == "big"
        assert "x-gateway-compaction" not in raw.headers
        assert small.hits == 0 and big.hits == 1


@pytest.mark.parametrize(("where", "typo", "meant"), [
    ("litellm_params", "api_bsae", "api_base"),
    ("litellm_params", "organisation", "organization"),
    ("model_info", "max_input_token", "max_input_tokens"),
    ("model_info", "base_modle", "base_model"),
])
def test_a_misspelt_key_in_a_model_entry_stops_start_up_with_the_key_meant(
        where: str, typo: str, meant: str) -> None:
    entry: dict[str, Any] = {"model_name": "m", "litellm_params": {
        "model": "openai/m", "api_key": "sk-secret-value-9911"}, "model_info": {}}
    entry[where][typo] = "https://internal.example/v1"
    with pytest.raises(ConfigError) as info:
        parse_config({"model_list": [entry]})
    assert f"model_list[0].{where}.{typo}: unknown key (did you mean {meant}?)" \
        in str(info.value)
    assert "sk-secret-value-9911" not in str(info.value)
    # LiteLLM's other options are not typos of these.
    parse_config({"model_list": [{"model_name": "m", "litellm_params": {
        "model": "azure/m", "api_base": "https://x.example", "api_type": "azure",
        "mock_timeout": True, "region_name": "eu"}, "model_info": {
        "supports_parallel_function_calling": True, "input_cost_per_token": 1e-6,
        "health_check_timeout": 1, "model": "gpt-4"}}]})


def test_check_config_names_ignored_entry_keys_and_public_endpoints(tmp_path: Path) -> None:
    path = tmp_path / "litellm.yaml"
    path.write_text(yaml.safe_dump({
        "model_list": [
            {"model_name": "gpt-4o", "litellm_params": {
                "model": "openai/gpt-4o", "api_key": "sk-literal-key-7781",
                "region_name": "eu", "input_cost_per_token": 0.000002, "temperature": 0.3}},
            {"model_name": "local", "litellm_params": {
                "model": "openai/llama", "api_base": "http://127.0.0.1:8000/v1"}}]}))
    path.chmod(0o600)
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config", str(path)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "model_list[0].litellm_params.region_name is ignored" in done.stderr
    assert "model_list[0].litellm_params.input_cost_per_token is ignored" in done.stderr
    assert "temperature is ignored" not in done.stderr  # sent as the deployment's default
    assert "no api_base: gpt-4o: https://api.openai.com/v1" in done.stderr
    assert "local:" not in done.stderr
    assert "sk-literal-key-7781" not in done.stderr + done.stdout


CORPUS = Path(__file__).resolve().parents[1] / "data" / "litellm_configs"
CORPUS_ENV = {"AZURE_API_KEY": "azure-key-123456", "OPENAI_API_KEY": "sk-openai-123456",
              "ANTHROPIC_API_KEY": "sk-ant-123456", "REDIS_HOST": "127.0.0.1",
              "REDIS_PASSWORD": "redis-pass-123456",
              "AZURE_API_BASE": "https://example-eu.openai.azure.com/",
              "LITELLM_MASTER_KEY": "sk-master-123456",
              "DATABASE_URL": "postgresql://u:db-pass-123456@db:5432/litellm"}


@pytest.mark.parametrize("name", sorted(p.name for p in CORPUS.glob("*.yaml")))
def test_litellm_documented_configs_start(name: str, monkeypatch: pytest.MonkeyPatch,
                                          caplog: pytest.LogCaptureFixture) -> None:
    """Configs as LiteLLM's documentation writes them load unchanged; what the gateway does
    not use is named in one warning, never a secret."""
    for key, value in CORPUS_ENV.items():
        monkeypatch.setenv(key, value)
    raw = yaml.safe_load((CORPUS / name).read_text())
    with caplog.at_level(logging.WARNING, logger="gateway.config"):
        config = parse_config(raw)
    assert config.model_list
    text = caplog.text
    for secret in CORPUS_ENV.values():
        if "pass" in secret or "key" in secret or secret.startswith("sk-"):
            assert secret not in text
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "check-config",
                           str(CORPUS / name)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **CORPUS_ENV})
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
