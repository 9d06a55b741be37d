"""Fixtures of the server tests: the three upstreams of :mod:`tests.server.three_upstreams`
(a module that defines its own ``referee``, ``claude`` or ``gpt`` uses that one)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from gateway.referee import Referee
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.responses_server import FakeResponses
from tests.server.three_upstreams import UPSTREAM_KEY


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
