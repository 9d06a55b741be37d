"""The secrets of a LiteLLM config that do not look like keys: AWS and Vertex credentials,
Slack/Teams webhook URLs (``environment_variables``, ``general_settings.alerting*``), and
literal secrets in a file that ``include:`` names, when other users can read it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.cli import main as cli_main
from gateway.config import parse_config
from tests.conftest import GatewayFactory
from tests.fakes.openai_fleet import FleetUpstream

AWS_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SESSION = "FwoGZXIvYXdzEJr-session-token-example"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
VERTEX = '{"type": "service_account", "private_key_id": "vertex-example-0123"}'
SLACK = "https://hooks.slack.com/services/T0000/B0000/XXXXslackXXXX"
TEAMS = "https://contoso.webhook.office.com/webhookb2/teams-example-0123/IncomingWebhook/x"


def config(base: str = "http://127.0.0.1:9/v1") -> dict[str, Any]:
    return {
        "model_list": [
            {"model_name": "bedrock-claude", "litellm_params": {
                "model": "bedrock/anthropic.claude-3-5-sonnet-20240620-v1:0",
                "aws_access_key_id": AWS_ID, "aws_secret_access_key": AWS_SECRET,
                "aws_session_token": AWS_SESSION, "aws_region_name": "us-east-1"}},
            {"model_name": "gemini", "litellm_params": {
                "model": "vertex_ai/gemini-2.0-flash", "vertex_credentials": VERTEX,
                "vertex_project": "my-project"}},
            {"model_name": "gpt", "litellm_params": {
                "model": "openai/gpt-4o", "api_base": base, "api_key": "sk-upstream-0123"}},
        ],
        "environment_variables": {"SLACK_ALERTS": SLACK, "REGION": "us-east-1"},
        "general_settings": {"alerting": ["slack", "webhook"],
                             "alert_to_webhook_url": {"llm_exceptions": TEAMS}},
    }


PLANTED = (AWS_ID, AWS_SESSION, AWS_SECRET, "vertex-example-0123", SLACK, TEAMS)


def test_cloud_credentials_and_webhooks_are_secrets_of_the_config() -> None:
    secrets = parse_config(config()).secrets()
    for planted in (AWS_ID, AWS_SESSION, AWS_SECRET, SLACK, TEAMS):
        assert planted in secrets
    assert any("vertex-example-0123" in s for s in secrets)


def test_check_config_masks_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config()))
    path.chmod(0o600)
    assert cli_main(["check-config", str(path)]) == 0
    out = capsys.readouterr()
    assert "bedrock-claude" in out.out and "***" in out.out
    assert [p for p in PLANTED if p in out.out + out.err] == []


def test_check_config_warns_about_a_readable_included_file(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main = tmp_path / "config.yaml"
    main.write_text(yaml.safe_dump({"include": ["models.yaml"],
                                    "general_settings": {"master_key": "os.environ/MK"}}))
    main.chmod(0o600)
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump({"model_list": config()["model_list"][2:]}))
    models.chmod(0o644)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MK", "sk-master-from-env-0123")
        assert cli_main(["check-config", str(main)]) == 0
    err = capsys.readouterr().err
    assert f"{models} is readable by other users" in err
    assert "model_list[0].litellm_params.api_key" in err
    assert f"{main} is readable" not in err
    models.chmod(0o600)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("MK", "sk-master-from-env-0123")
        assert cli_main(["check-config", str(main)]) == 0
    assert "readable by other users" not in capsys.readouterr().err


def test_check_config_warns_about_a_literal_webhook(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "config.yaml"
    raw = config()
    raw["model_list"] = raw["model_list"][2:]
    raw["general_settings"]["alerting_args"] = {"channel_url": SLACK}
    path.write_text(yaml.safe_dump(raw))
    path.chmod(0o644)
    assert cli_main(["check-config", str(path)]) == 0
    err = capsys.readouterr().err
    assert "general_settings.alert_to_webhook_url.llm_exceptions" in err
    assert "general_settings.alerting_args.channel_url" in err
    assert SLACK not in err and TEAMS not in err


async def test_a_log_line_naming_a_webhook_is_masked(
        gateway_factory: GatewayFactory, capsys: pytest.CaptureFixture[str]) -> None:
    from gateway.telemetry.access_log import setup_logging

    async with FleetUpstream("gpt") as up:
        raw = config(up.v1)
        raw["model_list"] = raw["model_list"][2:]
        await gateway_factory(raw)  # registers the config's secrets
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    setup_logging("info", "text")
    logging.getLogger("gateway.test").warning("alert to %s failed (%s)", SLACK, TEAMS)
    root.handlers[:], root.level = saved[0], saved[1]
    err = capsys.readouterr().err
    assert "alert to *** failed (***)" in err
