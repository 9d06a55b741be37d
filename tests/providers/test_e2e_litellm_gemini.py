"""litellm end to end: openai SDK -> gateway -> litellm -> a local Gemini generateContent API.

The fake validates like the real API (function call / response pairing, parts, inline data,
unknown fields) and answers with its native ``{"error": {code, message, status}}`` envelope
and its native SSE framing. The scenarios every native provider shares are in
test_e2e_litellm_natives.py; these are Gemini's own (a leading model turn, quota, 503).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import openai
import pytest

from tests.conftest import GatewayFactory, RunningGateway
from tests.factories import calls, tool, user
from tests.fakes.gemini_server import (
    CALL_AFTER_USER,
    FakeGemini,
    field,
    gemini_error,
)
from tests.providers.e2e_litellm import (
    GEMINI_MODEL,
    IGNORE_SCHEMA_WARNINGS,
    TOOLS,
    UPSTREAM_KEY,
    sdk,
    start_native_gateway,
)

pytestmark = IGNORE_SCHEMA_WARNINGS


@pytest.fixture
async def fake() -> AsyncIterator[FakeGemini]:
    async with FakeGemini(api_key=UPSTREAM_KEY) as server:
        yield server


@pytest.fixture
async def gw(gateway_factory: GatewayFactory, fake: FakeGemini) -> RunningGateway:
    return await start_native_gateway(gateway_factory, fake.base_url, GEMINI_MODEL, name="gem")


async def test_strict_step_fixes_what_the_default_projection_keeps(
    gw: RunningGateway, fake: FakeGemini
) -> None:
    # A history opening with the model's turn is left alone by the default projection;
    # Gemini refuses it (structural), and the ladder's strict projection drops it.
    history = [calls("call_a"), tool("call_a", "ok"), user("go on")]
    async with sdk(gw) as c:
        raw = await c.chat.completions.with_raw_response.create(model="gem", messages=history,
                                                                tools=TOOLS)
    assert raw.parse().choices[0].message.content == "you said: go on"
    assert (raw.headers["x-gateway-attempts"], raw.headers["x-gateway-recovery"]) == (
        "2", "strict")
    assert "leading_non_user_dropped" in raw.headers["x-gateway-repairs"]
    assert len(fake.requests) == 2
    assert [c["role"] for c in field(fake.requests[-1].body, "contents")] == ["user"]
    attempts = sorted((s for s in gw.spans.get_finished_spans() if s.name == "gateway.attempt"),
                      key=lambda s: (s.attributes or {})["gateway.attempt"])
    first = attempts[0]
    assert (first.attributes or {})["gateway.verdict"] == "structural"
    assert first.status.description == CALL_AFTER_USER  # Gemini's own words


async def test_quota_refusal_is_relayed_with_its_own_message(gw: RunningGateway,
                                                             fake: FakeGemini) -> None:
    message = "You exceeded your current quota, please check your plan and billing details."
    fake.script(gemini_error(429, message))
    async with sdk(gw) as c:
        with pytest.raises(openai.RateLimitError) as info:
            await c.chat.completions.create(model="gem", messages=[user("hi")])
    body = info.value.response.json()
    assert info.value.status_code == 429
    assert (body["error"]["message"], body["error"]["code"]) == (message, "RESOURCE_EXHAUSTED")
    assert "litellm" not in json.dumps(body) and "Exception" not in json.dumps(body)
    assert len(fake.requests) == 1  # an exhausted quota is not retried


async def test_unavailable_with_a_long_retry_after_keeps_503(gw: RunningGateway,
                                                             fake: FakeGemini) -> None:
    message = "The model is overloaded. Please try again later."
    fake.script(gemini_error(503, message, headers={"retry-after": "600"}))
    async with sdk(gw) as c:
        with pytest.raises(openai.InternalServerError) as info:
            await c.chat.completions.create(model="gem", messages=[user("hi")])
    assert info.value.status_code == 503
    assert info.value.response.headers["retry-after"] == "600"
    assert info.value.response.json()["error"]["message"] == message
