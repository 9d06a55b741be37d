"""The YAML config: LiteLLM's model_list as is, strict gateway sections, safe errors."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gateway.config import ConfigError, RepairOverride, load_config, parse_config
from tests.conftest import model_entry

LITELLM_CONFIG = """
model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: https://api.openai.com/v1
      api_key: os.environ/TEST_OPENAI_KEY
      rpm: 600
      tpm: 100000
    model_info:
      max_input_tokens: 128000
      id: my-id
      mode: chat
  - model_name: claude
    litellm_params:
      model: anthropic/claude-3-5-sonnet-20240620
      api_key: sk-ant-literal
      max_retries: 2
litellm_settings:
  drop_params: true
  success_callback: ["langfuse"]
general_settings:
  master_key: sk-1234
router_settings:
  routing_strategy: simple-shuffle
"""


def test_litellm_config_loads_unchanged_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-from-env")
    path = tmp_path / "litellm.yaml"
    path.write_text(LITELLM_CONFIG)
    with caplog.at_level(logging.WARNING, logger="gateway.config"):
        config = load_config(path)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "litellm_settings" in warnings[0].getMessage()
    entry = config.model("gpt-4o-mini")
    assert entry is not None
    assert entry.litellm_params.api_key == "sk-from-env"
    assert entry.litellm_params.extras() == {"rpm": 600, "tpm": 100000}
    assert entry.model_info.max_input_tokens == 128000
    claude = config.model("claude")
    assert claude is not None and claude.litellm_params.extras() == {"max_retries": 2}


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        ({"gateway": {"prot": 1}}, "gateway.prot: unknown key"),
        ({"gateway": {"port": "eighty"}}, "gateway.port"),
        ({"repair": {"enabled": "maybe"}}, "repair.enabled"),
        ({"surprise": {}}, "surprise: unknown key"),
        ({"model_list": [{"model_name": "x"}]}, "model_list[0].litellm_params"),
        ({"model_list": [{"model_name": "x", "litellm_params": {"model": "openai/x"},
                          "model_info": {"max_input_tokens": "lots"}}]},
         "model_list[0].model_info.max_input_tokens"),
        ({"compaction": {"trigger_ratio": 0.2}}, "compaction.trigger_ratio"),
        ({"repair": {"tool_outputs": "shrink"}}, "repair.tool_outputs"),
        ({"repair": {"owners": {"a": {"tool_outputs": True}}}},
         "repair.owners.a.tool_outputs"),
    ],
)
def test_invalid_config_names_the_key_path(doc: dict[str, object], expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert expected in str(info.value)


def test_missing_env_var_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SURELY_NOT_SET_KEY", raising=False)
    doc = yaml.safe_load(LITELLM_CONFIG.replace("TEST_OPENAI_KEY", "SURELY_NOT_SET_KEY"))
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert "SURELY_NOT_SET_KEY" in str(info.value)
    assert "model_list[0].litellm_params.api_key" in str(info.value)


@pytest.mark.parametrize("entry", ["os.environ/GATEWAY_KEY",
                                   {"key": "os.environ/GATEWAY_KEY", "owner": "team-a"}])
def test_an_empty_client_key_variable_is_named(monkeypatch: pytest.MonkeyPatch,
                                               entry: object) -> None:
    # (a Kubernetes Secret created with an empty value: the gateway must not start keyless)
    monkeypatch.setenv("GATEWAY_KEY", " ")
    doc = {"model_list": [{"model_name": "m", "litellm_params": {"model": "openai/m"}}],
           "gateway": {"api_keys": [entry]}}
    with pytest.raises(ConfigError, match=r"GATEWAY_KEY is empty"):
        parse_config(doc)


def test_secret_values_never_appear_in_errors() -> None:
    doc = {"gateway": {"api_keys": "sk-very-secret-value"}}  # wrong type: str, not list
    with pytest.raises(ConfigError) as info:
        parse_config(doc)
    assert "gateway.api_keys" in str(info.value)
    assert "sk-very-secret-value" not in str(info.value)


def test_serve_exits_2_on_bad_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gateway:\n  port: 4000\n  api_keys: [os.environ/NOT_SET_FOR_THIS_TEST]\n")
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(bad)],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "NOT_SET_FOR_THIS_TEST" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_serve_exits_2_on_unreadable_config(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "serve", "--config", str(tmp_path / "none.yaml")],
        capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 2
    assert "cannot read config" in proc.stderr


def test_demo_config_is_valid() -> None:
    config = load_config(Path(__file__).parent.parent / "configs" / "gateway.yaml")
    assert config.model("demo") is not None


def test_plainly_public_environment_values_are_not_secrets() -> None:
    # Masking a host or a port would blank every log line that names it; a value that is
    # not plainly public, or any value under a secret-sounding name, stays a secret.
    config = parse_config({"model_list": [], "environment_variables": {
        "REDIS_HOST": "127.0.0.1", "LANGFUSE_HOST": "https://cloud.langfuse.com",
        "REDIS_PORT": 6379, "ODD_NAME": "sk-abc123456789xyz",
        "DATABASE_URL": "postgres://app:hunter2pass@db:5432/x",
        "OPENAI_API_KEY": "localhost.example"}})
    secrets = config.secrets()
    assert "127.0.0.1" not in secrets and "https://cloud.langfuse.com" not in secrets
    assert {"sk-abc123456789xyz", "hunter2pass", "localhost.example"} <= set(secrets)


def test_an_environment_variable_may_name_another_and_wins_over_the_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As LiteLLM: `KEY: os.environ/VAULT_KEY` is resolved (used as written, the master key
    # would be the public text "os.environ/VAULT_KEY"), and the config's value is the one
    # references read, over the process environment's.
    monkeypatch.setenv("VAULT_MASTER", "sk-real-master-9f8e7d")
    monkeypatch.setenv("TEAM_KEY", "sk-stale-from-process")
    config = parse_config({"model_list": [model_entry("m", "http://127.0.0.1:9/v1",
                                                      api_key="os.environ/TEAM_KEY")],
                           "general_settings": {"master_key": "os.environ/LITELLM_MASTER_X"},
                           "environment_variables": {
                               "LITELLM_MASTER_X": "os.environ/VAULT_MASTER",
                               "TEAM_KEY": "sk-team-from-config"}})
    assert "sk-real-master-9f8e7d" in config.client_keys()
    assert "os.environ/VAULT_MASTER" not in config.client_keys()
    assert config.model_list[0].litellm_params.api_key == "sk-team-from-config"
    with pytest.raises(ConfigError, match=r"environment_variables\.K"):
        parse_config({"environment_variables": {"K": "os.environ/NOT_SET_ANYWHERE_42"}})


def test_tool_outputs_resolve_owner_over_model_over_section() -> None:
    repair = parse_config({
        "gateway": {"api_keys": [{"key": "k1", "owner": "plain"}, {"key": "k2", "owner": "other"}]},
        "repair": {"tool_outputs": "condense", "owners": {
            "plain": {"tool_outputs": "keep"}, "other": {"policy": "report"}}}}).repair
    model = RepairOverride(tool_outputs="keep")
    assert repair.resolved(None, None)[2] == "condense"
    assert repair.resolved(model, None)[2] == "keep"
    assert repair.resolved(model, "other")[2] == "keep"
    assert repair.resolved(None, "plain")[2] == "keep"
    assert repair.resolved(None, "other") == ("report", "report", "condense")
