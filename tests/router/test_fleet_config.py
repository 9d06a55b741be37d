"""A LiteLLM fleet config at start-up: what is honoured, what is named as ignored, what
refuses to start (never silently open)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import ConfigError, parse_config
from gateway.providers.openai_compat import HttpPool
from gateway.router.fleet import Fleet
from gateway.router.request_fields import take_litellm_fields
from gateway.server.errors import ClientError

FLEET_CONFIG = Path(__file__).resolve().parents[2] / "configs" / "litellm-fleet.yaml"


def entry(name: str, model: str = "openai/m", **params: Any) -> dict[str, Any]:
    return {"model_name": name,
            "litellm_params": {"model": model, "api_base": "http://127.0.0.1:9/v1", **params}}


def test_duplicate_model_names_are_deployments_of_one_group() -> None:
    config = parse_config({"model_list": [entry("gpt-4o", weight=2), entry("gpt-4o"),
                                          entry("other")]})
    fleet = Fleet(config, HttpPool())
    assert [r.deployment_id for r in fleet.groups["gpt-4o"]] == ["gpt-4o#1", "gpt-4o#2"]
    assert fleet.deployments["gpt-4o#1"].weight == 2.0


def test_one_warning_names_every_ignored_key_path(caplog: pytest.LogCaptureFixture,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DATABASE_URL", raising=False)
    raw = {"model_list": [entry("a")],
           "router_settings": {"num_retries": 1, "enable_pre_call_checks": True,
                               "routing_strategy": "round-robin"},
           "litellm_settings": {"drop_params": True, "success_callback": ["langfuse"]},
           "general_settings": {"master_key": "sk-x", "database_url": "os.environ/DATABASE_URL"},
           "credential_list": [{"credential_name": "c"}]}
    with caplog.at_level(logging.WARNING, logger="gateway.config"):
        config = parse_config(raw)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    for path in ("router_settings.enable_pre_call_checks", "litellm_settings.success_callback",
                 "general_settings.database_url", "credential_list",
                 "router_settings.routing_strategy=round-robin"):
        assert path in warnings[0]
    for honoured in ("num_retries", "drop_params", "master_key"):
        assert honoured not in warnings[0]
    assert config.router.num_retries == 1 and config.router.drop_params
    assert config.client_keys() == ["sk-x"]


def test_the_master_key_comes_from_the_environment_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-from-env-1")
    assert parse_config({"model_list": [entry("a")]}).client_keys() == ["sk-from-env-1"]
    monkeypatch.delenv("LITELLM_MASTER_KEY")
    assert parse_config({"model_list": [entry("a")]}).client_keys() == []


@pytest.mark.parametrize(("general", "path"), [
    ({"master_key": "sk-1", "custom_auth": "auth.user_api_key_auth"},
     "general_settings.custom_auth"),
    ({"enable_jwt_auth": True}, "general_settings.enable_jwt_auth"),
    ({"master_key": "sk-1", "key_management_system": "azure_key_vault"},
     "general_settings.key_management_system"),
    ({"master_key": ""}, "general_settings.master_key"),
])
def test_client_auth_the_gateway_cannot_honour_refuses_to_start(
    tmp_path: Path, general: dict[str, Any], path: str
) -> None:
    config = tmp_path / "litellm.yaml"
    config.write_text(yaml.safe_dump({"model_list": [entry("a")], "general_settings": general}))
    proc = subprocess.run([sys.executable, "-m", "gateway.cli", "serve", "--config",
                           str(config)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert path in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("extra", "path"), [
    ({"guardrails": [{"guardrail_name": "no-pii", "litellm_params": {
        "guardrail": "presidio", "mode": "pre_call", "default_on": True}}]}, "guardrails"),
    ({"general_settings": {"master_key": "sk-1", "admin_only_routes": ["/v1/models"]}},
     "general_settings.admin_only_routes"),
    ({"general_settings": {"master_key": "sk-1", "public_routes": ["/v1/models"]}},
     "general_settings.public_routes"),
    ({"general_settings": {"master_key": "sk-1", "max_parallel_requests": 4}},
     "general_settings.max_parallel_requests"),
])
def test_settings_that_narrow_access_refuse_rather_than_being_ignored(
        extra: dict[str, Any], path: str) -> None:
    # Ignoring one of these would serve more openly, or more at once, than the config says.
    with pytest.raises(ConfigError) as info:
        parse_config({"model_list": [entry("a")], **extra})
    assert path in str(info.value)


def test_router_names_must_exist() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config({"model_list": [entry("a")],
                      "router_settings": {"fallbacks": [{"a": ["typo"]}]}})
    assert "router_settings.fallbacks.a" in str(info.value) and "typo" in str(info.value)
    with pytest.raises(ConfigError) as info:
        parse_config({"model_list": [entry("a")],
                      "router_settings": {"model_group_alias": {"b": "nope"}}})
    assert "router_settings.model_group_alias.b" in str(info.value)


def test_the_repository_fleet_config_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_API_BASE", "OPENAI_API_KEY", "AZURE_API_BASE", "AZURE_API_KEY",
                 "ANTHROPIC_API_BASE", "ANTHROPIC_API_KEY", "VLLM_API_BASE", "VLLM_API_KEY",
                 "LITELLM_MASTER_KEY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:9/{name.lower()}")
    monkeypatch.delenv("DATABASE_URL", raising=False)
    config = parse_config(yaml.safe_load(FLEET_CONFIG.read_text()))
    router = config.router
    assert router.num_retries == 2 and router.allowed_fails == 1
    assert router.cooldown_time == 30.0 and router.timeout == 120.0
    assert dict(router.fallbacks) == {"gpt-4o": ("claude-sonnet",)}
    assert config.client_keys() == ["http://127.0.0.1:9/litellm_master_key"]
    fleet = Fleet(config, HttpPool())
    assert len(fleet.groups["gpt-4o"]) == 2 and len(fleet.groups["claude-sonnet"]) == 2
    bedrock = fleet.groups["claude-sonnet"][1]
    assert bedrock.wire == "litellm" and fleet.deployments["claude-bedrock"].order == 2
    # drop_params and the router timeout reach litellm; router-only keys never do.
    azure = fleet.groups["gpt-4o"][1].provider
    params = azure._params  # type: ignore[attr-defined]
    assert params["drop_params"] is True and params["timeout"] == 120.0
    assert "weight" not in params and params["num_retries"] == 0


def test_litellm_request_fields_are_taken_out_of_the_body() -> None:
    body = {"model": "m", "messages": [], "fallbacks": ["b"], "num_retries": 2,
            "timeout": 5, "caching": True, "mock_response": "x", "tags": ["t"],
            "api_base": "http://attacker", "metadata": {"m": 1}, "user": "u"}
    options = take_litellm_fields(body)
    assert body == {"model": "m", "messages": [], "metadata": {"m": 1}, "user": "u"}
    assert options.fallbacks == ("b",) and options.num_retries == 2 and options.timeout == 5.0
    with pytest.raises(ClientError) as info:
        take_litellm_fields({"fallbacks": [{"model": "x", "api_key": "k"}]})
    assert info.value.param == "fallbacks"
    with pytest.raises(ClientError):
        take_litellm_fields({"num_retries": 99})
    plain = {"model": "m", "messages": []}
    assert take_litellm_fields(plain).fallbacks is None and plain == {"model": "m",
                                                                      "messages": []}


def test_timeouts_are_read_at_litellms_levels() -> None:
    raw = {"model_list": [entry("own", timeout=7, stream_timeout=3), entry("router")],
           "router_settings": {"timeout": 20, "stream_timeout": 9},
           "gateway": {"timeouts": {"read": 600}}}
    fleet = Fleet(parse_config(raw), HttpPool())

    def reads(name: str) -> tuple[float | None, float | None]:
        provider = fleet.groups[name][0].provider
        return (provider._timeout.sock_read,  # type: ignore[attr-defined]
                provider._stream_timeout.sock_read)  # type: ignore[attr-defined]

    assert reads("own") == (7, 3)
    assert reads("router") == (20, 9)
    plain = Fleet(parse_config({"model_list": [entry("plain")]}), HttpPool())
    provider = plain.groups["plain"][0].provider
    assert provider._timeout.sock_read == 600  # type: ignore[attr-defined]


def test_num_retries_levels() -> None:
    from gateway.recovery.settings import recovery_policy_for

    def retries(raw: dict[str, Any], name: str = "a") -> int:
        config = parse_config(raw)
        route = Fleet(config, HttpPool()).groups[name][0]
        return recovery_policy_for(config, route).max_transient_retries

    assert retries({"model_list": [entry("a")]}) == 3  # the gateway's default
    assert retries({"model_list": [entry("a")], "litellm_settings": {"num_retries": 1}}) == 1
    assert retries({"model_list": [entry("a")], "litellm_settings": {"num_retries": 1},
                    "router_settings": {"num_retries": 4}}) == 4
    assert retries({"model_list": [entry("a", num_retries=0)],
                    "router_settings": {"num_retries": 4}}) == 0
    assert retries({"model_list": [entry("a", num_retries=0)],
                    "recovery": {"max_transient_retries": 5}}) == 5


def test_a_wildcard_never_serves_a_name_it_cannot_route() -> None:
    config = parse_config({"model_list": [{"model_name": "*",
                                           "litellm_params": {"model": "*"}}]})
    fleet = Fleet(config, HttpPool())
    assert fleet.resolve("hosted_vllm/llama") is None  # needs an api_base the entry lacks
    route = fleet.resolve("openai/gpt-4.1")
    assert route is not None and route.upstream_model == "gpt-4.1"
    assert route.wire == "openai"


def test_check_config_shows_the_honoured_litellm_settings_without_secrets() -> None:
    from gateway.security import masked_config

    raw = {"model_list": [entry("a"), entry("b")],
           "router_settings": {"fallbacks": [{"a": ["b"]}], "redis_host": "cache",
                               "redis_password": "redis-secret-99"},
           "general_settings": {"master_key": "sk-master-secret-1"}}
    shown = masked_config(parse_config(raw), raw)
    assert shown["router_settings"]["fallbacks"] == [{"a": ["b"]}]
    assert shown["general_settings"] == {"master_key": "***"}
    text = yaml.safe_dump(shown)
    assert "sk-master-secret-1" not in text and "redis-secret-99" not in text
    assert shown["router_settings"]["redis_url"] == "redis://***@cache:6379/0"
