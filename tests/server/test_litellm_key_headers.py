"""The client key headers LiteLLM's proxy accepts: ``x-litellm-api-key`` (its Claude Code
guide sends the proxy key there, next to Claude Code's own ``Authorization``) and the
header ``general_settings.litellm_key_header_name`` names. They authenticate like
``Authorization: Bearer``, never reach an upstream, and their values are masked."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import anthropic
import openai
import pytest

from gateway.redact import mask_credential_headers, register_credential_headers
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.openai_fleet import FleetUpstream

MASTER = "sk-litellm-master-for-key-headers"
WRONG = "sk-not-a-gateway-key-0123456789"


@pytest.fixture
async def served(gateway_factory: GatewayFactory
                 ) -> AsyncIterator[tuple[RunningGateway, FleetUpstream, FakeAnthropic]]:
    async with FleetUpstream("chat") as chat, FakeAnthropic(api_key="k-anthropic") as claude:
        gw = await gateway_factory({
            "model_list": [
                {"model_name": "gpt", "litellm_params": {
                    "model": "openai/gpt-4o-mini", "api_base": chat.v1, "api_key": "k-chat"}},
                {"model_name": "claude", "litellm_params": {
                    "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
                    "api_key": "k-anthropic"}},
            ],
            "general_settings": {"master_key": MASTER, "litellm_key_header_name": "X-Team-Key"},
        })
        yield gw, chat, claude


async def test_claude_code_sends_the_proxy_key_in_x_litellm_api_key(
        served: tuple[RunningGateway, FleetUpstream, FakeAnthropic]) -> None:
    gw, _chat, claude = served
    # ANTHROPIC_CUSTOM_HEADERS="x-litellm-api-key: Bearer <key>", next to Claude Code's own
    # Anthropic login in Authorization: the LiteLLM header is the one that authenticates.
    async with anthropic.AsyncAnthropic(
            base_url=gw.root, auth_token="claude-ai-oauth-token-of-the-user", max_retries=0,
            default_headers={"x-litellm-api-key": f"Bearer {MASTER}"}) as client:
        answer = await client.messages.create(model="claude", max_tokens=32,
                                              messages=[{"role": "user", "content": "hi"}])
    assert answer.content
    (sent,) = claude.requests
    assert "x-litellm-api-key" not in sent.headers
    assert sent.headers["x-api-key"] == "k-anthropic"  # the deployment's key, not the client's
    assert MASTER not in str(sent.headers)


async def test_the_configured_key_header_authenticates_and_stays_home(
        served: tuple[RunningGateway, FleetUpstream, FakeAnthropic]) -> None:
    gw, chat, _claude = served
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key="unused", max_retries=0,
                                  default_headers={"x-team-key": MASTER}) as client:
        answer = await client.chat.completions.create(
            model="gpt", messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content
    (sent,) = chat.requests
    assert "x-team-key" not in sent.headers and MASTER not in str(sent.headers)
    assert sent.headers["authorization"] == "Bearer k-chat"


async def test_a_wrong_key_in_a_litellm_header_is_refused_and_never_logged(
        served: tuple[RunningGateway, FleetUpstream, FakeAnthropic],
        caplog: pytest.LogCaptureFixture) -> None:
    gw, chat, _claude = served
    caplog.set_level(logging.DEBUG)
    async with openai.AsyncOpenAI(base_url=gw.base_url, api_key=MASTER, max_retries=0,
                                  default_headers={"x-litellm-api-key": WRONG}) as client:
        with pytest.raises(openai.AuthenticationError) as info:
            await client.chat.completions.create(
                model="gpt", messages=[{"role": "user", "content": "hi"}])
    assert WRONG not in str(info.value.body)
    assert WRONG not in caplog.text
    assert not chat.requests


def test_the_values_of_litellm_key_headers_are_masked_where_a_text_quotes_them() -> None:
    register_credential_headers(["x-team-key"])
    text = mask_credential_headers(
        f"bad header line x-litellm-api-key: Bearer {WRONG}; X-Team-Key: {WRONG}")
    assert WRONG not in text
    assert "x-litellm-api-key: Bearer ***" in text and "X-Team-Key: ***" in text
