"""One gateway in front of three real fake upstreams: a strict chat referee (``local``, the
translated path), a Responses API (``gpt``) and an Anthropic Messages API (``claude``)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.referee import Referee
from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses

Upstreams = tuple[Referee, FakeResponses, FakeAnthropic]


@pytest.fixture
async def upstreams() -> AsyncIterator[Upstreams]:
    async with (Referee(rules="strict") as referee, FakeResponses(api_key="r-key") as responses,
                FakeAnthropic(api_key="a-key") as messages):
        yield referee, responses, messages


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, upstreams: Upstreams) -> RunningGateway:
    referee, responses, messages = upstreams
    return await gateway_factory({
        "model_list": [
            {"model_name": "local", "litellm_params": {
                "model": "hosted_vllm/referee", "api_base": referee.base_url,
                "api_key": "c-key"}},
            {"model_name": "gpt", "litellm_params": {
                "model": "openai/gpt-5", "api_base": f"{responses.base_url}/v1",
                "api_key": "r-key"}},
            {"model_name": "claude", "litellm_params": {
                "model": "anthropic/claude-sonnet-4-5", "api_base": messages.base_url,
                "api_key": "a-key"}},
        ],
        "recovery": {"backoff_base": 0.001, "backoff_cap": 0.002},
    })
