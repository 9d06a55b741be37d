"""LiteLLM custom handlers (``litellm_settings.callbacks: module.instance``): one whose module
defines a hook that rejects or rewrites requests refuses start-up naming it (the gateway
runs no custom handler, and ignoring it would serve what it blocks); one that only logs is
named as ignored, as is one whose module is not beside the config (the file the proxy
loaded, not shipped with it: ``test_litellm_configs_heldout_2``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from gateway.config import ConfigError, load_config

CONFIG = """model_list:
  - model_name: gpt-4o
    litellm_params: {model: openai/gpt-4o, api_base: "http://127.0.0.1:9/v1", api_key: k}
litellm_settings:
  callbacks: ["otel", "custom_callbacks.proxy_handler_instance"]
"""
HOOK = """from litellm.integrations.custom_logger import CustomLogger
class MyHandler(CustomLogger):
    async def async_pre_call_hook(self, user_api_key_dict, cache, data, call_type):
        if "forbidden" in str(data.get("messages")):
            raise ValueError("blocked by policy")
        return data
proxy_handler_instance = MyHandler()
"""
LOGGER = """from litellm.integrations.custom_logger import CustomLogger
class MyLogger(CustomLogger):
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        print("done")
proxy_handler_instance = MyLogger()
"""


def _config(tmp_path: Path, module: str | None) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG)
    if module is not None:
        (tmp_path / "custom_callbacks.py").write_text(module)
    return path


def test_a_handler_that_rejects_requests_refuses_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_config(_config(tmp_path, HOOK))
    said = str(caught.value)
    assert "custom_callbacks.proxy_handler_instance" in said
    assert "async_pre_call_hook" in said


def test_a_handler_that_only_logs_is_named_as_ignored(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        config = load_config(_config(tmp_path, LOGGER))
    assert config.model_list[0].model_name == "gpt-4o"
    assert "litellm_settings.callbacks" in caplog.text


def test_a_hook_taken_from_another_module_refuses_start_up(tmp_path: Path) -> None:
    # The instance's class comes from a module beside the config, or is LiteLLM's own
    # content-safety hook: it blocks what it blocks all the same.
    (tmp_path / "my_guard.py").write_text(HOOK.replace("proxy_handler_instance = MyHandler()",
                                                       ""))
    for module in ("from my_guard import MyHandler\nproxy_handler_instance = MyHandler()\n",
                   "from litellm.proxy.hooks.azure_content_safety import "
                   "_PROXY_AzureContentSafety\nproxy_handler_instance = "
                   "_PROXY_AzureContentSafety(endpoint='x', api_key='y')\n"):
        with pytest.raises(ConfigError) as caught:
            load_config(_config(tmp_path, module))
        assert "custom_callbacks.proxy_handler_instance" in str(caught.value)


def test_request_rules_refuse_start_up(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(CONFIG.replace('callbacks: ["otel", "custom_callbacks.proxy_handler_instance"]',
                                   "post_call_rules: post_call_rules.my_custom_rule"))
    with pytest.raises(ConfigError) as caught:
        load_config(path)
    assert "litellm_settings.post_call_rules" in str(caught.value)
