"""The valid-client corpus through litellm to a native Anthropic upstream (the strict
wire): every request is accepted at the first attempt, with nothing repaired. The shapes
project() leaves as sent (``content: ""`` beside tool calls, empty tool output) are fine
once translated."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import orjson
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fidelity.test_valid_clients import CASES
from tests.providers.e2e_litellm import (
    ANTHROPIC_MODEL,
    IGNORE_SCHEMA_WARNINGS,
    UPSTREAM_KEY,
    start_native_gateway,
)

pytestmark = IGNORE_SCHEMA_WARNINGS

# Remote image URLs and audio would make litellm fetch or refuse media: not about structure.
_MEDIA = (b'"image_url"', b'"input_audio"', b'"audio"')
TEXT_CASES = [(case, body) for case, body in CASES
              if not any(m in orjson.dumps(body) for m in _MEDIA)
              and "response_format" not in body]


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    async with FakeAnthropic(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, fake: FakeAnthropic) -> RunningGateway:
    return await start_native_gateway(gateway_factory, fake.base_url, ANTHROPIC_MODEL,
                                      name="claude")


@pytest.mark.parametrize(("case", "body"), TEXT_CASES, ids=[c for c, _ in TEXT_CASES])
async def test_accepted_first_time_with_nothing_repaired(
    gw: RunningGateway, case: str, body: dict[str, Any],
) -> None:
    # The message structure is what is checked; OpenAI-only sampling and storage fields
    # (store, seed, penalties) are litellm's drop_params business, not projection's.
    request = {k: v for k, v in body.items() if k in ("messages", "tools", "tool_choice")}
    request["model"] = "claude"
    async with aiohttp.ClientSession() as http, http.post(
            gw.base_url + "/chat/completions", json=request,
            headers={"authorization": "Bearer client-key"}) as resp:
        text = await resp.text()
        assert resp.status == 200, text
        assert resp.headers.get("x-gateway-attempts") == "1", text
        assert "x-gateway-repairs" not in resp.headers
