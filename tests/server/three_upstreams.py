"""Three real upstreams, one per wire, each demanding the same upstream key: a strict chat
referee (``chat``), an Anthropic Messages API (``claude``) and a Responses API (``gpt``).
The fixtures (``referee``, ``claude``, ``gpt``) are used by ``tests/server/conftest.py`` and
imported by test modules elsewhere; a test builds its ``model_list`` with :func:`models`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from gateway.referee import Referee
from tests.conftest import model_entry
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses

UPSTREAM_KEY = "upstream-key-three-wires"


@pytest.fixture
async def referee() -> AsyncIterator[Referee]:
    async with Referee(rules="openai", style="openai", require_auth=UPSTREAM_KEY) as ref:
        yield ref


@pytest.fixture
async def claude() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def gpt() -> AsyncIterator[FakeResponses]:
    async with FakeResponses(api_key=UPSTREAM_KEY) as server:
        yield server


def models(referee: Referee, claude: FakeAnthropic, gpt: FakeResponses) -> list[dict[str, Any]]:
    """``chat`` (translated), ``claude`` and ``gpt`` (native) in front of the three."""
    return [
        model_entry("chat", referee.base_url, model="openai/referee", api_key=UPSTREAM_KEY),
        {"model_name": "claude", "litellm_params": {
            "model": "anthropic/claude-sonnet-4-5", "api_base": claude.base_url,
            "api_key": UPSTREAM_KEY}},
        {"model_name": "gpt", "litellm_params": {
            "model": "openai/gpt-5", "api_base": f"{gpt.base_url}/v1",
            "api_key": UPSTREAM_KEY}},
    ]
